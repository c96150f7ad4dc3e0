#!/usr/bin/python3
# SPDX-License-Identifier: Apache-2.0
"""Generates the golden fixtures in tests/golden/ with PyTorch.

Needs Debian's python3-torch (1.13); run it with the system interpreter:
    /usr/bin/python3 scripts/gen_golden.py
CI never runs this: the fixtures it writes are committed.

Each case is a folder holding the four files of `multihead apply`:
    module.json          the module config, as given to `multihead apply`
    weights.safetensors  the state_dict
    inputs.safetensors   query (key, value), masks, grad_output
    expected.safetensors output, attn_weights and every gradient

Expected values are computed in float64 from float32 inputs and weights, then
stored as float32. They come from `reference_mha`, a transcription of
torch.nn.functional.multi_head_attention_forward in plain torch ops that also
implements the two behaviours PyTorch 1.13 lacks:
  - a query whose keys are all masked gives zero weights and a zero attention
    row (1.13 gives NaN);
  - bool and float masks combine (float masks add, bool masks OR), as in
    PyTorch 2.x, where 1.13 rejects some combinations.
Every case that 1.13 can run is also run through torch.nn.MultiheadAttention
itself, and the two must agree to 1e-10, so the transcription is checked
against PyTorch on every case where PyTorch has an answer.
"""
import json
import math
import os
import shutil
import struct
import sys

import torch

ROOT = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "tests", "golden")


def write_safetensors(path, tensors):
    """Minimal safetensors writer (8-byte length, JSON header, raw data)."""
    header, blobs, offset = {}, [], 0
    for name in sorted(tensors):
        t = tensors[name].detach().contiguous()
        if t.dtype == torch.bool:
            dtype, raw = "BOOL", t.to(torch.uint8).numpy().tobytes()
        elif t.dtype == torch.int64:
            dtype, raw = "I64", t.numpy().tobytes()
        else:
            dtype, raw = "F32", t.to(torch.float32).numpy().tobytes()
        header[name] = {"dtype": dtype, "shape": list(t.shape), "data_offsets": [offset, offset + len(raw)]}
        blobs.append(raw)
        offset += len(raw)
    h = json.dumps(header, separators=(",", ":")).encode()
    h += b" " * ((8 - len(h) % 8) % 8)
    with open(path, "wb") as f:
        f.write(struct.pack("<Q", len(h)))
        f.write(h)
        for b in blobs:
            f.write(b)


def causal_mask(L, S, align):
    """Bool (L, S), True = masked."""
    i = torch.arange(L)[:, None]
    j = torch.arange(S)[None, :]
    limit = i if align == "top_left" else i + (S - L)
    return j > limit


