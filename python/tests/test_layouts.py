# SPDX-License-Identifier: Apache-2.0
"""Every tensor layout PyTorch allows reaches multihead's kernels safely: expanded (stride 0),
transposed, sliced and as_strided inputs give PyTorch's own results, forward and gradients, and
whatever the kernels cannot take is a Python exception, never a crash of the interpreter. The
low-level module takes the tensors themselves and checks them against what each kernel does."""

import math

import pytest
import torch
from torch import nn

import multihead
import multihead._multihead as _mh
import multihead.torch as mt
from test_torch import grads, sdpa_reference

torch.set_num_threads(2)


def layout(t, kind, gen):
    """t's values in another layout: the same logical tensor, so results must not change."""
    if kind == "contiguous":
        return t
    if kind == "transposed":  # stored with the last two dimensions swapped
        return t.transpose(-1, -2).contiguous().transpose(-1, -2)
    if kind == "sliced":  # every other element of a larger buffer, along the last dimension and a leading one
        big = torch.zeros(*t.shape[:-1], 2 * t.shape[-1], dtype=t.dtype)
        big[..., ::2] = t
        return big[..., ::2]
    if kind == "padded_rows":  # rows further apart than their length
        big = torch.zeros(*t.shape[:-1], t.shape[-1] + 3, dtype=t.dtype)
        big[..., : t.shape[-1]] = t
        return big[..., : t.shape[-1]]
    if kind == "as_strided":  # column-major storage of the last two dimensions, built by hand
        flat = t.transpose(-1, -2).contiguous()
        strides = list(flat.stride())
        strides[-1], strides[-2] = strides[-2], strides[-1]
        return torch.as_strided(flat, t.shape, strides)
    raise AssertionError(kind)


def expanded(shape, dim, dtype, gen):
    """A tensor of `shape` that repeats one slice along dim: stride 0 there, as broadcasting makes."""
    one = list(shape)
    one[dim] = 1
    return torch.randn(*one, generator=gen, dtype=torch.float64).to(dtype).expand(*shape)


KINDS = ["contiguous", "transposed", "sliced", "padded_rows", "as_strided"]


@pytest.mark.parametrize("seed", range(12))
def test_sdpa_random_layouts_match_pytorch(seed):
    gen = torch.Generator().manual_seed(500 + seed)
    pick = lambda *xs: xs[int(torch.randint(len(xs), (1,), generator=gen))]  # noqa: E731
    dtype = pick(torch.float64, torch.float32)
    B, L, S, E = pick(1, 3), pick(1, 4, 9), pick(1, 5, 8), pick(1, 8)
    shapes = [(B, L, E), (B, S, E), (B, S, E)]
    tensors = []
    for i, shape in enumerate(shapes):
        if pick(False, True):  # broadcast along a dimension: batch, positions or features
            t = expanded(shape, pick(0, 1, 2), dtype, gen)
        else:
            t = layout(torch.randn(*shape, generator=gen, dtype=torch.float64).to(dtype), pick(*KINDS), gen)
        tensors.append(t.requires_grad_() if t.is_leaf else t.detach().requires_grad_())
    q, k, v = tensors
    causal = pick(False, True)
    out = mt.scaled_dot_product_attention(q, k, v, is_causal=causal)
    q64, k64, v64 = (t.detach().double().requires_grad_() for t in (q, k, v))
    want = sdpa_reference(q64, k64, v64, is_causal=causal)
    tol = 1e-12 if dtype == torch.float64 else 2e-5
    torch.testing.assert_close(out.double(), want.detach(), rtol=tol, atol=tol)
    for got, exp in zip(grads(out, (q, k, v), seed), grads(want, (q64, k64, v64), seed)):
        torch.testing.assert_close(got.double(), exp, rtol=10 * tol, atol=10 * tol)


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64, torch.bfloat16])
@pytest.mark.parametrize("dim", [0, 1, 2])
def test_sdpa_expanded_inputs_do_not_crash(dtype, dim):
    # torch.randn(1, 1, 8).expand(1, 4, 8) aborted the interpreter in float32 and read
    # uninitialised memory in float64.
    gen = torch.Generator().manual_seed(dim)
    q = expanded((2, 4, 8), dim, dtype, gen)
    k = expanded((2, 4, 8), dim, dtype, gen)
    v = expanded((2, 4, 8), dim, dtype, gen)
    out = mt.scaled_dot_product_attention(q, k, v)
    want = sdpa_reference(q.double(), k.double(), v.double())
    tol = {torch.float64: 1e-12, torch.float32: 1e-5, torch.bfloat16: 3e-2}[dtype]
    torch.testing.assert_close(out.double(), want, rtol=tol, atol=tol)


