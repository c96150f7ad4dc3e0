# SPDX-License-Identifier: Apache-2.0
"""multihead's fused attention for PyTorch on the CPU.

- scaled_dot_product_attention(q, k, v, attn_mask=None, dropout_p=0.0, is_causal=False, scale=None,
  enable_gqa=False): PyTorch 2.x's function (a boolean mask's True means *attend*; a float mask is
  added; is_causal with a mask applies both, as PyTorch 2.13 does; a query that can see no key gets
  zeros and zero gradients; enable_gqa shares each key and value head among a group of query
  heads), forward and backward on the fused kernels: only the per-row log-sum-exp is kept for
  backward, nothing of size L x S; a backward that is itself differentiated, and a float mask that
  requires a gradient, are computed in plain PyTorch. float16, nested tensors and torch.func's
  transforms (vmap, batched gradients) go to PyTorch's own function.
- MultiheadAttention: torch.nn.MultiheadAttention with its forward on the fused kernels; the same
  constructor, parameters, state_dict names and results (PyTorch 2.x's, for fully masked rows).
- accelerate(model): makes every nn.MultiheadAttention inside a model this one, in place, keeping
  its weights, in training and in inference (PyTorch's fused encoder-layer path turned off there,
  and its encoder's packing of padded batches into nested tensors). A nested tensor given to the
  module, or to an encoder layer, goes to PyTorch's own path.

Tensors are used where they lie (no copies) when their last dimension is contiguous. float32 and
bfloat16 run the fused kernels (bfloat16 multiplies in bf16 where the CPU has bf16 units); float64
runs the reference kernels, which keep the (L, S) weights, for checking.
"""

import copy
import math

import torch
import torch.nn.functional as F
from torch import nn

from . import _multihead as _mh

__all__ = ["scaled_dot_product_attention", "MultiheadAttention", "accelerate", "InvalidArgument",
           "FailedAssertion", "WrongType"]

# PyTorch's own function (2.x), taken at import: what it computes is PyTorch's, even where
# torch.nn.functional's name has been pointed at this module's function.
_torch_sdpa = getattr(F, "scaled_dot_product_attention", None)

try:  # PyTorch 2.3 and later: causal_upper_left / causal_lower_right, passed as attn_mask
    from torch.nn.attention.bias import CausalBias as _CausalBias, CausalVariant as _CausalVariant
except ImportError:
    _CausalBias = _CausalVariant = None

_DTYPES = {torch.float32: "float32", torch.bfloat16: "bfloat16", torch.float64: "float64"}


# Each misuse is refused with an exception of the class its message suggests (ValueError,
# TypeError) that is also the class PyTorch 2.13 raises for the same misuse, so that code written
# against either catches it.
class InvalidArgument(ValueError, RuntimeError):
    """A value PyTorch refuses with RuntimeError (shapes, masks that do not fit)."""


class FailedAssertion(ValueError, AssertionError):
    """A value nn.MultiheadAttention refuses with an assert (ranks, feature counts, mask shapes)."""


class WrongType(TypeError, RuntimeError):
    """A dtype PyTorch refuses with RuntimeError (integers, dtypes that differ)."""


def _is_wrapped(t):
    """A tensor of torch.func's transforms (vmap's batched tensors, grad's; gradcheck's batched
    gradients use the older torch._vmap_internals): no storage of its own to hand the kernels."""
    if not isinstance(t, torch.Tensor) or t.layout != torch.strided:
        return False  # not a tensor, or sparse: refused as such
    functorch = getattr(torch._C, "_functorch", None)
    wrapped = getattr(functorch, "is_functorch_wrapped_tensor", None)
    if wrapped is not None and wrapped(t):
        return True
    try:
        (t.untyped_storage if hasattr(t, "untyped_storage") else t.storage)()
    except (NotImplementedError, RuntimeError):
        return not t.is_nested  # a nested tensor has storage of its own kind
    return False


