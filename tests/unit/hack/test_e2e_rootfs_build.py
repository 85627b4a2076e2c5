# -*- coding: utf-8 -*-
# Copyright: contributors to bcd.devices
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""A failed e2e rootfs build removes its tree and nothing else (tests/e2e/lib/rootfs.sh).

debootstrap mounts /proc and /sys in the tree it builds and, in a container, binds the host's /dev
entries into it; killed, it leaves them mounted. Run in the host's mount namespace, the build's
``rm -rf`` of its tree then deleted whatever those binds showed: the host's /dev/shm, for one. Here a
stand-in debootstrap binds a directory of the test's own into the tree, as debootstrap binds
/dev/shm, and fails without unmounting it."""

from __future__ import annotations

import os
import shutil
import subprocess
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[3]

pytestmark = pytest.mark.skipif(os.geteuid() != 0 or shutil.which("unshare") is None,
                                reason="mount namespaces and bind mounts need root (CI runs as root)")

FAKE_DEBOOTSTRAP = """#!/bin/sh
# debootstrap --variant=minbase SUITE TARGET MIRROR, failing halfway with the host's /dev/shm bound in
target=$3
mkdir -p "$target/dev/shm"
readlink /proc/self/ns/mnt > "$BCD_TEST_RECORD"
mount --bind "$BCD_TEST_HOST_DIR" "$target/dev/shm"
echo "E: Couldn't download packages" >&2
exit 1
"""


def mounted_under(path):
    with open("/proc/self/mountinfo", encoding="utf-8") as handle:
        return [line.split()[4] for line in handle if line.split()[4].startswith(str(path))]


@pytest.fixture
def build(tmp_path):
    tools = tmp_path / "bin"
    tools.mkdir()
    (tools / "debootstrap").write_text(FAKE_DEBOOTSTRAP)
    (tools / "debootstrap").chmod(0o755)
    host = tmp_path / "host-dev-shm"
    host.mkdir()
    (host / "precious").write_text("a file of the host's")
    cache = tmp_path / "cache"
    yield tools, host, cache, tmp_path / "ns"
    for point in reversed(mounted_under(tmp_path)):  # only after a failure of what is tested
        subprocess.run(["umount", "-l", point], check=False)


def run_build(tools, host, cache, record):
    env = dict(os.environ, PATH="%s:%s" % (tools, os.environ["PATH"]), E2E_CACHE=str(cache),
               E2E_DEBIAN_MIRROR="http://archive.example.test/debian", BCD_TEST_HOST_DIR=str(host),
               BCD_TEST_RECORD=str(record))
    return subprocess.run(["bash", "-c", "set -euo pipefail; source tests/e2e/lib/rootfs.sh; "
                           "rootfs_tarball probe trixie 'busybox-static'"],
                          cwd=str(REPO), env=env, capture_output=True, text=True, timeout=60, check=False)


def test_a_failed_build_removes_its_tree_and_leaves_the_hosts_files_and_mounts_alone(build):
    tools, host, cache, record = build
    done = run_build(tools, host, cache, record)
    assert done.returncode != 0 and "debootstrap trixie failed" in done.stderr
    assert (host / "precious").read_text() == "a file of the host's"
    assert mounted_under(cache) == []
    assert record.read_text().strip() != os.readlink("/proc/self/ns/mnt")  # debootstrap had a namespace of its own
    assert list((cache / "rootfs").glob(".build-*")) == []


def test_a_build_a_killed_run_left_is_swept_before_the_next_one(build):
    tools, host, cache, record = build
    stale = cache / "rootfs" / ".build-probe.abc123"
    (stale / "root" / "etc").mkdir(parents=True)
    other = cache / "rootfs" / ".build-other.def456"  # another rootfs's: not this build's to remove
    other.mkdir()
    run_build(tools, host, cache, record)
    assert not stale.exists() and other.is_dir()
