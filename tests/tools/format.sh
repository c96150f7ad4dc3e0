#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# Every C++ file is laid out as .clang-format says: clang-format would change nothing. To lay a file
# out so: clang-format -i FILE (or `bash tests/tools/format.sh SOURCE_DIR --fix` for every file).
set -euo pipefail
root=${1:?usage: format.sh SOURCE_DIR [--fix]}
cd "$root"
command -v clang-format >/dev/null || { echo "clang-format is not installed (scripts/setup.sh installs it)" >&2; exit 1; }
mapfile -d '' files < <(find src include tools tests python/src examples bench \
    -path tests/fuzz/corpus -prune -o -path '*/node_modules' -prune -o \
    -type f \( -name '*.cpp' -o -name '*.h' \) -print0 2>/dev/null)
if [[ ${2:-} == --fix ]]; then
  clang-format -i "${files[@]}"
  exit 0
fi
report=$(mktemp)
trap 'rm -f "$report"' EXIT
if ! clang-format --dry-run --Werror "${files[@]}" 2>"$report"; then
  grep -oE '^[^:]+\.(cpp|h)' "$report" | sort -u | sed 's/^/not formatted: /' >&2
  echo "lay them out with: clang-format -i FILE..." >&2
  exit 1
fi
echo "${#files[@]} C++ files are laid out as .clang-format says"