def reference_mha(p, cfg, q, k, v, kpm, attn_mask, need_weights, average):
    """Batch-first MHA in float64 torch ops; returns (output, weights)."""
    E, H = cfg["embed_dim"], cfg["num_heads"]
    D = E // H
    B, L, _ = q.shape
    S = k.shape[1]
    if "in_proj_weight" in p:
        wq, wk, wv = p["in_proj_weight"].chunk(3)
    else:
        wq, wk, wv = p["q_proj_weight"], p["k_proj_weight"], p["v_proj_weight"]
    bq = bk = bv = None
    if "in_proj_bias" in p:
        bq, bk, bv = p["in_proj_bias"].chunk(3)
    Q = torch.nn.functional.linear(q, wq, bq)
    K = torch.nn.functional.linear(k, wk, bk)
    V = torch.nn.functional.linear(v, wv, bv)
    if cfg.get("add_bias_kv"):
        K = torch.cat([K, p["bias_k"].expand(B, 1, E)], 1)
        V = torch.cat([V, p["bias_v"].expand(B, 1, E)], 1)
    if cfg.get("add_zero_attn"):
        K = torch.cat([K, torch.zeros(B, 1, E, dtype=K.dtype)], 1)
        V = torch.cat([V, torch.zeros(B, 1, E, dtype=V.dtype)], 1)
    S2 = K.shape[1]
    Q = Q.view(B, L, H, D).transpose(1, 2)
    K = K.view(B, S2, H, D).transpose(1, 2)
    V = V.view(B, S2, H, D).transpose(1, 2)
    scores = Q @ K.transpose(-1, -2) / math.sqrt(D)  # (B, H, L, S2)

    blocked = torch.zeros(B, H, L, S2, dtype=torch.bool)
    add = torch.zeros(B, H, L, S2, dtype=torch.float64)
    if kpm is not None:
        if kpm.dtype == torch.bool:
            blocked[..., :S] |= kpm.view(B, 1, 1, S)
        else:
            add[..., :S] += kpm.double().view(B, 1, 1, S)
    if attn_mask is not None:
        m = attn_mask.view(1, 1, L, S) if attn_mask.dim() == 2 else attn_mask.view(B, H, L, S)
        if m.dtype == torch.bool:
            blocked[..., :S] |= m
        else:
            add[..., :S] += m.double()
    # A float -inf is a mask too; keep it out of the arithmetic.
    blocked |= torch.isneginf(add)
    add = add.masked_fill(blocked, 0.0)
    full = blocked.all(-1, keepdim=True)  # queries with nothing to attend to
    scores = (scores + add).masked_fill(blocked & ~full, float("-inf"))
    P = torch.softmax(scores, -1) * (~full)
    O = (P @ V).transpose(1, 2).reshape(B, L, E)
    out = torch.nn.functional.linear(O, p["out_proj.weight"], p.get("out_proj.bias"))
    w = None
    if need_weights:
        w = P.mean(1) if average else P
    return out, w


CASES = []


def case(name, **kw):
    CASES.append((name, kw))


# name, module config and call options, data sizes.
case("self_basic", cfg=dict(embed_dim=16, num_heads=4), B=2, L=5)
case("self_one_head", cfg=dict(embed_dim=8, num_heads=1), B=2, L=4)
case("self_many_heads", cfg=dict(embed_dim=16, num_heads=8), B=1, L=6)
case("batch1", cfg=dict(embed_dim=12, num_heads=3), B=1, L=3)
case("cross_L_ne_S", cfg=dict(embed_dim=12, num_heads=3), B=2, L=3, S=6, cross=True)
case("cross_L_gt_S", cfg=dict(embed_dim=8, num_heads=2), B=2, L=6, S=2, cross=True)
case("kdim_vdim", cfg=dict(embed_dim=8, num_heads=2, kdim=5, vdim=7), B=2, L=4, S=3, cross=True)
case("kdim_vdim_masks", cfg=dict(embed_dim=6, num_heads=3, kdim=4, vdim=9), B=2, L=3, S=5, cross=True,
     kpm="bool", attn="float2")
case("no_bias", cfg=dict(embed_dim=8, num_heads=2, bias=False), B=2, L=4)
case("no_bias_kdim", cfg=dict(embed_dim=8, num_heads=2, bias=False, kdim=3, vdim=3), B=2, L=4, S=5, cross=True)
case("add_bias_kv", cfg=dict(embed_dim=8, num_heads=2, add_bias_kv=True), B=2, L=4)
case("add_zero_attn", cfg=dict(embed_dim=8, num_heads=2, add_zero_attn=True), B=2, L=4)
case("bias_kv_zero_attn_masks", cfg=dict(embed_dim=8, num_heads=2, add_bias_kv=True, add_zero_attn=True), B=2,
     L=3, S=5, cross=True, kpm="bool", attn="bool2")
