#!/usr/bin/python3
"""Side-by-side benchmark: multihead against torch.nn.MultiheadAttention.

Runs the same self-attention shapes through `multihead bench attention` and
through PyTorch (Debian's python3-torch 1.13) with the same thread count, one
after the other in the same run, and prints a Markdown table of medians and
ratios, with sgemm GFLOP/s on this machine as the roofline.

multihead's fp32 GEMMs run on oneDNN's sgemm by default, which picks its
kernels from the CPU (AVX-512 here); PyTorch 1.13's linear layers call
OpenBLAS, whose kernels follow OPENBLAS_CORETYPE, which the PyTorch process
gets set to the best its CPU supports (torch_peer.py). `--gemm both` adds a row per
pass with multihead on OpenBLAS as well, so the table separates what the GEMM
backend gives from what the rest of the layer gives (the PyTorch column is
one measurement shared by both rows).

    scripts/setup.sh
    /usr/bin/python3 bench/compare_torch.py --threads 2

PyTorch is timed at its fastest for each mode: forward in eval mode under
no_grad (its fused fast path), forward+backward in training mode; both with
need_weights=False and dropout 0, as multihead is. Memory is measured the same
way for both programs: the growth of the resident set (VmHWM after resetting
it, minus VmRSS before) during one iteration, in a fresh process.
"""
import argparse
import json
import os
import statistics
import subprocess
import sys
import time

from torch_peer import MEASURE_CHILD, print_header, torch_env

HERE = os.path.dirname(os.path.abspath(__file__))
DEFAULT_BIN = os.path.join(HERE, "..", "build", "multihead")

TORCH_CHILD = MEASURE_CHILD + r"""
import json, sys, torch
B, L, E, H, T, backward, causal, iters = json.loads(sys.argv[1])
torch.set_num_threads(T)
torch.manual_seed(0)

def make(b, l):
    m = torch.nn.MultiheadAttention(E, H, batch_first=True)
    x = torch.randn(b, l, E, requires_grad=backward)
    mask = torch.ones(l, l, dtype=torch.bool).triu(1) if causal else None
    return m, x, mask

def step(m, x, mask):
    if backward:
        m.train()
        y, _ = m(x, x, x, attn_mask=mask, need_weights=False)
        y.backward(torch.ones_like(y))
    else:
        m.eval()
        with torch.no_grad():
            m(x, x, x, attn_mask=mask, need_weights=False)

m, x, mask = make(1, 8)      # warm up the libraries on a tiny shape
step(m, x, mask)
m, x, mask = make(B, L)
print(json.dumps(measure(lambda: step(m, x, mask), iters)))
"""


def median(xs):
    return statistics.median(xs)


def run_multihead(binary, B, L, E, H, T, backward, causal, iters, gemm):
    cmd = [binary, "bench", "attention", "--batch", str(B), "--seq-len", str(L), "--embed-dim", str(E),
           "--num-heads", str(H), "--threads", str(T), "--iters", str(iters), "--gemm", gemm, "--json"]
    if backward:
        cmd.append("--backward")
    if causal:
        cmd.append("--causal")
    out = subprocess.run(cmd, check=True, capture_output=True, text=True).stdout
    return json.loads(out.strip().splitlines()[-1])


def run_torch(B, L, E, H, T, backward, causal, iters):
    out = subprocess.run([sys.executable, "-c", TORCH_CHILD, json.dumps([B, L, E, H, T, backward, causal, iters])],
                         check=True, capture_output=True, text=True, env=torch_env(T)).stdout
    return json.loads(out.strip().splitlines()[-1])


def mib(b):
    return f"{b / 2**20:.0f} MiB"


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--bin", default=DEFAULT_BIN, help="multihead binary")
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--shapes", default="8x512,1x4096", help="comma-separated BATCHxSEQ_LEN")
    ap.add_argument("--embed-dim", type=int, default=512)
    ap.add_argument("--num-heads", type=int, default=8)
    ap.add_argument("--iters", type=int, default=10)
    ap.add_argument("--causal", action="store_true")
    ap.add_argument("--gemm", choices=["onednn", "openblas", "both"], default="onednn",
                    help="multihead's fp32 GEMM backend")
    args = ap.parse_args()
    T, E, H = args.threads, args.embed_dim, args.num_heads
    backends = ["onednn", "openblas"] if args.gemm == "both" else [args.gemm]

    roof, _ = print_header(args.bin, T, backends)
    print(f"Shares of sgemm are of multihead's rate ({roof:.0f} GFLOP/s).\n")
    print("| shape (B x L), E, H | pass | multihead GEMM | multihead ms | PyTorch ms | speedup | multihead GFLOP/s "
          "| % of sgemm | attention kernel GFLOP/s (% of sgemm) | multihead peak (alloc / RSS) | PyTorch peak RSS | memory ratio |")
    print("|---|---|---|---|---|---|---|---|---|---|---|---|")
    version = None
    for shape in args.shapes.split(","):
        B, L = (int(v) for v in shape.lower().split("x"))
        iters = args.iters if B * L <= 8192 else max(3, args.iters // 2)
        for backward in (False, True):
            runs = [run_multihead(args.bin, B, L, E, H, T, backward, args.causal, iters, g) for g in backends]
            theirs = run_torch(B, L, E, H, T, backward, args.causal, iters)
            version = theirs["version"]
            t_ms = median(theirs["samples_ms"])
            for g, ours in zip(backends, runs):
                ratio_mem = theirs["peak_rss_delta_bytes"] / max(1, ours["peak_rss_delta_bytes"])
                print(f"| {B} x {L}, {E}, {H}{' causal' if args.causal else ''} | {'fwd+bwd' if backward else 'fwd'} "
                      f"| {g} | {ours['ms']:.1f} | {t_ms:.1f} | {t_ms / ours['ms']:.2f}x | {ours['gflops']:.0f} "
                      f"| {100 * ours['gflops'] / roof:.0f}% "
                      f"| {ours['attention_gflops']:.0f} ({100 * ours['attention_gflops'] / roof:.0f}%) "
                      f"| {mib(ours['peak_activation_bytes'])} / {mib(ours['peak_rss_delta_bytes'])} "
                      f"| {mib(theirs['peak_rss_delta_bytes'])} | {ratio_mem:.1f}x less |", flush=True)
    print(f"\nPyTorch {version}, {T} threads; medians of {args.iters} iterations (fewer for the largest shapes).")


if __name__ == "__main__":
    main()
