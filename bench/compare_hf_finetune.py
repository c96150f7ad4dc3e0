#!/usr/bin/python3
# SPDX-License-Identifier: Apache-2.0
"""Side-by-side fine-tuning benchmark: multihead against PyTorch with transformers, on a
pretrained Hugging Face checkpoint (all-MiniLM-L6-v2 by default, as the spam-minilm preset).

The same steps on both sides: the checkpoint's BERT with a new 2-class head (its pooler and a
classifier over [CLS]), in training mode (dropout as its config says), a batch of --batch
sequences of --seq-len random tokens (every one full length), cross-entropy, gradients clipped at
1.0 and AdamW at 5e-5 (PyTorch's fused AdamW). multihead runs `bench train --pretrained DIR`;
PyTorch runs a plain loop over transformers' BertForSequenceClassification.from_pretrained(DIR).

    scripts/setup.sh --data
    /usr/bin/python3 bench/compare_hf_finetune.py --threads 2

    /usr/bin/python3 bench/compare_hf_finetune.py --threads 2 --precision bf16

With `--precision bf16` multihead runs `bench train --precision bf16` and PyTorch its forward and
loss under torch.autocast("cpu", dtype=torch.bfloat16) (fp32 weights and AdamW state on both
sides), as mixed-precision fine-tuning is run. The peer is PyTorch 2.13's official CPU wheel with
transformers from the project's .venv (python/requirements.txt). The programs run alternately,
--rounds times, each a fresh process; every round's ratio is printed beside their median.
"""
import argparse
import json
import os
import statistics
import subprocess
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)


def torch_step_ms(a):
    import torch
    import transformers

    torch.set_num_threads(a.threads)
    torch.manual_seed(0)
    model = transformers.BertForSequenceClassification.from_pretrained(a.checkpoint, num_labels=2)
    model.train()
    opt = torch.optim.AdamW(model.parameters(), lr=5e-5, weight_decay=0.01, fused=True)
    vocab = model.config.vocab_size
    ids = torch.randint(0, vocab, (a.batch, a.seq_len))
    mask = torch.ones_like(ids)
    labels = torch.arange(a.batch) % 2
    autocast = torch.autocast("cpu", dtype=torch.bfloat16, enabled=a.precision == "bf16")

    def step():
        with autocast:
            loss = model(input_ids=ids, attention_mask=mask, labels=labels).loss
        opt.zero_grad(set_to_none=True)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        opt.step()

    step()  # warm-up: allocations, the first kernels' dispatch
    times = []
    for _ in range(a.iters):
        t0 = time.perf_counter()
        step()
        times.append((time.perf_counter() - t0) * 1e3)
    return statistics.median(times), torch.__version__, transformers.__version__


def cpu_name():
    with open("/proc/cpuinfo") as f:
        for line in f:
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    return "unknown CPU"


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--bin", default=os.path.join(ROOT, "build", "multihead"))
    ap.add_argument("--python", default=os.path.join(ROOT, ".venv", "bin", "python"),
                    help="the interpreter with PyTorch 2.13 and transformers (the project's .venv)")
    ap.add_argument("--checkpoint", default=os.path.join(ROOT, "data", "all-MiniLM-L6-v2"))
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--seq-len", type=int, default=256)
    ap.add_argument("--batch", type=int, default=16)
    ap.add_argument("--iters", type=int, default=5)
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--precision", choices=["fp32", "bf16"], default="fp32")
    ap.add_argument("--torch-child", action="store_true", help=argparse.SUPPRESS)
    a = ap.parse_args()
    if a.torch_child:
        ms, version, tf_version = torch_step_ms(a)
        print(json.dumps({"ms": ms, "torch": version, "transformers": tf_version}))
        return
    if a.rounds < 1 or a.iters < 1:
        ap.error("--rounds and --iters must be at least 1")
    if not os.path.isfile(os.path.join(a.checkpoint, "config.json")):
        sys.exit(f"{a.checkpoint}: no checkpoint there (scripts/setup.sh --data unpacks all-MiniLM-L6-v2)")
    env = dict(os.environ, OMP_NUM_THREADS=str(a.threads), HF_HUB_OFFLINE="1", TRANSFORMERS_OFFLINE="1")
    ours_cmd = [a.bin, "bench", "train", "--pretrained", a.checkpoint, "--seq-len", str(a.seq_len), "--batch",
                str(a.batch), "--threads", str(a.threads), "--iters", str(a.iters), "--precision", a.precision,
                "--json"]
    theirs_cmd = [a.python, os.path.abspath(__file__), "--torch-child"] + sys.argv[1:]
    print(f"CPU: {cpu_name()}, {a.threads} threads; fine-tuning {a.checkpoint}: batch {a.batch} x {a.seq_len} "
          f"tokens, {a.precision}, median of {a.iters} steps a round")
    ratios, ours_ms, theirs_ms = [], [], []
    for r in range(a.rounds):
        out = subprocess.run(ours_cmd, check=True, capture_output=True, text=True, env=env).stdout
        ours = json.loads(out.strip().splitlines()[-1])["ms"]
        theirs_out = json.loads(subprocess.run(theirs_cmd, check=True, capture_output=True, text=True,
                                               env=env).stdout.strip().splitlines()[-1])
        theirs = theirs_out["ms"]
        ours_ms.append(ours)
        theirs_ms.append(theirs)
        ratios.append(theirs / ours)
        print(f"round {r + 1}: multihead {ours:.0f} ms a step, PyTorch {theirs_out['torch']} with transformers "
              f"{theirs_out['transformers']} {theirs:.0f} ms: {theirs / ours:.2f}x")
    print(f"median: multihead {statistics.median(ours_ms):.0f} ms, PyTorch {statistics.median(theirs_ms):.0f} ms; "
          f"ratio {statistics.median(ratios):.2f}x (rounds {', '.join(f'{x:.2f}' for x in ratios)})")


if __name__ == "__main__":
    main()