case("kpm_bool", cfg=dict(embed_dim=8, num_heads=2), B=3, L=5, kpm="bool")
case("kpm_float", cfg=dict(embed_dim=8, num_heads=2), B=2, L=5, kpm="float")
case("attn_bool_2d", cfg=dict(embed_dim=8, num_heads=2), B=2, L=5, attn="bool2")
case("attn_float_2d", cfg=dict(embed_dim=8, num_heads=2), B=2, L=5, attn="float2")
case("attn_bool_3d", cfg=dict(embed_dim=8, num_heads=2), B=2, L=4, S=6, cross=True, attn="bool3")
case("attn_float_3d", cfg=dict(embed_dim=8, num_heads=2), B=2, L=4, attn="float3")
case("kpm_bool_attn_float", cfg=dict(embed_dim=8, num_heads=2), B=2, L=5, kpm="bool", attn="float2")
case("kpm_bool_attn_bool_3d", cfg=dict(embed_dim=8, num_heads=2), B=2, L=5, kpm="bool", attn="bool3")
case("kpm_float_attn_float", cfg=dict(embed_dim=8, num_heads=2), B=2, L=4, kpm="float", attn="float2")
case("causal_top_left", cfg=dict(embed_dim=8, num_heads=2, is_causal=True), B=2, L=5)
case("causal_top_left_L_ne_S", cfg=dict(embed_dim=8, num_heads=2, is_causal=True), B=2, L=3, S=6, cross=True)
case("causal_bottom_right", cfg=dict(embed_dim=8, num_heads=2, is_causal=True, causal_alignment="bottom_right"),
     B=2, L=3, S=6, cross=True)
case("causal_with_kpm", cfg=dict(embed_dim=8, num_heads=2, is_causal=True), B=2, L=5, kpm="bool")
case("fully_masked_rows", cfg=dict(embed_dim=8, num_heads=2), B=2, L=4, kpm="bool_full_b0", attn="bool2_row")
case("fully_masked_float", cfg=dict(embed_dim=8, num_heads=2), B=2, L=4, attn="float2_row_ninf")
case("per_head_weights", cfg=dict(embed_dim=12, num_heads=3, average_attn_weights=False), B=2, L=4, S=5,
     cross=True, kpm="bool")
case("no_weights", cfg=dict(embed_dim=8, num_heads=2, need_weights=False), B=2, L=4)
case("forward_only", cfg=dict(embed_dim=8, num_heads=4), B=2, L=3, no_grad=True)


def make_masks(gen, kind_kpm, kind_attn, B, H, L, S):
    kpm = attn = None
    if kind_kpm == "bool":
        kpm = torch.rand(B, S, generator=gen) < 0.3
        kpm[:, 0] = False  # keep every row attendable
    elif kind_kpm == "bool_full_b0":
        kpm = torch.zeros(B, S, dtype=torch.bool)
        kpm[0, :] = True  # batch element 0 has no valid key at all
        kpm[1, -1] = True
    elif kind_kpm == "float":
        kpm = torch.randn(B, S, generator=gen)
    if kind_attn == "bool2":
        attn = torch.rand(L, S, generator=gen) < 0.3
        attn[:, 0] = False
    elif kind_attn == "bool2_row":
        attn = torch.rand(L, S, generator=gen) < 0.3
        attn[:, 0] = False
        attn[1, :] = True  # query 1 sees nothing
    elif kind_attn == "float2":
        attn = torch.randn(L, S, generator=gen)
    elif kind_attn == "float2_row_ninf":
        attn = torch.randn(L, S, generator=gen)
        attn[2, :] = float("-inf")
        attn[0, 1] = float("-inf")
    elif kind_attn == "bool3":
        attn = torch.rand(B * H, L, S, generator=gen) < 0.3
        attn[..., 0] = False
    elif kind_attn == "float3":
        attn = torch.randn(B * H, L, S, generator=gen)
    return kpm, attn


def torch_native(mha, cfg, q, k, v, self_attn, kpm, attn_mask, need_weights, average):
    """The same call through torch.nn.MultiheadAttention 1.13, or None if it cannot express it."""
    if kpm is not None and attn_mask is not None and kpm.dtype != torch.bool:
        return None  # 1.13 cannot combine a float key_padding_mask with attn_mask
    if cfg.get("is_causal"):
        align = cfg.get("causal_alignment", "top_left")
        cm = causal_mask(q.shape[1], k.shape[1], align)
        if attn_mask is None:
            attn_mask = cm
        elif attn_mask.dtype == torch.bool:
            attn_mask = attn_mask | cm
        else:
            attn_mask = attn_mask.masked_fill(cm, float("-inf"))
    if attn_mask is not None and attn_mask.dtype != torch.bool:
        attn_mask = attn_mask.double()
    if kpm is not None and kpm.dtype != torch.bool:
        kpm = kpm.double()
    if self_attn:
        return mha(q, q, q, key_padding_mask=kpm, attn_mask=attn_mask, need_weights=need_weights,
                   average_attn_weights=average)
    return mha(q, k, v, key_padding_mask=kpm, attn_mask=attn_mask, need_weights=need_weights,
               average_attn_weights=average)


