#!/usr/bin/python3
# SPDX-License-Identifier: Apache-2.0
"""Side-by-side training benchmark: multihead against PyTorch.

The same encoder classifier on both sides: token embedding (vocab 8000),
sinusoidal positions, a stack of post-LN TransformerEncoderLayers with a
final LayerNorm, mean pooling and a linear head to 2 classes; AdamW (PyTorch's
fused AdamW where it has one on the CPU, 2.4 and later; and, as a variant beside torch.compile,
its foreach AdamW with the step compiled, PyTorch's recipe for a compiled optimizer) with gradient
clipping at 1.0; random tokens, every sequence full length.

    scripts/setup.sh
    /usr/bin/python3 bench/compare_torch_train.py --threads 2

    /usr/bin/python3 bench/compare_torch_train.py --threads 2 --precision bf16

Prints tokens per second (batch * seq_len / median step time) for each, and
the ratios. The peers (torch_peer.py, `--torch`): PyTorch 2.13's official CPU
wheel in the project's .venv by default, Debian's 1.13 and 2.6 as history
(2.x's encoder layers run scaled_dot_product_attention: each round times it
held to its flash kernel and to its math kernel and keeps the faster, named;
and 2.x again under torch.compile, default mode, its first step, which
compiles, timed apart), each on the OpenBLAS kernels best for the CPU, and
every program's sgemm rate is printed first. With `--precision bf16`
multihead runs `bench train --precision bf16` and PyTorch its forward and loss
under torch.autocast("cpu", dtype=torch.bfloat16) (fp32 weights and AdamW
state on both sides). The programs run alternately, --rounds times (each run a
fresh process), and each round's ratios are printed beside their median: on a
shared machine whose speed drifts between minutes, a ratio within a round is
what holds.
"""
import argparse
import json
import os
import statistics
import subprocess
import sys
import time

from torch_peer import adamw, add_torch_argument, peers, print_header, run_fastest_kernel, sdpa_kernel_held

HERE = os.path.dirname(os.path.abspath(__file__))


