#!/bin/bash
# Set up the sandbox harness on this machine (idempotent; root): the apt packages it needs, the
# pacman mirror built from mirror.json and the cached fake-Arch root tarball.
#   bash tests/harness/setup.sh            (prints timings; the tarball and mirror paths on the last lines)
# Cache: ${RIGKIT_CACHE:-~/.cache/rigkit}/harness. Cold: ~1 min of debootstrap (57-144 s measured);
# warm: < 2 s.
set -euo pipefail
HERE=$(cd "$(dirname "$0")" && pwd)
[ "$(id -u)" = 0 ] || { echo "setup.sh: needs root (debootstrap, chroot, network namespaces)" >&2; exit 2; }
# gcc, libc6-dev: the stand-in libnvidia-ml.so.1 the mirror's nvidia-utils ships (stubs/libnvidia-ml.c)
PKGS=(debootstrap systemd-container pacman-package-manager makepkg libarchive-tools zstd openssh-client iproute2 util-linux openssl gcc libc6-dev)
now() { date +%s.%N; }
t0=$(now)
missing=()
for p in "${PKGS[@]}"; do dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "ok installed" || missing+=("$p"); done
if [ ${#missing[@]} -gt 0 ]; then
  echo "setup.sh: installing ${missing[*]}" >&2
  apt-get update -qq
  DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
fi
t1=$(now)
mirror=$(python3 "$HERE/build_mirror.py")
t2=$(now)
tarball=$(bash "$HERE/rootfs.sh")
t3=$(now)
awk -v a="$t0" -v b="$t1" -v c="$t2" -v d="$t3" \
  'BEGIN { printf "setup.sh: apt %.1fs, mirror %.1fs, root tarball %.1fs, total %.1fs\n", b-a, c-b, d-c, d-a }' >&2
echo "mirror: $mirror"
echo "rootfs: $tarball"
