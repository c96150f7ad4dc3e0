# SPDX-License-Identifier: Apache-2.0
"""multihead.torch against PyTorch's own attention: outputs and every gradient in float64 on random
shapes, masks and flags; the fused float32 and bfloat16 paths against float64; accelerate() on a
Transformer; and clear errors for bad input."""

import copy
import inspect
import io
import math

import pytest
import torch
from torch import nn

import multihead.torch as mt

torch.set_num_threads(2)


def sdpa_reference(q, k, v, attn_mask=None, is_causal=False, scale=None):
    """PyTorch 2.x's scaled_dot_product_attention, in plain PyTorch (1.13 has none): a bool mask's
    True attends; a row that sees no key gives zeros."""
    L, S = q.shape[-2], k.shape[-2]
    scores = q @ k.transpose(-1, -2) * (scale if scale is not None else 1 / math.sqrt(q.shape[-1]))
    allowed = torch.ones(L, S, dtype=torch.bool)
    if is_causal:
        allowed = allowed.tril()
    if attn_mask is not None and attn_mask.dtype == torch.bool:
        allowed = allowed & attn_mask
    elif attn_mask is not None:
        scores = scores + attn_mask
    scores = scores.masked_fill(~allowed, float("-inf"))
    weights = torch.softmax(scores, dim=-1).nan_to_num(0.0)
    return weights @ v


def grads(out, inputs, seed):
    g = torch.randn(out.shape, generator=torch.Generator().manual_seed(seed), dtype=torch.float64).to(out.dtype)
    return torch.autograd.grad(out, inputs, g, allow_unused=True)


def leaves(*shapes, dtype=torch.float64, seed=0):
    gen = torch.Generator().manual_seed(seed)
    return [torch.randn(*s, generator=gen, dtype=dtype).requires_grad_() for s in shapes]


@pytest.mark.parametrize("seed", range(6))
def test_sdpa_matches_pytorch_outputs_and_gradients(seed):
    gen = torch.Generator().manual_seed(100 + seed)
    pick = lambda *xs: xs[int(torch.randint(len(xs), (1,), generator=gen))]  # noqa: E731
    lead = pick((), (3,), (2, 3))
    L, S, E, Ev = pick(1, 5, 17), pick(1, 7, 33), pick(4, 8), pick(3, 8)
    q, k, v = leaves((*lead, L, E), (*lead, S, E), (*lead, S, Ev), seed=seed)
    kind = seed % 3
    mask = None
    if kind == 1:  # boolean, broadcast over the leading dimensions; every row keeps its first key
        mask = torch.rand(L, S, generator=gen) > 0.3
        mask[:, 0] = True
    elif kind == 2:  # float, per leading element
        mask = torch.randn(*lead, L, S, generator=gen, dtype=torch.float64)
    causal = seed % 2 == 1 and mask is None
    scale = pick(None, 0.3)
    out = mt.scaled_dot_product_attention(q, k, v, attn_mask=mask, is_causal=causal, scale=scale)
    want = sdpa_reference(q, k, v, attn_mask=mask, is_causal=causal, scale=scale)
    torch.testing.assert_close(out, want, rtol=1e-12, atol=1e-12)
    for got, exp in zip(grads(out, (q, k, v), seed), grads(want, (q, k, v), seed)):
        torch.testing.assert_close(got, exp, rtol=1e-11, atol=1e-11)


def test_sdpa_fully_masked_rows_give_zeros_and_zero_gradients():
    q, k, v = leaves((2, 4, 8), (2, 6, 8), (2, 6, 8), seed=3)
    mask = torch.ones(4, 6, dtype=torch.bool)
    mask[1] = False  # query 1 attends nowhere
    for dtype in (torch.float64, torch.float32):
        qd, kd, vd = (t.detach().to(dtype).requires_grad_() for t in (q, k, v))
        out = mt.scaled_dot_product_attention(qd, kd, vd, attn_mask=mask)
        assert torch.all(out[:, 1] == 0)
        dq, _, _ = grads(out, (qd, kd, vd), 1)
        assert torch.all(dq[:, 1] == 0)
        assert torch.isfinite(out).all()


