#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# A virtual environment with PyTorch's CPU build, as a CPU user installs it, and numpy, at the
# versions python/requirements.txt pins: for `pip install .` of the package beside it. An
# environment already at DIR is brought to those versions.
#
#   scripts/make-venv.sh DIR [PACKAGE...]    (PYTHON=... picks the interpreter; default python3)
#
# PyTorch comes from the file pip's own configuration names (find-links) where there is one, else
# from PyTorch's CPU index (`pip install torch --index-url https://download.pytorch.org/whl/cpu`),
# never the several-GB CUDA build a plain `pip install torch` takes on Linux.
set -euo pipefail
[[ $# -ge 1 ]] || { echo "usage: scripts/make-venv.sh DIR [PACKAGE...]" >&2; exit 2; }
source "$(dirname "$0")/lib/python-env.sh"
dir=$1
shift
log=$(mktemp)
trap 'rm -f "$log"' EXIT
make_venv "${PYTHON:-python3}" "$dir" "$log" numpy "$@" || { echo "make-venv: failed" >&2; exit 1; }
echo "make-venv: $dir has $("$dir/bin/python" -c 'import torch; print("torch", torch.__version__)')"
