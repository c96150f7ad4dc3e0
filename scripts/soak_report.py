#!/usr/bin/env python3
# SPDX-License-Identifier: Apache-2.0
"""Reads a run's metrics.jsonl and says whether memory stopped growing.

Warm-up is the first epoch (its first checkpoint and evaluation included)
or the first 10% of the steps, whichever is longer. The steps after it are cut into six
windows; for each the report gives the largest allocator peak, the largest
bytes still held after a step (parameters, gradients, optimizer state and
anything leaked) and the largest resident set. The soak passes when no
window after the first exceeds the first one's held bytes or resident set
(by more than 1 MiB of RSS slack: the C library's arenas move a little), and
the peak stays within the largest seen during warm-up and the first window
(a step's peak depends on its batch's padded length, so peaks vary but are
bounded)."""
import json
import sys

MIB = 1024 * 1024


def main(path):
    steps = []
    with open(path) as f:
        for line in f:
            try:
                r = json.loads(line)
            except json.JSONDecodeError:
                break  # a line cut by the kill
            if "loss" in r and "memory" in r:
                steps.append(r)
    if len(steps) < 60:
        sys.exit(f"{path}: only {len(steps)} steps; too few for a soak")
    first_epoch = sum(1 for r in steps if r.get("epoch", 0) == 0)
    warm = max(1, len(steps) // 10, first_epoch + 1)
    if len(steps) - warm < 60:
        sys.exit(f"{path}: {len(steps)} steps, {warm} of them warm-up; too few for a soak")
    rest = steps[warm:]
    n = len(rest) // 6
    windows = [rest[i * n:(i + 1) * n] for i in range(5)] + [rest[5 * n:]]

    def top(rs, key):
        return max(r["memory"].get(key, 0) for r in rs)

    print(f"{len(steps)} steps; warm-up: steps 1-{warm}, "
          f"peak {top(steps[:warm], 'peak_bytes') / MIB:.1f} MiB")
    print("| steps | peak MiB | held after the step MiB | allocator cache MiB | RSS MiB |")
    print("|---|---|---|---|---|")
    for w in windows:
        print(f"| {w[0]['step']}-{w[-1]['step']} | {top(w, 'peak_bytes') / MIB:.1f} | "
              f"{top(w, 'current_bytes') / MIB:.1f} | {top(w, 'cached_bytes') / MIB:.1f} | "
              f"{top(w, 'rss_bytes') / MIB:.1f} |")
    first = windows[0]
    bound_peak = max(top(steps[:warm], "peak_bytes"), top(first, "peak_bytes"))
    failures = []
    for w in windows[1:]:
        span = f"steps {w[0]['step']}-{w[-1]['step']}"
        if top(w, "current_bytes") > top(first, "current_bytes"):
            failures.append(f"{span}: held bytes grew")
        if top(w, "rss_bytes") > top(first, "rss_bytes") + MIB:
            failures.append(f"{span}: resident memory grew")
        if top(w, "peak_bytes") > bound_peak:
            failures.append(f"{span}: the peak exceeded warm-up's")
    if failures:
        sys.exit("soak: FAILED: " + "; ".join(failures))
    print("soak: passed: memory flat after warm-up")


if __name__ == "__main__":
    main(sys.argv[1] if len(sys.argv) > 1 else "runs/soak/metrics.jsonl")