def test_sdpa_grouped_query_heads_share_their_key_and_value_heads():
    q, k, v = leaves((2, 6, 5, 8), (2, 3, 7, 8), (2, 2, 7, 4), seed=4)
    mask = torch.rand(5, 7, generator=torch.Generator().manual_seed(4)) > 0.4
    mask[:, 0] = True
    out = mt.scaled_dot_product_attention(q, k, v, attn_mask=mask, enable_gqa=True)
    want = sdpa_reference(q, k.repeat_interleave(2, dim=1), v.repeat_interleave(3, dim=1), attn_mask=mask)
    torch.testing.assert_close(out, want, rtol=1e-12, atol=1e-12)
    for got, exp in zip(grads(out, (q, k, v), 4), grads(want, (q, k, v), 4)):
        torch.testing.assert_close(got, exp, rtol=1e-11, atol=1e-11)
    torch_sdpa = getattr(torch.nn.functional, "scaled_dot_product_attention", None)
    if torch_sdpa is not None and "enable_gqa" in torch_sdpa.__doc__:  # PyTorch 2.5 and later
        torch.testing.assert_close(out, torch_sdpa(
            q, k, v, attn_mask=mask, enable_gqa=True), rtol=1e-12, atol=1e-12)
    with pytest.raises(RuntimeError, match="must divide the number of heads in query"):
        mt.scaled_dot_product_attention(q, k[:, :1].expand(2, 4, 7, 8), v, enable_gqa=True)
    with pytest.raises(RuntimeError, match="leading dimensions"):  # without enable_gqa, heads must match
        mt.scaled_dot_product_attention(q, k, v)


@pytest.mark.parametrize("dtype,tol", [(torch.float32, 2e-5), (torch.bfloat16, 3e-2)])
def test_sdpa_fused_kernels_agree_with_float64(dtype, tol):
    q, k, v = leaves((2, 4, 300, 32), (2, 4, 300, 32), (2, 4, 300, 32), seed=5)
    mask = torch.rand(300, 300, generator=torch.Generator().manual_seed(1)) > 0.2
    mask.fill_diagonal_(True)
    want = mt.scaled_dot_product_attention(q, k, v, attn_mask=mask)
    wq, wk, wv = grads(want, (q, k, v), 2)
    ql, kl, vl = (t.detach().to(dtype).requires_grad_() for t in (q, k, v))
    out = mt.scaled_dot_product_attention(ql, kl, vl, attn_mask=mask)
    assert out.dtype == dtype
    torch.testing.assert_close(out.double(), want.detach(), rtol=tol, atol=tol)
    for got, exp in zip(grads(out, (ql, kl, vl), 2), (wq, wk, wv)):
        assert got.dtype == dtype
        torch.testing.assert_close(got.double(), exp, rtol=10 * tol, atol=10 * tol)


def test_sdpa_dropout_is_repeatable_under_manual_seed_and_keeps_the_expectation():
    q, k, v = leaves((1, 64, 16), (1, 64, 16), (1, 64, 16), dtype=torch.float32, seed=6)
    torch.manual_seed(7)
    a = mt.scaled_dot_product_attention(q, k, v, dropout_p=0.3)
    torch.manual_seed(7)
    b = mt.scaled_dot_product_attention(q, k, v, dropout_p=0.3)
    assert torch.equal(a, b)
    plain = mt.scaled_dot_product_attention(q, k, v)
    assert not torch.equal(a, plain)
    mean = torch.stack([mt.scaled_dot_product_attention(q, k, v, dropout_p=0.3) for _ in range(200)]).mean(0)
    assert (mean - plain).abs().mean() < 0.05


