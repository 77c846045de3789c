#!/bin/bash
# Build (or reuse) the cached fake-Arch root tarball.
#   rootfs.sh            -> prints the tarball path (builds it on a cache miss)
#   rootfs.sh --key      -> prints the cache key only
# Cache: ${RIGKIT_CACHE:-~/.cache/rigkit}/harness/rootfs-<key>.tar.zst, key = sha256 of this script and
# files/pacman.conf (the only inputs baked into the tarball). Per-host parts (hostname, mirror, sshd
# address, keys, the base package set, the host overlay) are applied by hostctl.py at host creation,
# so editing stubs or mirror.json never rebuilds this.
set -euo pipefail
HERE=$(cd "$(dirname "$0")" && pwd)
CACHE=${RIGKIT_HARNESS_CACHE:-${RIGKIT_CACHE:-$HOME/.cache/rigkit}/harness}
# Debian 13 "trixie" (issue 58): pacman 7.0.0 (pacman-package-manager 7.0.0-1+b1), systemd 257, Python 3.13,
# and the libc trixie's Docker 26 needs (debs.py); bookworm's debootstrap knows trixie, and the machine's
# debian-archive-keyring holds trixie's keys
SUITE=trixie
INCLUDE=systemd,systemd-sysv,dbus,openssh-server,python3,python3-venv,python3-yaml,sudo,procps,iproute2,curl,libgomp1,pacman-package-manager,less
KEY=$( { cat "$HERE/rootfs.sh" "$HERE/files/pacman.conf"; echo "$SUITE $INCLUDE"; } | sha256sum | cut -c1-16)
[ "${1:-}" = --key ] && { echo "$KEY"; exit 0; }
OUT=$CACHE/rootfs-$KEY.tar.zst
if [ -s "$OUT" ]; then echo "$OUT"; exit 0; fi
mkdir -p "$CACHE/debs"
exec 9>"$CACHE/rootfs.lock"; flock 9
if [ -s "$OUT" ]; then echo "$OUT"; exit 0; fi
R=$(mktemp -d /var/tmp/rigkit-rootfs.XXXXXX); chmod 755 "$R"   # mktemp's 0700 would stop sshd for non-root users
trap 'rm -rf "$R"' EXIT
t0=$(date +%s.%N)
debootstrap --variant=minbase --cache-dir="$CACHE/debs" --include="$INCLUDE" "$SUITE" "$R" >"$CACHE/debootstrap.log" 2>&1 \
  || { tail -20 "$CACHE/debootstrap.log" >&2; exit 1; }
t1=$(date +%s.%N)

# --- identity: Arch's os-release ------------------------------------------------------------
rm -f "$R/etc/os-release" "$R/usr/lib/os-release" "$R/etc/debian_version" "$R/etc/lsb-release"
cat > "$R/usr/lib/os-release" <<'OS'
NAME="Arch Linux"
PRETTY_NAME="Arch Linux"
ID=arch
BUILD_ID=rolling
ANSI_COLOR="38;2;23;147;209"
HOME_URL="https://archlinux.org/"
DOCUMENTATION_URL="https://wiki.archlinux.org/"
SUPPORT_URL="https://bbs.archlinux.org/"
BUG_REPORT_URL="https://gitlab.archlinux.org/groups/archlinux/-/issues"
PRIVACY_POLICY_URL="https://terms.archlinux.org/docs/privacy-policy/"
LOGO=archlinux-logo
OS
ln -sf ../usr/lib/os-release "$R/etc/os-release"
: > "$R/etc/arch-release"
ln -sf ../proc/self/mounts "$R/etc/mtab"

# --- no apt/dpkg on PATH (pyinfra's server.packages would pick apt before pacman) -------------
mkdir -p "$R/usr/lib/fake-arch/debian-bin"
for b in apt apt-get apt-cache apt-config apt-mark dpkg dpkg-query dpkg-deb dpkg-divert dpkg-split dpkg-trigger dpkg-statoverride dpkg-maintscript-helper aptitude; do
  for d in usr/bin usr/sbin bin sbin; do [ -e "$R/$d/$b" ] && [ ! -L "$R/$d/$b" ] && mv "$R/$d/$b" "$R/usr/lib/fake-arch/debian-bin/$b"; done
