#!/usr/bin/env bash
# Copyright: contributors to bcd.devices
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
#
# Boot a cached systemd rootfs (Debian bookworm or trixie) as a container whose PID 1 is
# a real systemd.
#
#   unshare -m --propagation private -- bash tests/e2e/lib/in_systemd_node.sh TARBALL DIR OVERLAY
#
# Only in a private mount namespace (as above): every mount below vanishes with it. The
# rootfs is unpacked on a tmpfs at DIR/root, OVERLAY's files are copied over it (sshd's
# port, root's authorized key, the nvidia-smi stand-in: tests/e2e/systemd/bcd_systemd.py
# writes them), and the script ends by exec'ing systemd-nspawn, so the caller's process
# is nspawn and the container's systemd is its only child. SIGTERM powers the container off.
#
# systemd-nspawn is the rootfs's own (systemd-container), run chrooted in that same tree:
# nothing is installed on the machine. The tree is bound onto a directory of itself
# (/srv/bcd-e2e-node) before anything is mounted in it, so the container (-D that
# directory) sees the bare tree while the launcher, around it, gets /proc, /sys, /dev and
# its own /run and /tmp.
#
# The options, each needed on these machines (PID 1 is not systemd, cgroups are hybrid v1):
#   --register=no --keep-unit   no systemd-machined and no host systemd to ask for a scope
#   SYSTEMD_NSPAWN_UNIFIED_HIERARCHY=1
#                               the container gets the cgroup v2 (unified) hierarchy on its
#                               /sys/fs/cgroup; without it nspawn copies the host's hybrid
#                               layout (a tmpfs with v1 hierarchies), and bcd.devices makes
#                               no slices without /sys/fs/cgroup/cgroup.controllers
#   --link-journal=no           the launcher and the container share /etc/machine-id
#   --console=read-only         the boot messages go to the caller's stdout (a log file)
# The container shares the machine's network: sshd listens on a loopback port only.
set -euo pipefail

tarball=$1 dir=$2 overlay=$3
if [[ $(readlink /proc/self/ns/mnt) == "$(readlink /proc/1/ns/mnt)" ]]; then
  echo "in_systemd_node.sh: refusing to mount in the host's mount namespace; run it under unshare -m" >&2
  exit 2
fi

root=$dir/root
container=/srv/bcd-e2e-node # inside $root
mkdir -p "$root"
mount -t tmpfs -o mode=0755 e2e-systemd-node "$root"
zstd -q -dc "$tarball" | tar -C "$root" --numeric-owner -xf -
cp -a "$overlay/." "$root/"

mkdir -p "$root$container"
mount --bind "$root" "$root$container"
mount -t proc proc "$root/proc"
mount --rbind /sys "$root/sys"
mount --rbind /dev "$root/dev"
mount -t tmpfs -o mode=0755 e2e-launcher-run "$root/run"
mount -t tmpfs -o mode=1777 e2e-launcher-tmp "$root/tmp"

exec chroot "$root" /usr/bin/env -i PATH=/usr/sbin:/usr/bin:/sbin:/bin LANG=C.UTF-8 \
  SYSTEMD_NSPAWN_UNIFIED_HIERARCHY=1 \
  systemd-nspawn --quiet --register=no --keep-unit --link-journal=no --console=read-only \
  --machine=bcd-e2e-node -D "$container" --boot
