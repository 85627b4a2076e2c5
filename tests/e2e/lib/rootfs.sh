# shellcheck shell=bash
# Copyright: contributors to bcd.devices
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
#
# Root filesystems for the end-to-end tests, built once with debootstrap and cached as
# zstd tarballs under .cache/e2e/rootfs (ignored by git through .cache/).
#
# A tarball is named <name>-<key>.tar.zst, where <key> hashes the recipe: the suite, the
# variant, the package list and RECIPE_EPOCH. Changing any of them builds a new tarball;
# the old ones of that name are removed. Packages are not pinned: a cached tarball keeps
# the versions it was built with until the recipe changes or E2E_REBUILD=1 is set. Each
# tarball carries /etc/bcd-e2e/manifest (the recipe and `dpkg-query` of every package)
# so a run can report the versions it tested.
#
# Functions (source this file; `set -euo pipefail` is expected):
#   rootfs_tarball NAME SUITE "PKG ..."   sets ROOTFS_TARBALL to the tarball's path, building
#                                         it when missing (then ROOTFS_BUILT=1); a failed
#                                         build ends the calling script (errexit)
#   rootfs_extract TARBALL DIR            unpacks a tarball into DIR (created, must be empty)
#   in_chroot DIR CMD...                  runs CMD chrooted in DIR in a private mount
#                                         namespace with /proc, /sys and /dev (for apt, go)
#   debian_mirror                         prints the Debian archive debootstrap uses:
#                                         E2E_DEBIAN_MIRROR, else the one this machine's
#                                         apt sources name; fails when there is none
#
# The podman rootfs of this suite is `rootfs_tarball trixie-podman trixie "podman ..."`;
# a systemd rootfs for systemd-nspawn is
# `rootfs_tarball bookworm-systemd bookworm "systemd systemd-sysv …"` (the full list is in hack/e2e.sh).
#
# Environment: E2E_CACHE (default <repo>/.cache/e2e), E2E_DEBIAN_MIRROR (default: the
# Debian archive in this machine's apt sources; no registry host is written here),
# E2E_APT_DIR (default /etc/apt, where those sources are read), E2E_REBUILD=1 to rebuild
# even when cached.

RECIPE_EPOCH=1

e2e_log() { printf '== e2e: %s\n' "$*" >&2; }

debian_mirror() {
  if [[ -n ${E2E_DEBIAN_MIRROR:-} ]]; then
    printf '%s\n' "$E2E_DEBIAN_MIRROR"
    return 0
  fi
  local apt=${E2E_APT_DIR:-/etc/apt} found
  # The first archive (not security, not a file: or cdrom: source) of a "deb" entry: deb822
  # stanzas in sources.list.d/*.sources first, as Debian 12 writes them, then the one-line
  # sources.list and sources.list.d/*.list.
  local deb822=() lines=() file
  for file in "$apt"/sources.list.d/*.sources; do [[ -f $file ]] && deb822+=("$file"); done
  for file in "$apt"/sources.list "$apt"/sources.list.d/*.list; do [[ -f $file ]] && lines+=("$file"); done
  found=$(
    if ((${#deb822[@]})); then
      awk '
        function pick() {
          if (types ~ /(^|[ \t])deb([ \t]|$)/ && enabled != "no")
            for (i = 1; i <= nuris; i++) if (usable(uris[i])) { print uris[i]; exit }
          types = ""; enabled = ""; nuris = 0
        }
        function usable(uri) { return uri ~ /^https?:\/\// && uri !~ /security/ }
        FNR == 1 && NR > 1 { pick() }
        /^[ \t]*#/ { next }
        /^[ \t]*$/ { pick(); next }
        tolower($1) == "types:" { types = substr($0, index($0, ":") + 1) }
        tolower($1) == "enabled:" { enabled = tolower($2) }
        tolower($1) == "uris:" { for (i = 2; i <= NF; i++) uris[++nuris] = $i }
        END { pick() }
      ' "${deb822[@]}"
    fi
    if ((${#lines[@]})); then
      awk '
        /^[ \t]*deb[ \t]/ {
          sub(/^[ \t]*deb[ \t]+/, ""); sub(/^\[[^]]*\][ \t]*/, "")
          if ($1 ~ /^https?:\/\// && $1 !~ /security/) { print $1; exit }
        }
      ' "${lines[@]}"
    fi
  )
  found=${found%%$'\n'*}
  if [[ -z $found ]]; then
    e2e_log "no Debian archive in $apt/sources.list or $apt/sources.list.d: set E2E_DEBIAN_MIRROR to one"
    return 1
  fi
  printf '%s\n' "${found%/}"
}

