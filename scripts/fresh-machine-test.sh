#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# The README, run as a newcomer would on a fresh Debian 12 machine.
#
#   scripts/fresh-machine-test.sh [--steps N] [--keep]
#
# A Debian 12 minbase root is made with debootstrap (once; the bare root is
# cached) from the mirror in this machine's own apt sources. Each run copies
# that bare root, puts `git archive HEAD` in it, and runs inside chroot, with
# nothing installed but what the project's scripts install:
#   1. the README's test command, in full;
#   2. the README's main-job command up to its training, then that training
#      cut to N steps (default 40) into runs/spam, `eval` of the run and one
#      `inspect`;
#   3. every command of the README's "Your own data", "Fine-tuning", "From
#      multihead to PyTorch and ONNX" and "Training from Python" (on
#      runs/spam), then of "Using multihead from other programs"
#      (install and embed by CMake and pkg-config, pip install into a venv,
#      multihead serve on runs/spam answering curl);
#   4. every python block of the README, each as a file, with PYTHONPATH=build/python, by Debian's
#      python3, or by the project's .venv/bin/python where the block's first line says
#      `# .venv/bin/python`.
# The commands are read out of README.md itself. The first that fails is
# named, with the tail of its log, and the script exits 1.
#
# Needs root (debootstrap, chroot, mount). Cache: $MULTIHEAD_FRESH_CACHE,
# default /var/cache/multihead-fresh-machine (the bare root, and the .deb
# files downloaded by earlier runs, which save the download but not the
# install). --keep leaves the work folder (root and logs) for a look; a
# failing command's whole log is kept as last-failure.log in the cache.
set -euo pipefail
cd "$(dirname "$0")/.."
repo=$PWD

steps=40
keep=0
while [[ $# -gt 0 ]]; do
  case "$1" in
    --steps) steps=${2:?--steps needs a number}; shift 2 ;;
    --keep) keep=1; shift ;;
    *) echo "usage: scripts/fresh-machine-test.sh [--steps N] [--keep]" >&2; exit 2 ;;
  esac
done
[[ $steps =~ ^[1-9][0-9]*$ ]] || { echo "fresh-machine-test: --steps must be a positive integer" >&2; exit 2; }
[[ $(id -u) -eq 0 ]] || { echo "fresh-machine-test: needs root (debootstrap, chroot, mount)" >&2; exit 2; }

say() { echo "fresh-machine-test: $*" >&2; }
die() { say "$*"; exit 1; }

cache=${MULTIHEAD_FRESH_CACHE:-/var/cache/multihead-fresh-machine}
suite=bookworm