def generate(name, spec, seed):
    cfg = dict(type="MultiheadAttention", **spec["cfg"])
    E, H = cfg["embed_dim"], cfg["num_heads"]
    B, L = spec["B"], spec["L"]
    cross = spec.get("cross", False)
    S = spec.get("S", L)
    gen = torch.Generator().manual_seed(seed)
    torch.manual_seed(seed)
    mha = torch.nn.MultiheadAttention(E, H, bias=cfg.get("bias", True), add_bias_kv=cfg.get("add_bias_kv", False),
                                      add_zero_attn=cfg.get("add_zero_attn", False), kdim=cfg.get("kdim"),
                                      vdim=cfg.get("vdim"), batch_first=True)
    # Random values everywhere (PyTorch's init leaves the biases at zero,
    # which would hide bias bugs).
    with torch.no_grad():
        for _, prm in mha.named_parameters():
            prm.copy_(torch.rand(prm.shape, generator=gen) - 0.5)
    weights32 = {n: prm.detach().float().clone() for n, prm in mha.named_parameters()}
    mha = mha.double()
    kdim = cfg.get("kdim") or E
    vdim = cfg.get("vdim") or E
    q32 = torch.randn(B, L, E, generator=gen)
    k32 = torch.randn(B, S, kdim, generator=gen) if cross else None
    v32 = torch.randn(B, S, vdim, generator=gen) if cross else None
    kpm, attn_mask = make_masks(gen, spec.get("kpm"), spec.get("attn"), B, H, L, S)
    no_grad = spec.get("no_grad", False)
    g32 = None if no_grad else torch.randn(B, L, E, generator=gen)
    need_weights = cfg.get("need_weights", True)
    average = cfg.get("average_attn_weights", True)

    q = q32.double().requires_grad_(True)
    k = k32.double().requires_grad_(True) if cross else q
    v = v32.double().requires_grad_(True) if cross else q
    params = {n: prm for n, prm in mha.named_parameters()}
    kpm_d = kpm if kpm is None or kpm.dtype == torch.bool else kpm.double()
    attn_d = attn_mask if attn_mask is None or attn_mask.dtype == torch.bool else attn_mask.double()
    if cfg.get("is_causal"):
        cm = causal_mask(L, S, cfg.get("causal_alignment", "top_left"))
        attn_d = cm if attn_d is None else (attn_d | cm if attn_d.dtype == torch.bool else attn_d.masked_fill(cm, float("-inf")))
    out, w = reference_mha(params, cfg, q, k, v, kpm_d, attn_d, need_weights, average)

    # Cross-check the transcription against nn.MultiheadAttention: outputs,
    # weights and (below) every gradient.
    native = torch_native(mha, cfg, q, k, v, not cross, kpm, attn_mask, need_weights, average)
    checked = False
    if native is not None:
        n_out, n_w = native
        ok = ~torch.isnan(n_out)
        if ok.all() or "fully" in name:
            assert torch.allclose(out[ok], n_out[ok], atol=1e-10), f"{name}: reference disagrees with torch"
            if need_weights:
                okw = ~torch.isnan(n_w)
                assert torch.allclose(w[okw], n_w[okw], atol=1e-10), f"{name}: weights disagree with torch"
            checked = True

    expected = {"output": out}
    if need_weights:
        expected["attn_weights"] = w
    inputs = {"query": q32}
    if cross:
        inputs["key"], inputs["value"] = k32, v32
    if kpm is not None:
        inputs["key_padding_mask"] = kpm
    if attn_mask is not None:
        inputs["attn_mask"] = attn_mask
    if g32 is not None:
        inputs["grad_output"] = g32
        grads = torch.autograd.grad(out, [q] + ([k, v] if cross else []) + list(params.values()), g32.double(),
                                    allow_unused=True)
        expected["grad_query"] = grads[0]
        if cross:
            expected["grad_key"], expected["grad_value"] = grads[1], grads[2]
        for n, gr in zip(params, grads[3 if cross else 1:]):
            expected["grad." + n] = gr if gr is not None else torch.zeros_like(params[n])
        for n, t in expected.items():
            assert not torch.isnan(t).any(), f"{name}: NaN in {n}"
        if native is not None and not torch.isnan(native[0]).any():
            wrt = [q] + ([k, v] if cross else []) + list(params.values())
            n_grads = torch.autograd.grad(native[0], wrt, g32.double(), allow_unused=True)
            for a, b in zip(grads, n_grads):
                assert (a is None) == (b is None) and (a is None or torch.allclose(a, b, atol=1e-10)), \
                    f"{name}: gradients disagree with torch"

    d = os.path.join(ROOT, "mha", name)
    os.makedirs(d, exist_ok=True)
    with open(os.path.join(d, "module.json"), "w") as f:
        json.dump(cfg, f, indent=2, sort_keys=True)
        f.write("\n")
    write_safetensors(os.path.join(d, "weights.safetensors"), weights32)
    write_safetensors(os.path.join(d, "inputs.safetensors"), inputs)
    write_safetensors(os.path.join(d, "expected.safetensors"), expected)
    return checked