def _pytorch_computes(*tensors, masks=()):
    """Inputs PyTorch computes and these kernels do not take: float16, nested tensors, the wrapped
    tensors of torch.func's transforms (vmap, grad), which have no storage to hand over, and a
    float mask that asks for its own gradient (the kernels take masks as constants)."""
    return (any(isinstance(t, torch.Tensor) and (t.dtype == torch.float16 or t.is_nested or _is_wrapped(t))
                for t in tensors + masks)
            or any(isinstance(t, torch.Tensor) and t.requires_grad and torch.is_grad_enabled() for t in masks))


def _check_tensor(name, t, dtypes=tuple(_DTYPES)):
    if not isinstance(t, torch.Tensor):
        raise TypeError(f"{name} must be a torch.Tensor, got {type(t).__name__}")
    if t.device.type != "cpu":
        raise InvalidArgument(f"{name} is on {t.device}: multihead runs on the CPU")
    if t.layout != torch.strided:
        raise InvalidArgument(f"{name} must be a dense tensor, got layout {t.layout}")
    if t.dtype not in dtypes:
        names = ", ".join(str(d).replace("torch.", "") for d in dtypes)
        raise WrongType(f"{name} must be {names}, got {str(t.dtype).replace('torch.', '')}")


def _rows(t):
    """t (B, P, X) as the kernels read it: the last dimension contiguous and rows at least X apart.

    Anything else (transposed, expanded along positions with stride 0, overlapping rows from
    as_strided) is copied; a batch dimension expanded with stride 0 is read in place.
    """
    if t.stride(-1) == 1 and t.stride(-2) >= t.shape[-1]:
        return t
    return t.contiguous()


def _seed(dropout_p):
    """A dropout seed from PyTorch's generator, so torch.manual_seed makes runs repeatable."""
    return int(torch.randint(0, 2**62, (1,), dtype=torch.int64).item()) if dropout_p > 0 else 0


class _MaskSet:
    """Masks in the kernels' polarity (nonzero bool: masked; floats added), kept alive as tensors."""

    def __init__(self, dtype):
        self.dtype = torch.float64 if dtype == torch.float64 else torch.float32
        self.tensors = []
        self.masks = _mh.Masks()

    def _keep(self, t):
        t = t.contiguous()
        self.tensors.append(t)
        return t

    def key_padding(self, mask):
        if mask.dtype == torch.bool or mask.dtype == torch.uint8:
            self.masks.key_padding_bool = self._keep(mask.to(torch.uint8))
        else:
            self.masks.key_padding_add = self._keep(mask.to(self.dtype))

    def attn(self, mask, masked, per_head):
        """mask: (L, S) or (B*H, L, S); masked: True where a nonzero bool means masked."""
        self.masks.attn_per_head = per_head
        if mask.dtype == torch.bool or mask.dtype == torch.uint8:
            m = mask.bool() if masked else ~mask.bool()
            self.masks.attn_bool = self._keep(m.to(torch.uint8))
        else:
            self.masks.attn_add = self._keep(mask.to(self.dtype))


