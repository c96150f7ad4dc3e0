#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# Fingerprints of short, fixed-seed runs of every preset: the SHA-256 of each
# run's last checkpoint and of its metrics with the timing and memory fields
# taken out. A change meant to leave training as it was (a refactoring) must
# leave every line the same:
#
#   scripts/preset-fingerprints.sh OLD_BINARY /tmp/before > before.txt
#   scripts/preset-fingerprints.sh build/multihead /tmp/after > after.txt
#   diff before.txt after.txt
#
# The runs cross epoch boundaries, evaluate mid-run, accumulate gradients and
# checkpoint every few steps, so the loop's every branch is taken. Needs the
# datasets (scripts/setup.sh --data); takes a few minutes on 2 cores.
set -euo pipefail

if [[ $# -ne 2 ]]; then
  echo "usage: $0 MULTIHEAD_BINARY OUT_DIR" >&2
  exit 2
fi
bin=$(realpath "$1")
out=$2
rm -rf "$out"
mkdir -p "$out"

# Runs: name, then the arguments of `multihead train`.
train() {
  local name=$1
  shift
  "$bin" train --quiet --threads 2 --seed 11 --out "$out/$name" "$@" >"$out/$name.log" 2>&1 ||
    { echo "$name: multihead train failed; see $out/$name.log" >&2; exit 1; }
}

# A config of a preset with some keys changed: preset name, jq filter.
config_of() {
  local preset=$1 filter=$2
  "$bin" train --quiet --threads 2 --preset "$preset" --steps 1 --out "$out/.probe-$preset" >/dev/null 2>&1
  jq "$filter" "$out/.probe-$preset/config.json" >"$out/$preset-config.json"
  rm -rf "$out/.probe-$preset"
}

# SpamAssassin: batch 256 makes an epoch ~17 steps, so 30 steps cross one.
train spam --preset spam --steps 30 --batch 256 --checkpoint-every 7 --grad-accumulation 2
# Moby-Dick: evaluation every 10 steps.
config_of moby-dick '.eval_every = 10 | .sample.tokens = 40'
train moby-dick --config "$out/moby-dick-config.json" --steps 25 --checkpoint-every 4
# Fashion-MNIST: 1,000 training images, two epochs of 16 steps.
config_of fashion-mnist '.data.limit_train = 1000 | .train.epochs = 2 | .train.batch = 64'
train fashion-mnist --config "$out/fashion-mnist-config.json" --checkpoint-every 5
# Reverse: step-based, no evaluation until the end.
train reverse --preset reverse --steps 40 --checkpoint-every 15

# Metrics and results without what timing, the allocator or the machine decide.
for run in spam moby-dick fashion-mnist reverse; do
  ckpt=$(sha256sum "$out/$run/checkpoints/last.safetensors" | cut -d' ' -f1)
  metrics=$(jq -c 'del(.tokens_per_s, .memory)' "$out/$run/metrics.jsonl" | sha256sum | cut -d' ' -f1)
  results=$(jq -c 'del(.train_seconds, .tokens_per_s, .ms_per_step, .machine)' "$out/$run/results.json" |
              sha256sum | cut -d' ' -f1)
  echo "$run checkpoint $ckpt metrics $metrics results $results"
done