def mha_pair(dtype=torch.float64, **kwargs):
    torch.manual_seed(11)
    theirs = nn.MultiheadAttention(**kwargs, dtype=dtype)
    ours = mt.MultiheadAttention(**kwargs, dtype=dtype)
    ours.load_state_dict(theirs.state_dict())
    return theirs, ours


MHA_CASES = [
    dict(embed_dim=16, num_heads=4),
    dict(embed_dim=16, num_heads=2, batch_first=True),
    dict(embed_dim=12, num_heads=3, bias=False),
    dict(embed_dim=16, num_heads=4, add_bias_kv=True),
    dict(embed_dim=16, num_heads=4, add_zero_attn=True, batch_first=True),
    dict(embed_dim=16, num_heads=2, kdim=10, vdim=6),
]


@pytest.mark.parametrize("case", range(len(MHA_CASES)))
@pytest.mark.parametrize("masks", ["none", "bool", "float", "floatattn", "both3d"])
@pytest.mark.parametrize("need_weights,average", [(True, True), (True, False), (False, True)])
def test_multihead_attention_matches_pytorch(case, masks, need_weights, average):
    kwargs = MHA_CASES[case]
    theirs, ours = mha_pair(**kwargs)
    E, H = kwargs["embed_dim"], kwargs["num_heads"]
    kdim, vdim = kwargs.get("kdim", E), kwargs.get("vdim", E)
    B, L, S = 3, 5, 7
    first = kwargs.get("batch_first", False)
    shape = lambda n, d: (B, n, d) if first else (n, B, d)  # noqa: E731
    self_attention = kdim == E and vdim == E and case % 2 == 0
    if self_attention:
        (x,) = leaves(shape(L, E), seed=case)
        query = key = value = x
        S = L
    else:
        query, key, value = leaves(shape(L, E), shape(S, kdim), shape(S, vdim), seed=case)
    gen = torch.Generator().manual_seed(case)
    kpm = attn = None
    if masks in ("bool", "floatattn", "both3d"):
        kpm = torch.rand(B, S, generator=gen) > 0.7
        kpm[:, 0] = False  # every row keeps a key: PyTorch 1.13 gives NaN otherwise
    if masks == "float":  # PyTorch 1.13 adds a float key padding mask only when there is no other mask
        kpm = torch.randn(B, S, generator=gen, dtype=torch.float64)
    if masks == "floatattn":
        attn = torch.randn(L, S, generator=gen, dtype=torch.float64)
    if masks == "bool":
        attn = torch.rand(L, S, generator=gen) > 0.7
        attn[:, 0] = False
    if masks == "both3d":
        attn = torch.randn(B * H, L, S, generator=gen, dtype=torch.float64)
    args = dict(key_padding_mask=kpm, attn_mask=attn, need_weights=need_weights, average_attn_weights=average)
    out, w = ours(query, key, value, **args)
    want, want_w = theirs(query, key, value, **args)
    torch.testing.assert_close(out, want, rtol=1e-10, atol=1e-10)
    if need_weights:
        torch.testing.assert_close(w, want_w.detach(), rtol=1e-10, atol=1e-10)
    else:
        assert w is None and want_w is None
    inputs = [query] if self_attention else [query, key, value]
    ours_params = [p for _, p in sorted(ours.named_parameters())]
    theirs_params = [p for _, p in sorted(theirs.named_parameters())]
    for got, exp in zip(grads(out, inputs + ours_params, 9), grads(want, inputs + theirs_params, 9)):
        torch.testing.assert_close(got, exp, rtol=1e-9, atol=1e-10)


def test_multihead_attention_unbatched_and_causal():
    theirs, ours = mha_pair(embed_dim=8, num_heads=2)
    (x,) = leaves((6, 8), seed=4)
    causal = torch.triu(torch.ones(6, 6, dtype=torch.bool), diagonal=1)
    out, w = ours(x, x, x, attn_mask=causal)
    want, want_w = theirs(x, x, x, attn_mask=causal)
    torch.testing.assert_close(out, want)
    torch.testing.assert_close(w, want_w.detach())
    out_hint, _ = ours(x, x, x, attn_mask=causal, is_causal=True, need_weights=False)
    torch.testing.assert_close(out_hint, want)