LAYER_CASES = []


def layer_case(name, **kw):
    LAYER_CASES.append((name, kw))


# Transformer layers run through torch.nn itself (no fully masked rows here,
# so PyTorch 1.13's answer is the reference).
layer_case("encoder_post_ln_relu", type="TransformerEncoderLayer",
           cfg=dict(d_model=16, nhead=4, dim_feedforward=24), B=2, L=5)
layer_case("encoder_pre_ln_gelu", type="TransformerEncoderLayer",
           cfg=dict(d_model=16, nhead=2, dim_feedforward=20, activation="gelu", norm_first=True), B=2, L=6)
layer_case("encoder_post_ln_masks", type="TransformerEncoderLayer",
           cfg=dict(d_model=12, nhead=3, dim_feedforward=16, layer_norm_eps=1e-6), B=3, L=5, kpm=True,
           attn="bool")
layer_case("encoder_pre_ln_float_mask", type="TransformerEncoderLayer",
           cfg=dict(d_model=8, nhead=2, dim_feedforward=12, norm_first=True, activation="gelu"), B=2, L=4,
           kpm=True, attn="float")
layer_case("encoder_causal", type="TransformerEncoderLayer",
           cfg=dict(d_model=8, nhead=2, dim_feedforward=12, is_causal=True), B=2, L=5)
layer_case("decoder_post_ln", type="TransformerDecoderLayer",
           cfg=dict(d_model=16, nhead=4, dim_feedforward=24, tgt_is_causal=True), B=2, L=4, S=6)
layer_case("decoder_post_ln_memory_masks", type="TransformerDecoderLayer",
           cfg=dict(d_model=12, nhead=3, dim_feedforward=16, tgt_is_causal=True), B=2, L=5, S=4, kpm=True,
           mem_kpm=True, mem_attn="bool")
layer_case("decoder_pre_ln_gelu", type="TransformerDecoderLayer",
           cfg=dict(d_model=8, nhead=2, dim_feedforward=12, norm_first=True, activation="gelu"), B=2, L=3, S=5,
           attn="bool", mem_kpm=True, mem_attn="float")


def rand_mask(gen, kind, rows, cols, B):
    if kind is None:
        return None
    if kind == "bool":
        m = torch.rand(rows, cols, generator=gen) < 0.3
        m[:, 0] = False
        return m
    return torch.randn(rows, cols, generator=gen)


