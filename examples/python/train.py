# SPDX-License-Identifier: Apache-2.0
"""Training from Python with the library's training loop: progress in a callback, and a clean stop.

    PYTHONPATH=build/python /usr/bin/python3 examples/python/train.py runs/reverse-py
"""
import sys

import multihead

out = sys.argv[1]
job = {"task": "sequence_task",  # the reverse preset's task: reverse sequences of symbols
       "data": {"kind": "reverse", "symbols": 10, "min_len": 1, "max_len": 16},
       "model": {"d_model": 64, "nhead": 4, "num_layers": 2, "positions": "rope"},
       "train": {"steps": 400, "batch": 32, "lr": 1e-3, "warmup_steps": 40}}


def progress(stop_at=None):
    def on_step(record):
        if "loss" in record and record["step"] % 50 == 0:
            print(f"step {record['step']}: loss {record['loss']:.3f}, lr {record['lr']:.2e}")
        return record.get("step") != stop_at  # False stops after this step, its checkpoint kept
    return on_step


run = multihead.train(job, out, on_step=progress(stop_at=200), overwrite=True)
print("stopped early:", run.stopped)
run = multihead.train(job, out, on_step=progress(), resume=True)  # goes on from step 200 to the end
print("stopped early:", run.stopped)
print(open(out + "/results.json").read())