def test_multihead_attention_fused_float32_agrees_with_float64():
    theirs, ours = mha_pair(embed_dim=64, num_heads=4, batch_first=True)
    ours32 = mt.MultiheadAttention(64, 4, batch_first=True)
    ours32.load_state_dict({k: v.float() for k, v in theirs.state_dict().items()})
    (x,) = leaves((2, 200, 64), seed=8)
    want, _ = theirs(x, x, x, need_weights=False)
    got, _ = ours32(x.detach().float(), x.detach().float(), x.detach().float(), need_weights=False)
    torch.testing.assert_close(got.double(), want.detach(), rtol=1e-4, atol=1e-5)


def test_accelerate_trains_a_transformer_step_for_step_like_pytorch():
    torch.manual_seed(3)
    layer = nn.TransformerEncoderLayer(d_model=32, nhead=4, dim_feedforward=64, dropout=0.0, batch_first=True,
                                       dtype=torch.float64)
    theirs = nn.TransformerEncoder(layer, num_layers=2)
    ours = mt.accelerate(copy.deepcopy(theirs))
    assert sum(type(m) is mt.MultiheadAttention for m in ours.modules()) == 2
    assert not any(type(m) is nn.MultiheadAttention for m in ours.modules())
    opt_t = torch.optim.AdamW(theirs.parameters(), lr=1e-3)
    opt_o = torch.optim.AdamW(ours.parameters(), lr=1e-3)
    gen = torch.Generator().manual_seed(4)
    for step in range(5):
        x = torch.randn(4, 10, 32, generator=gen, dtype=torch.float64)
        pad = torch.zeros(4, 10, dtype=torch.bool)
        pad[1, 7:] = True
        losses = []
        for model, opt in ((theirs, opt_t), (ours, opt_o)):
            opt.zero_grad()
            loss = model(x, src_key_padding_mask=pad).pow(2).mean()
            loss.backward()
            opt.step()
            losses.append(loss.item())
        assert losses[0] == pytest.approx(losses[1], rel=1e-10), f"step {step}"


def test_accelerate_reaches_the_attention_in_inference_too(monkeypatch):
    # In eval mode without gradients PyTorch's encoder layer has a fused path that never calls
    # its self_attn; an accelerated layer's attention must still be multihead's.
    torch.manual_seed(5)
    layer = nn.TransformerEncoderLayer(d_model=32, nhead=4, dim_feedforward=64, dropout=0.0, batch_first=True)
    theirs = nn.TransformerEncoder(layer, num_layers=2).eval()
    ours = mt.accelerate(copy.deepcopy(theirs)).eval()
    calls = []
    forward = mt.MultiheadAttention.forward

    def counted(self, *args, **kwargs):
        calls.append(self)
        return forward(self, *args, **kwargs)

    monkeypatch.setattr(mt.MultiheadAttention, "forward", counted)
    x = torch.randn(3, 9, 32)
    pad = torch.zeros(3, 9, dtype=torch.bool)
    pad[1, 5:] = True
    with torch.no_grad():
        want = theirs(x, src_key_padding_mask=pad)
        got = ours(x, src_key_padding_mask=pad)
    assert len(calls) == 2
    keep = ~pad  # PyTorch's fused path may zero the padded positions' outputs
    torch.testing.assert_close(got[keep], want[keep], rtol=1e-4, atol=1e-5)
    with torch.inference_mode():
        ours(x)
    assert len(calls) == 4


