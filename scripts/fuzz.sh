#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# Builds the libFuzzer targets (clang 14, ASan + UBSan) and fuzzes each for
# SECONDS (default 300), two at a time, from the committed seed corpus.
# New inputs go to build-fuzz/corpus/ (the committed corpus stays small);
# crash reproducers land in tests/fuzz/crashes/ to be committed with the fix.
# The last line of each target's log (build-fuzz/fuzz_<target>.log) gives its exec count.
#
#   scripts/setup.sh --fuzz && scripts/fuzz.sh [SECONDS [TARGET...]]
set -euo pipefail
cd "$(dirname "$0")/.."
secs=${1:-300}
targets=(safetensors safetensors_roundtrip safetensors_many idx delimited aclimdb config tokenizer http_framing checkpoint)
if [[ $# -gt 1 ]]; then targets=("${@:2}"); fi  # scripts/fuzz.sh SECONDS TARGET...
CC=clang-14 CXX=clang++-14 cmake -B build-fuzz -DCMAKE_BUILD_TYPE=RelWithDebInfo -DMULTIHEAD_FUZZ=ON >/dev/null
cmake --build build-fuzz -j2 --target "${targets[@]/#/fuzz_}"
mkdir -p tests/fuzz/crashes
run() {
  local t=$1
  mkdir -p "build-fuzz/corpus/$t"
  local rc=0
  # One thread per target: two targets share the two cores.
  OMP_NUM_THREADS=1 "build-fuzz/tests/fuzz/fuzz_$t" -max_total_time="$secs" -artifact_prefix="tests/fuzz/crashes/$t-" \
    -print_final_stats=1 "build-fuzz/corpus/$t" "tests/fuzz/corpus/$t" >"build-fuzz/fuzz_$t.log" 2>&1 || rc=$?
  # libFuzzer's own summary: "Done N runs in T second(s)" (absent when it stopped on a finding).
  echo "$t: $(grep -a -E '^Done [0-9]+ runs' "build-fuzz/fuzz_$t.log" | tail -1 | grep . || echo "stopped early, see build-fuzz/fuzz_$t.log"), exit $rc"
}
for ((i = 0; i < ${#targets[@]}; i += 2)); do
  run "${targets[i]}" &
  if ((i + 1 < ${#targets[@]})); then run "${targets[i + 1]}" & fi
  wait
done
