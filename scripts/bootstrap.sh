#!/usr/bin/env bash
# Install what railab needs on a Debian machine, as root. Idempotent: skips what is present.
#   scripts/bootstrap.sh          runtime needs (FRR, iproute2, nftables, graphviz, gcc for the load
#                                 engine's compiled fast path, the railab package)
#   scripts/bootstrap.sh --test   also what the test suite uses (OpenSSH server, Docker, Chromium,
#                                 and the test, containerlab and ssh extras: pytest, ruff, docker, paramiko,
#                                 libyang 2.7 built against Debian's libyang2-dev for the SONiC YANG tests,
#                                 Playwright, which drives Debian's /usr/bin/chromium in the `railab ui`
#                                 tests: its own browser download, `playwright install`, is never used)
set -euo pipefail
cd "$(dirname "$0")/.."
if [ "$(id -u)" -ne 0 ]; then
  echo "railab bootstrap: run as root (network namespaces and FRR need it): sudo $0 $*" >&2
  exit 1
fi
pkgs=(frr iproute2 nftables graphviz procps gcc libc6-dev)
if [ "${1:-}" = "--test" ]; then
  pkgs+=(openssh-server docker.io chromium busybox-static libyang2-dev python3-dev)
fi
missing=()
for p in "${pkgs[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
if [ "${#missing[@]}" -gt 0 ]; then
  echo "railab bootstrap: apt-get install ${missing[*]}"
  apt-get update -qq
  DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
fi
extra=""
[ "${1:-}" = "--test" ] && extra="[test,containerlab,ssh]"
python3 -m pip install -q --disable-pip-version-check --root-user-action=ignore -e ".${extra}"
# Byte-compile railab's own modules once: with PYTHONDONTWRITEBYTECODE set (some CI images and
# sandboxes set it) every railab command would otherwise compile ~50 modules from source at
# start (~0.2 s each time). compileall writes them regardless; a later edit just makes Python
# compile that file in memory again.
python3 -m compileall -q -j 0 app testbed topologies traffic checks >/dev/null
# The load engine's fast path (traffic/fastpath.c), compiled once per source into /var/cache/railab
python3 -m railab.traffic.fastpath >/dev/null
