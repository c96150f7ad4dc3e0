# SPDX-License-Identifier: Apache-2.0
"""A pytest plugin that puts multihead's drop-ins under PyTorch's own tests, which stay untouched
(pytest -p multihead_substitute, with this folder on PYTHONPATH):

- every torch.nn.MultiheadAttention built becomes multihead.torch.MultiheadAttention (as
  accelerate() makes it: same parameters, isinstance still holds);
- every nn.TransformerEncoderLayer and nn.TransformerEncoder built is accelerated (PyTorch's fused
  encoder path, which never calls the attention module, and the encoder's nested-tensor packing,
  turned off);
- torch.nn.functional.scaled_dot_product_attention is multihead's (PyTorch 2.x; PyTorch 1.13 has
  no public one), and so is what nn.functional's own multi-head attention calls. multihead stands
  in for PyTorch's fused CPU backend: where a test narrows the backends to others
  (`sdpa_kernel(SDPBackend.MATH)`, its reference), PyTorch's own function computes, so that the
  test compares multihead with PyTorch rather than with itself.
"""

import functools

import torch
import torch.nn.functional as F
from torch import nn

import multihead.torch as mt


def _after_init(cls, then):
    init = cls.__init__

    @functools.wraps(init)
    def init_then(self, *args, **kwargs):
        init(self, *args, **kwargs)
        then(self)

    cls.__init__ = init_then


def pytest_configure(config):
    for cls in (nn.MultiheadAttention, nn.TransformerEncoderLayer, nn.TransformerEncoder):
        _after_init(cls, mt.accelerate)
    if hasattr(F, "scaled_dot_product_attention"):
        pytorch_sdpa = F.scaled_dot_product_attention

        @functools.wraps(pytorch_sdpa)
        def sdpa(*args, **kwargs):
            if torch.backends.cuda.flash_sdp_enabled():  # the fused backend's flag, CPU's as well
                return mt.scaled_dot_product_attention(*args, **kwargs)
            return pytorch_sdpa(*args, **kwargs)

        F.scaled_dot_product_attention = sdpa
        # TorchScript compiles nn.functional's multi-head attention with its own operator there.
        torch.jit._builtins._register_builtin(sdpa, "aten::scaled_dot_product_attention")
