#!/usr/bin/env bash
# Copyright: contributors to bcd.devices
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
#
# Unpack the cached rootfs on a tmpfs, prepare it for podman, then run a command.
#
#   unshare -m --propagation private -- bash tests/e2e/lib/in_podman_rootfs.sh TARBALL WORK CMD...
#
# Only in a private mount namespace (as above): every mount below vanishes with the
# namespace, nothing is mounted on the host, and the unpacked rootfs (a tmpfs on
# WORK/rootfs) costs no disk writes and no slow deletion.
#
# The rootfs is bound onto itself (runc refuses a root that is not a mount point:
# "mount /, flags: 0x84000: invalid argument"); it gets /proc, /sys, tmpfs on /run and
# /tmp, and its own /dev: a tmpfs with the usual character devices, devpts, shm and
# mqueue. WORK/nodes (the fakehw nodes, on disk) appears in it as /srv/nodes. The fake
# GPU nodes the vendor specs name are created later by the test driver, in that /dev,
# so they exist only for podman in this namespace and never on the host.
#
# Podman is set up for this machine: runc, cgroupfs (PID 1 is not systemd), events to a
# file, vfs storage; busybox-static with its applets is the containers' root (/srv/bb).
# Podman 5.4 reads CDI specs only from /etc/cdi and /var/run/cdi (it ignores
# containers.conf's cdi_spec_dirs, containers/podman#25691), so the driver bind-mounts
# the node under test's directories there.
set -euo pipefail

tarball=$1 work=$2
shift 2
if [[ $(readlink /proc/self/ns/mnt) == "$(readlink /proc/1/ns/mnt)" ]]; then
  echo "in_podman_rootfs.sh: refusing to mount in the host's mount namespace; run it under unshare -m" >&2
  exit 2
fi

root=$work/rootfs
mkdir -p "$root" "$work/nodes"
mount -t tmpfs -o mode=0755 e2e-rootfs "$root"
zstd -q -dc "$tarball" | tar -C "$root" --numeric-owner -xf -

cat >"$root/etc/containers/containers.conf" <<'CONF'
[engine]
runtime = "runc"
cgroup_manager = "cgroupfs"
events_logger = "file"
CONF
cat >"$root/etc/containers/storage.conf" <<'CONF'
[storage]
driver = "vfs"
graphroot = "/var/lib/containers/storage"
runroot = "/run/containers/storage"
CONF
mkdir -p "$root/srv/bb/bin" "$root/srv/nodes"
cp "$root/bin/busybox" "$root/srv/bb/bin/busybox"
chroot "$root" /bin/busybox --install -s /srv/bb/bin

mount --bind "$root" "$root"
mount --bind "$work/nodes" "$root/srv/nodes"
mount -t proc proc "$root/proc"
mount --rbind /sys "$root/sys"
mount -t tmpfs -o mode=0755 e2e-dev "$root/dev"
for node in null:1:3 zero:1:5 full:1:7 random:1:8 urandom:1:9 tty:5:0; do
  IFS=: read -r name major minor <<<"$node"
  mknod -m 0666 "$root/dev/$name" c "$major" "$minor"
done
mkdir -p "$root/dev/pts" "$root/dev/shm" "$root/dev/mqueue"
mount -t devpts -o newinstance,ptmxmode=0666,mode=0620 devpts "$root/dev/pts"
ln -s pts/ptmx "$root/dev/ptmx"
mount -t tmpfs -o mode=1777 e2e-shm "$root/dev/shm"
mount -t mqueue mqueue "$root/dev/mqueue"
ln -s /proc/self/fd "$root/dev/fd"
ln -s /proc/self/fd/0 "$root/dev/stdin"
ln -s /proc/self/fd/1 "$root/dev/stdout"
ln -s /proc/self/fd/2 "$root/dev/stderr"
mount -t tmpfs -o mode=0755 e2e-run "$root/run"
mount -t tmpfs -o mode=1777 e2e-tmp "$root/tmp"
exec "$@"