def torch_tokens_per_s(a):
    import torch

    torch.set_num_threads(a.threads)
    torch.manual_seed(0)

    class Classifier(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.embedding = torch.nn.Embedding(a.vocab_size, a.d_model)
            layer = torch.nn.TransformerEncoderLayer(a.d_model, a.num_heads, a.dim_feedforward, a.dropout,
                                                     batch_first=True)
            self.encoder = torch.nn.TransformerEncoder(layer, a.num_layers, norm=torch.nn.LayerNorm(a.d_model),
                                                       enable_nested_tensor=False)
            self.classifier = torch.nn.Linear(a.d_model, 2)
            pos = torch.arange(a.seq_len, dtype=torch.float32)[:, None]
            i = torch.arange(0, a.d_model, 2, dtype=torch.float32)
            pe = torch.zeros(a.seq_len, a.d_model)
            pe[:, 0::2] = torch.sin(pos / torch.pow(10000.0, i / a.d_model))
            pe[:, 1::2] = torch.cos(pos / torch.pow(10000.0, i / a.d_model))
            self.register_buffer("pe", pe)

        def forward(self, ids):
            h = self.encoder(self.embedding(ids) + self.pe)
            return self.classifier(h.mean(1))

    model = Classifier().train()
    if a.compile_optimizer:
        # PyTorch's recipe for a compiled optimizer: AdamW's foreach form, its step under
        # torch.compile (Inductor fuses the update of every parameter into generated kernels).
        opt = torch.optim.AdamW(model.parameters(), lr=1e-4, foreach=True)
        optimizer_step = torch.compile(opt.step, fullgraph=False)
    else:
        opt = adamw(torch, model.parameters(), 1e-4)
        optimizer_step = opt.step
    # torch.compile (default mode): Inductor compiles forward and backward into generated C++/OpenMP
    # kernels on the CPU; the first step compiles and is timed apart.
    forward = torch.compile(model) if a.compile else model
    ids = torch.randint(0, a.vocab_size, (a.batch, a.seq_len))
    labels = torch.arange(a.batch) % 2

    bf16 = a.precision == "bf16"

    def step():
        opt.zero_grad()
        with sdpa_kernel_held(a.sdpa), torch.autocast("cpu", dtype=torch.bfloat16, enabled=bf16):
            loss = torch.nn.functional.cross_entropy(forward(ids).float(), labels)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        optimizer_step()

    first_s = 0.0
    if a.compile or a.compile_optimizer:
        t0 = time.perf_counter()
        step()
        first_s = time.perf_counter() - t0
    # At least two steps and a second, as multihead's bench warms up.
    t0, warm = time.perf_counter(), 0
    while warm < 2 or time.perf_counter() - t0 < 1.0:
        step()
        warm += 1
    times = []
    for _ in range(a.iters):
        t0 = time.perf_counter()
        step()
        times.append(time.perf_counter() - t0)
    parts = profile_parts(torch, step) if a.profile else None
    generated = ""
    if a.compile:
        from torch._dynamo.utils import counters
        graphs = counters["stats"]["unique_graphs"]
        breaks = sum(counters["graph_break"].values())
        generated = f"Inductor C++/OpenMP kernels, {graphs} graph{'s' if graphs != 1 else ''}, {breaks} graph breaks"
    return a.batch * a.seq_len / statistics.median(times), torch.__version__, first_s, generated, parts


# PyTorch's operators by what they do, as `bench train` splits multihead's step: products (the math
# SDPA's batched products among them), the attention kernels and softmax, the optimizer and
# clipping; the rest is element-wise work, copies and the autograd engine's own.
PARTS = (("GEMM", ("aten::mm", "aten::addmm", "aten::bmm", "aten::baddbmm")),
         ("attention", ("attention", "softmax")),
         ("optimizer", ("adam", "foreach", "aten::norm", "linalg_vector_norm", "clip")))

ROWS = tuple(name for name, _ in PARTS) + ("other", "step")  # bench train's parts, lower-cased there


def profile_parts(torch, step, steps=3):
    """Milliseconds a step by part (the operators' self times under torch.profiler, over `steps`
    steps), and the ten operators of most self time."""
    from torch.profiler import ProfilerActivity, profile
    with profile(activities=[ProfilerActivity.CPU]) as prof:
        for _ in range(steps):
            step()
    parts = {name: 0.0 for name, _ in PARTS}
    parts["other"] = 0.0
    ops = []
    for e in prof.key_averages():
        ms = e.self_cpu_time_total / 1e3 / steps
        part = next((name for name, keys in PARTS if any(k in e.key.lower() for k in keys)), "other")
        parts[part] += ms
        ops.append((ms, e.key))
    ops.sort(reverse=True)
    return {"parts_ms": parts, "top_ops_ms": [[k, round(ms, 1)] for ms, k in ops[:10]]}


def peer_label(name, rounds):
    """A PyTorch program's row name: eager (fused AdamW), compiled, or compiled with its AdamW step."""
    label = f"PyTorch {rounds[0]['version']}"
    if name.endswith(" compiled+optimizer"):
        return label + " + torch.compile, AdamW step compiled (foreach)"
    return label + (" + torch.compile" if name.endswith(" compiled") else "")


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--bin", default=os.path.join(HERE, "..", "build", "multihead"))
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--d-model", type=int, default=256)
    ap.add_argument("--num-heads", type=int, default=8)
    ap.add_argument("--num-layers", type=int, default=4)
    ap.add_argument("--dim-feedforward", type=int, default=2048)  # nn.TransformerEncoderLayer's default
    ap.add_argument("--seq-len", type=int, default=256)
    ap.add_argument("--batch", type=int, default=32)
    ap.add_argument("--vocab-size", type=int, default=8000)
    ap.add_argument("--dropout", type=float, default=0.1)
    ap.add_argument("--iters", type=int, default=5)
    ap.add_argument("--rounds", type=int, default=3, help="alternating runs of both programs")
    ap.add_argument("--gemm", choices=["onednn", "openblas", "both"], default="onednn",
                    help="multihead's fp32 GEMM backend")
    ap.add_argument("--precision", choices=["fp32", "bf16"], default="fp32",
                    help="bf16: multihead --precision bf16 against PyTorch under bf16 autocast")
    add_torch_argument(ap)
    ap.add_argument("--no-compile", dest="torch_compile", action="store_false",
                    help="leave out the torch.compile row (PyTorch 2.x peers)")
    ap.add_argument("--profile", action="store_true",
                    help="after the rounds, each side's step by part: bench train's parts for multihead, "
                         "torch.profiler's operators for each eager PyTorch (its faster SDPA kernel)")
    ap.add_argument("--torch-child", action="store_true", help=argparse.SUPPRESS)
    ap.add_argument("--compile", action="store_true", help=argparse.SUPPRESS)  # the child compiles
    ap.add_argument("--compile-optimizer", action="store_true", help=argparse.SUPPRESS)  # and its AdamW step
    ap.add_argument("--sdpa", default="auto", help=argparse.SUPPRESS)  # the child's SDPA kernel
    a = ap.parse_args()
    if a.torch_child:
        tps, version, first_s, generated, parts = torch_tokens_per_s(a)
        # "ms" lets run_fastest_kernel pick the faster kernel.
        print(json.dumps({"tokens_per_s": tps, "version": version, "ms": a.batch * a.seq_len / tps * 1e3,
                          "first_s": first_s, "generated": generated, "profile": parts}))
        return
    if a.rounds < 1 or a.iters < 1:
        ap.error("--rounds and --iters must be at least 1")
    backends = ["onednn", "openblas"] if a.gemm == "both" else [a.gemm]
    peer_list = peers(a.torch)
    print_header(a.bin, a.threads, peer_list, backends, a.precision == "bf16")
    cmd = [a.bin, "bench", "train", "--d-model", str(a.d_model), "--num-heads", str(a.num_heads), "--num-layers",
           str(a.num_layers), "--dim-feedforward", str(a.dim_feedforward), "--seq-len", str(a.seq_len),
           "--batch", str(a.batch), "--vocab-size", str(a.vocab_size), "--dropout", str(a.dropout),
           "--threads", str(a.threads), "--iters", str(a.iters), "--precision", a.precision, "--json"]
    ours = {g: [] for g in backends}     # per round: bench train's JSON
    theirs = {p.name: [] for p in peer_list}  # per round: tokens/s and version
    compiled = [p for p in peer_list if p.name != "1.13"] if a.torch_compile else []
    theirs.update({p.name + " compiled": [] for p in compiled})
    theirs.update({p.name + " compiled+optimizer": [] for p in compiled})
    child_args = [os.path.abspath(__file__), "--torch-child"] + [x for x in sys.argv[1:] if x != "--profile"]
    for _ in range(a.rounds):
        for g in backends:
            out = subprocess.run(cmd + ["--gemm", g], check=True, capture_output=True, text=True).stdout
            ours[g].append(json.loads(out.strip().splitlines()[-1]))
        for p in peer_list:
            theirs[p.name].append(run_fastest_kernel(p, lambda k: child_args + ["--sdpa", k], a.threads))
        for p in compiled:  # SDPA's own choice of kernel inside the compiled graph
            for suffix, flags in ((" compiled", ["--compile"]),
                                  (" compiled+optimizer", ["--compile", "--compile-optimizer"])):
                r = p.run(child_args + ["--sdpa", "auto"] + flags, a.threads)
                r["kernel_note"] = f" (first step {r['first_s']:.1f} s)"
                theirs[p.name + suffix].append(r)
    tokens = a.batch * a.seq_len
    print(f"encoder classifier: d_model {a.d_model}, {a.num_heads} heads, {a.num_layers} layers, feed-forward "
          f"{a.dim_feedforward}, vocab {a.vocab_size}, batch {a.batch} x {a.seq_len}, dropout {a.dropout}, "
          f"{a.threads} threads, {a.precision}{' (PyTorch under bf16 autocast)' if a.precision == 'bf16' else ''}, "
          f"median of {a.iters} steps a run, {a.rounds} alternating rounds")
    print("| | tokens/s (median of rounds) | step ms, round by round |")
    print("|---|---|---|")
    for g, runs in ours.items():
        steps = ", ".join(f"{r['ms']:.0f}" for r in runs)
        print(f"| multihead ({g} GEMMs) | {statistics.median(r['tokens_per_s'] for r in runs):.0f} | {steps} |")
    for name, ts in theirs.items():
        steps = ", ".join(f"{tokens / t['tokens_per_s'] * 1e3:.0f}{t['kernel_note']}" for t in ts)
        label = peer_label(name, ts)
        print(f"| {label} | {statistics.median(t['tokens_per_s'] for t in ts):.0f} | {steps} |")
    for p in compiled:
        print(f"\ntorch.compile (default mode) of PyTorch {p.name} generated: {theirs[p.name + ' compiled'][0]['generated']}")
    print()
    for g, runs in ours.items():
        for name, ts in theirs.items():
            ratios = [r["tokens_per_s"] / t["tokens_per_s"] for r, t in zip(runs, ts)]
            label = peer_label(name, ts)
            print(f"speedup with {g} GEMMs over {label}: {statistics.median(ratios):.2f}x "
                  f"(median of rounds: {', '.join(f'{x:.2f}' for x in ratios)})")
        print(f"multihead peak {runs[0]['peak_bytes'] / 2**20:.0f} MiB allocated")
    if a.profile:
        print_profile(a, ours, theirs, peer_list, child_args)


def print_profile(a, ours, theirs, peer_list, child_args):
    """The step by part: multihead's (bench train's parts, its median round) beside each eager
    peer's (torch.profiler's self times over three steps, in a run of its own with the SDPA kernel
    it was fastest with). The profiler slows PyTorch's step a little: read the shares."""
    names = [f"multihead ({g})" for g in ours] + [f"PyTorch {theirs[p.name][0]['version']}" for p in peer_list]
    print("\n| step part (ms) | " + " | ".join(names) + " |")
    print("|---" * (1 + len(names)) + "|")
    columns, tops = [], []
    for runs in ours.values():
        r = sorted(runs, key=lambda r: r["ms"])[len(runs) // 2]
        columns.append(dict({part: r["parts_ms"][part.lower()] for part in ROWS[:-1]}, step=r["ms"]))
    for p in peer_list:
        kernel = statistics.mode(t.get("kernel", "auto") for t in theirs[p.name])
        prof = p.run(child_args + ["--sdpa", kernel, "--profile", "--iters", "1"], a.threads)["profile"]
        columns.append(dict(prof["parts_ms"], step=sum(prof["parts_ms"].values())))
        tops.append((p, kernel, prof["top_ops_ms"]))
    for part in ROWS:
        print(f"| {part} | " + " | ".join(f"{c[part]:.1f}" for c in columns) + " |")
    for p, kernel, top in tops:
        print(f"\nPyTorch {p.name} ({kernel} SDPA), the operators of most self time a step: "
              + ", ".join(f"{k} {ms:.1f} ms" for k, ms in top))


if __name__ == "__main__":
    main()
