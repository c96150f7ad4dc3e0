#!/usr/bin/python3
# SPDX-License-Identifier: Apache-2.0
"""Side-by-side benchmark: multihead against torch.nn.MultiheadAttention.

Runs the same self-attention shapes through `multihead bench attention` and
through PyTorch with the same thread count, one after the other in the same
run, and prints a Markdown table of medians and ratios, with sgemm GFLOP/s on
this machine as the roofline. The peers (torch_peer.py, `--torch`): PyTorch
2.13's official CPU wheel in the project's .venv by default; Debian 12's 1.13
and Debian 13's 2.6 (scripts/torch2-root.sh) as history, a column each.

multihead's fp32 GEMMs run on oneDNN's sgemm by default, which picks its
kernels from the CPU (AVX-512 here); PyTorch's linear layers call OpenBLAS,
whose kernels follow OPENBLAS_CORETYPE, which each PyTorch process gets set to
the best its CPU supports (torch_peer.py). `--gemm both` adds a row per pass
with multihead on OpenBLAS as well, so the table separates what the GEMM
backend gives from what the rest of the layer gives (the PyTorch columns are
one measurement shared by both rows).

    scripts/setup.sh
    /usr/bin/python3 bench/compare_torch.py --threads 2 --torch 2.13,1.13
    /usr/bin/python3 bench/compare_torch.py --threads 2 --precision bf16

PyTorch is timed at its fastest for each mode: forward in eval mode under
no_grad (its fused fast path), forward+backward in training mode; both with
need_weights=False and dropout 0, as multihead is (1.13's bf16 forward in
training mode: its eval-mode fast path rejects autocast's bf16); a causal mask as an (L, L)
bool mask, and for 2.x with is_causal=True as well (the hint that lets SDPA
skip the masked tiles). PyTorch 2.x is timed twice, with SDPA held to its
flash-attention kernel and to its math kernel (torch.nn.attention.sdpa_kernel),
and the faster is its figure, named beside it. With `--precision bf16`
multihead runs `--precision bf16` and PyTorch runs under
torch.autocast("cpu", dtype=torch.bfloat16); shares of the roofline are then
of multihead's bf16 product rate. Memory is measured the same way for both
programs: the growth of the resident set (VmHWM after resetting it, minus
VmRSS before) during one iteration, in a fresh process.
"""
import argparse
import json
import os
import statistics
import subprocess

from torch_peer import MEASURE_CHILD, SDPA_KERNEL_CHILD, add_torch_argument, peers, print_header, run_fastest_kernel

HERE = os.path.dirname(os.path.abspath(__file__))
DEFAULT_BIN = os.path.join(HERE, "..", "build", "multihead")

TORCH_CHILD = MEASURE_CHILD + SDPA_KERNEL_CHILD + r"""
import json, sys, torch
B, L, E, H, T, backward, causal, iters, bf16, sdpa = json.loads(sys.argv[1])
torch.set_num_threads(T)
torch.manual_seed(0)
two = hasattr(torch.nn, "attention")

def make(b, l):
    m = torch.nn.MultiheadAttention(E, H, batch_first=True)
    x = torch.randn(b, l, E, requires_grad=backward)
    mask = torch.ones(l, l, dtype=torch.bool).triu(1) if causal else None
    return m, x, mask

def step(m, x, mask):
    hint = {"is_causal": True} if causal and two else {}
    with sdpa_kernel_held(sdpa), torch.autocast("cpu", dtype=torch.bfloat16, enabled=bf16):
        if backward:
            m.train()
            y, _ = m(x, x, x, attn_mask=mask, need_weights=False, **hint)
            y.backward(torch.ones_like(y))
        else:
            # 1.13's fused eval-mode path does not take autocast's bf16 (a dtype error); in
            # training mode with dropout 0 it runs the same math on autocast's kernels.
            m.train(bf16 and not two)
            with torch.no_grad():
                m(x, x, x, attn_mask=mask, need_weights=False, **hint)

m, x, mask = make(1, 8)      # warm up the libraries on a tiny shape
step(m, x, mask)
m, x, mask = make(B, L)
print(json.dumps(measure(lambda: step(m, x, mask), iters)))
"""


def median(xs):
    return statistics.median(xs)