in_chroot() {
  local dir=$1
  shift
  # A private mount namespace: nothing mounted here is seen, or left behind, outside.
  # shellcheck disable=SC2016  # expanded by the inner shell
  unshare -m --propagation private -- /bin/bash -euo pipefail -c '
    dir=$1; shift
    mount -t proc proc "$dir/proc"
    mount --rbind /sys "$dir/sys"
    mount --rbind /dev "$dir/dev"
    exec chroot "$dir" /usr/bin/env -i PATH=/usr/sbin:/usr/bin:/sbin:/bin HOME=/root \
      LANG=C.UTF-8 DEBIAN_FRONTEND=noninteractive "$@"
  ' in_chroot "$dir" "$@"
}

rootfs_tarball() {
  local name=$1 suite=$2 packages=$3
  local cache=${E2E_CACHE:?}/rootfs mirror
  local recipe key tarball
  recipe=$(printf 'epoch %s\nsuite %s\nvariant minbase\npackages %s\n' "$RECIPE_EPOCH" "$suite" "$packages")
  key=$(printf '%s\n' "$recipe" | sha256sum | cut -c1-12)
  tarball=$cache/$name-$key.tar.zst
  # shellcheck disable=SC2034  # results for the caller
  ROOTFS_TARBALL=$tarball ROOTFS_BUILT=0
  if [[ -s $tarball && ${E2E_REBUILD:-0} != 1 ]]; then
    return 0
  fi
  mirror=$(debian_mirror)
  mkdir -p "$cache"
  # A build a killed run left (the caller holds the cache's lock, so none is running); nothing is mounted
  # under one (its mounts lived in the build's own namespace), and rm stays on this file system regardless.
  for stale in "$cache"/.build-"$name".*; do
    if [[ -d $stale ]] && ! grep -qF " $stale/" /proc/self/mountinfo; then rm -rf --one-file-system "$stale"; fi
  done
  e2e_log "building rootfs $name ($suite: $packages) from $mirror; cached as $tarball"
  # A plain command (not under if, ||, or $(...)) so that errexit holds inside it.
  (_rootfs_build "$cache" "$name" "$suite" "$packages" "$mirror" "$recipe" "$tarball")
  # shellcheck disable=SC2034
  ROOTFS_BUILT=1
}

# Runs in a subshell (see rootfs_tarball): the EXIT trap removes the unpacked tree even
# when the build fails halfway.
#
# debootstrap mounts /proc and /sys in the tree it builds and, in a container (Docker, LXC,
# systemd-nspawn: most CI runners), binds the host's /dev/null, /dev/pts, /dev/shm and the like
# into it, unmounting them when it exits cleanly. It runs in a private mount namespace, as
# in_chroot does, so those mounts are never seen outside it and die with it however it ends:
# no rm -rf of the tree (this trap, a stale sweep, someone deleting the checkout while make
# test's --prepare runs) can reach the host's /dev through one. The trap's rm also stays on the
# tree's own file system.
_rootfs_build() {
  set -euo pipefail
  local cache=$1 name=$2 suite=$3 packages=$4 mirror=$5 recipe=$6 tarball=$7 build
  build=$(mktemp -d "$cache/.build-$name.XXXXXX")
  # shellcheck disable=SC2064  # expand now: $build is local
  trap "rm -rf --one-file-system '$build'" EXIT
  if ! unshare -m --propagation private -- \
    debootstrap --variant=minbase "$suite" "$build/root" "$mirror" >"$build/debootstrap.log" 2>&1; then
    tail -n 30 "$build/debootstrap.log" >&2
    e2e_log "debootstrap $suite failed (log above)"
    return 1
  fi
  cp /etc/resolv.conf "$build/root/etc/resolv.conf"
  # shellcheck disable=SC2086  # the package list is split on purpose
  if ! in_chroot "$build/root" sh -c 'apt-get update -qq && apt-get install -y -qq --no-install-recommends "$@"' \
    apt-install $packages >"$build/apt.log" 2>&1; then
    tail -n 30 "$build/apt.log" >&2
    e2e_log "apt-get install in the $suite rootfs failed (log above)"
    return 1
  fi
  in_chroot "$build/root" apt-get clean
  rm -rf "$build/root/var/lib/apt/lists/"*_* "$build/root/tmp/"* "$build/root/etc/resolv.conf"
  mkdir -p "$build/root/etc/bcd-e2e"
  {
    printf '%s\n' "$recipe"
    printf 'built %s from %s\n' "$(date -u +%Y-%m-%dT%H:%M:%SZ)" "$mirror"
    # shellcheck disable=SC2016  # a dpkg-query format, not shell
    in_chroot "$build/root" dpkg-query -W -f '${Package} ${Version}\n'
  } >"$build/root/etc/bcd-e2e/manifest"
  tar -C "$build/root" --numeric-owner --xattrs -cf - . | zstd -q -T0 -3 -o "$build/rootfs.tar.zst"
  rm -f "$cache/$name"-*.tar.zst
  mv "$build/rootfs.tar.zst" "$tarball"
}

rootfs_extract() {
  local tarball=$1 dir=$2
  mkdir -p "$dir"
  zstd -q -dc "$tarball" | tar -C "$dir" --numeric-owner --xattrs -xf -
}
