#!/usr/bin/env bash
# Installs the build into a fresh prefix, moves the prefix (the package must not depend on where
# it was installed), and builds examples/embed against it twice: by find_package and by
# pkg-config. Each build's three norms must equal those that the installed CLI's
# `multihead demo` prints for the same layer; a version the package does not offer must be
# refused. Usage: embed.sh BUILD_DIR SOURCE_DIR
set -euo pipefail
build=$(realpath "$1") source=$(realpath "$2")
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT

cmake --install "$build" --prefix "$work/installed" > "$work/install.log"
mv "$work/installed" "$work/prefix"
prefix=$work/prefix
for f in bin/multihead lib/libmultihead.a include/multihead/version.h include/multihead/nn/multi_head_attention.h \
         lib/cmake/multihead/multiheadConfig.cmake lib/cmake/multihead/multiheadConfigVersion.cmake \
         lib/cmake/multihead/multiheadTargets.cmake lib/pkgconfig/multihead.pc; do
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

pc_flags=$(PKG_CONFIG_PATH="$prefix/lib/pkgconfig" pkg-config --cflags --libs multihead)
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
echo "PASS: installed at one prefix, used from another, by CMake and pkg-config; 1.0 and 0.2 refused"