def run_multihead(binary, B, L, E, H, T, backward, causal, iters, gemm, precision="fp32"):
    cmd = [binary, "bench", "attention", "--batch", str(B), "--seq-len", str(L), "--embed-dim", str(E),
           "--num-heads", str(H), "--threads", str(T), "--iters", str(iters), "--gemm", gemm,
           "--precision", precision, "--json"]
    if backward:
        cmd.append("--backward")
    if causal:
        cmd.append("--causal")
    out = subprocess.run(cmd, check=True, capture_output=True, text=True).stdout
    return json.loads(out.strip().splitlines()[-1])


def run_torch(peer, B, L, E, H, T, backward, causal, iters, bf16):
    """The peer's best: for PyTorch 2.x the faster of SDPA's flash and math kernels, named."""
    return run_fastest_kernel(
        peer, lambda k: ["-c", TORCH_CHILD, json.dumps([B, L, E, H, T, backward, causal, iters, bf16, k])], T)


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
    ap.add_argument("--precision", choices=["fp32", "bf16"], default="fp32",
                    help="bf16: multihead --precision bf16 against PyTorch under bf16 autocast")
    ap.add_argument("--gemm", choices=["onednn", "openblas", "both"], default="onednn",
                    help="multihead's fp32 GEMM backend")
    add_torch_argument(ap)
    args = ap.parse_args()
    T, E, H = args.threads, args.embed_dim, args.num_heads
    backends = ["onednn", "openblas"] if args.gemm == "both" else [args.gemm]
    bf16 = args.precision == "bf16"
    peer_list = peers(args.torch)

    roof = print_header(args.bin, T, peer_list, backends, bf16)
    print(f"Shares of the roofline are of multihead's {'bf16 product' if bf16 else 'sgemm'} rate ({roof:.0f} GFLOP/s)."
          f" {'PyTorch under torch.autocast(cpu, bfloat16); multihead --precision bf16.' if bf16 else ''}\n")
    head = ["shape (B x L), E, H", "pass", "multihead GEMM", "multihead ms", "multihead GFLOP/s", "% of roofline",
            "attention kernel GFLOP/s (%)", "multihead peak (alloc / RSS)"]
    for p in peer_list:
        head += [f"PyTorch {p.version} ms", f"speedup over {p.name}", f"PyTorch {p.name} peak RSS",
                 f"memory vs {p.name}"]
    print("| " + " | ".join(head) + " |")
    print("|" + "---|" * len(head))
    for shape in args.shapes.split(","):
        B, L = (int(v) for v in shape.lower().split("x"))
        iters = args.iters if B * L <= 8192 else max(3, args.iters // 2)
        for backward in (False, True):
            runs = [run_multihead(args.bin, B, L, E, H, T, backward, args.causal, iters, g, args.precision)
                    for g in backends]
            theirs = [run_torch(p, B, L, E, H, T, backward, args.causal, iters, bf16) for p in peer_list]
            for g, ours in zip(backends, runs):
                row = [f"{B} x {L}, {E}, {H}{' causal' if args.causal else ''}", "fwd+bwd" if backward else "fwd", g,
                       f"{ours['ms']:.1f}", f"{ours['gflops']:.0f}", f"{100 * ours['gflops'] / roof:.0f}%",
                       f"{ours['attention_gflops']:.0f} ({100 * ours['attention_gflops'] / roof:.0f}%)",
                       f"{mib(ours['peak_activation_bytes'])} / {mib(ours['peak_rss_delta_bytes'])}"]
                for t in theirs:
                    t_ms = median(t["samples_ms"])
                    row += [f"{t_ms:.1f}{t['kernel_note']}", f"{t_ms / ours['ms']:.2f}x",
                            mib(t["peak_rss_delta_bytes"]),
                            f"{t['peak_rss_delta_bytes'] / max(1, ours['peak_rss_delta_bytes']):.1f}x less"]
                print("| " + " | ".join(row) + " |", flush=True)
    print(f"\n{T} threads; medians of {args.iters} iterations (fewer for the largest shapes); "
          f"{args.precision}; PyTorch 2.x's kernel (flash or math) is the faster of the two, named.")


if __name__ == "__main__":
    main()
