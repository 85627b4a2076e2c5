# -*- coding: utf-8 -*-
# Copyright: contributors to bcd.devices
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""The root wrapper of docs/slices-and-admission.md ("A wrapper and systemd-run"), run as the page gives it.

The wrapper is copied verbatim from the page and run as root with an env file an attacker wrote
directly (bypassing the env policy): a ``PATH`` to a directory of its own ``systemd-run``, ``grep``
and ``sh``, ``LD_PRELOAD``, ``BASH_ENV``, ``ENV``, ``IFS``, ``PS4`` and a ``$(...)`` value. There is no
systemd here, so a recording stand-in is bind-mounted over ``/usr/bin/systemd-run`` in a private
mount namespace (``unshare -m``): nothing outside the test sees it. The attacker's programs must
never run, no line of the file may reach the environment the wrapper gives ``systemd-run``, and
``/usr/bin/systemd-run`` must get the hold's ``EnvironmentFile=`` and slice.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[3]
PAGE = REPO / "docs" / "slices-and-admission.md"
SYSTEMD_RUN = "/usr/bin/systemd-run"
CLEAN_ENV = {"PATH": "/usr/sbin:/usr/bin:/sbin:/bin", "LANG": "C"}


def wrapper_source():
    text = PAGE.read_text(encoding="utf-8")
    section = text.split("### A wrapper and systemd-run\n", 1)[1].split("\n### ", 1)[0]
    blocks = re.findall(r"```sh\n(.*?)```", section, re.S)
    assert blocks, "no sh block in the section"
    assert blocks[0].startswith("#!/bin/sh\n")
    return blocks[0]


def unavailable():
    if os.geteuid() != 0:
        return "needs root (a bind mount in a private mount namespace)"
    if not shutil.which("unshare") or not os.path.exists(SYSTEMD_RUN):
        return "needs unshare and a %s to stand in for" % SYSTEMD_RUN
    probe = subprocess.run(["unshare", "-m", "true"], stdout=subprocess.PIPE, stderr=subprocess.STDOUT, check=False)
    if probe.returncode != 0:
        return "unshare -m is not allowed here: %s" % probe.stdout.decode(errors="replace").strip()
    return None


pytestmark = pytest.mark.skipif(unavailable() is not None, reason=str(unavailable()))


class World:
    """A node root with one hold's env file, the wrapper, a stand-in and an attacker's directory."""

    def __init__(self, base):
        self.base = base
        self.root = base / "node"
        self.allocations = self.root / "run" / "bcd" / "allocations"
        self.allocations.mkdir(parents=True)
        self.wrapper = base / "bcd-run"
        self.wrapper.write_text(wrapper_source())
        self.wrapper.chmod(0o755)
        self.record = base / "record.json"
        self.marker = base / "attacker-ran"
        self.stub = base / "systemd-run-stub"
        # the stand-in records its argv and environment; it starts nothing
        self.stub.write_text("#!/usr/bin/python3 -I\nimport json, os, sys\n"
                             "json.dump({'argv': sys.argv[1:], 'env': dict(os.environ)}, open(%r, 'w'))\n"
                             "print(' '.join(['/usr/bin/systemd-run'] + sys.argv[1:]))\n" % str(self.record))
        self.stub.chmod(0o755)
        self.evil = base / "evil"
        (self.evil / "bin").mkdir(parents=True)
        attacker = "#!/bin/sh\necho \"$0 $*\" >> %s\n" % self.marker
        for name in ("systemd-run", "grep", "sh", "env", "cat", "test", "printf", "echo"):
            path = self.evil / "bin" / name
            path.write_text(attacker)
            path.chmod(0o755)
        (self.evil / "rc").write_text(attacker.split("\n", 1)[1])

    def env_file(self, allocation_id, lines):
        path = self.allocations / ("%s.env" % allocation_id)
        path.write_text("".join(line + "\n" for line in lines))
        return path

    def hostile(self, allocation_id, sliced=True):
        lines = ["BCD_ALLOCATION_ID=%s" % allocation_id]
        if sliced:
            lines.append("BCD_CGROUP_PARENT=bcd-alloc-%s.slice" % allocation_id)
        lines += ["BCD_RESERVATION_ID=rsv_1", "NVIDIA_VISIBLE_DEVICES=GPU-5f1c2a90-0001-4000-8000-000000000001",
                  "PATH=%s/bin" % self.evil, "LD_PRELOAD=%s/evil.so" % self.evil, "BASH_ENV=%s/rc" % self.evil,
                  "ENV=%s/rc" % self.evil, "IFS=/", "PS4=$(%s/bin/sh)" % self.evil, "SHELLOPTS=xtrace",
                  "RUN_NOTE=nightly run; $(touch %s)" % self.marker]
        return self.env_file(allocation_id, lines)

    def run(self, *argv):
        if self.record.exists():
            self.record.unlink()
        script = 'mount --bind "$1" %s && shift && exec "$@"' % SYSTEMD_RUN
        env = dict(CLEAN_ENV, BCD_ROOT=str(self.root))
        return subprocess.run(["unshare", "-m", "/bin/sh", "-c", script, "sh", str(self.stub), str(self.wrapper)]
                              + list(argv), env=env, capture_output=True, check=False,
                              timeout=30, cwd=str(self.base))

    def recorded(self):
        return json.loads(self.record.read_text()) if self.record.exists() else None