def generate_layer(name, spec, seed):
    kind = spec["type"]
    cfg = dict(type=kind, **spec["cfg"])
    d, B, L = cfg["d_model"], spec["B"], spec["L"]
    S = spec.get("S", L)
    gen = torch.Generator().manual_seed(seed)
    kw = dict(d_model=d, nhead=cfg["nhead"], dim_feedforward=cfg["dim_feedforward"], dropout=0.0,
              activation=cfg.get("activation", "relu"), layer_norm_eps=cfg.get("layer_norm_eps", 1e-5),
              batch_first=True, norm_first=cfg.get("norm_first", False))
    cfg["dropout"] = 0.0
    layer = (torch.nn.TransformerEncoderLayer if kind == "TransformerEncoderLayer" else
             torch.nn.TransformerDecoderLayer)(**kw)
    with torch.no_grad():
        for _, prm in layer.named_parameters():
            prm.copy_(torch.rand(prm.shape, generator=gen) - 0.5)
            if prm.dim() == 1 and "norm" in _:
                prm.add_(1.0 if _.endswith("weight") else 0.0)
    weights32 = {n: prm.detach().float().clone() for n, prm in layer.named_parameters()}
    layer = layer.double().eval()
    x32 = torch.randn(B, L, d, generator=gen)
    g32 = torch.randn(B, L, d, generator=gen)
    inputs = {}
    x = x32.double().requires_grad_(True)
    kpm = None
    if spec.get("kpm"):
        kpm = torch.rand(B, L, generator=gen) < 0.3
        kpm[:, 0] = False
    attn = rand_mask(gen, spec.get("attn"), L, L, B)
    causal_flag = cfg.get("is_causal") or cfg.get("tgt_is_causal")
    attn_used = attn
    if causal_flag:
        cm = causal_mask(L, L, "top_left")
        attn_used = cm if attn is None else attn | cm
    if attn_used is not None and attn_used.dtype != torch.bool:
        attn_used = attn_used.double()
    if kind == "TransformerEncoderLayer":
        out = layer(x, src_mask=attn_used, src_key_padding_mask=kpm)
        inputs["src"] = x32
        if kpm is not None:
            inputs["src_key_padding_mask"] = kpm
        if attn is not None:
            inputs["src_mask"] = attn
        wrt = [x]
        grad_names = ["grad_src"]
    else:
        m32 = torch.randn(B, S, d, generator=gen)
        mem = m32.double().requires_grad_(True)
        mem_kpm = None
        if spec.get("mem_kpm"):
            mem_kpm = torch.rand(B, S, generator=gen) < 0.3
            mem_kpm[:, 0] = False
        mem_attn = rand_mask(gen, spec.get("mem_attn"), L, S, B)
        mem_attn_used = mem_attn if mem_attn is None or mem_attn.dtype == torch.bool else mem_attn.double()
        out = layer(x, mem, tgt_mask=attn_used, memory_mask=mem_attn_used, tgt_key_padding_mask=kpm,
                    memory_key_padding_mask=mem_kpm)
        inputs["tgt"], inputs["memory"] = x32, m32
        for n, t in (("tgt_key_padding_mask", kpm), ("tgt_mask", attn), ("memory_key_padding_mask", mem_kpm),
                     ("memory_mask", mem_attn)):
            if t is not None:
                inputs[n] = t
        wrt = [x, mem]
        grad_names = ["grad_tgt", "grad_memory"]
    inputs["grad_output"] = g32
    params = dict(layer.named_parameters())
    grads = torch.autograd.grad(out, wrt + list(params.values()), g32.double())
    expected = {"output": out}
    for n, gr in zip(grad_names, grads):
        expected[n] = gr
    for n, gr in zip(params, grads[len(wrt):]):
        expected["grad." + n] = gr
    for n, t in expected.items():
        assert not torch.isnan(t).any(), f"{name}: NaN in {n}"
    dirname = os.path.join(ROOT, "layers", name)
    os.makedirs(dirname, exist_ok=True)
    with open(os.path.join(dirname, "module.json"), "w") as f:
        json.dump(cfg, f, indent=2, sort_keys=True)
        f.write("\n")
    write_safetensors(os.path.join(dirname, "weights.safetensors"), weights32)
    write_safetensors(os.path.join(dirname, "inputs.safetensors"), inputs)
    write_safetensors(os.path.join(dirname, "expected.safetensors"), expected)


