#!/usr/bin/python3
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

Every configuration runs in a fresh process with PyTorch at its best (torch_peer.py: its best
OpenBLAS kernels, a caching malloc, the same threads), which the drop-ins share: their projections
are PyTorch's own matmuls.

    cmake --build build -j2
    /usr/bin/python3 bench/torch_dropin.py --threads 2
"""
import argparse
import json
import os
import subprocess
import sys

from compare_torch import mib, run_multihead
from torch_peer import MEASURE_CHILD, print_header, torch_env

HERE = os.path.dirname(os.path.abspath(__file__))
BUILD = os.path.join(HERE, "..", "build")

CHILD = MEASURE_CHILD + r"""
import json, math, sys, torch
cfg = json.loads(sys.argv[1])
torch.set_num_threads(cfg["threads"])
torch.manual_seed(0)
import multihead.torch as mt

def torch_sdpa(q, k, v):  # PyTorch 1.13's attention math, as its multi_head_attention_forward runs it
    w = torch.softmax(torch.bmm(q / math.sqrt(q.shape[-1]), k.transpose(-2, -1)), dim=-1)
    return torch.bmm(w, v)

def attention_step(B, L):
    E, H = cfg["embed_dim"], cfg["heads"]
    backward = cfg["backward"]
    if cfg["op"] == "sdpa":
        D = E // H
        q, k, v = (torch.randn(B * H, L, D, requires_grad=backward) for _ in range(3))
        f = mt.scaled_dot_product_attention if cfg["impl"] == "multihead" else torch_sdpa
        def step():
            if backward:
                f(q, k, v).backward(torch.ones(B * H, L, D))
            else:
                with torch.no_grad():
                    f(q, k, v)
        return step
    m = torch.nn.MultiheadAttention(E, H, batch_first=True)
    if cfg["impl"] == "multihead":
        mt.accelerate(m)
    x = torch.randn(B, L, E, requires_grad=backward)
    m.train(backward)
    def step():
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
    opt = torch.optim.AdamW(model.parameters(), lr=1e-4)
    x = torch.randn(B, L, 256)
    def step():
        opt.zero_grad(set_to_none=True)
        with torch.autocast("cpu", dtype=torch.bfloat16, enabled=cfg["bf16"]):
            loss = model(x).float().pow(2).mean()
        loss.backward()
        opt.step()
    return step

make = train_step if cfg["op"] == "train" else attention_step
make(2, 8)()  # the libraries' first use, on a tiny shape
print(json.dumps(measure(make(cfg["batch"], cfg["seq_len"]), cfg["iters"])))
"""


def child(cfg, threads):
    env = torch_env(threads)
    env["PYTHONPATH"] = os.path.join(BUILD, "python")
    cfg = dict(cfg, threads=threads)
    r = subprocess.run([sys.executable, "-c", CHILD, json.dumps(cfg)], capture_output=True, text=True, env=env)
    if r.returncode != 0:
        sys.exit(f"torch_dropin: {json.dumps(cfg)} failed:\n{r.stderr}")
    return json.loads(r.stdout.strip().splitlines()[-1])


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--bin", default=os.path.join(BUILD, "multihead"), help="multihead binary")
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--shapes", default="8x512,1x4096", help="comma-separated BATCHxSEQ_LEN")
    ap.add_argument("--embed-dim", type=int, default=512)
    ap.add_argument("--num-heads", type=int, default=8)
    ap.add_argument("--iters", type=int, default=7)
    ap.add_argument("--skip-training", action="store_true")
    args = ap.parse_args()
    T, E, H = args.threads, args.embed_dim, args.num_heads
    print_header(args.bin, T)

    print("| op | shape (B x L), E, H | pass | PyTorch ms | drop-in ms | drop-in vs PyTorch | native vs PyTorch "
          "| bridge keeps | PyTorch peak RSS | drop-in peak RSS | memory ratio |")
    print("|---|---|---|---|---|---|---|---|---|---|---|")
    for shape in args.shapes.split(","):
        B, L = (int(v) for v in shape.lower().split("x"))
        for backward in (False, True):
            cfg = dict(batch=B, seq_len=L, embed_dim=E, heads=H, backward=backward, iters=args.iters)
            own = run_multihead(args.bin, B, L, E, H, T, backward, False, args.iters, "onednn")
            for op in ("sdpa", "mha"):
                theirs = child(dict(cfg, op=op, impl="torch"), T)
                ours = child(dict(cfg, op=op, impl="multihead"), T)
                ratio = theirs["ms"] / ours["ms"]
                native_cols = "| - | - "
                if op == "mha":
                    native_ratio = theirs["ms"] / own["ms"]
                    native_cols = f"| {native_ratio:.2f}x | {100 * ratio / native_ratio:.0f}% "
                mem = theirs["peak_rss_delta_bytes"] / max(1, ours["peak_rss_delta_bytes"])
                print(f"| {op} | {B} x {L}, {E}, {H} | {'fwd+bwd' if backward else 'fwd'} | {theirs['ms']:.1f} "
                      f"| {ours['ms']:.1f} | {ratio:.2f}x {native_cols}| {mib(theirs['peak_rss_delta_bytes'])} "
                      f"| {mib(ours['peak_rss_delta_bytes'])} | {mem:.1f}x less |", flush=True)
    if args.skip_training:
        return
    print("\n| training loop (encoder, 32 x 256 tokens) | precision | PyTorch ms a step | accelerated ms a step "
          "| tokens/s PyTorch | tokens/s accelerated | speed-up |")
    print("|---|---|---|---|---|---|---|")
    for bf16 in (False, True):
        cfg = dict(op="train", batch=32, seq_len=256, bf16=bf16, iters=max(3, args.iters // 2))
        theirs = child(dict(cfg, impl="torch"), T)
        ours = child(dict(cfg, impl="multihead"), T)
        tok = 32 * 256 * 1e3
        print(f"| AdamW, dropout 0.1 | {'bf16 autocast' if bf16 else 'fp32'} | {theirs['ms']:.0f} | {ours['ms']:.0f} "
              f"| {tok / theirs['ms']:.0f} | {tok / ours['ms']:.0f} | {theirs['ms'] / ours['ms']:.2f}x |", flush=True)
    print(f"\n{T} threads; medians of {args.iters} iterations ({max(3, args.iters // 2)} for training steps).")


if __name__ == "__main__":
    main()
