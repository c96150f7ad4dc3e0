# SPDX-License-Identifier: Apache-2.0
# Python environments with PyTorch's CPU build: sourced by scripts/setup.sh
# (.venv, the project's) and tests/install/pip_install.sh (fresh venvs that
# `pip install` the package). PyTorch is installed as a CPU user installs it,
# never the CUDA build that a plain `pip install torch` takes on Linux (several
# GB): the file pip's own configuration points at (find-links) where there is
# one, else PyTorch's CPU index.

# The requirements file every environment is pinned by.
python_requirements() { echo "$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)/python/requirements.txt"; }

# install_torch_cpu VENV_PYTHON LOG: torch as python/requirements.txt pins it, CPU build, without
# its dependencies (the requirements file pins those).
install_torch_cpu() {
  local python=$1 log=$2 version
  version=$(sed -n 's/^torch==\([0-9.]*\)$/\1/p' "$(python_requirements)")
  [[ -n $version ]] || { echo "python/requirements.txt pins no torch==X.Y.Z" >&2; return 1; }
  "$python" -c "import importlib.metadata as m, sys; sys.exit(m.version('torch').split('+')[0] != '$version')" \
    2>/dev/null && return 0
  # --no-index: only the files pip's configuration (find-links) names.
  "$python" -m pip install --no-index --no-deps "torch==$version" >>"$log" 2>&1 ||
    "$python" -m pip install --no-deps --index-url https://download.pytorch.org/whl/cpu "torch==$version" >>"$log" 2>&1
}

# make_venv PYTHON DIR LOG [PACKAGE...]: a venv of PYTHON at DIR (made, or one already there kept)
# with torch (CPU) and the given packages (default: the whole of python/requirements.txt), at the
# versions python/requirements.txt pins. The project's own venvs use Debian's python3, the interpreter the build's Python module is
# compiled for. A failure shows the log's tail.
make_venv() {
  local python=$1 dir=$2 log=$3
  shift 3
  local req
  req=$(python_requirements)
  if ! { "$python" -m venv "$dir" >>"$log" 2>&1 &&
         install_torch_cpu "$dir/bin/python" "$log" &&
         if [[ $# -gt 0 ]]; then
           "$dir/bin/python" -m pip install -c "$req" torch "$@" >>"$log" 2>&1
         else
           "$dir/bin/python" -m pip install -r "$req" >>"$log" 2>&1
         fi; }; then
    tail -n 30 "$log" >&2
    return 1
  fi
}
