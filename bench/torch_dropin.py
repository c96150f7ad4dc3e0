#!/usr/bin/python3
# SPDX-License-Identifier: Apache-2.0
"""Side-by-side benchmark: multihead.torch's drop-ins against PyTorch's own, inside PyTorch.

1. Attention alone: scaled_dot_product_attention (PyTorch 1.13 has none; its math, as
   nn.functional.multi_head_attention_forward does it, is the peer) and MultiheadAttention
   (torch.nn.MultiheadAttention against multihead.torch.MultiheadAttention), forward and
   forward+backward, with medians, ratios and the growth of the resident set during one
   iteration; beside them `multihead bench attention` on the same layer, so the cost of the
   bridge shows (the drop-in's ratio to PyTorch over the native one's).
2. A PyTorch training loop for `multihead bench train`'s encoder (4 post-LN layers, d_model 256,
   8 heads, dim_feedforward 2048, dropout 0.1, AdamW, batch 32 x 256 tokens), untouched and after
   multihead.torch.accelerate(model), in fp32 and under torch.autocast(bfloat16): tokens per second.

The drop-ins run inside the first PyTorch `--torch` names (torch_peer.py; by default PyTorch
2.13's official CPU wheel in the project's .venv, the module built for the same interpreter); beside
them stand each named PyTorch's own (Debian's 1.13 and 2.6 as history), whose
F.scaled_dot_product_attention and nn.MultiheadAttention are timed with SDPA held to its flash
kernel and to its math kernel, the faster named. With `--precision bf16` the SDPA inputs are
bfloat16 on every side, MultiheadAttention runs under torch.autocast("cpu", dtype=torch.bfloat16)
(its projections in bf16, so the attention gets bf16 Q, K, V) and the native figure is
`bench attention --precision bf16`.

Every configuration runs in a fresh process with PyTorch at its best (torch_peer.py: its best
OpenBLAS kernels, a caching malloc, the same threads), which the drop-ins share: their projections
are PyTorch's own matmuls.

    scripts/setup.sh && cmake --build build -j2
    /usr/bin/python3 bench/torch_dropin.py --threads 2
    /usr/bin/python3 bench/torch_dropin.py --threads 2 --precision bf16 --skip-training
"""
import argparse
import json
import os

from compare_torch import mib, run_multihead
from torch_peer import (ADAMW_CHILD, MEASURE_CHILD, SDPA_KERNEL_CHILD, add_torch_argument, peers, print_header,
                        run_fastest_kernel)

HERE = os.path.dirname(os.path.abspath(__file__))
BUILD = os.path.join(HERE, "..", "build")

CHILD = MEASURE_CHILD + SDPA_KERNEL_CHILD + ADAMW_CHILD + r"""
import json, math, sys, torch
cfg = json.loads(sys.argv[1])
torch.set_num_threads(cfg["threads"])
torch.manual_seed(0)
if cfg["impl"] == "multihead":
    import multihead.torch as mt
bf16 = cfg.get("precision") == "bf16"
dtype = torch.bfloat16 if bf16 else torch.float32

def torch_sdpa(q, k, v):  # PyTorch's own: 2.x's function, or 1.13's math as its multi_head_attention_forward runs it
    if hasattr(torch.nn.functional, "scaled_dot_product_attention"):
        return torch.nn.functional.scaled_dot_product_attention(q, k, v)
    w = torch.softmax(torch.matmul(q / math.sqrt(q.shape[-1]), k.transpose(-2, -1)), dim=-1)
    return torch.matmul(w, v)

def attention_step(B, L):
    E, H = cfg["embed_dim"], cfg["heads"]
    backward = cfg["backward"]
    held = lambda: sdpa_kernel_held(cfg.get("sdpa", "auto"))
    if cfg["op"] == "sdpa":
        D = E // H
        # (B, H, L, D): PyTorch 2.x's fused kernels take only 4-dimensional inputs.
        q, k, v = (torch.randn(B, H, L, D, dtype=dtype, requires_grad=backward) for _ in range(3))
        f = mt.scaled_dot_product_attention if cfg["impl"] == "multihead" else torch_sdpa
        def step():
            with held():
                if backward:
                    f(q, k, v).backward(torch.ones(B, H, L, D, dtype=dtype))
                else:
                    with torch.no_grad():
                        f(q, k, v)
        return step
    m = torch.nn.MultiheadAttention(E, H, batch_first=True)
    if cfg["impl"] == "multihead":
        mt.accelerate(m)
    x = torch.randn(B, L, E, requires_grad=backward)
    # 1.13's fused eval-mode path does not take autocast's bf16 (a dtype error); in training
    # mode with dropout 0 it runs the same math on autocast's kernels.
    m.train(backward or (bf16 and not hasattr(torch.nn, "attention")))
    def step():
        with held(), torch.autocast("cpu", dtype=torch.bfloat16, enabled=bf16):
            if backward:
                y, _ = m(x, x, x, need_weights=False)
                y.backward(torch.ones_like(y))
            else:
                with torch.no_grad():
                    m(x, x, x, need_weights=False)
    return step

def train_step(B, L):
    layer = torch.nn.TransformerEncoderLayer(256, 8, dim_feedforward=2048, dropout=0.1, batch_first=True)
    model = torch.nn.TransformerEncoder(layer, num_layers=4)
    if cfg["impl"] == "multihead":
        mt.accelerate(model)
    model.train()
    opt = adamw(torch, model.parameters(), 1e-4)
    x = torch.randn(B, L, 256)
    def step():
        opt.zero_grad(set_to_none=True)
        with sdpa_kernel_held(cfg.get("sdpa", "auto")), torch.autocast("cpu", dtype=torch.bfloat16, enabled=cfg["bf16"]):
            loss = model(x).float().pow(2).mean()
        loss.backward()
        opt.step()
    return step

make = train_step if cfg["op"] == "train" else attention_step
make(2, 8)()  # the libraries' first use, on a tiny shape
print(json.dumps(measure(make(cfg["batch"], cfg["seq_len"]), cfg["iters"])))
"""