@pytest.fixture
def world(tmp_path):
    return World(tmp_path)


def test_the_page_gives_a_wrapper_that_exports_nothing_from_the_file():
    source = wrapper_source()
    code = "\n".join(line for line in source.splitlines() if not line.lstrip().startswith("#"))
    assert "export PATH" in code and not re.search(r"export\s+\"?\$", code)
    assert not re.search(r"(^|\s)(\.|source|eval)\s", code)
    assert "/usr/bin/systemd-run" in code and "EnvironmentFile=" in code and "--scope" not in code


def test_an_attackers_env_file_runs_none_of_its_programs_and_reaches_no_root_shell(world):
    env_file = world.hostile("alloc_train")
    proc = world.run("alloc_train", "sh", "-c", 'echo "RUN_NOTE=$RUN_NOTE"')
    assert proc.returncode == 0, proc.stderr
    assert proc.stderr == b""  # an exported LD_PRELOAD would have ld.so complain in every program started
    assert not world.marker.exists(), world.marker.read_text()
    recorded = world.recorded()
    argv = recorded["argv"]
    assert argv[argv.index("--") + 1:] == ["sh", "-c", 'echo "RUN_NOTE=$RUN_NOTE"']
    assert "--slice=bcd-alloc-alloc_train.slice" in argv
    assert argv[argv.index("-p") + 1] == "EnvironmentFile=%s" % env_file
    assert "--wait" in argv and "--pipe" in argv and "--scope" not in argv
    assert [a for a in argv if a.startswith("--unit=bcd-run-alloc_train-")]
    # the environment systemd-run got is the caller's and the wrapper's own PATH, nothing of the file
    env = recorded["env"]
    for line in env_file.read_text().splitlines():
        key = line.split("=", 1)[0]
        assert key == "PATH" or key not in env, key
    assert env["PATH"] == "/usr/sbin:/usr/bin:/sbin:/bin"
    assert env["BCD_ROOT"] == str(world.root)
    assert proc.stdout.decode().startswith("/usr/bin/systemd-run --quiet --wait --pipe --collect --same-dir ")


def test_an_unsliced_hold_runs_without_a_slice(world):
    world.hostile("alloc_small", sliced=False)
    proc = world.run("alloc_small", "true")
    assert proc.returncode == 0, proc.stderr
    assert not [a for a in world.recorded()["argv"] if a.startswith("--slice")]
    assert not world.marker.exists()


@pytest.mark.parametrize("line", ["BCD_CGROUP_PARENT=system.slice", "BCD_CGROUP_PARENT=bcd-alloc-other.slice",
                                  "BCD_CGROUP_PARENT=bcd-alloc-alloc_x.slice --uid=0", " BCD_CGROUP_PARENT=x.slice"])
def test_a_slice_line_the_wrapper_did_not_build_is_not_used(world, line):
    world.env_file("alloc_x", ["BCD_ALLOCATION_ID=alloc_x", line])
    proc = world.run("alloc_x", "true")
    assert proc.returncode == 0, proc.stderr
    assert not [a for a in world.recorded()["argv"] if a.startswith("--slice")]


def test_the_workloads_user_is_passed_when_named(world):
    world.hostile("alloc_u")
    env = dict(CLEAN_ENV, BCD_ROOT=str(world.root), BCD_RUN_USER="nobody")
    script = 'mount --bind "$1" %s && shift && exec "$@"' % SYSTEMD_RUN
    proc = subprocess.run(["unshare", "-m", "/bin/sh", "-c", script, "sh", str(world.stub), str(world.wrapper),
                           "alloc_u", "id"], env=env, capture_output=True, check=False,
                          timeout=30)
    assert proc.returncode == 0, proc.stderr
    assert "--uid=nobody" in world.recorded()["argv"]


@pytest.mark.parametrize("argv, code, message", [
    (["alloc_gone", "true"], 1, "bcd-run: no hold alloc_gone ({root}/run/bcd/allocations/alloc_gone.env)\n"),
    (["../../etc/x", "true"], 2, "bcd-run: not an allocation id (A-Z, a-z, 0-9, _)\n"),
    (["a b", "true"], 2, "bcd-run: not an allocation id (A-Z, a-z, 0-9, _)\n"),
    (["", "true"], 2, "bcd-run: not an allocation id (A-Z, a-z, 0-9, _)\n"),
    (["alloc_train"], 2, "usage: bcd-run ALLOCATION_ID COMMAND [ARG...]\n"),
])
def test_a_bad_call_starts_nothing(world, argv, code, message):
    world.hostile("alloc_train")
    proc = world.run(*argv)
    assert (proc.returncode, proc.stderr.decode()) == (code, message.format(root=world.root))
    assert world.recorded() is None and not world.marker.exists()
