#!/usr/bin/env bash
# `pip install --no-build-isolation SOURCE` into a fresh venv that sees Debian's packages
# (PyTorch, numpy, setuptools), then, from a folder outside the source tree: the package imports
# from the venv, its compiled-in version the one pip recorded, and the drop-in tests (python/tests/test_torch.py,
# copied out) pass against the installed module. Usage: pip_install.sh SOURCE_DIR [PYTHON]
set -euo pipefail
source=$(realpath "$1")
python=${2:-/usr/bin/python3}
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
unset PYTHONPATH PYTHONHOME VIRTUAL_ENV

"$python" -m venv --system-site-packages "$work/venv"
cd "$work"
if ! "$work/venv/bin/python" -m pip install --no-build-isolation --no-deps "$source" > "$work/pip.log" 2>&1; then
  tail -n 40 "$work/pip.log"; echo "FAIL: pip install"; exit 1
fi

# The module's version (CMake's, compiled in) must be the one pip recorded (setup.py's).
"$work/venv/bin/python" - "$work/venv" <<'PY'
import importlib.metadata
import sys
import multihead
venv = sys.argv[1]
assert multihead.__file__.startswith(venv + "/"), f"multihead imported from {multihead.__file__}, not the venv"
recorded = importlib.metadata.version("multihead")
assert multihead.__version__ == recorded, f"the module says {multihead.__version__}, pip recorded {recorded}"
print(f"imported multihead {multihead.__version__} from {multihead.__file__}")
PY

mkdir tests && cp "$source/python/tests/test_torch.py" tests/
OMP_NUM_THREADS=${OMP_NUM_THREADS:-2} "$work/venv/bin/python" -m pytest -q -p no:cacheprovider tests
