#!/usr/bin/python3
# SPDX-License-Identifier: Apache-2.0
"""The portable build against the native one, A/B alternating.

The default build (-march=x86-64-v3, Highway's AVX2 and AVX-512 kernels chosen
at run time) beside a -DMULTIHEAD_NATIVE=ON build of the same source (every
kernel compiled for this CPU alone), on `bench attention` and `bench train`:

    cmake -B build -DCMAKE_BUILD_TYPE=Release && cmake --build build -j2 --target multihead
    cmake -B build-native -DCMAKE_BUILD_TYPE=Release -DMULTIHEAD_NATIVE=ON \\
        -DMULTIHEAD_BUILD_TESTS=OFF -DMULTIHEAD_PYTHON=OFF
    cmake --build build-native -j2 --target multihead
    /usr/bin/python3 bench/portable_vs_native.py --threads 2 --rounds 5

Each round runs every case in both binaries, one after the other (which goes
first alternates between rounds), each a fresh process timing its own median;
the round's ratio portable/native is printed for each case and, last, the
median of the rounds' ratios (above 1: the portable build is slower). On a
shared machine whose speed drifts between minutes, a ratio within a round is
what holds.
"""
import argparse
import json
import os
import statistics
import subprocess
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))

CASES = {
    "attention fwd B=8 L=512 E=512 H=8": ["attention"],
    "attention fwd+bwd B=8 L=512 E=512 H=8": ["attention", "--backward"],
    "attention bf16 fwd+bwd B=8 L=512 E=512 H=8": ["attention", "--backward", "--precision", "bf16"],
    "train fp32 (d 256, 4 layers, L 256, B 32)": ["train"],
    "train bf16 (d 256, 4 layers, L 256, B 32)": ["train", "--precision", "bf16"],
}


def run(binary, args, threads, iters):
    cmd = [binary, "bench", *args, "--threads", str(threads), "--json"]
    if args[0] == "attention":
        cmd += ["--iters", str(2 * iters)]
    else:
        cmd += ["--iters", str(iters)]
    out = subprocess.run(cmd, check=True, capture_output=True, text=True).stdout
    result = json.loads(out.strip().splitlines()[-1])
    return result["ms"], result["machine"]


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--portable", default=os.path.join(ROOT, "build", "multihead"))
    ap.add_argument("--native", default=os.path.join(ROOT, "build-native", "multihead"))
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--iters", type=int, default=5, help="timed steps of bench train (twice as many for attention)")
    ap.add_argument("--cases", default=",".join(str(i) for i in range(len(CASES))),
                    help="which cases, by index: " + "; ".join(f"{i} {n}" for i, n in enumerate(CASES)))
    a = ap.parse_args()
    for name, path in (("--portable", a.portable), ("--native", a.native)):
        if not os.access(path, os.X_OK):
            sys.exit(f"portable_vs_native: {name} {path} is not an executable (build it as the docstring says)")
    chosen = [list(CASES)[int(i)] for i in a.cases.split(",")]
    binaries = {"portable": a.portable, "native": a.native}
    ratios = {case: [] for case in chosen}
    machines = {}
    for r in range(a.rounds):
        order = ["portable", "native"] if r % 2 == 0 else ["native", "portable"]
        for case in chosen:
            ms = {}
            for which in order:
                ms[which], machines[which] = run(binaries[which], CASES[case], a.threads, a.iters)
            ratios[case].append(ms["portable"] / ms["native"])
            print(f"round {r + 1} {case}: portable {ms['portable']:.1f} ms, native {ms['native']:.1f} ms, "
                  f"ratio {ratios[case][-1]:.3f} ({order[0]} first)", flush=True)
    for which in ("portable", "native"):
        m = machines[which]
        print(f"{which}: {m['cpu']}, {m['threads']} threads, kernels {m['kernel_simd']} ({m['kernel_target']}, "
              f"chosen at {m.get('kernel_dispatch', 'build time')}), GEMM {m['gemm_backend']} {m['gemm_isa']}, "
              f"bf16 products {m['bf16_path']}")
    print("median of the rounds' ratios portable/native (above 1: portable slower):")
    for case in chosen:
        rs = ratios[case]
        print(f"  {case}: {statistics.median(rs):.3f} (rounds {', '.join(f'{x:.3f}' for x in rs)})")


if __name__ == "__main__":
    main()
