#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# Soak test: trains the spam preset for MINUTES (default 30), checkpointing
# every 50 steps, then checks from metrics.jsonl that the allocator's peak,
# the bytes held between steps and the resident memory stop growing after
# warm-up (scripts/soak_report.py). Needs build/ and scripts/setup.sh --data.
#   scripts/soak.sh [MINUTES [RUN_DIR]]     THREADS=1 by default
set -euo pipefail
cd "$(dirname "$0")/.."
minutes=${1:-30}
out=${2:-runs/soak}
threads=${THREADS:-1}
rm -rf "$out"
echo "soak: $minutes min of build/multihead train --preset spam --epochs 1000 --checkpoint-every 50 --threads $threads"
set +e
timeout --signal=KILL "${minutes}m" build/multihead train --preset spam --epochs 1000 --checkpoint-every 50 \
  --threads "$threads" --quiet --out "$out"
rc=$?
set -e
# The run is stopped by the clock (SIGKILL: exit 137), as a crash would stop it.
if [[ $rc -ne 137 && $rc -ne 0 ]]; then
  echo "soak: training failed with exit code $rc" >&2
  exit 1
fi
python3 scripts/soak_report.py "$out/metrics.jsonl"