done

# --- Debian's own units that Arch has not: trixie's run-lock.mount (a tmpfs on /run/lock; Arch's systemd ships
# none; the control machine's systemd-analyze 252 refused it with this root as --root: "Cannot create mount unit
# for API file system /run/lock", notes/sandbox-trixie.md item 7)
rm -f "$R/usr/lib/systemd/system/run-lock.mount" "$R"/usr/lib/systemd/system/*.wants/run-lock.mount

# --- pacman: stock Arch layout ----------------------------------------------------------------
mkdir -p "$R/etc/pacman.d" "$R/var/lib/pacman" "$R/var/cache/pacman/pkg"
cp "$HERE/files/pacman.conf" "$R/etc/pacman.conf"

# --- pacman 7's download user, as Arch's pacman package makes it (its sysusers entry at the upgrade to 7.0.0:
# "Creating group 'alpm' with GID 946. Creating user 'alpm' (Arch Linux Package Management) with UID 946";
# Arch's news 2024-09-14 "Manual intervention for pacman 7.0.0 and local repositories required"); Debian's
# pacman-package-manager makes none, and files/pacman.conf names it (DownloadUser = alpm)
chroot "$R" sh -c 'getent group alpm >/dev/null || groupadd -r -g 946 alpm; id alpm >/dev/null 2>&1 || useradd -r -u 946 -g alpm -d / -s /usr/sbin/nologin -c "Arch Linux Package Management" alpm'

# --- the operator user (Arch: wheel) with NOPASSWD sudo; systemctl real binary kept aside ----
chroot "$R" sh -c 'getent group wheel >/dev/null || groupadd -r wheel; id rig >/dev/null 2>&1 || useradd -m -s /bin/bash -G wheel rig'
echo 'rig ALL=(ALL) NOPASSWD: ALL' > "$R/etc/sudoers.d/rig"; chmod 440 "$R/etc/sudoers.d/rig"
[ -e "$R/usr/bin/systemctl.real" ] || cp -a "$R/usr/bin/systemctl" "$R/usr/bin/systemctl.real"
rm -f "$R"/etc/ssh/ssh_host_*   # generated per host
# boot faster inside nspawn: mask units that only matter on real hardware
for u in systemd-timesyncd.service apt-daily.timer apt-daily-upgrade.timer e2scrub_all.timer fstrim.timer dpkg-db-backup.timer \
         systemd-networkd-wait-online.service getty@tty1.service console-getty.service \
         systemd-modules-load.service; do  # trixie's fails in a container: "Failed to initialize libkmod context"
  ln -sf /dev/null "$R/etc/systemd/system/$u"
done
: > "$R/etc/machine-id"
rm -rf "$R"/var/cache/apt/archives/*.deb "$R"/var/lib/apt/lists/* "$R"/usr/share/doc/* "$R"/usr/share/man/* "$R"/usr/share/locale/*
t2=$(date +%s.%N)
tar -C "$R" --numeric-owner -cf - . | zstd -q -T0 -3 -o "$OUT.tmp" -f && mv "$OUT.tmp" "$OUT"
t3=$(date +%s.%N)
for old in "$CACHE"/rootfs-*.tar.zst; do [ "$old" = "$OUT" ] || rm -f "$old"; done
awk -v a="$t0" -v b="$t1" -v c="$t2" -v d="$t3" -v o="$OUT" -v sz="$(du -h "$OUT"|cut -f1)" \
  'BEGIN { printf "rootfs: debootstrap %.1fs, arch-ify %.1fs, pack %.1fs -> %s (%s)\n", b-a, c-b, d-c, o, sz }' >&2
echo "$OUT"
