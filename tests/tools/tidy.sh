#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# The library's, the CLI's and the Python module's sources pass the checks .clang-tidy names, with
# the build's own compile commands (BUILD_DIR/compile_commands.json). Two files at a time.
set -euo pipefail
root=${1:?usage: tidy.sh SOURCE_DIR BUILD_DIR}
build=${2:?usage: tidy.sh SOURCE_DIR BUILD_DIR}
cd "$root"
command -v clang-tidy >/dev/null || { echo "clang-tidy is not installed (scripts/setup.sh installs it)" >&2; exit 1; }
[[ -f $build/compile_commands.json ]] || { echo "no $build/compile_commands.json (CMAKE_EXPORT_COMPILE_COMMANDS)" >&2; exit 1; }
mapfile -t files < <(python3 - "$build/compile_commands.json" "$root" <<'PY'
import json, os, sys
root = os.path.realpath(sys.argv[2])
seen = set()
for e in json.load(open(sys.argv[1])):
    f = os.path.realpath(os.path.join(e["directory"], e["file"]))
    rel = os.path.relpath(f, root)
    if rel.split(os.sep)[0] in ("src", "tools") or rel.startswith("python/src/"):
        if rel not in seen:
            seen.add(rel)
            print(rel)
PY
)
(( ${#files[@]} > 50 )) || { echo "only ${#files[@]} sources in the compile commands" >&2; exit 1; }
report=$(mktemp)
trap 'rm -f "$report"' EXIT
# clang-tidy prints its findings on stdout and counts on stderr; a finding is an error (.clang-tidy).
if ! printf '%s\0' "${files[@]}" | xargs -0 -n 4 -P 2 clang-tidy -p "$build" --quiet >"$report" 2>/dev/null; then
  grep -E '(warning|error):' "$report" | sort -u >&2
  echo "clang-tidy found the above in ${#files[@]} sources" >&2
  exit 1
fi
echo "${#files[@]} sources pass .clang-tidy's checks"
