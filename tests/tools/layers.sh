#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# The layers check themselves. Each folder of the library may include the headers of the folders its
# layer keeps below it (docs/ARCHITECTURE.md) and no others: a core file that includes a train or app
# header fails here, even where its code is header-only and would link. Each umbrella header includes
# its own layer and those below. With a compiler and the build's include folder, the core umbrella
# header is also preprocessed and must not pull in nlohmann/json (users of the core get its
# declarations without the JSON library's 140k lines).
set -euo pipefail
root=${1:?usage: layers.sh SOURCE_DIR [CXX BUILD_INCLUDE_DIR]}
cxx=${2:-}
build_include=${3:-}
cd "$root"

core="core io kernels nn"
train="$core data train"
declare -A allowed=(
  [core]="core"
  [io]="core io"
  [kernels]="core kernels"
  [nn]="core io kernels nn"
  [data]="core io kernels data"
  [train]="$train"
  [report]="$train report"
  [tasks]="$train report tasks"
  [serve]="$train report tasks serve"
  [bench]="$train bench"
  [experiments]="$train report tasks bench experiments"
  [multihead.h]="$core"
  [train.h]="$train"
)

bad=0
check_file() {  # file, the folder whose rules it follows
  local file=$1 folder=$2 used
  if grep -qE '^#include "\.\./' "$file"; then
    echo "$file: includes by a relative path outside its folder" >&2
    bad=1
  fi
  for used in $(grep -oE '^#include "multihead/[a-z_]+/' "$file" | sed -E 's|#include "multihead/||; s|/$||' | sort -u); do
    if [[ " ${allowed[$folder]} " != *" $used "* ]]; then
      echo "$file: includes multihead/$used/, which $folder may not (it may use: ${allowed[$folder]})" >&2
      bad=1
    fi
  done
}

for folder in core io kernels nn data train report tasks serve bench experiments; do
  for dir in "src/$folder" "include/multihead/$folder"; do
    [[ -d $dir ]] || continue
    while IFS= read -r -d '' f; do check_file "$f" "$folder"; done < <(find "$dir" -type f \( -name '*.h' -o -name '*.cpp' \) -print0)
  done
done
check_file include/multihead/multihead.h multihead.h
check_file include/multihead/train.h train.h
# Every folder is one of the above: a new one must be placed in a layer here.
for dir in src/* include/multihead/*/; do
  folder=$(basename "$dir")
  [[ -d $dir && -z ${allowed[$folder]+x} ]] && { echo "$dir: a folder in no layer (add it to tests/tools/layers.sh and docs/ARCHITECTURE.md)" >&2; bad=1; }
done

if [[ -n $cxx ]]; then
  deps=$("$cxx" -std=c++20 -M -Iinclude -I"$build_include" include/multihead/multihead.h)
  if grep -q 'nlohmann/json.hpp' <<<"$deps"; then
    echo "include/multihead/multihead.h pulls in nlohmann/json.hpp (through one of these):" >&2
    grep -oE 'include/multihead/[a-z_/]+\.h' <<<"$deps" | sort -u >&2
    bad=1
  fi
fi

if ((bad)); then exit 1; fi
echo "every include keeps to its layer${cxx:+, and the core umbrella header is JSON-free}"
