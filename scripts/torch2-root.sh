#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# PyTorch 2.x for the side-by-side benchmarks: a Debian 13 (trixie) root with
# Debian's python3-torch (2.6) and python3-numpy, run under chroot.
#
#   scripts/torch2-root.sh                 make the root (once; cached) and print
#                                          the command that runs its Python
#   scripts/torch2-root.sh --check         exit 0 where the root is made, 1 where not
#   scripts/torch2-root.sh python3 ARGS..  run the root's Python with ARGS
#
# Debian 12, the release multihead builds on, ships PyTorch 1.13; today's
# PyTorch has a flash-attention CPU kernel behind scaled_dot_product_attention
# (forward and backward, fp32 and bf16) that nn.MultiheadAttention and
# nn.TransformerEncoderLayer use, and the benchmarks measure against it too
# (bench/torch_peer.py). The root is made by debootstrap from the mirror in
# this machine's own apt sources (scripts/lib/debian-root.sh) and cached in
# $MULTIHEAD_TORCH2_CACHE (default /var/cache/multihead-torch2).
#
# Each run is in a private mount namespace (unshare), so nothing stays mounted
# after it: /proc, /sys and a tmpfs /dev/shm for PyTorch, and this checkout's
# bench/ folder bound (read-only) at its own path, so a benchmark's child
# script and its imports are found where the parent names them, and the
# folder MULTIHEAD_TORCH2_SHARE names, if any, bound writable. The environment passes
# through (thread counts, OPENBLAS_CORETYPE, GLIBC_TUNABLES), less the host's
# Python paths.
#
# Needs root (debootstrap, chroot, mount).
set -euo pipefail
repo=$(cd "$(dirname "$0")/.." && pwd)

say() { echo "torch2-root: $*" >&2; }
die() { say "$*"; exit 1; }
[[ $(id -u) -eq 0 ]] || { echo "torch2-root: needs root (debootstrap, chroot, mount)" >&2; exit 2; }

suite=trixie
cache=${MULTIHEAD_TORCH2_CACHE:-/var/cache/multihead-torch2}
root=$cache/$suite-torch
# libopenblas0-openmp: Debian's python3-torch calls whatever BLAS the system
# has, and without it that is the reference BLAS (netlib), whose sgemm would
# handicap the peer; Debian 12's PyTorch runs on the same OpenMP OpenBLAS.
# torch.compile's Inductor writes C++/OpenMP kernels and builds them with g++
# against Python's and libtorch's headers (python3-dev, python3-setuptools,
# libtorch-dev); ONNX Runtime (python3-onnxruntime, with python3-onnx for the
# export) is the inference peer a deployer picks.
packages=(python3-torch python3-numpy libopenblas0-openmp g++ python3-dev python3-setuptools libtorch-dev
          python3-onnx python3-onnxruntime)

# .torch-complete holds the package list the root was made with, then PyTorch's version.
made() { [[ -f $root/.torch-complete && $(head -n 1 "$root/.torch-complete") == "${packages[*]}" ]]; }

install_into() {  # install_into ROOT: the packages, into ROOT
  chroot "$1" /usr/bin/env -i PATH=/usr/sbin:/usr/bin:/sbin:/bin DEBIAN_FRONTEND=noninteractive \
    /bin/sh -c "apt-get update -qq && apt-get install -y -qq --no-install-recommends ${packages[*]} && apt-get clean" \
    >"$cache/install.log" 2>&1
}

make_root() {
  source "$repo/scripts/lib/debian-root.sh"
  mkdir -p "$cache"
  if [[ -f $root/.torch-complete ]]; then
    # Made with an older package list: the packages it lacks go into it in place.
    say "installing ${packages[*]} into $root"
    root_network "$suite" "$root"
    install_into "$root" || { tail -n 30 "$cache/install.log" >&2; die "installing ${packages[*]} failed (log: $cache/install.log)"; }
  else
    make_bare_root "$suite" "$cache/$suite-minbase" "$cache/debootstrap.log"
    say "installing ${packages[*]} into a copy of it (once; cached in $root)"
    rm -rf "$root.tmp"
    cp -a "$cache/$suite-minbase" "$root.tmp"
    rm -f "$root.tmp/.complete"
    root_network "$suite" "$root.tmp"
    if ! install_into "$root.tmp"; then
      tail -n 30 "$cache/install.log" >&2
      rm -rf "$root.tmp"
      die "installing ${packages[*]} failed (log: $cache/install.log)"
    fi
    rm -rf "$root" && mv "$root.tmp" "$root"
  fi
  { echo "${packages[*]}"; chroot "$root" dpkg-query -W -f='${Version}\n' python3-torch; } >"$root/.torch-complete"
  say "PyTorch $(tail -n 1 "$root/.torch-complete") ready in $root"
}

case "${1:-}" in
  --check) made; exit ;;
  "")
    made || make_root
    echo "$repo/scripts/torch2-root.sh python3"
    exit 0 ;;
  python3) shift ;;
  *) echo "usage: scripts/torch2-root.sh [--check | python3 ARGS...]" >&2; exit 2 ;;
esac

made || die "no PyTorch 2 root in $root yet: run scripts/torch2-root.sh once to make it"
bench=$repo/bench
# The working directory is kept where the root has it (this checkout's bench/),
# else the root's /.
cwd=/
[[ $PWD == "$bench" || $PWD == "$bench"/* ]] && cwd=$PWD
# MULTIHEAD_TORCH2_SHARE names one more folder, bound writable at its own
# path: where a benchmark and its PyTorch 2 children exchange files.
share=${MULTIHEAD_TORCH2_SHARE:-}
[[ -z $share || -d $share ]] || die "MULTIHEAD_TORCH2_SHARE=$share is not a folder"
exec unshare --mount --propagation private -- /bin/bash -c '
  set -e
  root=$1 bench=$2 cwd=$3 share=$4; shift 4
  if [[ -n $share ]]; then mkdir -p "$root$share" && mount --bind "$share" "$root$share"; fi
  mount -t proc proc "$root/proc"
  mount --rbind /sys "$root/sys"
  mkdir -p "$root/dev/shm" && mount -t tmpfs tmpfs "$root/dev/shm"
  mkdir -p "$root$bench"
  mount --bind -o ro "$bench" "$root$bench"
  cd "$root$cwd"
  exec chroot "$root" /usr/bin/env -u PYTHONPATH -u PYTHONHOME -u VIRTUAL_ENV /bin/sh -c "cd \"\$0\" && exec /usr/bin/python3 \"\$@\"" "$cwd" "$@"
' torch2-root "$root" "$bench" "$cwd" "$share" "$@"
