#!/usr/bin/env bash
# Installs everything multihead needs to build and test, from Debian 12's
# packages. With --torch it also installs PyTorch (python3-torch 1.13) and
# NumPy, which only the golden-fixture generator and the side-by-side
# benchmarks use; the build and the tests never need them.
set -euo pipefail

packages=(
  build-essential cmake pkg-config
  libopenblas-openmp-dev   # BLAS (sgemm) through CBLAS, OpenMP build
  libgtest-dev libgmock-dev
  nlohmann-json3-dev libcli11-dev libfmt-dev
  libhwy-dev               # Google Highway: portable SIMD and its vectorised exp
)
if [[ "${1:-}" == "--torch" ]]; then
  packages+=(python3-torch python3-numpy)
elif [[ $# -gt 0 ]]; then
  echo "usage: scripts/setup.sh [--torch]" >&2
  exit 2
fi

missing=()
for p in "${packages[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
if [[ ${#missing[@]} -eq 0 ]]; then
  echo "setup: all ${#packages[@]} packages already installed"
  exit 0
fi

sudo=()
[[ $(id -u) -ne 0 ]] && sudo=(sudo)
echo "setup: installing ${missing[*]}"
export DEBIAN_FRONTEND=noninteractive
"${sudo[@]}" apt-get update -qq
"${sudo[@]}" apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
echo "setup: done"
