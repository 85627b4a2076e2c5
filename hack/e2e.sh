#!/usr/bin/env bash
# Copyright: contributors to bcd.devices
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
#
# End-to-end: real CDI consumers accept the specs bcd.devices writes, and a real
# systemd manages the hold slices (docs/verified-consumers.md says what is proven and
# with which versions).
#
#   bash hack/e2e.sh [PYTEST ARGS...]      e.g. -k release, -x, -k systemd
#   bash hack/e2e.sh --prepare             build what a cold cache lacks, run nothing (make test starts it first)
#
# 1. Installs the host tools it lacks (debootstrap, zstd, the ssh client) with apt-get.
#    For tests/e2e/test_eda.py, ansible-rulebook in its own venv (requirements/tools/ansible-rulebook.txt,
#    hack/tool_venv.sh) and Debian's default-jre-headless when java is missing (its rule engine runs in a JVM).
# 2. Gets the Debian trixie rootfs (podman 5, runc, busybox-static, Go and Debian's CDI
#    Go library, Docker 26 with containerd 1.7: tests/e2e/test_docker_cdi.py starts dockerd
#    in it, CDI on, no network, vfs storage) and a systemd rootfs (systemd,
#    systemd-nspawn, sshd, python3 with cryptography and PyYAML; trixie's with Slurm 24.11
#    and munge too) for each of Debian bookworm and trixie, from .cache/e2e/rootfs, building
#    and caching each on the first run.
# 3. Gets tests/e2e/cdicheck, a checker built on that CDI library, from .cache/e2e/bin,
#    building it in the rootfs when its source changed.
# 4. In a private mount namespace, unpacks the rootfs on a tmpfs and runs tests/e2e
#    (pytest; tests/e2e/lib/in_podman_rootfs.sh): fakehw nodes (in a scratch directory
#    under .cache/e2e/work) are converged through ansible-playbook, then podman, chrooted
#    in the rootfs, and the checker consume the specs. Nothing is mounted on the host,
#    and the scratch directory is removed.
#    The systemd part (tests/e2e/test_systemd_slices.py) boots each systemd rootfs in
#    turn with its own systemd-nspawn (tests/e2e/lib/in_systemd_node.sh, in a further
#    private mount namespace) and converges it with the role bcd.devices.bcd_holds over ssh on a
#    loopback port; the container is powered off when the suite ends. The Slurm part
#    (tests/e2e/test_slurm.py) boots the trixie one again with slurmctld and slurmd, the
#    TaskProlog of docs/slices-and-admission.md, and runs jobs with srun and sbatch.
#
# Needs root, .venv (make venv) and, on a cold cache, the Debian mirror. Environment:
#   E2E_CACHE          the cache (default .cache/e2e; git ignores .cache/)
#   E2E_DEBIAN_MIRROR  default: the Debian archive this machine's apt sources name
#   E2E_SYSTEMD_RELEASES  the Debian releases the systemd part boots (default "bookworm trixie")
#   E2E_REBUILD=1      rebuild the rootfs and the checker even when cached
#   E2E_KEEP=1         keep the scratch directory (its path is printed)
set -euo pipefail
shopt -s inherit_errexit

repo=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
cd "$repo"
# --prepare: build or fetch what a cold cache lacks (the root filesystems, the checker, the tool venvs), run
# nothing. make test starts it beside lint, units, sanity and molecule: the network's and the disk's work more
# than the CPU's, and five minutes of a cold CI on their own. The run that follows waits for it (the lock).
prepare=0
if [[ ${1:-} == --prepare ]]; then
  prepare=1
  shift
fi
export E2E_CACHE=${E2E_CACHE:-$repo/.cache/e2e}
# shellcheck source=tests/e2e/lib/rootfs.sh
source tests/e2e/lib/rootfs.sh

die() {
  printf 'e2e: %s\n' "$*" >&2
  exit 2
}

started=$SECONDS
[[ $(id -u) == 0 ]] || die "run as root: debootstrap, chroot, mknod and mount namespaces need it"
[[ -x .venv/bin/ansible-playbook && -x .venv/bin/python ]] ||
  die ".venv is missing or incomplete: run 'make venv' first (or 'make e2e')"
if [[ ! -e .build/ansible_collections/bcd/devices ]]; then
  mkdir -p .build/ansible_collections/bcd
  ln -sfn ../../.. .build/ansible_collections/bcd/devices
fi