def test_nested_and_empty_inputs_go_as_pytorch_takes_them():
    # A nested tensor is PyTorch's own: the accelerated module hands it to PyTorch's path, which
    # computes it (or refuses it) as without multihead. Empty batches and empty sequences give what
    # PyTorch gives, never an internal error.
    torch.manual_seed(3)
    theirs = nn.MultiheadAttention(16, 2, batch_first=True).eval()
    ours = mt.accelerate(copy.deepcopy(theirs)).eval()
    nt = torch.nested.nested_tensor([torch.randn(3, 16), torch.randn(5, 16)])
    with torch.no_grad():
        try:
            want, _ = theirs(nt, nt, nt, need_weights=False)
        except Exception as e:  # noqa: BLE001 - whatever PyTorch raises, multihead raises the same
            with pytest.raises(type(e)):
                ours(nt, nt, nt, need_weights=False)
        else:
            got, _ = ours(nt, nt, nt, need_weights=False)
            for a, b in zip(got.unbind(), want.unbind()):
                torch.testing.assert_close(a, b)
    for q_shape, k_shape in (((0, 5, 16), (0, 5, 16)), ((2, 0, 16), (2, 5, 16))):
        q, k = torch.randn(*q_shape, requires_grad=True), torch.randn(*k_shape)
        want, _ = theirs(q, k, k)
        got, _ = ours(q, k, k)
        assert got.shape == want.shape
        got.sum().backward()
        assert q.grad.shape == q.shape
    layer = nn.TransformerEncoderLayer(16, 2, 32, 0.0, batch_first=True).eval()
    fast = mt.accelerate(copy.deepcopy(layer)).eval()
    encoder = mt.accelerate(nn.TransformerEncoder(copy.deepcopy(layer), 2)).eval()
    for shape in ((0, 4, 16), (3, 0, 16)):
        x = torch.randn(*shape)
        with torch.no_grad():
            assert fast(x).shape == layer(x).shape == encoder(x).shape == x.shape
    # A nested tensor into an accelerated encoder layer, or an encoder of them, takes PyTorch's fused
    # path, which alone takes one: the same values in inference, PyTorch's own refusal with
    # gradients; the padded batch still goes to multihead's kernels.
    plain_encoder = nn.TransformerEncoder(copy.deepcopy(layer), 2, enable_nested_tensor=False).eval()
    for parts in ([torch.randn(3, 16), torch.randn(5, 16)], [torch.randn(0, 16), torch.randn(0, 16)]):
        nt = torch.nested.nested_tensor(parts)
        for plain, accelerated in ((layer, fast), (plain_encoder, encoder)):
            with torch.no_grad():
                want = plain(nt)
                got = accelerated(nt)
            for a, b in zip(got.unbind(), want.unbind()):
                torch.testing.assert_close(a, b)
            with pytest.raises(AssertionError, match="does not support NestedTensor"):
                plain(nt)
            with pytest.raises(AssertionError, match="does not support NestedTensor"):
                accelerated(nt)
    assert type(fast).__mro__[1] is nn.TransformerEncoderLayer and isinstance(fast.self_attn, mt.MultiheadAttention)
    # A hook on the layer runs once a call, nested or not.
    calls = []
    handle = fast.register_forward_hook(lambda module, args, out: calls.append(module))
    nt = torch.nested.nested_tensor([torch.randn(3, 16), torch.randn(5, 16)])
    with torch.no_grad():
        fast(torch.randn(2, 4, 16))
        for a, b in zip(fast(nt).unbind(), layer(nt).unbind()):
            torch.testing.assert_close(a, b)
    handle.remove()
    assert calls == [fast, fast]


def test_a_mask_with_is_causal_applies_both_as_pytorch_2_13_does():
    q, k, v = leaves((2, 3, 6, 8), (2, 3, 6, 8), (2, 3, 6, 4), seed=11)
    mask = torch.rand(6, 6, generator=torch.Generator().manual_seed(2)) > 0.3
    for m in (mask, torch.randn(6, 6, dtype=torch.float64, generator=torch.Generator().manual_seed(3))):
        out = mt.scaled_dot_product_attention(q, k, v, attn_mask=m, is_causal=True)
        want = sdpa_reference(q, k, v, attn_mask=m, is_causal=True)
        torch.testing.assert_close(out, want)
        for got, exp in zip(grads(out, (q, k, v), 4), grads(want, (q, k, v), 4)):
            torch.testing.assert_close(got, exp)