def _dense_probabilities(q, k, heads, masks, scale):
    """The probabilities (B, H, L, S) of an attention call as the kernels define them (the masks of
    `masks`, a _mh.Masks; a row that sees no key all zeros), in plain PyTorch: the backward of a
    call whose gradient comes batched (torch.func.vmap over it, gradcheck's batched gradients)
    computes with these, since a batched tensor has no storage to hand the kernels."""
    B, L, S = q.shape[0], q.shape[1], k.shape[1]
    D = q.shape[2] // heads
    dtype = torch.float64 if q.dtype == torch.float64 else torch.float32
    qh = q.to(dtype).view(B, L, heads, D).transpose(1, 2)
    kh = k.to(dtype).view(B, S, heads, D).transpose(1, 2)
    scores = (qh @ kh.transpose(-1, -2)) * scale  # (B, H, L, S)
    cols = S if masks.masked_cols < 0 else masks.masked_cols
    covered = scores[..., :cols]
    masked = torch.zeros(B, heads, L, cols, dtype=torch.bool)
    if masks.key_padding_bool is not None:
        masked |= masks.key_padding_bool.bool().view(B, 1, 1, cols)
    if masks.key_padding_add is not None:
        covered = covered + masks.key_padding_add.to(dtype).view(B, 1, 1, cols)
    shape = (B, heads, L, cols) if masks.attn_per_head else (L, cols)
    if masks.attn_bool is not None:
        masked |= masks.attn_bool.bool().view(shape)
    if masks.attn_add is not None:
        covered = covered + masks.attn_add.to(dtype).view(shape)
    if masks.causal:
        masked |= torch.ones(L, cols, dtype=torch.bool).triu(1)
    scores = torch.cat([covered.masked_fill(masked, float("-inf")), scores[..., cols:]], dim=-1)
    dead = torch.isneginf(scores).all(dim=-1, keepdim=True)
    return torch.softmax(scores.masked_fill(dead, 0.0), dim=-1).masked_fill(dead, 0.0)


def _dense_backward(q, k, v, heads, masks, scale, dout):
    """dq, dk, dv of attention without dropout from its dense probabilities, in plain PyTorch (so
    that dout may be batched): dV = P^T dO, dS = P * (dO V^T - rowsum(dO V^T * P)), dQ = s dS K,
    dK = s dS^T Q."""
    B, L, S = q.shape[0], q.shape[1], k.shape[1]
    D, Dv = q.shape[2] // heads, v.shape[2] // heads
    p = _dense_probabilities(q, k, heads, masks, scale)
    dtype = p.dtype
    qh = q.to(dtype).view(B, L, heads, D).transpose(1, 2)
    kh = k.to(dtype).view(B, S, heads, D).transpose(1, 2)
    vh = v.to(dtype).view(B, S, heads, Dv).transpose(1, 2)
    doh = dout.to(dtype).view(B, L, heads, Dv).transpose(1, 2)
    dv = p.transpose(-1, -2) @ doh
    dp = doh @ vh.transpose(-1, -2)
    ds = p * (dp - (dp * p).sum(dim=-1, keepdim=True))
    dq, dk = (ds @ kh) * scale, (ds.transpose(-1, -2) @ qh) * scale
    merge = lambda t, n: t.transpose(1, 2).reshape(B, n, -1)  # noqa: E731 - (B, H, n, X) to (B, n, H*X)
    return merge(dq, L), merge(dk, S), merge(dv, S)


