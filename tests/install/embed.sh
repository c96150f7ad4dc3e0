#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# Installs the build into a fresh prefix, moves the prefix (the package must not depend on where
# it was installed), and builds examples/embed (a consumer of the core layer alone) against it
# twice: by find_package(multihead COMPONENTS core) and by pkg-config's multihead-core. Each
# build's three norms must equal those that the installed CLI's `multihead demo` prints for the
# same layer; a version the package does not offer must be refused. The layers' link
# dependencies are checked: a core consumer links no SentencePiece, MPI or cairo, a train
# consumer no cairo, and the core component installed alone builds the example.
# Usage: embed.sh BUILD_DIR SOURCE_DIR
set -euo pipefail
build=$(realpath "$1") source=$(realpath "$2")
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT

cmake --install "$build" --prefix "$work/installed" > "$work/install.log"
mv "$work/installed" "$work/prefix"
prefix=$work/prefix
for f in bin/multihead lib/libmultihead_core.a lib/libmultihead_train.a lib/libmultihead_app.a \
         include/multihead/version.h include/multihead/nn/multi_head_attention.h include/multihead/multihead.h \
         include/multihead/train.h include/multihead/app.h \
         lib/cmake/multihead/multiheadConfig.cmake lib/cmake/multihead/multiheadConfigVersion.cmake \
         lib/cmake/multihead/multihead-core-targets.cmake lib/pkgconfig/multihead.pc lib/pkgconfig/multihead-core.pc \
         lib/pkgconfig/multihead-train.pc lib/pkgconfig/multihead-app.pc share/doc/multihead/LICENSE; do
  [[ -e $prefix/$f ]] || { echo "FAIL: the install has no $f"; exit 1; }
done
if find "$prefix" -name '_multihead*' | grep -q .; then
  echo "FAIL: a plain install put the Python module under the prefix"; exit 1
fi

# The norms `multihead demo` prints, in the order the example prints them.
norms() { grep -oE '\|(output|grad input|grad params)\| += [0-9.]+' | sed -E 's/ +/ /g'; }
expected=$("$prefix/bin/multihead" demo --pad 0 --seed 7 | norms)
[[ $(wc -l <<< "$expected") == 3 ]] || { echo "FAIL: demo printed no norms"; exit 1; }

cmake -S "$source/examples/embed" -B "$work/by-cmake" -DCMAKE_PREFIX_PATH="$prefix" -DCMAKE_BUILD_TYPE=Release \
  > "$work/configure.log" || { cat "$work/configure.log"; exit 1; }
cmake --build "$work/by-cmake" > "$work/build.log" || { cat "$work/build.log"; exit 1; }
by_cmake=$("$work/by-cmake/embed" 7)
echo "find_package: $by_cmake"

pc_flags=$(PKG_CONFIG_PATH="$prefix/lib/pkgconfig" pkg-config --cflags --libs multihead-core)
c++ -std=c++20 -O2 "$source/examples/embed/main.cpp" -o "$work/by-pkg-config" $pc_flags
by_pc=$("$work/by-pkg-config" 7)
echo "pkg-config:   $by_pc"

version=$(grep -oE 'MULTIHEAD_VERSION "[^"]+"' "$prefix/include/multihead/version.h" | cut -d'"' -f2)
for got in "$by_cmake" "$by_pc"; do
  [[ $got == "multihead $version:"* ]] || { echo "FAIL: the example names version '${got%%:*}', not $version"; exit 1; }
  if [[ $(norms <<< "$got") != "$expected" ]]; then
    printf 'FAIL: the installed library gave\n%s\nwhere multihead demo gives\n%s\n' "$got" "$expected"; exit 1
  fi
done

# The layers' link dependencies, in the link commands and in the shared libraries the programs
# load. Each check has a positive control, a library the program does link (libdnnl for the core
# consumer, SentencePiece for the train one), so that a check that cannot see the dependencies fails.
libs_of() { ldd "$1" | awk '{print $1}'; }
forbid() {  # forbid WHAT TEXT CONTROL PATTERN...
  local what=$1 text=$2 control=$3; shift 3
  grep -q "$control" <<< "$text" || { echo "FAIL: $what: no $control in what it links, so the check sees nothing"; exit 1; }
  for p in "$@"; do
    if grep -qiE "$p" <<< "$text"; then echo "FAIL: $what links $p"; exit 1; fi
  done
}
core_forbidden=(sentencepiece 'libmpi|ompi' cairo httplib)
forbid "the core consumer's link command (find_package)" "$(cat "$work/by-cmake/CMakeFiles/embed.dir/link.txt")" dnnl \
  "${core_forbidden[@]}"