# --- The README's commands ------------------------------------------------
# The Quick start section's sh blocks: the one that runs ctest is the test
# command, the one that ends in `build/multihead train` the main job; then
# every sh block of "Using multihead from other programs".
readme_blocks() {  # readme_blocks SECTION: its sh blocks, one line each
  awk -v section="## $1" 'index($0, section) == 1 {q = 1; next} /^## / {q = 0}
       q && /^```sh/ {b = 1; next} q && b && /^```/ {b = 0; print ""; next}
       q && b {printf "%s ", $0}' README.md
}
test_cmd=$(readme_blocks "Quick start" | grep -m1 'ctest' | sed 's/ *$//') || true
main_cmd=$(readme_blocks "Quick start" | grep -m1 'build/multihead train' | sed 's/ *$//') || true
[[ -n $test_cmd ]] || die "README.md's Quick start has no sh block that runs ctest"
[[ -n $main_cmd ]] || die "README.md's Quick start has no sh block that runs build/multihead train"
train_cmd="build/multihead train${main_cmd##*build/multihead train}"
main_setup=${main_cmd% && build/multihead train*}
[[ $main_setup != "$main_cmd" ]] || die "README.md's main-job command does not end in '&& build/multihead train'"
mapfile -t use_cmds < <(readme_blocks "Using multihead from other programs" | sed 's/ *$//' | grep .)
[[ ${#use_cmds[@]} -gt 0 ]] || die "README.md has no sh block under 'Using multihead from other programs'"
# The sections on a user's own data, fine-tuning, PyTorch and ONNX, and training from Python.
guide_cmds=()
for section in "Your own data" "Fine-tuning" "From multihead to PyTorch and ONNX" "Training from Python"; do
  mapfile -t cmds < <(readme_blocks "$section" | sed 's/ *$//' | grep .)
  [[ ${#cmds[@]} -gt 0 ]] || die "README.md has no sh block under '$section'"
  guide_cmds+=("${cmds[@]}")
done

# Every python block of the README, in order: each is run as written, as a
# file, once runs/spam is there (the blocks use it).
python_blocks=$(awk '/^```python/ {b = 1; n++; next} b && /^```/ {b = 0; next} b {print n "\t" $0}' README.md)
[[ -n $python_blocks ]] || die "README.md has no python block"

# --- The bare root, made once, from this machine's own mirror --------------
source "$repo/scripts/lib/debian-root.sh"
bare=$cache/$suite-minbase
mkdir -p "$cache/debs"
make_bare_root "$suite" "$bare" "$cache/debootstrap.log"

# --- A fresh copy of it, with the project and this machine's network -------
work=$(mktemp -d /var/tmp/multihead-fresh.XXXXXX)
root=$work/root
logs=$work/logs
mounted=()
cleanup() {
  local i
  for ((i = ${#mounted[@]} - 1; i >= 0; i--)); do umount "${mounted[i]}" 2>/dev/null || umount -l "${mounted[i]}" || true; done
  # Never delete through a mount point that is still there.
  if grep -q " $root" /proc/mounts; then
    say "left $work in place: something is still mounted under it"
  elif [[ $keep -eq 1 ]]; then
    say "kept $work"
  else
    rm -rf "$work"
  fi
}
trap cleanup EXIT
cp -a "$bare" "$root"
rm -f "$root/.complete"
mkdir -p "$logs" "$root/root/multihead"
git -C "$repo" archive HEAD | tar -x -C "$root/root/multihead"

# This machine's network (its apt sources, proxies, name servers and
# certificate authorities), not its packages: nothing the build uses comes
# with them.
root_network "$suite" "$root"
# PyTorch's CPU build as pip on this machine finds it: the torch files in the folders pip's
# configuration names (find-links), handed into the root with a pip.conf naming them, so that
# scripts/setup.sh installs the same CPU build there instead of downloading the several-GB CUDA one
# (a machine without such a file takes it from PyTorch's CPU index: scripts/lib/python-env.sh).
links=$( { python3 -m pip config list 2>/dev/null || true; } | sed -n "s/^.*find-links='\(.*\)'$/\1/p" | tr ' ' '\n' | sort -u)
handed=()
for dir in $links; do
  dir=${dir#file://}
  for wheel in "$dir"/torch-*.whl; do
    [[ -f $wheel ]] || continue
    mkdir -p "$root$dir" && cp "$wheel" "$root$dir/" && handed+=("$wheel")
  done
done
if [[ ${#handed[@]} -gt 0 ]]; then
  printf '[global]\nfind-links = %s\n' "$(dirname "${handed[@]}" | sort -u | tr '\n' ' ')" > "$root/etc/pip.conf"
  say "handed into the root, with a pip.conf naming them: ${handed[*]}"
else
  say "pip here names no local torch file: the root takes PyTorch from its CPU index"
fi
# .deb files from earlier runs: they save the download, never the install.
find "$cache/debs" -name '*.deb' -exec cp -t "$root/var/cache/apt/archives/" {} +

# The check cannot pass on the host's packages: the root has none of them.
for tool in cmake g++ npm; do
  chroot "$root" /bin/sh -c "command -v $tool" >/dev/null 2>&1 && die "the bare root already has $tool: it is not fresh"
done

mount -t proc proc "$root/proc" && mounted+=("$root/proc")
mount -t devpts -o newinstance,ptmxmode=0666 devpts "$root/dev/pts" && mounted+=("$root/dev/pts")
mkdir -p "$root/dev/shm" && mount -t tmpfs tmpfs "$root/dev/shm" && mounted+=("$root/dev/shm")
# A machine has /sys: Open MPI's hwloc reads the CPU topology there (without it mpirun failed to
# start now and then: "failed to find sysfs cpu topology directory").
mkdir -p "$root/sys" && mount -t sysfs -o ro sysfs "$root/sys" && mounted+=("$root/sys")

# --- The README's commands, each logged, the first failure named ----------
step=0
run() {
  local cmd=$1 log
  step=$((step + 1))
  log=$logs/$step.log
  say "[$step] $cmd"
  local start=$SECONDS
  # `cd ... || exit 1; CMD`, not `cd ... && CMD`: with `&&`, a CMD that starts
  # a server in the background (`serve ... & server=$!`) would put the cd and
  # the server together in a subshell, and `kill $server` would stop the
  # subshell instead of the server.
  if ! chroot "$root" /usr/bin/env -i HOME=/root LANG=C.UTF-8 TERM=dumb \
      PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin \
      ${node_ca:+NODE_EXTRA_CA_CERTS=$node_ca} \
      ${http_proxy:+http_proxy=$http_proxy} ${https_proxy:+https_proxy=$https_proxy} \
      /bin/bash -c "cd /root/multihead || exit 1; $cmd" >"$log" 2>&1; then
    cp "$log" "$cache/last-failure.log"
    say "FAILED after $((SECONDS - start)) s: $cmd"
    say "last lines of its log (all of it: $cache/last-failure.log):"
    tail -n 40 "$log" >&2
    exit 1
  fi
  say "    ok in $((SECONDS - start)) s"
}

run "$test_cmd"
say "    $(grep -E 'tests passed|tests failed' "$logs/1.log" | tail -n 1)"
run "$main_setup"
# Into the main job's own directory (runs/spam), which the README's serve
# commands below take as their run.
run "$train_cmd --steps $steps"
run "test -s runs/spam/report.md && test -s runs/spam/results.json"
run "build/multihead eval --run runs/spam"
run "build/multihead inspect --run runs/spam --text 'Free money: click here to claim your prize' --out runs/spam/inspect"
run "ls runs/spam/inspect/*.png >/dev/null"
for cmd in "${guide_cmds[@]}" "${use_cmds[@]}"; do run "$cmd"; done
# The python blocks, each a file of its own run on the build's package: by Debian's python3, or by
# the project's .venv where the block's first line names it.
for n in $(cut -f1 <<<"$python_blocks" | uniq); do
  block=$root/root/multihead/readme-python-$n.py
  awk -F'\t' -v n="$n" '$1 == n {sub(/^[^\t]*\t/, ""); print}' <<<"$python_blocks" >"$block"
  python=/usr/bin/python3
  [[ $(head -n 1 "$block") == "# .venv/bin/python" ]] && python=.venv/bin/python
  run "PYTHONPATH=build/python $python readme-python-$n.py"
done

find "$root/var/cache/apt/archives" -maxdepth 1 -name '*.deb' -exec cp -u -t "$cache/debs/" {} +
say "passed: the README's test command, its main job, its own-data, fine-tuning, PyTorch and Python-training commands, its install, embed, pip and serve commands, and its python blocks on a fresh Debian $suite root ($SECONDS s)"
