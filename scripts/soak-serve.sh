#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# Server soak: `multihead serve` under hostile clients beside normal ones for
# MINUTES (default 10), after a quiet phase of normal clients alone:
# thousands of idle connections, hundreds of clients dripping a header byte a
# second, a slot hog reconnecting as fast as it is closed, chunked bodies
# past the limit, smuggling framings, pipelined, half-closed, malformed and
# reset requests, each kind from its own loopback address
# (scripts/soak_serve.py). Fails if a normal request is lost, a smuggled one
# is answered, or the normal p99 passes 10 times the quiet phase's. Serves
# RUN_DIR, or a small classifier it trains.
#   scripts/soak-serve.sh [MINUTES [RUN_DIR]]
set -euo pipefail
cd "$(dirname "$0")/.."
minutes=${1:-10}
run=${2:-}
work=$(mktemp -d)
server=
cleanup() {
  [[ -n $server ]] && kill "$server" 2>/dev/null && wait "$server" 2>/dev/null
  rm -rf "$work"
}
trap cleanup EXIT
if [[ -z $run ]]; then
  run=$work/run
  {
    echo "text,label"
    for i in $(seq 1 20); do echo "good great fine,pos"; echo "bad awful poor,neg"; done
  } > "$work/tiny.csv"
  build/multihead train --source csv --tokenizer word --vocab-size 64 --epochs 2 --max-len 8 --threads 1 --quiet \
    --data "$work/tiny.csv" --out "$run" > /dev/null
fi
build/multihead serve --run "$run" --port 0 --threads 1 > "$work/serve.log" 2>&1 &
server=$!
for _ in $(seq 1 100); do grep -q "run on http" "$work/serve.log" && break; sleep 0.1; done
port=$(sed -n 's/.*run on http:\/\/[^ ]*:\([0-9]*\) .*/\1/p' "$work/serve.log" | head -1)
[[ -n $port ]] || { cat "$work/serve.log" >&2; exit 1; }
/usr/bin/python3 scripts/soak_serve.py "$port" "$server" "$minutes"