class _Attention(torch.autograd.Function):
    """Attention over heads split by strides: q (B, L, H*D), k (B, S, H*D), v (B, S, H*Dv)."""

    @staticmethod
    def forward(ctx, q, k, v, heads, mask_set, scale, dropout_p, need_weights, average):
        B, L, S = q.shape[0], q.shape[1], k.shape[1]
        Dv = v.shape[2] // heads
        ctx.empty = B * L == 0 or S == 0
        if ctx.empty:
            # No query, or no key to attend to (every row fully masked): zeros, as for masked rows.
            ctx.shapes = (q.shape, k.shape, v.shape)
            weights = q.new_zeros((B, L, S) if average else (B, heads, L, S)) if need_weights else None
            if weights is not None:
                ctx.mark_non_differentiable(weights)
            return q.new_zeros(B, L, heads * Dv), weights
        seed = _seed(dropout_p)
        out = q.new_empty(B, L, heads * Dv)
        weights = None
        if q.dtype == torch.float64:
            saved = q.new_empty(B, heads, L, S)  # the probabilities
            _mh.ref_forward(out, saved, q, k, v, heads, mask_set.masks, scale, dropout_p, seed)
            if need_weights:
                weights = q.new_empty((B, L, S) if average else (B, heads, L, S))
                _mh.ref_weights(weights, saved, average, dropout_p, seed)
        else:
            saved = torch.empty(B, heads, L, dtype=torch.float32)  # the log-sum-exp of each row
            _mh.fused_forward(out, saved, q, k, v, heads, mask_set.masks, scale, dropout_p, seed)
            if need_weights:
                weights = torch.empty((B, L, S) if average else (B, heads, L, S), dtype=torch.float32)
                _mh.fused_weights(weights, average, saved, q, k, heads, mask_set.masks, scale, dropout_p, seed)
                weights = weights.to(q.dtype)
        ctx.save_for_backward(q, k, v, out, saved)
        ctx.args = (heads, mask_set, scale, dropout_p, seed)
        if weights is not None:
            ctx.mark_non_differentiable(weights)
        return out, weights

    @staticmethod
    def backward(ctx, dout, _dweights):
        if ctx.empty:
            grads = tuple(dout.new_zeros(shape) for shape in ctx.shapes)
            return grads + (None,) * 6
        q, k, v, out, saved = ctx.saved_tensors
        heads, mask_set, scale, dropout_p, seed = ctx.args
        if _is_wrapped(dout) or torch.is_grad_enabled():
            # Batched gradients (vmap), or a backward that is itself differentiated (create_graph,
            # gradgradcheck): the gradient in plain PyTorch, from the dense probabilities.
            if dropout_p > 0:
                raise InvalidArgument("batched or higher-order gradients of attention with dropout: its masks "
                                      "are drawn in the kernels; use dropout 0 there")
            dq, dk, dv = _dense_backward(q, k, v, heads, mask_set.masks, scale, dout)
            return dq.to(q.dtype), dk.to(k.dtype), dv.to(v.dtype), None, None, None, None, None, None
        grad_dtype = torch.float64 if q.dtype == torch.float64 else torch.float32
        dout = dout.to(grad_dtype).contiguous()
        dq = torch.empty(q.shape, dtype=grad_dtype)
        dk = torch.empty(k.shape, dtype=grad_dtype)
        dv = torch.empty(v.shape, dtype=grad_dtype)
        if q.dtype == torch.float64:
            _mh.ref_backward(dq, dk, dv, saved, dout, q, k, v, heads, mask_set.masks, scale, dropout_p, seed)
        else:
            _mh.fused_backward(dq, dk, dv, saved, out, dout, q, k, v, heads, mask_set.masks, scale, dropout_p,
                               seed)
        return dq.to(q.dtype), dk.to(k.dtype), dv.to(v.dtype), None, None, None, None, None, None