def child(cfg, threads, peer, dropin=False):
    """A timing child in peer's PyTorch: PyTorch's own (the fastest of its SDPA kernels), or with dropin
    the drop-in (impl multihead), which runs in that PyTorch with the built module on PYTHONPATH."""
    cfg = dict(cfg, threads=threads)
    if dropin:
        return peer.run(["-c", CHILD, json.dumps(cfg)], threads, {"PYTHONPATH": os.path.join(BUILD, "python")})
    return run_fastest_kernel(peer, lambda k: ["-c", CHILD, json.dumps(dict(cfg, sdpa=k))], threads)


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--bin", default=os.path.join(BUILD, "multihead"), help="multihead binary")
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--shapes", default="8x512,1x4096", help="comma-separated BATCHxSEQ_LEN")
    ap.add_argument("--embed-dim", type=int, default=512)
    ap.add_argument("--num-heads", type=int, default=8)
    ap.add_argument("--iters", type=int, default=7)
    ap.add_argument("--precision", choices=["fp32", "bf16"], default="fp32",
                    help="the attention section in bf16 (SDPA on bfloat16 inputs, MultiheadAttention under autocast)")
    ap.add_argument("--skip-training", action="store_true")
    add_torch_argument(ap)
    args = ap.parse_args()
    T, E, H = args.threads, args.embed_dim, args.num_heads
    peer_list = peers(args.torch)
    print_header(args.bin, T, peer_list, bf16=args.precision == "bf16")
    # The drop-ins run inside the first PyTorch named (2.13 by default), with its settings.
    host = peer_list[0]

    head = ["op", "shape (B x L), E, H", "pass", "drop-in ms"]
    for p in peer_list:
        head += [f"PyTorch {p.version} ms", f"drop-in vs {p.name}", f"native vs {p.name}"]
    head += ["bridge keeps", "drop-in peak RSS"] + [f"PyTorch {p.name} peak RSS" for p in peer_list]
    print("| " + " | ".join(head) + " |")
    print("|" + "---|" * len(head))
    for shape in args.shapes.split(","):
        B, L = (int(v) for v in shape.lower().split("x"))
        for backward in (False, True):
            cfg = dict(batch=B, seq_len=L, embed_dim=E, heads=H, backward=backward, iters=args.iters,
                       precision=args.precision)
            own = run_multihead(args.bin, B, L, E, H, T, backward, False, args.iters, "onednn", args.precision)
            for op in ("sdpa", "mha"):
                ours = child(dict(cfg, op=op, impl="multihead"), T, host, dropin=True)
                theirs = [child(dict(cfg, op=op, impl="torch"), T, p) for p in peer_list]
                row = [op, f"{B} x {L}, {E}, {H}", "fwd+bwd" if backward else "fwd", f"{ours['ms']:.1f}"]
                for t in theirs:
                    row += [f"{t['ms']:.1f}{t['kernel_note']}", f"{t['ms'] / ours['ms']:.2f}x",
                            f"{t['ms'] / own['ms']:.2f}x" if op == "mha" else "-"]
                row += [f"{100 * own['ms'] / ours['ms']:.0f}%" if op == "mha" else "-",
                        mib(ours["peak_rss_delta_bytes"])] + [mib(t["peak_rss_delta_bytes"]) for t in theirs]
                print("| " + " | ".join(row) + " |", flush=True)
    print("\n'bridge keeps': the native layer's time over the drop-in's (what the bridge to PyTorch keeps of "
          "the native speed).")
    if args.skip_training:
        return
    head = ["training loop (encoder, 32 x 256 tokens)", "precision", "accelerated ms a step"]
    for p in peer_list:
        head += [f"PyTorch {p.version} ms a step", f"speed-up over {p.name}"]
    print("\n| " + " | ".join(head) + " |")
    print("|" + "---|" * len(head))
    for bf16 in (False, True):
        cfg = dict(op="train", batch=32, seq_len=256, bf16=bf16, iters=max(3, args.iters // 2))
        ours = child(dict(cfg, impl="multihead"), T, host, dropin=True)
        row = ["AdamW, dropout 0.1", "bf16 autocast" if bf16 else "fp32", f"{ours['ms']:.0f}"]
        for p in peer_list:
            t = child(dict(cfg, impl="torch"), T, p)
            row += [f"{t['ms']:.0f}{t['kernel_note']}", f"{t['ms'] / ours['ms']:.2f}x"]
        print("| " + " | ".join(row) + " |", flush=True)
    print(f"\n{T} threads; medians of {args.iters} iterations ({max(3, args.iters // 2)} for training steps).")


if __name__ == "__main__":
    main()