# --- host tools --------------------------------------------------------------------
missing=()
for tool in debootstrap:debootstrap zstd:zstd unshare:util-linux nsenter:util-linux chroot:coreutils \
  ssh:openssh-client ssh-keygen:openssh-client; do
  command -v "${tool%%:*}" >/dev/null || missing+=("${tool#*:}")
done
mapfile -t missing < <(printf '%s\n' "${missing[@]}" | sort -u | sed '/^$/d')
if ((${#missing[@]})); then
  e2e_log "installing ${missing[*]} with apt-get"
  apt-get update -qq
  DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
fi

# --- ansible-rulebook (tests/e2e/test_eda.py) -----------------------------------------
# The Event-Driven Ansible engine, twice: the floor, 1.1.7 (requirements/tools/ansible-rulebook.txt), and the
# current 1.3 (requirements/tools/ansible-rulebook-1.3.txt), each in its own venv (hack/tool_venv.sh: built once,
# again when its file changes); test_eda.py runs its scenario under each. Their rule engine runs in a JVM (1.3 needs
# JDK 17), Debian's default-jre-headless where java is missing.
if ! command -v java >/dev/null; then
  e2e_log "installing default-jre-headless (ansible-rulebook's rule engine) with apt-get"
  apt-get update -qq
  DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends default-jre-headless >/dev/null
fi
t=$SECONDS
rulebooks=()
for tool in ansible-rulebook ansible-rulebook-1.3; do
  engine=$(bash hack/tool_venv.sh "$tool")/ansible-rulebook
  version=$("$engine" --version 2>/dev/null | sed -n '1s/^ansible-rulebook \[\(.*\)\]$/\1/p')
  [[ -n $version ]] || die "$engine --version does not name its version"
  rulebooks+=("$version=$engine")
done
# "1.1.7=/path 1.3.2=/path": tests/e2e/test_eda.py runs its scenario under each, oldest first.
export BCD_E2E_RULEBOOKS="${rulebooks[*]}"
e2e_log "ansible-rulebook ${rulebooks[*]%%=*} ($((SECONDS - t))s), $(java -version 2>&1 | head -n 1)"

mkdir -p "$E2E_CACHE/work" "$E2E_CACHE/bin"
# One run at a time per cache: scratch directories and cache writes are not shared.
exec 9>"$E2E_CACHE/.lock"
if ! flock -n 9; then
  e2e_log "waiting for another hack/e2e.sh on $E2E_CACHE (make test's --prepare, or a run of yours)"
  flock -w 3600 9 || die "another hack/e2e.sh is still running on $E2E_CACHE after an hour"
fi
for stale in "$E2E_CACHE"/work/run.*; do
  # A scratch directory left by a killed run; its mounts died with its namespace.
  if [[ -d $stale ]] && ! grep -qF " $stale/" /proc/self/mountinfo; then rm -rf "$stale"; fi
done

# --- the rootfs --------------------------------------------------------------------
t=$SECONDS
rootfs_tarball trixie-podman trixie \
  "podman runc busybox-static golang-go golang-github-container-orchestrated-devices-container-device-interface-dev docker.io docker-cli containerd"
rootfs_time="$((SECONDS - t))s ($( ((ROOTFS_BUILT)) && echo built || echo cached))"
tarball=$ROOTFS_TARBALL

# The systemd nodes of tests/e2e/test_systemd_slices.py, one per Debian release in
# E2E_SYSTEMD_RELEASES: systemd-container gives the systemd-nspawn that boots it (nothing
# is installed on the machine), openssh-server the role's connection, python3-apt the
# role's package task. The package names are the same in bookworm and trixie.
systemd_packages="systemd systemd-sysv systemd-container dbus python3 python3-apt python3-cryptography python3-yaml openssh-server"
# Trixie's node also runs Slurm for tests/e2e/test_slurm.py (slurmctld, slurmd, srun and
# sbatch, munge); slurmctld and slurmd do not start without /etc/slurm/slurm.conf, which only
# that test writes (slurmd through a drop-in of tests/e2e/systemd/bcd_systemd.py), so the
# slices tests boot the same tree with no Slurm daemon but munged running.
slurm_packages="munge slurmctld slurmd slurm-client"
systemd_tarballs=() systemd_rootfs_times=()
for release in ${E2E_SYSTEMD_RELEASES:-bookworm trixie}; do
  [[ $release =~ ^[a-z]+$ ]] || die "E2E_SYSTEMD_RELEASES: $release is not a Debian release name"
  t=$SECONDS
  packages=$systemd_packages
  [[ $release == trixie ]] && packages+=" $slurm_packages"
  rootfs_tarball "$release-systemd" "$release" "$packages"
  systemd_rootfs_times+=("$release $((SECONDS - t))s ($( ((ROOTFS_BUILT)) && echo built || echo cached))")
  systemd_tarballs+=("$release=$ROOTFS_TARBALL")
done
# "bookworm=/path trixie=/path": tests/e2e/systemd/bcd_systemd.py boots one node per entry.
export BCD_E2E_SYSTEMD_TARBALLS="${systemd_tarballs[*]}"

work=$(mktemp -d "$E2E_CACHE/work/run.XXXXXX")
# shellcheck disable=SC2317  # run by the EXIT trap
cleanup() {
  if [[ ${E2E_KEEP:-0} == 1 ]]; then
    e2e_log "kept the scratch directory $work (the fakehw nodes are in $work/nodes)"
  elif ! grep -qF " $work/" /proc/self/mountinfo; then
    rm -rf "$work"
  fi
}
trap cleanup EXIT
# tests/e2e/lib/in_podman_rootfs.sh unpacks the rootfs on a tmpfs at $work/rootfs, in a private
# mount namespace, prepares podman in it, then runs the command given.
in_rootfs() {
  unshare -m --propagation private -- bash tests/e2e/lib/in_podman_rootfs.sh "$tarball" "$work" "$@"
}

# --- the checker on the reference CDI library ---------------------------------------
t=$SECONDS
checker_key=$({ cat tests/e2e/cdicheck/main.go; basename "$tarball"; } | sha256sum | cut -c1-12)
checker=$E2E_CACHE/bin/cdicheck-$checker_key
checker_state=cached
if [[ ! -x $checker || ${E2E_REBUILD:-0} == 1 ]]; then
  e2e_log "building tests/e2e/cdicheck against Debian's CDI Go library"
  # shellcheck disable=SC2016  # expanded by the inner shell
  in_rootfs bash -euo pipefail -c '
    root=$1 src=$2 dest=$3
    go_env() {
      chroot "$root" /usr/bin/env -i PATH=/usr/bin:/bin HOME=/tmp GO111MODULE=off GOPATH=/usr/share/gocode \
        GOCACHE=/tmp/gocache GOTELEMETRY=off CGO_ENABLED=0 "$@"
    }
    mkdir -p "$root/tmp/cdicheck"
    cp "$src" "$root/tmp/cdicheck/main.go"
    unformatted=$(go_env gofmt -l /tmp/cdicheck/main.go)
    if [[ -n $unformatted ]]; then echo "e2e: tests/e2e/cdicheck/main.go is not gofmt-formatted" >&2; exit 1; fi
    go_env go build -trimpath -ldflags="-s -w" -o /tmp/cdicheck/cdicheck /tmp/cdicheck/main.go
    cp "$root/tmp/cdicheck/cdicheck" "$dest"
  ' build-cdicheck "$work/rootfs" "$repo/tests/e2e/cdicheck/main.go" "$work/cdicheck"
  rm -f "$E2E_CACHE"/bin/cdicheck-*
  mv "$work/cdicheck" "$checker"
  checker_state=built
fi
checker_time="$((SECONDS - t))s ($checker_state)"
if ((prepare)); then
  systemd_rootfs_time=$(printf '%s, ' "${systemd_rootfs_times[@]}")
  e2e_log "prepared: rootfs $rootfs_time, systemd rootfs ${systemd_rootfs_time%, }, checker $checker_time;" \
    "total $((SECONDS - started))s"
  exit 0
fi

# --- the suite ---------------------------------------------------------------------
t=$SECONDS
status=0
# shellcheck disable=SC2016  # expanded by the inner shell
in_rootfs bash -euo pipefail -c '
  root=$1 work=$2 checker=$3
  shift 3
  install -m 0755 "$checker" "$root/usr/local/bin/cdicheck"
  exec env BCD_E2E_ROOTFS="$root" BCD_E2E_WORK="$work" .venv/bin/python -m pytest tests/e2e -p no:cacheprovider -v "$@"
' run-suite "$work/rootfs" "$work" "$checker" "$@" || status=$?
suite_time="$((SECONDS - t))s"

systemd_rootfs_time=$(printf '%s, ' "${systemd_rootfs_times[@]}")
e2e_log "rootfs $rootfs_time, systemd rootfs ${systemd_rootfs_time%, }, checker $checker_time," \
  "suite (unpack and boot included) $suite_time;" \
  "total $((SECONDS - started))s"
if ((status)); then
  e2e_log "FAILED (pytest exit status $status); E2E_KEEP=1 keeps the scratch directory"
fi
exit "$status"
