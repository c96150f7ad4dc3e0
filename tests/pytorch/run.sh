#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# PyTorch's own attention tests against multihead's drop-ins, under PyTorch 2.13 (.venv) and
# Debian's PyTorch 1.13 (/usr/bin/python3), each test run as PyTorch ships it and with multihead
# substituted (run_upstream.py prints each test's outcome in both).
#
# The tests come from Debian's pytorch source packages, fetched with apt-get's own configuration
# kept in the cache folder (a deb-src line for bookworm and trixie; nothing of the system's apt is
# changed): trixie's 2.6.0 for PyTorch 2.13 (its nearest source there), bookworm's 1.13.1 for 1.13.
# Only the upstream tarball is used, checked against the hash its .dsc names; nothing of it enters
# this repository.
#
# Usage: tests/pytorch/run.sh [--fast] MULTIHEAD_PYTHONPATH
#   --fast: what CI runs (PyTorch 2.13's fused-kernel-versus-math sweep of 3,072 cases narrowed to
#   its float32, batch 2, 3-head, 17-key cases); without it, every test of the files.
# The cache is ${MULTIHEAD_CACHE:-~/.cache/multihead}/pytorch-tests.
set -euo pipefail
fast=0
if [[ ${1:-} == --fast ]]; then fast=1; shift; fi
[[ $# -eq 1 ]] || { echo "usage: $0 [--fast] MULTIHEAD_PYTHONPATH" >&2; exit 2; }
module_path=$(realpath "$1")
here=$(cd "$(dirname "$0")" && pwd)
root=$(cd "$here/../.." && pwd)
venv_python=$root/.venv/bin/python
[[ -x $venv_python ]] || { echo "no .venv: scripts/setup.sh makes it" >&2; exit 2; }
cache=${MULTIHEAD_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/multihead}/pytorch-tests
mkdir -p "$cache/apt/lists/partial" "$cache/apt/archives/partial" "$cache/logs"

apt_options=(-o "Dir::Etc::SourceList=$cache/apt/sources.list" -o Dir::Etc::SourceParts=/dev/null
             -o "Dir::State::Lists=$cache/apt/lists" -o "Dir::Cache=$cache/apt" -o Debug::NoLocking=1
             -o APT::Sandbox::User=root)
cat > "$cache/apt/sources.list" <<'EOF'
deb-src [signed-by=/usr/share/keyrings/debian-archive-keyring.gpg] http://deb.debian.org/debian bookworm main
deb-src [signed-by=/usr/share/keyrings/debian-archive-keyring.gpg] http://deb.debian.org/debian trixie main
EOF

# The test/ folder of pytorch's upstream tarball in RELEASE (bookworm, trixie), extracted once into
# the cache; prints its path.
tests_of() {
  local release=$1 line url name hash folder
  if ! ls -d "$cache/$release"/*/test >/dev/null 2>&1; then
    apt-get "${apt_options[@]}" -qq update >&2
    line=$(cd "$cache" && apt-get "${apt_options[@]}" source --print-uris "pytorch/$release" 2>/dev/null |
           grep "\.orig\.tar\." | head -n 1)
    [[ -n $line ]] || { echo "apt-get source names no upstream tarball of pytorch/$release" >&2; exit 1; }
    read -r url name _ hash <<<"$line"
    url=${url//\'/}
    hash=${hash#SHA256:}
    python3 -c 'import sys, urllib.request; urllib.request.urlretrieve(sys.argv[1], sys.argv[2])' "$url" "$cache/$name"
    echo "$hash  $cache/$name" | sha256sum -c --quiet - >&2
    rm -rf "$cache/$release" && mkdir -p "$cache/$release"
    tar -xf "$cache/$name" -C "$cache/$release" --wildcards '*/test/*'
    rm -f "$cache/$name"
  fi
  folder=$(ls -d "$cache/$release"/*/test | head -n 1)
  echo "$folder"
}

# expecttest, which PyTorch's test utilities import: .venv has it from python/requirements.txt;
# for Debian's python3 (no Debian package of it) the same pinned version goes into the cache.
expecttest=$(grep -E '^expecttest==' "$root/python/requirements.txt")
site13=$cache/site-1.13
if [[ ! -f $site13/.$expecttest ]]; then
  "$venv_python" -m pip install -q --no-deps --target "$site13" "$expecttest" >&2
  touch "$site13/.$expecttest"
fi

if ((fast)); then
  sweep="not mask_vs_math or (mask_vs_math and float32 and batch_size_2_ and n_head_3 and kv_seq_len_17)"
else
  sweep=""
fi
status=0
tests213=$(tests_of trixie)
PYTHONPATH=$module_path "$venv_python" "$here/run_upstream.py" --series 2.13 --tests "$tests213" \
  --logs "$cache/logs" nn/test_multihead_attention.py "test_transformers.py${sweep:+::$sweep}" || status=1
tests113=$(tests_of bookworm)
PYTHONPATH=$module_path /usr/bin/python3 "$here/run_upstream.py" --series 1.13 --tests "$tests113" \
  --pythonpath "$site13" --logs "$cache/logs" "test_nn.py::ultihead or ransformer or ttention" test_transformers.py ||
  status=1
exit $status