forbid "the core consumer (find_package)" "$(libs_of "$work/by-cmake/embed")" dnnl "${core_forbidden[@]}"
forbid "pkg-config multihead-core" "$pc_flags" dnnl "${core_forbidden[@]}"
forbid "the core consumer (pkg-config)" "$(libs_of "$work/by-pkg-config")" dnnl "${core_forbidden[@]}"

# A consumer of the training layer: SentencePiece, no cairo. Of every layer: cairo too.
mkdir "$work/layers"
cat > "$work/layers/train.cpp" <<'CPP'
#include <cstdio>
#include "multihead/train.h"
int main() {
  multihead::TokenizerConfig cfg;
  cfg.kind = multihead::TokenizerKind::kChar;
  auto tok = multihead::train_tokenizer(cfg, {"attention"});
  std::printf("%lld\n", static_cast<long long>(tok->vocab_size()));
}
CPP
cat > "$work/layers/app.cpp" <<'CPP'
#include <cstdio>
#include "multihead/app.h"
int main() { std::printf("%zu\n", multihead::presets().size()); }
CPP
cat > "$work/layers/CMakeLists.txt" <<'CMAKE'
cmake_minimum_required(VERSION 3.25)
project(layers LANGUAGES CXX)
set(CMAKE_CXX_STANDARD 20)
find_package(multihead 0.1 REQUIRED COMPONENTS train)
add_executable(uses_train train.cpp)
target_link_libraries(uses_train PRIVATE multihead::train)
find_package(multihead 0.1 REQUIRED)
add_executable(uses_all app.cpp)
target_link_libraries(uses_all PRIVATE multihead::multihead)
CMAKE
cmake -S "$work/layers" -B "$work/layers/build" -DCMAKE_PREFIX_PATH="$prefix" -DCMAKE_BUILD_TYPE=Release \
  > "$work/layers.log" 2>&1 && cmake --build "$work/layers/build" >> "$work/layers.log" 2>&1 \
  || { cat "$work/layers.log"; exit 1; }
[[ $("$work/layers/build/uses_train") -gt 0 && $("$work/layers/build/uses_all") -gt 0 ]] \
  || { echo "FAIL: the train and app consumers printed nothing"; exit 1; }
forbid "the train consumer's link command" "$(cat "$work/layers/build/CMakeFiles/uses_train.dir/link.txt")" \
  sentencepiece cairo httplib
forbid "the train consumer" "$(libs_of "$work/layers/build/uses_train")" sentencepiece cairo httplib
grep -q cairo <<< "$(libs_of "$work/layers/build/uses_all")" || { echo "FAIL: multihead::multihead links no cairo"; exit 1; }

# The core component alone, installed into a prefix of its own, builds the core consumer.
cmake --install "$build" --prefix "$work/core-only" --component core > "$work/install-core.log"
[[ ! -e $work/core-only/include/multihead/train.h && ! -e $work/core-only/lib/libmultihead_train.a ]] \
  || { echo "FAIL: the core component installed the train layer"; exit 1; }
cmake -S "$source/examples/embed" -B "$work/core-only-build" -DCMAKE_PREFIX_PATH="$work/core-only" \
  -DCMAKE_BUILD_TYPE=Release > "$work/core-only.log" 2>&1 && cmake --build "$work/core-only-build" >> "$work/core-only.log" 2>&1 \
  || { cat "$work/core-only.log"; exit 1; }
[[ $(norms <<< "$("$work/core-only-build/embed" 7)") == "$expected" ]] \
  || { echo "FAIL: the core-only install gave other norms"; exit 1; }

# 0.x: another minor version may have another API, so 0.2 is refused as 1.0 is.
for wanted in 1.0 0.2; do
  mkdir "$work/want-$wanted"
  printf 'cmake_minimum_required(VERSION 3.25)\nproject(want LANGUAGES CXX)\nfind_package(multihead %s REQUIRED)\n' \
    "$wanted" > "$work/want-$wanted/CMakeLists.txt"
  if cmake -S "$work/want-$wanted" -B "$work/want-$wanted/build" -DCMAKE_PREFIX_PATH="$prefix" > "$work/want.log" 2>&1; then
    echo "FAIL: find_package(multihead $wanted) accepted version $version"; exit 1
  fi
  grep -q "compatible with requested version \"$wanted\"" "$work/want.log" || { cat "$work/want.log"; exit 1; }
done
echo "PASS: installed at one prefix, used from another, by CMake and pkg-config; each layer links only its own dependencies; the core component alone builds the example; 1.0 and 0.2 refused"