PARITY = dict(vocab_size=50, d_model=16, nhead=4, dim_feedforward=32, num_layers=2, num_classes=3, max_len=16,
              positions="sinusoidal", pooling="mean", final_norm=True, activation="relu", norm_first=False,
              dropout=0.0, layer_norm_eps=1e-5, optimizer="adamw", lr=3e-3, betas=[0.9, 0.999], eps=1e-8,
              weight_decay=0.01, warmup_steps=5, schedule="cosine", total_steps=20, clip_grad_norm=1.0, steps=20,
              batch=4, seq_len=10)


def sinusoidal(max_len, d):
    pe = torch.zeros(max_len, d, dtype=torch.float64)
    pos = torch.arange(max_len, dtype=torch.float64)[:, None]
    i = torch.arange(0, d, 2, dtype=torch.float64)
    angle = pos / torch.pow(10000.0, i / d)
    pe[:, 0::2] = torch.sin(angle)
    pe[:, 1::2] = torch.cos(angle)
    return pe.float()


class ParityClassifier(torch.nn.Module):
    """The model multihead's SequenceClassifier builds, in torch.nn, with the same state_dict names:
    sinusoidal positions (a buffer the state_dict leaves out) or learned ones (pos_embedding)."""

    def __init__(self, c):
        super().__init__()
        self.embedding = torch.nn.Embedding(c["vocab_size"], c["d_model"])
        if c["positions"] == "learned":
            self.pos_embedding = torch.nn.Embedding(c["max_len"], c["d_model"])
        else:
            self.register_buffer("pe", sinusoidal(c["max_len"], c["d_model"]), persistent=False)
        layer = torch.nn.TransformerEncoderLayer(c["d_model"], c["nhead"], c["dim_feedforward"], c["dropout"],
                                                 c["activation"], c["layer_norm_eps"], batch_first=True,
                                                 norm_first=c["norm_first"])
        self.encoder = torch.nn.TransformerEncoder(layer, c["num_layers"], norm=torch.nn.LayerNorm(c["d_model"]),
                                                   enable_nested_tensor=False)
        self.classifier = torch.nn.Linear(c["d_model"], c["num_classes"])

    def forward(self, ids, pad):
        table = self.pos_embedding.weight if hasattr(self, "pos_embedding") else self.pe
        x = self.embedding(ids) + table[: ids.shape[1]]
        h = self.encoder(x, src_key_padding_mask=pad)
        keep = (~pad).float().unsqueeze(-1)
        return self.classifier((h * keep).sum(1) / keep.sum(1))


def lr_lambda(c):
    def f(step):
        if step < c["warmup_steps"]:
            return (step + 1) / c["warmup_steps"]
        t = min(max((step - c["warmup_steps"]) / max(c["total_steps"] - c["warmup_steps"], 1), 0.0), 1.0)
        return 0.5 * (1 + math.cos(math.pi * t))
    return f


def generate_train_parity():
    """20 AdamW steps of a tiny encoder classifier in PyTorch: initial weights, batches and per-step losses."""
    c = PARITY
    gen = torch.Generator().manual_seed(7)
    torch.manual_seed(7)
    model = ParityClassifier(c)
    with torch.no_grad():
        for n, prm in model.named_parameters():
            if "norm" in n:
                continue  # LayerNorm keeps its (1, 0) initialisation
            prm.copy_((torch.rand(prm.shape, generator=gen) - 0.5) * (2.0 if "embedding" in n else 0.6))
    init = {n: prm.detach().clone() for n, prm in model.named_parameters()}
    S, B, L = c["steps"], c["batch"], c["seq_len"]
    ids = torch.randint(0, c["vocab_size"], (S, B, L), generator=gen)
    lengths = torch.randint(3, L + 1, (S, B), generator=gen)
    pad = torch.arange(L)[None, None, :] >= lengths[:, :, None]
    labels = ids[:, :, 0] % c["num_classes"]  # learnable: the class is in the first token
    opt = torch.optim.AdamW(model.parameters(), lr=c["lr"], betas=tuple(c["betas"]), eps=c["eps"],
                            weight_decay=c["weight_decay"])
    sched = torch.optim.lr_scheduler.LambdaLR(opt, lr_lambda(c))
    losses = []
    model.train()
    for s in range(S):
        opt.zero_grad()
        loss = torch.nn.functional.cross_entropy(model(ids[s], pad[s]), labels[s])
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), c["clip_grad_norm"])
        opt.step()
        sched.step()
        losses.append(loss.item())
    d = os.path.join(ROOT, "train", "classifier_adamw")
    os.makedirs(d, exist_ok=True)
    with open(os.path.join(d, "config.json"), "w") as f:
        json.dump(c, f, indent=2, sort_keys=True)
        f.write("\n")
    write_safetensors(os.path.join(d, "init.safetensors"), init)
    write_safetensors(os.path.join(d, "batches.safetensors"), {"ids": ids, "padding": pad, "labels": labels})
    final = {n: prm.detach().clone() for n, prm in model.named_parameters()}
    final["losses"] = torch.tensor(losses)
    write_safetensors(os.path.join(d, "expected.safetensors"), final)
    print(f"classifier_adamw: losses {losses[0]:.4f} -> {losses[-1]:.4f}")