def scaled_dot_product_attention(query, key, value, attn_mask=None, dropout_p=0.0, is_causal=False, scale=None,
                                 enable_gqa=False):
    """torch.nn.functional.scaled_dot_product_attention (PyTorch 2.x) on the fused kernels.

    query (..., L, E), key (..., S, E), value (..., S, Ev), the same leading dimensions; attn_mask
    broadcastable to (..., L, S), boolean (True: attend) or float (added), and with is_causal both
    apply. A query row that can see no key gives zeros, and zero gradients. With enable_gqa, key and
    value may have fewer heads (dimension -3) than query, each a divisor of its count: head h of
    key and value serves query heads h*g to h*g+g-1, as in PyTorch.
    """
    if _CausalBias is not None and isinstance(attn_mask, _CausalBias):
        attn_mask, is_causal = _causal_bias(attn_mask, is_causal, query)
    if _pytorch_computes(query, key, value, masks=(attn_mask,)) and _torch_sdpa is not None:
        gqa = {"enable_gqa": True} if enable_gqa else {}  # PyTorch before 2.5 has no enable_gqa
        return _torch_sdpa(query, key, value, attn_mask=attn_mask, dropout_p=dropout_p, is_causal=is_causal,
                           scale=scale, **gqa)
    if isinstance(attn_mask, torch.Tensor) and attn_mask.requires_grad and torch.is_grad_enabled():
        raise InvalidArgument("attn_mask requires a gradient: that needs PyTorch 2's own scaled_dot_product_attention "
                              "(the kernels take masks as constants); detach it, or use PyTorch 2")
    for name, t in (("query", query), ("key", key), ("value", value)):
        _check_tensor(name, t)
        if t.dim() < 2:
            raise InvalidArgument(f"{name} must have at least 2 dimensions (..., positions, features), got {t.dim()}")
    if enable_gqa and query.dim() >= 3:
        key, value = (_shared_heads(t, query.shape[-3]) for t in (key, value))
    if not (query.dtype == key.dtype == value.dtype):
        raise WrongType(f"query, key and value must have one dtype, got {query.dtype}, {key.dtype}, {value.dtype}")
    lead = query.shape[:-2]
    if key.shape[:-2] != lead or value.shape[:-2] != lead:
        raise InvalidArgument(f"query, key and value must share their leading dimensions, got {tuple(query.shape)}, "
                              f"{tuple(key.shape)}, {tuple(value.shape)}")
    L, E, S = query.shape[-2], query.shape[-1], key.shape[-2]
    if key.shape[-1] != E or value.shape[-2] != S:
        raise InvalidArgument(f"key must be (..., S, {E}) and value (..., S, Ev), got {tuple(key.shape)} and "
                              f"{tuple(value.shape)}")
    if E == 0:
        raise InvalidArgument("query and key need at least one feature")
    if not 0.0 <= dropout_p < 1.0:
        raise InvalidArgument(f"dropout_p must be in [0, 1), got {dropout_p}")
    if scale is None:
        scale = 1.0 / math.sqrt(E)
    G = math.prod(lead)
    q = _rows(query.reshape(G, L, E))
    k = _rows(key.reshape(G, S, E))
    v = _rows(value.reshape(G, S, value.shape[-1]))
    masks = _MaskSet(query.dtype)
    masks.masks.causal = bool(is_causal)
    if attn_mask is not None:
        _check_tensor("attn_mask", attn_mask, (torch.bool, torch.float32, torch.float64, torch.bfloat16))
        try:
            full = attn_mask.expand(*lead, L, S) if attn_mask.dim() > 2 or lead else attn_mask.expand(L, S)
        except RuntimeError:
            raise InvalidArgument(f"attn_mask of shape {tuple(attn_mask.shape)} does not broadcast to "
                                  f"{tuple(lead) + (L, S)}") from None
        if attn_mask.dim() <= 2:
            masks.attn(attn_mask.expand(L, S), masked=False, per_head=False)
        else:
            masks.attn(full.reshape(G, L, S), masked=False, per_head=True)
    out, _ = _Attention.apply(q, k, v, 1, masks, float(scale), float(dropout_p), False, True)
    return out.reshape(*lead, L, value.shape[-1])


def _causal_bias(bias, is_causal, query):
    """A CausalBias read as PyTorch reads it: (attn_mask, is_causal) for the kernels. Upper-left
    (and lower-right on a square) is is_causal; lower-right otherwise is its boolean mask, whose
    first rows see no key when there are more queries than keys."""
    if is_causal:
        raise ValueError("CausalBias should not be used with causal=True")
    if bias.seq_len_q == bias.seq_len_kv or bias.variant == _CausalVariant.UPPER_LEFT:
        return None, True
    return bias._materialize(query.device), False


