#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# Every source file names its licence in its first lines (an SPDX identifier, as REUSE and
# licence scanners read them): C++, Python, shell, CMake, JavaScript and CSS.
set -euo pipefail
root=${1:?usage: spdx.sh SOURCE_DIR}
cd "$root"
missing=$(find src include tools python tests scripts cmake examples bench .ci CMakeLists.txt \
    -path tests/fuzz/corpus -prune -o -path '*/node_modules' -prune -o -path '*/__pycache__' -prune -o \
    -type f \( -name '*.cpp' -o -name '*.h' -o -name '*.py' -o -name '*.sh' -o -name '*.cmake' -o \
    -name 'CMakeLists.txt' -o -name '*.js' -o -name '*.mjs' -o -name '*.css' -o -name '*.in' -o -path .ci/run \) \
    -print 2>/dev/null | while read -r f; do
  head -n 2 "$f" | grep -q 'SPDX-License-Identifier: Apache-2.0' || echo "$f"
done)
if [[ -n $missing ]]; then
  echo "these source files name no licence (add '// SPDX-License-Identifier: Apache-2.0' or its '#' form):" >&2
  echo "$missing" >&2
  exit 1
fi
echo "every source file carries its SPDX identifier"