def test_misuse_raises_what_pytorch_raises():
    # Each refusal is of the class its message suggests (ValueError, TypeError) and of the one
    # PyTorch 2.13 raises for the same misuse; where this PyTorch has the function or argument, the
    # same call to PyTorch's own raises that class too.
    q = torch.randn(2, 4, 8)
    sdpa_cases = [
        (RuntimeError, lambda f: f(q, q.double(), q)),
        (RuntimeError, lambda f: f(q, torch.randn(3, 4, 8), torch.randn(3, 4, 8))),
        (RuntimeError, lambda f: f(q, torch.randn(2, 4, 7), q)),
        (RuntimeError, lambda f: f(q, q, q, attn_mask=torch.ones(3, 3, dtype=torch.bool))),
        (RuntimeError, lambda f: f(torch.randn(8), torch.randn(8), torch.randn(8))),
        (RuntimeError, lambda f: f(q.long(), q.long(), q.long())),
    ]
    theirs = nn.MultiheadAttention(8, 2, batch_first=True)
    ours = mt.accelerate(copy.deepcopy(theirs))
    x = torch.randn(2, 5, 8)
    mha_cases = [
        (AssertionError, lambda m: m(x[None], x[None], x[None])),
        (AssertionError, lambda m: m(x, x[0], x[0])),
        (AssertionError, lambda m: m(torch.randn(2, 5, 6), torch.randn(2, 5, 6), torch.randn(2, 5, 6))),
        (AssertionError, lambda m: m(x, x, x, key_padding_mask=torch.zeros(2, 4, dtype=torch.bool))),
        (AssertionError, lambda m: m(x, torch.randn(2, 5, 8), torch.randn(2, 6, 8))),
        (RuntimeError, lambda m: m(x, x, x, attn_mask=torch.zeros(4, 4, dtype=torch.bool))),
        (RuntimeError, lambda m: m(x, torch.randn(3, 5, 8), torch.randn(3, 5, 8))),
        (RuntimeError, lambda m: m(x.double(), x.double(), x.double())),  # weights of another dtype
    ]
    pytorch_2 = int(torch.__version__.split(".")[0]) >= 2
    if pytorch_2:  # a hint that needs its mask (PyTorch 1.13's forward has no is_causal)
        mha_cases.append((RuntimeError, lambda m: m(x, x, x, is_causal=True)))
    for kind, call in sdpa_cases:
        with pytest.raises(kind):
            call(mt.scaled_dot_product_attention)
        if pytorch_2:
            with pytest.raises(kind):
                call(torch.nn.functional.scaled_dot_product_attention)
    for kind, call in mha_cases:
        with pytest.raises(kind):
            call(ours)
        if pytorch_2:
            with pytest.raises(kind):
                call(theirs)