def _shared_heads(t, heads):
    """Key or value with its heads (dimension -3) repeated to the query's count, for enable_gqa."""
    if t.dim() < 3 or t.shape[-3] == heads:
        return t
    if t.shape[-3] == 0 or heads % t.shape[-3]:
        raise InvalidArgument(f"Number of heads in key and value must divide the number of heads in query: "
                              f"{t.shape[-3]} does not divide {heads}")
    return t.repeat_interleave(heads // t.shape[-3], dim=-3)


def _check_ranks(query, key, value, key_padding_mask, attn_mask, num_heads):
    """nn.MultiheadAttention's rank checks, with its messages; True for a batched (3-D) query."""
    if query.dim() not in (2, 3):
        raise FailedAssertion(f"query should be unbatched 2D or batched 3D tensor but received {query.dim()}-D "
                              f"query tensor")
    kind = "batched (3-D)" if query.dim() == 3 else "unbatched (2-D)"
    if key.dim() != query.dim() or value.dim() != query.dim():
        raise FailedAssertion(f"For {kind} `query`, expected `key` and `value` to be {query.dim()}-D but found "
                              f"{key.dim()}-D and {value.dim()}-D tensors respectively")
    if key_padding_mask is not None and key_padding_mask.dim() != query.dim() - 1:
        raise FailedAssertion(f"For {kind} `query`, expected `key_padding_mask` to be `None` or "
                              f"{query.dim() - 1}-D but found {key_padding_mask.dim()}-D tensor instead")
    if attn_mask is not None and attn_mask.dim() not in (2, 3):
        raise FailedAssertion(f"For {kind} `query`, expected `attn_mask` to be `None`, 2-D or 3-D but found "
                              f"{attn_mask.dim()}-D tensor instead")
    if query.dim() == 2 and attn_mask is not None and attn_mask.dim() == 3:
        expected = (num_heads, query.shape[0], key.shape[0])
        if tuple(attn_mask.shape) != expected:
            raise FailedAssertion(f"Expected `attn_mask` shape to be {expected} but got {tuple(attn_mask.shape)}")
    return query.dim() == 3


def _bias_for(x, bias):
    """A bias of a narrower floating dtype than the input, widened to it: PyTorch's projections
    promote such a bias (a float16 bias beside float64 weights computes in float64)."""
    if (bias is not None and bias.dtype != x.dtype and bias.is_floating_point()
            and torch.promote_types(x.dtype, bias.dtype) == x.dtype):
        return bias.to(x.dtype)
    return bias


_PyTorchMultiheadAttention = nn.MultiheadAttention


class MultiheadAttention(_PyTorchMultiheadAttention):
    """torch.nn.MultiheadAttention whose attention runs on multihead's fused kernels.

    The same constructor, parameters and state_dict; forward takes the same arguments (and
    is_causal, as in PyTorch 2.x) and gives the same results. Attention weights (need_weights)
    are recomputed from the kernel's saved log-sum-exp and returned without a gradient.
    """

    def __prepare_scriptable__(self):
        """torch.jit.script takes PyTorch's own module, sharing these parameters: TorchScript
        cannot call these kernels."""
        plain = copy.copy(self)
        plain.__class__ = _PyTorchMultiheadAttention
        return plain

    def forward(self, query, key, value, key_padding_mask=None, need_weights=True, attn_mask=None,
                average_attn_weights=True, is_causal=False):
        if _pytorch_computes(query, key, value, masks=(key_padding_mask, attn_mask)):
            # Nested tensors (ragged batches), float16 and torch.func's transforms are PyTorch's own:
            # its module computes them, or refuses them, as it would without multihead.
            extra = {"is_causal": True} if is_causal else {}  # PyTorch 1.13's forward has no is_causal
            return super().forward(query, key, value, key_padding_mask=key_padding_mask, need_weights=need_weights,
                                   attn_mask=attn_mask, average_attn_weights=average_attn_weights, **extra)
        for name, t in (("query", query), ("key", key), ("value", value)):
            _check_tensor(name, t)
        batched = _check_ranks(query, key, value, key_padding_mask, attn_mask, self.num_heads)
        if not batched:
            query, key, value = query.unsqueeze(0), key.unsqueeze(0), value.unsqueeze(0)
            if key_padding_mask is not None:
                key_padding_mask = key_padding_mask.unsqueeze(0)
        elif not self.batch_first:
            query, key, value = query.transpose(0, 1), key.transpose(0, 1), value.transpose(0, 1)
        B, L, E = query.shape
        S = key.shape[1]
        H = self.num_heads
        if E != self.embed_dim:
            raise FailedAssertion(f"query has {E} features, expected embed_dim {self.embed_dim}")
        if key.shape[0] != B:
            raise InvalidArgument(f"key and value must have the query's batch of {B}, got {tuple(key.shape)} and "
                                  f"{tuple(value.shape)}")
        if value.shape[:2] != key.shape[:2]:
            raise FailedAssertion(f"key and value must be (batch {B}, S, features) with the same S, got "
                                  f"{tuple(key.shape)} and {tuple(value.shape)}")
        if key.shape[2] != self.kdim or value.shape[2] != self.vdim:
            raise InvalidArgument(f"key must have kdim {self.kdim} and value vdim {self.vdim} features, got "
                                  f"{key.shape[2]} and {value.shape[2]}")

        # Projections on PyTorch's own matmul; one packed product for self-attention.
        if self._qkv_same_embed_dim and query is key and key is value:
            q, k, v = F.linear(query, self.in_proj_weight, _bias_for(query, self.in_proj_bias)).split(E, dim=-1)
        else:
            if self._qkv_same_embed_dim:
                w_q, w_k, w_v = self.in_proj_weight.chunk(3)
            else:
                w_q, w_k, w_v = self.q_proj_weight, self.k_proj_weight, self.v_proj_weight
            b_q, b_k, b_v = self.in_proj_bias.chunk(3) if self.in_proj_bias is not None else (None,) * 3
            q, k, v = (F.linear(x, w, _bias_for(x, b)) for x, w, b in
                       ((query, w_q, b_q), (key, w_k, b_k), (value, w_v, b_v)))
        if self.bias_k is not None:
            k = torch.cat([k, self.bias_k.expand(B, 1, E)], dim=1)
            v = torch.cat([v, self.bias_v.expand(B, 1, E)], dim=1)
        if self.add_zero_attn:
            k = torch.cat([k, k.new_zeros(B, 1, E)], dim=1)
            v = torch.cat([v, v.new_zeros(B, 1, E)], dim=1)

        masks = _MaskSet(q.dtype)
        masks.masks.masked_cols = S  # the bias_k and zero keys are never masked
        if key_padding_mask is not None:
            _check_tensor("key_padding_mask", key_padding_mask,
                          (torch.bool, torch.uint8, torch.float32, torch.float64, torch.bfloat16))
            if tuple(key_padding_mask.shape) != (B, S):
                raise FailedAssertion(f"key_padding_mask must be ({B}, {S}), got {tuple(key_padding_mask.shape)}")
            masks.key_padding(key_padding_mask)
        if is_causal and attn_mask is None:
            # PyTorch 2.x: is_causal is a hint that attn_mask is the causal mask, never a mask itself.
            raise InvalidArgument("Need attn_mask if specifying the is_causal hint (the causal mask it stands for)")
        if is_causal:
            masks.masks.causal = True  # the causal mask attn_mask is, as the hint says
        elif attn_mask is not None:
            _check_tensor("attn_mask", attn_mask,
                          (torch.bool, torch.uint8, torch.float32, torch.float64, torch.bfloat16))
            if attn_mask.dim() == 2 and tuple(attn_mask.shape) == (L, S):
                masks.attn(attn_mask, masked=True, per_head=False)
            elif attn_mask.dim() == 3 and tuple(attn_mask.shape) == (B * H, L, S):
                masks.attn(attn_mask, masked=True, per_head=True)
            else:
                raise InvalidArgument(f"attn_mask must be ({L}, {S}) or ({B * H}, {L}, {S}), got "
                                      f"{tuple(attn_mask.shape)}")

        dropout = self.dropout if self.training else 0.0
        out, weights = _Attention.apply(_rows(q), _rows(k), _rows(v), H, masks, 1.0 / math.sqrt(E // H),
                                        dropout, bool(need_weights), bool(average_attn_weights))
        out = F.linear(out, self.out_proj.weight, _bias_for(out, self.out_proj.bias))
        if not batched:
            out = out.squeeze(0)
            weights = weights.squeeze(0) if weights is not None else None
        elif not self.batch_first:
            out = out.transpose(0, 1)
        return out, weights


class _EncoderLayer(nn.TransformerEncoderLayer):
    """What accelerate() makes of a torch.nn.TransformerEncoderLayer: PyTorch's layer, whose fused
    inference path (which never calls self_attn) is off for a padded batch and PyTorch's again for
    a nested tensor, which only that path takes (PyTorch 1.13 has no nested LayerNorm for the
    ordinary one): the layer computes a nested tensor, or refuses it, as it does without multihead."""

    def forward(self, src, *args, **kwargs):
        if isinstance(src, torch.Tensor) and src.is_nested:
            # PyTorch's forward on the plain copy: this call's hooks have run already.
            return nn.TransformerEncoderLayer.forward(self.__prepare_scriptable__(), src, *args, **kwargs)
        return super().forward(src, *args, **kwargs)

    def __prepare_scriptable__(self):
        """PyTorch's own layer over the same submodules and parameters, its fused path as it was."""
        plain = copy.copy(self)
        plain.__class__ = nn.TransformerEncoderLayer
        plain.activation_relu_or_gelu = self._multihead_fused_path
        return plain


def accelerate(model):
    """Makes every torch.nn.MultiheadAttention inside model (model itself included) run on
    multihead's kernels, in place and keeping its weights; returns model.

    In eval mode without gradients, PyTorch's nn.TransformerEncoderLayer (and nn.TransformerEncoder
    over it) takes a fused path of its own that never calls its self_attn module; accelerate turns
    that path off for each layer whose attention it replaced, so that the layer's attention runs on
    multihead's kernels in inference too. A layer whose PyTorch offers no way to do so is named in
    one warning."""
    if not isinstance(model, nn.Module):
        raise TypeError(f"accelerate takes a torch.nn.Module, got {type(model).__name__}")
    for module in model.modules():
        if type(module) is _PyTorchMultiheadAttention:
            module.__class__ = MultiheadAttention
    unreached = []
    for name, module in model.named_modules():
        if isinstance(module, nn.TransformerEncoderLayer) and isinstance(module.self_attn, MultiheadAttention):
            # PyTorch 1.13 to 2.13 take the fused path only while this is 1 (relu) or 2 (gelu); the
            # ordinary path calls self.activation, which it leaves as it was.
            if type(module) is nn.TransformerEncoderLayer and hasattr(module, "activation_relu_or_gelu"):
                module._multihead_fused_path = module.activation_relu_or_gelu
                module.__class__ = _EncoderLayer
            if hasattr(module, "activation_relu_or_gelu"):
                module.activation_relu_or_gelu = 0
            else:
                unreached.append(name or type(module).__name__)
        elif isinstance(module, nn.TransformerEncoder) and any(
                isinstance(getattr(layer, "self_attn", None), MultiheadAttention) for layer in module.layers):
            # PyTorch 2.x's encoder decides at construction whether to pack a padded batch into a
            # nested tensor for the fused path; its layers now take the padded batch and its mask.
            if hasattr(module, "use_nested_tensor"):
                module.use_nested_tensor = False
    if unreached:
        import warnings

        warnings.warn(
            "multihead.torch.accelerate: PyTorch's fused encoder-layer path may bypass the attention of "
            f"{', '.join(unreached)} in eval mode without gradients (this PyTorch has no "
            "activation_relu_or_gelu to turn it off); there the attention runs on PyTorch's kernels",
            stacklevel=2,
        )
    return model
