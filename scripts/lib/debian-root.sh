# SPDX-License-Identifier: Apache-2.0
# Debian roots made by debootstrap from this machine's own mirror: sourced by
# scripts/fresh-machine-test.sh (a bare Debian 12 root for the README's
# commands) and scripts/torch2-root.sh (Debian 13 with PyTorch 2.x, the
# benchmarks' peer). The mirror is always read from this machine's apt
# sources, never written into the repo.
#
# The caller defines say() and die().

# This machine's apt entries for Debian 12 (bookworm and its -updates and
# -security suites), as "URI SUITE COMPONENTS" lines, from deb822 stanzas and
# one-line entries alike.
host_debian_sources() {
  {
    for f in /etc/apt/sources.list /etc/apt/sources.list.d/*.list; do
      if [[ -f $f ]]; then awk '$1 == "deb" {c = ""; for (i = 4; i <= NF; i++) c = c " " $i; print $2, $3 c}' "$f"; fi
    done
    for f in /etc/apt/sources.list.d/*.sources; do
      if [[ ! -f $f ]]; then continue; fi
      awk 'function flush() { if (types ~ /(^| )deb( |$)/ && enabled != "no") { n = split(uris, u, " "); m = split(suites, s, " ");
                                for (i = 1; i <= n; i++) for (j = 1; j <= m; j++) print u[i], s[j], comps } types = uris = suites = comps = enabled = "" }
           /^[ \t]*$/ { flush(); next }
           /^Types:/ { sub(/^Types:[ \t]*/, ""); types = $0 }
           /^URIs:/ { sub(/^URIs:[ \t]*/, ""); uris = $0 }
           /^Suites:/ { sub(/^Suites:[ \t]*/, ""); suites = $0 }
           /^Components:/ { sub(/^Components:[ \t]*/, ""); comps = $0 }
           /^Enabled:/ { sub(/^Enabled:[ \t]*/, ""); enabled = $0 }
           END { flush() }' "$f"
    done
  } | awk '$2 == "bookworm" || index($2, "bookworm-") == 1'
}

# debian_sources SUITE: the same mirrors for SUITE (bookworm's entries with
# the suite renamed: a Debian mirror serves every release).
debian_sources() {
  host_debian_sources | awk -v s="$1" '{sub(/^bookworm/, s, $2); print}'
}

# debian_mirror SUITE: the mirror of SUITE's main entry.
debian_mirror() {
  debian_sources "$1" | awk -v s="$1" '$2 == s {print $1; exit}'
}

need_debootstrap() {
  command -v debootstrap >/dev/null && return
  say "installing debootstrap on this machine"
  DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends debootstrap >/dev/null 2>&1 ||
    { apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends debootstrap >/dev/null; }
}

# make_bare_root SUITE DIR LOG: a minbase root of SUITE in DIR, made once
# (DIR/.complete marks a finished one; a half-made root is never kept).
make_bare_root() {
  local suite=$1 dir=$2 log=$3 mirror
  [[ -f $dir/.complete ]] && return
  mirror=$(debian_mirror "$suite")
  [[ -n $mirror ]] || die "no Debian 12 entry in this machine's apt sources to take the mirror from"
  need_debootstrap
  say "making a bare Debian $suite minbase root from $mirror (once; cached in $dir)"
  rm -rf "$dir.tmp"
  debootstrap --variant=minbase "$suite" "$dir.tmp" "$mirror" >"$log" 2>&1 ||
    { tail -n 30 "$log" >&2; rm -rf "$dir.tmp"; die "debootstrap failed"; }
  rm -rf "$dir" && mv "$dir.tmp" "$dir" && touch "$dir/.complete"
}

# root_network SUITE ROOT: the apt sources of SUITE and the settings this
# machine reaches its mirror with (proxies; no expiry check for a snapshot
# mirror), its name servers and certificate authorities (an intercepting
# proxy's among them). These are this machine's network, not packages.
# Sets node_ca to the root's path of the host's CA bundle, where there is one.
root_network() {
  local suite=$1 root=$2 uri s comps
  node_ca=
  while read -r uri s comps; do echo "deb $uri $s $comps"; done < <(debian_sources "$suite") >"$root/etc/apt/sources.list"
  apt-config dump | grep -E '^Acquire::(https?::Proxy|Check-Valid-Until|Check-Date)' >"$root/etc/apt/apt.conf.d/01host-network" || true
  cp -L /etc/resolv.conf "$root/etc/resolv.conf"
  if [[ -f /etc/ssl/certs/ca-certificates.crt ]]; then
    cp /etc/ssl/certs/ca-certificates.crt "$root/etc/host-ca-certificates.crt"
    node_ca=/etc/host-ca-certificates.crt
  fi
  if compgen -G "/usr/local/share/ca-certificates/*" >/dev/null; then
    mkdir -p "$root/usr/local/share/ca-certificates"
    cp -r /usr/local/share/ca-certificates/. "$root/usr/local/share/ca-certificates/"
  fi
}