def test_float16_nested_and_transformed_inputs_are_pytorchs_to_compute():
    # float16 is not a dtype of the kernels: PyTorch's own function computes it.
    if hasattr(torch.nn.functional, "scaled_dot_product_attention"):
        q = torch.randn(2, 3, 4, 8).half()
        torch.testing.assert_close(mt.scaled_dot_product_attention(q, q, q, is_causal=True),
                                   torch.nn.functional.scaled_dot_product_attention(q, q, q, is_causal=True))
    # Batched gradients (vmap over the backward, as gradcheck checks them) on the fused kernels'
    # forward, with the backward computed densely in PyTorch.
    q, k, v = leaves((2, 3, 4, 8), (2, 3, 5, 8), (2, 3, 5, 6), seed=12)
    mask = torch.rand(4, 5, generator=torch.Generator().manual_seed(4)) > 0.4
    mask[1] = False  # a row that sees no key
    for m, causal in ((None, True), (mask, False), (mask, True)):
        assert torch.autograd.gradcheck(lambda a, b, c: mt.scaled_dot_product_attention(a, b, c, attn_mask=m, is_causal=causal),
                                         (q, k, v), check_batched_grad=True)
    theirs, ours = mha_pair(embed_dim=8, num_heads=2, batch_first=True, add_bias_kv=True, add_zero_attn=True)
    (x,) = leaves((2, 4, 8), seed=13)
    pad = torch.zeros(2, 4, dtype=torch.bool)
    pad[0, 2:] = True
    assert torch.autograd.gradcheck(lambda a: ours(a, a, a, key_padding_mask=pad, need_weights=False)[0], (x,),
                                    check_batched_grad=True)
    # torch.func.vmap over the function itself: PyTorch's function computes each item.
    if hasattr(torch, "func"):
        xs = torch.randn(5, 2, 4, 8)
        torch.testing.assert_close(torch.func.vmap(lambda a: mt.scaled_dot_product_attention(a, a, a))(xs),
                                   torch.nn.functional.scaled_dot_product_attention(xs, xs, xs))


def test_second_order_gradients_and_mask_gradients_are_computed():
    # gradgradcheck differentiates the backward itself: it runs in plain PyTorch from the kernels'
    # forward, so the second derivatives are those of the dense formula.
    q, k, v = leaves((2, 3, 8), (2, 5, 8), (2, 5, 4), seed=21)
    mask = torch.rand(3, 5, generator=torch.Generator().manual_seed(21)) > 0.3
    mask[:, 0] = True
    assert torch.autograd.gradgradcheck(
        lambda a, b, c: mt.scaled_dot_product_attention(a, b, c, attn_mask=mask), (q, k, v))
    theirs, ours = mha_pair(embed_dim=8, num_heads=2, batch_first=True)
    (x,) = leaves((2, 3, 8), seed=22)
    assert torch.autograd.gradgradcheck(lambda a: ours(a, a, a, need_weights=False)[0], (x,))
    # A float mask that asks for its gradient gets it (PyTorch's own path computes such a call).
    (float_mask,) = leaves((3, 3), seed=23)
    out = ours(x, x, x, attn_mask=float_mask, need_weights=False)[0]
    want = theirs(x, x, x, attn_mask=float_mask, need_weights=False)[0]
    g_ours, = torch.autograd.grad(out.sum(), float_mask)
    g_theirs, = torch.autograd.grad(want.sum(), float_mask)
    assert g_ours.abs().sum() > 0
    torch.testing.assert_close(g_ours, g_theirs)
    (sdpa_mask,) = leaves((3, 5), seed=24)
    if hasattr(torch.nn.functional, "scaled_dot_product_attention"):
        g, = torch.autograd.grad(mt.scaled_dot_product_attention(q, k, v, attn_mask=sdpa_mask).sum(), sdpa_mask)
        want, = torch.autograd.grad(sdpa_reference(q, k, v, attn_mask=sdpa_mask).sum(), sdpa_mask)
        torch.testing.assert_close(g, want)
    else:  # PyTorch 1.13 has no function of its own to compute it: refused, never a silent zero
        with pytest.raises(RuntimeError, match="attn_mask requires a gradient"):
            mt.scaled_dot_product_attention(q, k, v, attn_mask=sdpa_mask)