@pytest.mark.parametrize("seed", range(8))
def test_multihead_attention_random_layouts_match_pytorch(seed):
    gen = torch.Generator().manual_seed(900 + seed)
    pick = lambda *xs: xs[int(torch.randint(len(xs), (1,), generator=gen))]  # noqa: E731
    torch.manual_seed(seed)
    first = pick(False, True)
    kdim = pick(None, 6)
    theirs = nn.MultiheadAttention(8, 2, batch_first=first, kdim=kdim, vdim=kdim, dtype=torch.float64)
    ours = mt.MultiheadAttention(8, 2, batch_first=first, kdim=kdim, vdim=kdim, dtype=torch.float64)
    ours.load_state_dict(theirs.state_dict())
    B, L, S = pick(1, 3), pick(1, 5), pick(2, 7)
    shape = lambda n, d: (B, n, d) if first else (n, B, d)  # noqa: E731
    inputs = []
    for n, d in ((L, 8), (S, kdim or 8), (S, kdim or 8)):
        if pick(False, True):
            t = expanded(shape(n, d), pick(0, 1, 2), torch.float64, gen)
        else:
            t = layout(torch.randn(*shape(n, d), generator=gen, dtype=torch.float64), pick(*KINDS), gen)
        inputs.append(t.detach().requires_grad_())
    kpm = torch.rand(B, S, generator=gen) > 0.6
    kpm[:, 0] = False
    out, w = ours(*inputs, key_padding_mask=kpm)
    want, want_w = theirs(*inputs, key_padding_mask=kpm)
    torch.testing.assert_close(out, want, rtol=1e-10, atol=1e-10)
    torch.testing.assert_close(w, want_w.detach(), rtol=1e-10, atol=1e-10)
    params_o = [p for _, p in sorted(ours.named_parameters())]
    params_t = [p for _, p in sorted(theirs.named_parameters())]
    for got, exp in zip(grads(out, inputs + params_o, seed), grads(want, inputs + params_t, seed)):
        torch.testing.assert_close(got, exp, rtol=1e-9, atol=1e-10)


def test_the_low_level_module_checks_every_tensor_against_the_kernel():
    q = torch.randn(2, 4, 8)
    masks = _mh.Masks()
    out, lse = torch.empty(2, 4, 8), torch.empty(2, 2, 4)
    _mh.fused_forward(out, lse, q, q, q, 2, masks, 0.5, 0.0, 0)  # as it should be: runs
    with pytest.raises(multihead.ShapeError, match=r"out must be \(2, 4, 8\), got \(2, 3, 8\)"):
        _mh.fused_forward(torch.empty(2, 3, 8), lse, q, q, q, 2, masks, 0.5, 0.0, 0)
    with pytest.raises(ValueError, match=r"lse must be \(2, 2, 4\)"):
        _mh.fused_forward(out, torch.empty(1), q, q, q, 2, masks, 0.5, 0.0, 0)
    with pytest.raises(ValueError, match="lse must be float32, got float64"):
        _mh.fused_forward(out, lse.double(), q, q, q, 2, masks, 0.5, 0.0, 0)
    with pytest.raises(ValueError, match="must be a torch.Tensor"):
        _mh.fused_forward(out, lse, 12345, q, q, 2, masks, 0.5, 0.0, 0)
    with pytest.raises(ValueError, match="do not split into 3 heads|must split into 3 heads"):
        _mh.fused_forward(out, lse, q, q, q, 3, masks, 0.5, 0.0, 0)
    with pytest.raises(ValueError, match="out must be contiguous"):
        _mh.fused_forward(torch.empty(2, 8, 4).transpose(1, 2), lse, q, q, q, 2, masks, 0.5, 0.0, 0)
    # An expanded view handed straight to the kernel (torch.py would copy it): refused, not read.
    with pytest.raises(ValueError, match="expanded or overlapping view"):
        _mh.fused_forward(out, lse, torch.randn(2, 1, 8).expand(2, 4, 8), q, q, 2, masks, 0.5, 0.0, 0)
    with pytest.raises(ValueError, match="expanded or overlapping view"):
        _mh.ref_forward(out.double(), torch.empty(2, 2, 4, 4, dtype=torch.float64),
                        torch.randn(2, 1, 8, dtype=torch.float64).expand(2, 4, 8), q.double(), q.double(), 2,
                        _mh.Masks(), 0.5, 0.0, 0)
    # Masks: shapes from the call, not from the caller.
    masks.key_padding_bool = torch.zeros(2, 3, dtype=torch.uint8)
    with pytest.raises(ValueError, match=r"key_padding_mask must be \(2, 4\), got \(2, 3\)"):
        _mh.fused_forward(out, lse, q, q, q, 2, masks, 0.5, 0.0, 0)
    masks = _mh.Masks()
    masks.masked_cols = 9
    with pytest.raises(ValueError, match=r"masked_cols must be in \[-1, 4\]"):
        _mh.fused_forward(out, lse, q, q, q, 2, masks, 0.5, 0.0, 0)
    # Backward: gradients of the inputs' shapes, contiguous.
    with pytest.raises(ValueError, match=r"dk must be \(2, 4, 8\)"):
        _mh.fused_backward(torch.empty(2, 4, 8), torch.empty(2, 4, 4), torch.empty(2, 4, 8), lse, out,
                           torch.randn(2, 4, 8), q, q, q, 2, _mh.Masks(), 0.5, 0.0, 0)


def test_library_errors_are_python_exceptions():
    assert issubclass(multihead.ShapeError, multihead.Error) and issubclass(multihead.Error, ValueError)
    with pytest.raises(multihead.IoError):
        multihead.load_run("/nonexistent/run")


def test_keys_past_the_fp32_limit_are_refused_and_the_limit_itself_is_exact():
    n = 1 << 24  # kMaxFp32AttentionPositions: fp32 sums of equal terms are exact up to here
    q = torch.ones(1, 1, 1)
    k = torch.ones(1, n, 1)
    out = mt.scaled_dot_product_attention(q, k, k)
    assert out.item() == pytest.approx(1.0, abs=1e-6)
    del k, out
    k = torch.ones(1, n + 1, 1)
    with pytest.raises(ValueError, match=f"at most {n} query and key positions"):
        mt.scaled_dot_product_attention(q, k, k)
    # float64 runs the reference kernels, whose sums have no such limit.
    k64 = torch.ones(1, n + 1, 1, dtype=torch.float64)
    out64 = mt.scaled_dot_product_attention(q.double(), k64, k64)
    assert out64.item() == pytest.approx(1.0, abs=1e-12)
    assert math.isfinite(out64.item())
