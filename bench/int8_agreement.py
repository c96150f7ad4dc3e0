#!/usr/bin/env python3
# SPDX-License-Identifier: Apache-2.0
"""What int8 products change, against fp32, on trained runs' own test data.

For each run (a directory of `multihead train`, or a Hugging Face checkpoint that is a classifier):
- a text classifier: its test split's labels in fp32 and in int8, the share that agree, and the
  accuracy of each against the split's answers; with --rounds, the speed of each over the first
  --timed test texts (alternating rounds, medians; the same process and threads);
- a language model: greedy continuations of prompts cut from its validation text, in fp32 and in
  int8: the share of generated tokens that agree position by position, and the validation loss of
  each (`multihead eval`);
- a pronunciation run: its test words pronounced (greedy) in fp32 and in int8: the share of words
  with the same phonemes, and the word error rate of each against the dictionary.

    PYTHONPATH=build/python .venv/bin/python bench/int8_agreement.py runs/spam-minilm runs/spam \
        runs/moby-dick runs/cmudict --threads 2
"""
import argparse
import os
import re
import statistics
import subprocess
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)

import multihead  # noqa: E402  (PYTHONPATH=build/python)


def cli_eval(binary, run, precision, threads):
    out = subprocess.run([binary, "eval", "--run", run, "--precision", precision, "--threads", str(threads)],
                         capture_output=True, text=True, check=True).stdout
    return out.splitlines()[0]


def classifier(run_dir, a):
    texts, answers = multihead.load_run(run_dir, threads=a.threads).test_texts()
    runs = {p: multihead.load_run(run_dir, threads=a.threads, precision=p) for p in ("fp32", "int8")}
    labels = {p: [x["label"] for x in run.predict(texts)] for p, run in runs.items()}
    agree = sum(x == y for x, y in zip(labels["fp32"], labels["int8"])) / len(texts)
    acc = {p: sum(x == y for x, y in zip(labels[p], answers)) / len(texts) for p in labels}
    out = (f"{len(texts)} test texts: labels agree {agree:.2%}; accuracy fp32 {acc['fp32']:.2%}, "
           f"int8 {acc['int8']:.2%}")
    if a.rounds:  # the test set's first --timed texts classified, the two precisions alternating
        timed = texts[: a.timed]
        seconds = {p: [] for p in runs}
        for _ in range(a.rounds):
            for p, run in runs.items():
                t0 = time.perf_counter()
                run.predict(timed)
                seconds[p].append(time.perf_counter() - t0)
        rate = {p: len(timed) / statistics.median(v) for p, v in seconds.items()}
        out += (f"; {len(timed)} texts, median of {a.rounds} alternating rounds: fp32 {rate['fp32']:.1f} and "
                f"int8 {rate['int8']:.1f} inputs/s, int8 {rate['int8'] / rate['fp32']:.2f}x")
    return out


def language_model(run_dir, a):
    config = multihead.load_run(run_dir, threads=a.threads).config
    data = config["data"]["path"]
    with open(data if os.path.isabs(data) else os.path.join(ROOT, data), encoding="utf-8", errors="replace") as f:
        text = f.read()
    # Prompts from the text's last tenth (the validation split's side), a sentence start each.
    tail = text[len(text) * 9 // 10:]
    starts = [m.end() for m in re.finditer(r"[.!?]\s+", tail)][: a.prompts]
    prompts = [tail[s:s + 40] for s in starts]
    outs = {}
    for precision in ("fp32", "int8"):
        run = multihead.load_run(run_dir, threads=a.threads, precision=precision)
        outs[precision] = [run.tokenizer.encode(run.generate(p, tokens=a.tokens, temperature=0)) for p in prompts]
    same = total = 0
    for x, y in zip(outs["fp32"], outs["int8"]):
        total += len(x)
        same += sum(u == v for u, v in zip(x, y))
    loss = {p: cli_eval(a.bin, run_dir, p, a.threads) for p in ("fp32", "int8")}
    return (f"{len(prompts)} greedy continuations of {a.tokens} tokens: tokens agree {same / total:.2%}; "
            f"fp32 {loss['fp32']}; int8 {loss['int8']}")


def pronunciation(run_dir, a):
    words, answers = multihead.load_run(run_dir, threads=a.threads).test_texts()
    words, answers = words[: a.words], answers[: a.words]
    said = {}
    for precision in ("fp32", "int8"):
        run = multihead.load_run(run_dir, threads=a.threads, precision=precision)
        said[precision] = [" ".join(p[0]["phonemes"]) for p in run.pronounce(words, beam=1)]
    agree = sum(x == y for x, y in zip(said["fp32"], said["int8"])) / len(words)
    wer = {p: sum(x != y for x, y in zip(said[p], answers)) / len(words) for p in said}
    return (f"{len(words)} test words (greedy): phonemes agree {agree:.2%}; word error rate fp32 {wer['fp32']:.2%}, "
            f"int8 {wer['int8']:.2%}")


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("runs", nargs="+")
    ap.add_argument("--bin", default=os.path.join(ROOT, "build", "multihead"))
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--prompts", type=int, default=50)
    ap.add_argument("--tokens", type=int, default=64)
    ap.add_argument("--words", type=int, default=2000)
    ap.add_argument("--rounds", type=int, default=0, help="time classifiers' predictions over this many rounds")
    ap.add_argument("--timed", type=int, default=200, help="test texts a timed round classifies")
    a = ap.parse_args()
    multihead.set_num_threads(a.threads)
    print(multihead.machine())
    for run_dir in a.runs:
        task = multihead.load_run(run_dir, threads=a.threads).task
        measure = {"text_classification": classifier, "language_modeling": language_model,
                   "pronunciation": pronunciation}.get(task)
        if measure is None:
            print(f"{run_dir}: a {task} run, not measured here", file=sys.stderr)
            continue
        print(f"{run_dir} ({task}): {measure(run_dir, a)}", flush=True)


if __name__ == "__main__":
    main()