def test_pytorch_2_idioms_causal_bias_scripting_and_mixed_bias_dtypes():
    x = torch.randn(2, 4, 8, dtype=torch.float64)
    # A float16 bias beside float64 weights: PyTorch widens it; so does the drop-in.
    theirs, ours = mha_pair(embed_dim=8, num_heads=2, batch_first=True)
    for m in (theirs, ours):
        m.in_proj_bias = nn.Parameter(theirs.in_proj_bias.detach().half())
    torch.testing.assert_close(ours(x, x, x)[0], theirs(x, x, x)[0])
    # nn.MultiheadAttention's own rank messages, which code may match.
    with pytest.raises(AssertionError, match="expected `key` and `value` to be 3-D but found 2-D and 3-D"):
        ours(x, x[0], x)
    # torch.jit.script compiles PyTorch's own module, with the same parameters and results.
    layer = mt.accelerate(nn.TransformerEncoderLayer(8, 2, 16, dropout=0.0, batch_first=True, dtype=torch.float64))
    scripted = torch.jit.script(copy.deepcopy(layer))
    torch.testing.assert_close(scripted(x), layer(x))
    # An accelerated model saved whole (pickled) loads back accelerated, with the same results.
    buffer = io.BytesIO()
    torch.save(layer, buffer)
    buffer.seek(0)
    loaded = torch.load(buffer, weights_only=False) if "weights_only" in inspect.signature(torch.load).parameters \
        else torch.load(buffer)
    assert type(loaded) is type(layer) and type(loaded.self_attn) is mt.MultiheadAttention
    torch.testing.assert_close(loaded(x), layer(x))
    # torch.nn.attention.bias's causal biases (PyTorch 2.3 and later).
    bias_module = pytest.importorskip("torch.nn.attention.bias")
    q, k, v = leaves((2, 6, 8), (2, 4, 8), (2, 4, 8), seed=25)
    for bias in (bias_module.causal_upper_left(6, 4), bias_module.causal_lower_right(6, 4)):
        want = sdpa_reference(q, k, v, attn_mask=bias._materialize())
        torch.testing.assert_close(mt.scaled_dot_product_attention(q, k, v, attn_mask=bias), want)
    with pytest.raises(ValueError, match="CausalBias should not be used with causal=True"):
        mt.scaled_dot_product_attention(q, k, v, attn_mask=bias, is_causal=True)


def test_bad_inputs_raise_clear_python_errors():
    q = torch.randn(2, 4, 8)
    with pytest.raises(TypeError, match="query must be a torch.Tensor"):
        mt.scaled_dot_product_attention([1.0], q, q)
    with pytest.raises(TypeError, match="must be float32, bfloat16, float64, got int64"):
        mt.scaled_dot_product_attention(q.long(), q.long(), q.long())
    with pytest.raises(ValueError, match="share their leading dimensions"):
        mt.scaled_dot_product_attention(q, torch.randn(3, 4, 8), torch.randn(3, 4, 8))
    with pytest.raises(ValueError, match="key must be"):
        mt.scaled_dot_product_attention(q, torch.randn(2, 4, 7), q)
    with pytest.raises(ValueError, match="does not broadcast"):
        mt.scaled_dot_product_attention(q, q, q, attn_mask=torch.ones(3, 3, dtype=torch.bool))
    with pytest.raises(ValueError, match="at least one feature"):
        mt.scaled_dot_product_attention(torch.randn(2, 3, 0), torch.randn(2, 5, 0), torch.randn(2, 5, 4))
    with pytest.raises(TypeError, match="one dtype"):
        mt.scaled_dot_product_attention(q, q.double(), q)
    with pytest.raises(ValueError, match="dense"):
        mt.scaled_dot_product_attention(q.to_sparse(), q, q)
    mha = mt.MultiheadAttention(8, 2, batch_first=True)
    with pytest.raises(ValueError, match="key_padding_mask must be"):
        mha(q, q, q, key_padding_mask=torch.zeros(2, 5, dtype=torch.bool))
    with pytest.raises(ValueError, match="attn_mask must be"):
        mha(q, q, q, attn_mask=torch.zeros(5, 4, dtype=torch.bool))
    with pytest.raises(ValueError, match="expected embed_dim 8"):
        mha(torch.randn(2, 4, 6), torch.randn(2, 4, 6), torch.randn(2, 4, 6))
    with pytest.raises(TypeError, match="torch.nn.Module"):
        mt.accelerate("model")