# A classifier trained in PyTorch, to be fine-tuned in multihead: learned positions, pre-norm, GELU.
PYTORCH_INIT = dict(vocab_size=40, d_model=16, nhead=4, dim_feedforward=24, num_layers=2, num_classes=3, max_len=12,
                    positions="learned", pooling="mean", final_norm=True, activation="gelu", norm_first=True,
                    dropout=0.0, layer_norm_eps=1e-5)


def generate_pytorch_init():
    """A state_dict as PyTorch initialises and saves it, a batch, and PyTorch's loss and gradients of one step."""
    c = PYTORCH_INIT
    torch.manual_seed(11)
    model = ParityClassifier(c)
    for layer in model.encoder.layers:  # biases PyTorch starts at zero, made nonzero so that they are checked
        with torch.no_grad():
            layer.self_attn.in_proj_bias.normal_(0, 0.1)
    gen = torch.Generator().manual_seed(12)
    B, L = 5, 9
    ids = torch.randint(0, c["vocab_size"], (B, L), generator=gen)
    ids[:, 0] = 2  # <cls>
    lengths = torch.tensor([9, 4, 7, 2, 9])
    pad = torch.arange(L)[None, :] >= lengths[:, None]
    labels = torch.tensor([0, 2, 1, 1, 2])
    model.train()
    loss = torch.nn.functional.cross_entropy(model(ids, pad), labels)
    loss.backward()
    d = os.path.join(ROOT, "train", "pytorch_init")
    os.makedirs(d, exist_ok=True)
    with open(os.path.join(d, "config.json"), "w") as f:
        json.dump(c, f, indent=2, sort_keys=True)
        f.write("\n")
    write_safetensors(os.path.join(d, "state_dict.safetensors"), model.state_dict())
    write_safetensors(os.path.join(d, "batch.safetensors"), {"ids": ids, "padding": pad, "labels": labels})
    expected = {n: p.grad for n, p in model.named_parameters()}
    expected["loss"] = loss.detach().reshape(1)
    write_safetensors(os.path.join(d, "expected.safetensors"), expected)
    print(f"pytorch_init: loss {loss.item():.4f}")


def main():
    torch.set_num_threads(1)
    out_dir = os.path.join(ROOT, "mha")
    shutil.rmtree(out_dir, ignore_errors=True)
    for i, (name, spec) in enumerate(CASES):
        checked = generate(name, spec, seed=1000 + i)
        print(f"{name:28s} {'checked against nn.MultiheadAttention' if checked else 'reference only (1.13 cannot express it)'}")
    print(f"torch {torch.__version__}: wrote {len(CASES)} cases to {os.path.relpath(out_dir)}", file=sys.stderr)
    layer_dir = os.path.join(ROOT, "layers")
    shutil.rmtree(layer_dir, ignore_errors=True)
    for i, (name, spec) in enumerate(LAYER_CASES):
        generate_layer(name, spec, seed=2000 + i)
        print(f"{name:28s} torch.nn.{spec['type']}")
    print(f"wrote {len(LAYER_CASES)} cases to {os.path.relpath(layer_dir)}", file=sys.stderr)
    shutil.rmtree(os.path.join(ROOT, "train"), ignore_errors=True)
    generate_train_parity()
    generate_pytorch_init()


if __name__ == "__main__":
    main()
