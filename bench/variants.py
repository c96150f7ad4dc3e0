#!/usr/bin/python3
# SPDX-License-Identifier: Apache-2.0
"""Attention variants against length: full (fused), block-sparse,
sliding-window and linear attention, as `multihead bench attention`
measures them (self-attention layer, E=512, H=8, batch 1).

    /usr/bin/python3 bench/variants.py --threads 2

Prints a Markdown table of median layer time and the attention kernel's
time, and the allocator's peak bytes, per variant and length. Full attention
at 64k is left out: at about a minute a forward pass it does not fit the
benchmark's time budget.
"""
import argparse
import json
import os
import subprocess

HERE = os.path.dirname(os.path.abspath(__file__))


def run(binary, variant, L, threads, backward):
    iters = 3 if L <= 4096 else 1
    cmd = [binary, "bench", "attention", "--batch", "1", "--seq-len", str(L), "--attention", variant, "--window",
           "256", "--block-size", "64", "--threads", str(threads), "--iters", str(iters), "--warmup", "1", "--json"]
    if backward:
        cmd.append("--backward")
    out = subprocess.run(cmd, check=True, capture_output=True, text=True).stdout
    return json.loads(out.strip().splitlines()[-1])


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--bin", default=os.path.join(HERE, "..", "build", "multihead"))
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--lengths", default="1024,4096,16384,65536")
    ap.add_argument("--backward", action="store_true", help="time forward + backward")
    a = ap.parse_args()
    variants = ["full", "block_sparse", "sliding_window", "linear"]
    lengths = [int(x) for x in a.lengths.split(",")]
    print(f"{'forward+backward' if a.backward else 'forward'}, E=512, H=8, batch 1, {a.threads} threads; "
          "block_sparse: blocks of 64, one neighbour; sliding_window: 256 keys on each side\n")
    print("| L | variant | layer ms | attention kernel ms | speedup of the kernel over full | peak allocated |")
    print("|---|---|---|---|---|---|")
    for L in lengths:
        full_ms = None
        for v in variants:
            if v == "full" and L > 16384:
                print(f"| {L} | full | (not run) | | | |")
                continue
            r = run(a.bin, v, L, a.threads, a.backward)
            if v == "full":
                full_ms = r["attention_ms"]
            ratio = f"{full_ms / r['attention_ms']:.1f}x" if full_ms else ""
            print(f"| {L} | {v} | {r['ms']:.1f} | {r['attention_ms']:.1f} | {ratio} | "
                  f"{r['peak_bytes'] / 2**20:.0f} MiB |", flush=True)


if __name__ == "__main__":
    main()
