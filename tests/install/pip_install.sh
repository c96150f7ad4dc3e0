#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# The package installed the standard way, beside PyTorch 2.13 (CPU build):
#   1. `pip install SOURCE` (PEP 517, build isolation on: pyproject.toml's build requirements from
#      PyPI) into a fresh venv with torch, numpy and pytest alone;
#   2. `pip wheel SOURCE`, and that wheel installed into a second fresh venv;
# and in each, from a folder outside the source tree: the package imports from the venv, its
# compiled-in version the one pip recorded, and the drop-in tests (python/tests/test_torch.py,
# copied out) pass against what was installed. Usage: pip_install.sh SOURCE_DIR [PYTHON]
set -euo pipefail
source=$(realpath "$1")
python=${2:-/usr/bin/python3}
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
unset PYTHONPATH PYTHONHOME VIRTUAL_ENV
source "$source/scripts/lib/python-env.sh"

# Imports from the venv, the version pip recorded, and the drop-in tests, from outside the source tree.
check() {
  local venv=$1 what=$2
  (cd "$work" && "$venv/bin/python" - "$venv" "$what") <<'PY'
import importlib.metadata
import sys
import multihead
import multihead.torch
import torch
venv, what = sys.argv[1], sys.argv[2]
assert multihead.__file__.startswith(venv + "/"), f"multihead imported from {multihead.__file__}, not the venv"
recorded = importlib.metadata.version("multihead")
assert multihead.__version__ == recorded, f"the module says {multihead.__version__}, pip recorded {recorded}"
licence = importlib.metadata.metadata("multihead")["License"]
assert licence == "Apache-2.0", f"pip recorded the licence {licence!r}, not Apache-2.0"
print(f"{what}: multihead {multihead.__version__} from {multihead.__file__}, beside torch {torch.__version__}")
PY
  rm -rf "$work/tests" && mkdir "$work/tests" && cp "$source/python/tests/test_torch.py" "$work/tests/"
  (cd "$work" && OMP_NUM_THREADS=${OMP_NUM_THREADS:-2} "$venv/bin/python" -m pytest -q -p no:cacheprovider tests)
}

fail() { tail -n 40 "$2"; echo "FAIL: $1"; exit 1; }
# make_venv shows its log's tail itself.
venv_failed() { echo "FAIL: $1"; exit 1; }

make_venv "$python" "$work/installed" "$work/venv.log" numpy pytest || venv_failed "a venv with torch"
"$work/installed/bin/python" -m pip install --no-deps "$source" > "$work/pip.log" 2>&1 || fail "pip install" "$work/pip.log"
check "$work/installed" "pip install"

"$work/installed/bin/python" -m pip wheel --no-deps -w "$work/wheels" "$source" > "$work/wheel.log" 2>&1 ||
  fail "pip wheel" "$work/wheel.log"
wheel=$(ls "$work"/wheels/multihead-*.whl)
make_venv "$python" "$work/from-wheel" "$work/venv2.log" numpy pytest || venv_failed "a second venv with torch"
"$work/from-wheel/bin/python" -m pip install --no-deps "$wheel" > "$work/install-wheel.log" 2>&1 ||
  fail "pip install of the wheel" "$work/install-wheel.log"
check "$work/from-wheel" "$(basename "$wheel")"
