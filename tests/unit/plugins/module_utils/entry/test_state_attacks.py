# -*- coding: utf-8 -*-
# Copyright: contributors to bcd.devices
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""The account's state files against root's commands (issue 22, item 3).

A fakehw node whose state directory belongs to a throwaway account (the "attacker", as the
``bcd`` account of the role's nodes), with every state file a pass leaves there. The attacker
plants one file — a FIFO, a link to ``/dev/zero``, JSON nested 100 000 levels deep, a
10 000-digit integer — and root runs each command that reads that file, ``bcd-holds`` and the
modules alike, each in a subprocess with a deadline. Each must end within it, with its
documented exit code and one line naming the file, never a traceback. Also: 200 000 planted
files do not slow a root pass down, the lock's timeout holds against a holder that never lets
go, and a stored input with hostile ``instances`` is refused.

Skipped unless run as root with ``useradd`` and ``/usr/bin/python3`` (CI runs as root).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import shutil
import tempfile
import time
from pathlib import Path

import pytest

from ansible_collections.bcd.devices.tests.unit.attackers import (  # noqa: F401 (fixture)  pylint: disable=unused-import
    attacker,
)
from ansible_collections.bcd.devices.tests.unit.attackers import ATTACKER_PYTHON, CAN_PLAY, CANNOT_PLAY, COLLECTIONS_PARENT, LAUNCHER
from ansible_collections.bcd.devices.tests.unit.conftest import GPU_A, GPU_B, GPU_C, open_to_all

if not CAN_PLAY:
    pytest.skip(CANNOT_PLAY, allow_module_level=True)

MODULE_LAUNCHER = r"""
import importlib, json, sys
sys.path.insert(0, sys.argv[1])
from ansible_collections.bcd.devices.tests.unit.module_args import patch_module_args
module = importlib.import_module("ansible_collections.bcd.devices.plugins.modules." + sys.argv[2])
with patch_module_args(json.loads(sys.argv[3])):
    module.main()
"""
DEADLINE = 60  # seconds a command may take; a FIFO read that blocks would take forever
STATE = "/var/lib/bcd"
HOLD_A1 = {"allocation_id": "a1", "reservation_id": "r1", "binding": "BINDING_HOLD", "devices": [{"id": GPU_B}]}
HOLD_A2 = {"allocation_id": "a2", "reservation_id": "r2", "binding": "BINDING_HOLD", "devices": [{"id": GPU_C}]}
SPEC_1 = {"generation": 1, "devices": [HOLD_A1]}
SPEC_2 = {"generation": 2, "devices": [HOLD_A1, HOLD_A2]}  # binds a2: journals, signs, reads events.seq

# Each command root runs, and the state files it reads.
COMMANDS = {
    "status": ["status"],
    "busy": ["busy", GPU_C, "--lock-timeout", "5"],
    "metrics": ["metrics"],
    "doctor": ["doctor"],
    "events": ["events"],
    "events-ack": ["events", "--ack-through", "1"],
    "converge-stored": ["converge", "--stored"],
    "converge-spec": ["converge", "--spec", "{spec}"],
    "mig-boot": ["mig-layout", "--boot", "--lock-timeout", "5"],
}
LOADS = ("status", "busy", "metrics", "doctor", "events-ack", "converge-stored", "converge-spec")
READS = {
    "ledger.json": LOADS,
    "releasing.json": LOADS,
    "maintenance.json": LOADS,
    "health.json": LOADS,
    "events.jsonl": LOADS + ("events",),
    "events.seq": ("events-ack", "converge-spec"),
    "node.key": ("status", "metrics", "doctor", "converge-spec"),
    "nodespec.json": ("status", "doctor", "converge-stored", "converge-spec"),
    "last-pass.json": ("metrics", "doctor"),
    "lock": ("busy", "events", "events-ack", "converge-stored", "converge-spec"),
    "mig-layout.json": ("mig-boot",),
}
BIG = b"7" * 10000


def deep(name, journal):
    content = b"[" * 100000 + b"]" * 100000
    return journal + content + b"\n" if name == "events.jsonl" else content


def big_integer(name, journal):
    """A 10 000-digit integer where the file has a number (past the cap where it has none)."""
    return {
        "ledger.json": b'{"journal_seq": %s}' % BIG,
        "releasing.json": b'{"releases": {"a9": {"device_ids": [], "generation": %s, "since": '
                          b'"2026-01-01T00:00:00Z"}}}' % BIG,
        "nodespec.json": b'{"generation": %s, "devices": []}' % BIG,
        "last-pass.json": b'{"state": "CONVERGED", "finished": %s, "duration_seconds": 1}' % BIG,
        "events.jsonl": journal + b'{"seq": %s, "type": "AllocationFailed", "body": {}}\n' % BIG,
        "maintenance.json": b'{"%s": {"reason": "x", "since": %s}}' % (GPU_B.encode(), BIG),
        "health.json": b'{"%s": %s}' % (GPU_B.encode(), BIG),
    }.get(name, BIG + BIG)  # events.seq, node.key: over their caps (64 bytes, 16 KiB)


ATTACKS = ("fifo", "dev-zero", "deep", "big-integer")
CASES = [(name, attack, command) for name in sorted(READS) for attack in ATTACKS for command in READS[name]
         if name != "lock" or attack in ("fifo", "dev-zero")]


class World:
    """A fakehw node, its state directory the attacker's, holding every state file a pass leaves."""

    def __init__(self, make_node, attacker):
        self.node = make_node(vendor="mig")
        self.attacker = attacker
        self.state = self.node.state()
        os.makedirs(self.state, mode=0o700)
        attacker.chown(self.state)
        open_to_all(self.state)
        self.specs = {}
        for spec in (SPEC_1, SPEC_2):
            self.specs[spec["generation"]] = os.path.join(self.node.base, "spec-%d.json" % spec["generation"])
            with open(self.specs[spec["generation"]], "w") as handle:
                json.dump(spec, handle)

    def root_cli(self, *argv, timeout=DEADLINE):
        """``bcd-holds ARGV`` as root: ``(exit code, stdout, stderr, seconds)``; a hang fails the test."""
        env = dict((key, value) for key, value in os.environ.items() if key != "JOURNAL_STREAM")
        started = time.monotonic()
        try:
            proc = subprocess.run([sys.executable, "-I", "-c", LAUNCHER, COLLECTIONS_PARENT] + list(argv)
                                  + ["--root", self.node.root, "--fakehw", self.node.fakehw], cwd="/", env=env,
                                  timeout=timeout, capture_output=True, check=False)
        except subprocess.TimeoutExpired:
            pytest.fail("bcd-holds %s did not end within %ds" % (" ".join(argv), timeout))
        return proc.returncode, proc.stdout.decode(), proc.stderr.decode(), time.monotonic() - started

    def command(self, name):
        return [part.format(spec=self.specs[2]) for part in COMMANDS[name]]

    def module(self, name, **args):
        """The module ``name`` run as root: ``(exit code, result, stderr)``."""
        args = dict(args, root=self.node.root, fakehw=self.node.fakehw, state_dir=STATE)
        try:
            proc = subprocess.run([sys.executable, "-I", "-c", MODULE_LAUNCHER, COLLECTIONS_PARENT, name, json.dumps(args)],
                                  cwd="/", timeout=DEADLINE, capture_output=True, check=False)
        except subprocess.TimeoutExpired:
            pytest.fail("bcd.devices.%s did not end within %ds" % (name, DEADLINE))
        return proc.returncode, json.loads(proc.stdout.decode()), proc.stderr.decode()

    def populate(self):
        """Every state file: a pass binds a1 (ledger, journal, key, stored input, last pass, lock);
        the others as an operator and a Kubernetes release would leave them."""
        code, _out, err, _seconds = self.root_cli("converge", "--spec", self.specs[1])
        assert code == 0, err
        self.plant("maintenance.json", b'{"%s": {"reason": "firmware", "since": 1}}' % GPU_A.encode())
        self.plant("health.json", b"{}")
        self.plant("releasing.json", b'{"releases": {}}')
        self.plant("events.seq", b"0\n")
        self.plant("mig-layout.json", b'{"version": 1, "boot_id": "", "gpus": {}}')
        for name in READS:
            assert os.path.isfile(self.path(name)), name
        return self

    def path(self, name):
        return os.path.join(self.state, name)

    def read(self, name):
        with open(self.path(name), "rb") as handle:
            return handle.read()

    def plant(self, name, content=None, fifo=False, link=None):
        """What the attacker leaves at ``name`` (made by root here, then handed to the attacker: the same)."""
        path = self.path(name)
        if os.path.lexists(path):
            os.unlink(path)
        if fifo:
            os.mkfifo(path, 0o600)
        elif link is not None:
            os.symlink(link, path)
        else:
            with open(path, "wb") as handle:
                handle.write(content)
        self.attacker.chown(path)

    def attack(self, name, attack):
        journal = self.read("events.jsonl")
        if attack == "fifo":
            self.plant(name, fifo=True)
        elif attack == "dev-zero":
            self.plant(name, link="/dev/zero")
        elif attack == "deep":
            self.plant(name, deep(name, journal))
        else:
            self.plant(name, big_integer(name, journal))


@pytest.fixture
def tmp_path():
    """The nodes of this file in a directory of their own, not under pytest's: pytest makes its base 0700
    again whenever another session starts, and the attacker must traverse down to the state directory."""
    path = tempfile.mkdtemp(prefix="bcd-state-attacks-")
    os.chmod(path, 0o711)
    yield Path(path)
    shutil.rmtree(path, ignore_errors=True)


@pytest.fixture
def world(make_node, attacker):
    return World(make_node, attacker).populate()


def one_line_naming(text, name):
    lines = text.strip().splitlines()
    assert len(lines) == 1, text
    assert "%s/%s" % (STATE, name) in lines[0], text
    return lines[0]


@pytest.mark.parametrize("name, attack, command", CASES)
def test_a_planted_state_file_is_one_line_and_an_exit_code_never_a_hang_or_a_traceback(world, name, attack, command):
    world.attack(name, attack)
    code, out, err, seconds = world.root_cli(*world.command(command))
    assert "Traceback" not in out + err
    assert seconds < 30
    if command == "converge-spec" and name == "nodespec.json":
        # the pass's input is the spec: the stored one is replaced (renamed over, never opened)
        assert code == 0, err
        assert json.loads(world.read(name))["generation"] == 2
    elif command == "doctor":
        assert code == 1 and err == "", err  # doctor's failed check
        (line,) = [line for line in out.splitlines() if line.split()[:2] == ["ERROR", "state"]]
        one_line_naming(line, name)
    else:
        assert code == 2, (code, out, err)  # busy too: 2, never Python's 1
        assert one_line_naming(err, name).startswith("ERROR: ")


def test_every_file_root_reads_is_attacked():
    from ansible_collections.bcd.devices.plugins.module_utils.node.state_files import FILE_CAPS, NEVER_READ
    assert sorted(name for name, cap in FILE_CAPS.items() if cap != NEVER_READ or name == "lock") == sorted(READS)


def test_a_fifo_as_the_unreadable_marker_is_never_opened(world):
    world.plant("releasing.unreadable", fifo=True)
    code, out, err, _seconds = world.root_cli("busy", GPU_C, "--json")
    assert code == 3, err  # the marker claims every GPU until the kube side is known
    assert json.loads(out)[0]["busy"] is True


@pytest.mark.parametrize("module, args, name, attack", [
    (module, args, name, attack)
    for module, args in (
        ("holds", {"generation": 2, "devices": SPEC_2["devices"], "lock_timeout": 5}),
        ("holds_info", {}),
        ("events", {}),
        ("gpu_busy", {"gpus": [GPU_C], "lock_timeout": 5}),
        ("maintenance", {"gpus": [GPU_C], "state": "present", "reason": "reset", "lock_timeout": 5}),
    )
    for name, attack in (("ledger.json", "fifo"), ("lock", "fifo"), ("events.jsonl", "deep"),
                         ("maintenance.json", "big-integer"), ("releasing.json", "dev-zero"))
    if not (module == "holds_info" and name == "lock") and not (module == "events" and name in (
        "ledger.json", "maintenance.json", "releasing.json"))
])
def test_the_modules_fail_with_one_line_naming_the_file(world, module, args, name, attack):
    world.attack(name, attack)
    code, result, err = world.module(module, **args)
    assert "Traceback" not in err
    assert code == 1 and result["failed"] is True, result
    assert "\n" not in result["msg"] and "%s/%s" % (STATE, name) in result["msg"], result["msg"]


def test_a_lock_held_forever_costs_its_timeout_and_no_more(world):
    holder = subprocess.Popen([ATTACKER_PYTHON, "-I", "-c", (
        "import fcntl, os, sys, time\n"
        "fd = os.open(sys.argv[1], os.O_RDWR)\n"
        "fcntl.flock(fd, fcntl.LOCK_EX)\n"
        "print('held', flush=True)\n"
        "time.sleep(120)\n"), world.path("lock")], preexec_fn=world.attacker.demote, stdout=subprocess.PIPE)
    try:
        assert holder.stdout.readline() == b"held\n"
        code, _out, err, seconds = world.root_cli("busy", GPU_C, "--lock-timeout", "1")
        assert code == 2 and seconds < 15, (code, err, seconds)
        assert one_line_naming(err, "lock").startswith("ERROR: another pass holds the lock")
    finally:
        holder.kill()
        holder.wait(10)


@pytest.mark.parametrize("instances, problem", [
    (["vm"], "instances[0] must be a mapping with instance_id and gpus, not a string"),
    ([1], "instances[0] must be a mapping with instance_id and gpus, not an integer"),
    ([{"gpus": [GPU_B]}], "instances[0].instance_id must be text, not null"),
    ([{"instance_id": 5}], "instances[0].instance_id must be text, not an integer"),
    ([{"instance_id": "vm", "gpus": GPU_B}], "instances[0].gpus must be a list of GPU ids, not a string"),
    ([{"instance_id": "vm", "gpus": {"a": 1}}], "instances[0].gpus must be a list of GPU ids, not a mapping"),
    ([{"instance_id": "vm", "gpus": [[GPU_B]]}], "instances[0].gpus[0] must be a GPU id (text), not a list"),
    ([{"instance_id": "vm", "gpus": [{"a": 1}]}], "instances[0].gpus[0] must be a GPU id (text), not a mapping"),
    ([{"instance_id": "vm", "os": "x"}], "instances[0]: unknown key 'os'"),
    ({"vm": [GPU_B]}, "instances must be a list, not a mapping"),
])
def test_hostile_instances_are_refused_in_a_stored_input_and_in_a_spec(world, instances, problem):
    stored = dict(SPEC_1, instances=instances)
    world.plant("nodespec.json", json.dumps(stored).encode())
    for argv in (["converge", "--stored"], ["status"]):
        code, out, err, _seconds = world.root_cli(*argv)
        assert code == 2 and "Traceback" not in out + err, err
        assert one_line_naming(err, "nodespec.json").endswith("nodespec.json: %s" % problem)
    spec = os.path.join(world.node.base, "hostile.json")
    with open(spec, "w") as handle:
        json.dump(dict(SPEC_2, instances=instances), handle)
    code, out, err, _seconds = world.root_cli("converge", "--spec", spec)
    assert code == 2 and "Traceback" not in out + err, err
    assert err.strip() == "ERROR: cannot read the spec %s: %s" % (spec, problem)


def test_good_instances_still_claim_their_gpus(world):
    world.plant("nodespec.json", json.dumps(dict(SPEC_2, instances=[{"instance_id": "vm1", "gpus": [GPU_C]}])).encode())
    code, out, err, _seconds = world.root_cli("converge", "--stored", "--json")
    assert code == 0, err
    assert "a2" in json.loads(out)["section"]["message"]  # refused: GPU_C is the VM's


def test_two_hundred_thousand_planted_files_do_not_slow_a_root_pass(world):
    def timed():
        best = None
        for _try in range(2):
            code, _out, err, seconds = world.root_cli("converge", "--stored")
            assert code == 0, err
            best = seconds if best is None else min(best, seconds)
        return best

    before = timed()
    world.attacker.python("import os, sys\n"
                          "for number in range(200000):\n"
                          "    os.close(os.open(os.path.join(sys.argv[1], 'junk-%d' % number), "
                          "os.O_CREAT | os.O_WRONLY, 0o600))\n", world.state, timeout=120)
    after = timed()
    assert after < 3 * before + 1.0, (before, after)
    code, _out, err, seconds = world.root_cli("status")
    assert code == 0 and seconds < 3 * before + 1.0, (err, seconds)


def test_a_lock_and_journal_root_creates_belong_to_the_account(world):
    for name in ("lock", "events.jsonl", "events.seq", "ledger.json"):
        os.unlink(world.path(name))
    code, _out, err, _seconds = world.root_cli("converge", "--spec", world.specs[2])
    assert code == 0, err
    for name in ("lock", "events.jsonl"):
        info = os.lstat(world.path(name))
        assert (info.st_uid, info.st_mode & 0o7777) == (world.attacker.uid, 0o600), name
