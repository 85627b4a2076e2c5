# -*- coding: utf-8 -*-
# Copyright: contributors to bcd.devices
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""Quotas on what the root helper creates (docs/security.md, "Quotas on what root creates").

On 0.2.0 an account the helper serves could have root leave about 100 files a second in
``/etc/cdi``: ``hold.write`` for fresh allocation ids, and ``hold.write`` + ``hold.set_aside``
in a loop (1 987 specs and 1 243 damaged copies in 16 s), each loaded by every container
runtime on every start and never pruned. Those reproductions run here against a real helper
process (``tests/unit/attackers.py``'s ``World``), played by a throwaway account, with every loop bounded
in count and time: fresh holds past the quota are refused, damaged copies are pruned to a few
per allocation and a few dozen in all, a flood is rate limited and the limit lifts, and a whole
pass of the most holds a node may have still goes through. The parts (the pruning, the bounded
count) are tested on their own below, without root; the token bucket in test_limits.py.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import socket
import stat
import subprocess
import tempfile
import time
from pathlib import Path

import pytest

from ansible_collections.bcd.devices.plugins.module_utils.domain.input.assignment import MAX_ASSIGNMENTS, MAX_ATOMS, MAX_DEVICES
from ansible_collections.bcd.devices.plugins.module_utils.domain.cdi.hold_spec import DAMAGED_FILE_RE, SPEC_FILE_RE
from ansible_collections.bcd.devices.plugins.module_utils.entry.converge import run_pass
from ansible_collections.bcd.devices.plugins.module_utils.entry.helper.limits import RATE_BURST, RATE_PER_SECOND, RATED_OPS, RateLimit
from ansible_collections.bcd.devices.plugins.module_utils.entry.helper.reading import MAX_HOLD_FILES
from ansible_collections.bcd.devices.plugins.module_utils.node import writers as _writers
from ansible_collections.bcd.devices.plugins.module_utils.node.helper_client import HelperClient
from ansible_collections.bcd.devices.plugins.module_utils.node.hosts import FakeHwHost
from ansible_collections.bcd.devices.plugins.module_utils.node.writers import (
    ASIDE_PER_HOLD,
    ASIDE_TOTAL,
    TooManyEntries,
    count_node_files,
    set_aside,
)
from ansible_collections.bcd.devices.tests.unit.attackers import (  # noqa: F401 (fixtures)  pylint: disable=unused-import
    CAN_PLAY,
    CANNOT_PLAY,
    COLLECTIONS_PARENT,
    GPU_A,
    GPU_B,
    HARDWARE,
    LAUNCHER,
    attacker,
    target_untouched,
    world,
)
from ansible_collections.bcd.devices.tests.unit.attackers import hold as _hold
from ansible_collections.bcd.devices.tests.unit.builders import slot
from ansible_collections.bcd.devices.tests.unit.served_helper import ServedHelper

needs_an_account = pytest.mark.skipif(not CAN_PLAY, reason=CANNOT_PLAY)
_SLOTS = {}  # type: dict


def hold(allocation_id, **fields):
    """What the account asks the helper to write: each allocation on a slot of GPU_A of its own, since root
    refuses two allocations on one atom (issue 33) and these tests are about how many files root keeps."""
    number = _SLOTS.setdefault(allocation_id, len(_SLOTS))
    return _hold(allocation_id, devices=[{"id": "%s/s%d" % (GPU_A, number), "device_class": "gpu.slot"}], **fields)


# The account's loop: one connection per request, the requests one JSON object a line on stdin, until
# they run out, a reply's error contains STOP (when not empty) or SECONDS pass. A line "--" starts a tail:
# once stopped, the loop skips to it and sends the tail at once. Stdlib only.
LOOP = r"""
import json, socket, sys, time
path, stop, seconds = sys.argv[1], sys.argv[2], float(sys.argv[3])
replies, start, skipping = [], time.monotonic(), False
for line in sys.stdin:
    if line.strip() == "--":
        skipping = False
        continue
    if skipping:
        continue
    if time.monotonic() - start > seconds:
        break
    with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as connection:
        connection.settimeout(20)
        connection.connect(path)
        connection.sendall(line.encode())
        got = b""
        while b"\n" not in got:
            chunk = connection.recv(65536)
            if not chunk:
                break
            got += chunk
    reply = json.loads(got.decode().splitlines()[0])
    replies.append(reply)
    if stop and stop in (reply.get("error") or ""):
        stop, skipping = "", True
print(json.dumps({"replies": replies, "seconds": time.monotonic() - start}))
"""


def loop(world, requests, stop="", seconds=90, tail=()):
    """The account sends ``requests`` (one connection each) in one process, up to a reply whose error
    holds ``stop``, then ``tail`` at once; its replies, in order."""
    lines = [json.dumps(r) for r in requests] + (["--"] + [json.dumps(r) for r in tail] if tail else [])
    proc = subprocess.run(["/usr/bin/python3", "-c", LOOP, world.socket, stop, str(seconds)],
                          input="".join(line + "\n" for line in lines).encode(),
                          preexec_fn=world.attacker.demote, cwd="/", stdout=subprocess.PIPE,
                          stderr=subprocess.PIPE, timeout=seconds + 60, check=False)
    assert proc.returncode == 0, proc.stderr.decode()
    return json.loads(proc.stdout)["replies"]


def as_root(world, message):
    """One request from root itself (the test process), over the same socket."""
    with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as connection:
        connection.settimeout(20)
        connection.connect(world.socket)
        connection.sendall((json.dumps(message) + "\n").encode())
        return json.loads(connection.makefile("rb").readline())


def names(directory, pattern):
    if not os.path.isdir(directory):
        return []
    return sorted(name for name in os.listdir(directory) if pattern.fullmatch(name))


def root_owned_copies(world):
    """The damaged copies root keeps in /etc/cdi (regular files it owns), by allocation."""
    found = {}
    directory = world.node("/etc/cdi")
    for name in names(directory, DAMAGED_FILE_RE):
        info = os.lstat(os.path.join(directory, name))
        if stat.S_ISREG(info.st_mode) and info.st_uid == 0:
            found.setdefault(DAMAGED_FILE_RE.fullmatch(name).group(1), []).append(name)
    return found


# -- the reproductions, against a real helper process played by the account ----------------------

KINDS = {"cdi": ("/etc/cdi", SPEC_FILE_RE, "hold specs", "/etc/cdi/bcd-%s.json"),
         "allocation-env": ("/run/bcd/allocations", re.compile(r"^[A-Za-z0-9_]+\.env$"), "env files",
                            "/run/bcd/allocations/%s.env")}


@needs_an_account
@pytest.mark.parametrize("kind", sorted(KINDS))
def test_fresh_holds_past_the_quota_are_refused_and_what_root_keeps_stays_bounded(world, kind):
    directory, pattern, what, path = KINDS[kind]
    extra = 40
    replies = loop(world, [{"op": "hold.write", "kind": kind, "hold": hold("f%d" % i)}
                           for i in range(MAX_HOLD_FILES + extra)])
    assert len(replies) == MAX_HOLD_FILES + extra
    assert replies[:MAX_HOLD_FILES] == [{"ok": True}] * MAX_HOLD_FILES
    assert replies[MAX_HOLD_FILES:] == [
        {"ok": False, "error": "quota: %s already holds %d %s, the most a node may have (a pass honours at most %d "
                               "holds); %s is not created until one is removed"
                               % (directory, MAX_HOLD_FILES, what, MAX_ASSIGNMENTS, path % ("f%d" % i)),
         "retryable": True}  # once one is removed, it is written
        for i in range(MAX_HOLD_FILES, MAX_HOLD_FILES + extra)]
    kept = names(world.node(directory), pattern)
    assert len(kept) == MAX_HOLD_FILES and len(os.listdir(world.node(directory))) == MAX_HOLD_FILES
    assert all(os.lstat(os.path.join(world.node(directory), name)).st_uid == 0 for name in kept)
    # a hold's own file may always be written again; a fresh one takes a place another left
    assert world.request({"op": "hold.write", "kind": kind, "hold": hold("f0", generation=2)}) == {"ok": True}
    assert world.request({"op": "hold.write", "kind": kind, "hold": hold("n1")})["error"].startswith("quota: ")
    assert world.request({"op": "hold.remove", "kind": kind, "allocation_id": "f5"}) == {"ok": True}
    assert world.request({"op": "hold.write", "kind": kind, "hold": hold("n1")}) == {"ok": True}
    assert world.request({"op": "hold.write", "kind": kind, "hold": hold("n2")})["error"].startswith("quota: ")
    assert len(names(world.node(directory), pattern)) == MAX_HOLD_FILES
    # root counts the same: the quota is the node's, not a peer's
    assert as_root(world, {"op": "hold.write", "kind": kind, "hold": hold("n3")})["error"].startswith("quota: ")
    assert world.alive()


@needs_an_account
def test_write_and_set_aside_in_a_loop_keeps_a_few_copies_each_and_prunes_nothing_else(world):
    etc_cdi = world.node("/etc/cdi")
    os.makedirs(etc_cdi, mode=0o755)
    # planted beside them (by root: only root writes /etc/cdi): names of the pattern that are no copy
    # root made, and names not quite of the pattern; pruning must leave every one, and follow nothing
    link = os.path.join(etc_cdi, "bcd-a1.json.damaged-20000101T000000Z")
    os.symlink(world.target, link)
    foreign = os.path.join(etc_cdi, "bcd-a1.json.damaged-20000101T000001Z")
    Path(foreign).write_text("the account's")
    os.chown(foreign, world.attacker.uid, world.attacker.gid)
    os.mkdir(os.path.join(etc_cdi, "bcd-a1.json.damaged-20000101T000002Z"))
    near = ["bcd-a1.json.damaged-20000101T000003Z.keep", "bcd-a1.json.damaged-2000", "bcd-a1.json.damaged-"
            "20000101T000004Z-", "xbcd-a1.json.damaged-20000101T000005Z", "vendor.json"]
    for name in near:
        Path(etc_cdi, name).write_text("kept")
    planted = sorted(os.listdir(etc_cdi))

    rounds = 40
    requests = []
    for generation in range(1, rounds + 1):
        requests += [{"op": "hold.write", "kind": "cdi", "hold": hold("a1", generation=generation)},
                     {"op": "hold.set_aside", "allocation_id": "a1"}]
    replies = loop(world, requests)
    assert replies == [{"ok": True}] * len(requests)
    [copies] = list(root_owned_copies(world).values())
    assert len(copies) == ASIDE_PER_HOLD
    # the newest were kept: those of the last rounds
    generations = sorted(json.loads(Path(etc_cdi, name).read_text())["annotations"]["bcd.dev/generation"]
                         for name in copies)
    assert generations == [str(g) for g in range(rounds - ASIDE_PER_HOLD + 1, rounds + 1)]

    others = 2 * ASIDE_TOTAL
    requests = []
    for index in range(others):
        requests += [{"op": "hold.write", "kind": "cdi", "hold": hold("b%d" % index)},
                     {"op": "hold.set_aside", "allocation_id": "b%d" % index},
                     {"op": "hold.write", "kind": "cdi", "hold": hold("b%d" % index, generation=2)},
                     {"op": "hold.set_aside", "allocation_id": "b%d" % index}]
    assert loop(world, requests) == [{"ok": True}] * len(requests)
    kept = root_owned_copies(world)
    assert sum(len(copies) for copies in kept.values()) == ASIDE_TOTAL
    assert max(len(copies) for copies in kept.values()) <= ASIDE_PER_HOLD
    # /etc/cdi holds the planted entries and the bounded copies, nothing else: no spec is left live
    assert sorted(os.listdir(etc_cdi)) == sorted(planted + [n for copies in kept.values() for n in copies])
    assert os.path.islink(link) and os.readlink(link) == world.target and target_untouched(world)
    assert os.stat(foreign).st_uid == world.attacker.uid
    assert os.path.isdir(os.path.join(etc_cdi, "bcd-a1.json.damaged-20000101T000002Z"))
    assert all(Path(etc_cdi, name).read_text() == "kept" for name in near)
    assert world.alive()


@needs_an_account
def test_a_flood_is_rate_limited_cheaply_and_the_limit_lifts_after_the_window(world):
    flood = [{"op": "hold.set_aside", "allocation_id": "zz"}] * (RATE_BURST + 2000)
    # sent at once after the first refusal: what only shrinks what root keeps has a bucket of its own, and
    # fresh writes get at most the few tokens that trickle back meanwhile
    writes = 40
    tail = ([{"op": "hold.remove", "kind": "cdi", "allocation_id": "a1"}, {"op": "slice.stop", "allocation_id": "a1"}]
            + [{"op": "hold.write", "kind": "cdi", "hold": hold("t%d" % i)} for i in range(writes)])
    start = time.monotonic()
    replies = loop(world, flood, stop="rate limited", seconds=120, tail=tail)
    took = time.monotonic() - start
    flooded, shrinking, written = replies[:-len(tail)], replies[-len(tail):-writes], replies[-writes:]
    granted = [reply for reply in flooded if reply == {"ok": True}]
    # the burst, and what trickled back in while it was spent
    assert len(granted) == len(flooded) - 1 and RATE_BURST <= len(granted) <= RATE_BURST + took * RATE_PER_SECOND
    assert re.fullmatch(r"rate limited: uid %d asked for more than %d of %s at once, or more than %g a second; "
                        r"try again in 0\.[0-9]{2}s" % (world.attacker.uid, RATE_BURST, ", ".join(RATED_OPS),
                                                        RATE_PER_SECOND), flooded[-1]["error"]), flooded[-1]
    assert shrinking == [{"ok": True}, {"ok": True}]
    refused = [reply for reply in written if reply != {"ok": True}]
    assert all(reply["error"].startswith("rate limited: ") for reply in refused), refused
    assert len(refused) >= writes - 1 - took * RATE_PER_SECOND
    assert len(names(world.node("/etc/cdi"), SPEC_FILE_RE)) == writes - len(refused)
    # root never is limited
    assert as_root(world, {"op": "hold.write", "kind": "cdi", "hold": hold("r1")}) == {"ok": True}
    # logged once for the episode, not once a refusal
    assert world.helper_log().count("uid %d: rate limited" % world.attacker.uid) == 1
    time.sleep(3.0 / RATE_PER_SECOND)
    assert world.request({"op": "hold.write", "kind": "cdi", "hold": hold("a1")}) == {"ok": True}
    assert world.alive()


def cryptography_for_the_account(world):
    probe = world.attacker.run(["/usr/bin/python3", "-c", "import cryptography"])
    return probe.returncode == 0


@needs_an_account
def test_a_whole_pass_of_the_most_holds_goes_through_the_limits_and_the_next_is_a_no_op(world):
    if not cryptography_for_the_account(world):
        pytest.skip("the account's /usr/bin/python3 has no cryptography")
    spec = os.path.join(world.base, "spec.json")
    devices = [{"allocation_id": "s%d" % index, "reservation_id": "r%d" % index, "binding": "BINDING_HOLD",
                "devices": [{"id": "%s/s%d" % (GPU_A, index), "device_class": "gpu.slot"}],
                "limits": {"cpu_millis": 100}} for index in range(MAX_ASSIGNMENTS)]
    Path(spec).write_text(json.dumps({"generation": 1, "devices": devices}))
    os.chmod(spec, 0o644)

    def converge():
        proc = subprocess.run(["/usr/bin/python3", "-c", LAUNCHER, COLLECTIONS_PARENT, "converge", "--spec", spec,
                               "--root", world.root, "--fakehw", world.fakehw, "--json",
                               "--helper-socket", world.socket],
                              preexec_fn=world.attacker.demote, cwd="/", stdout=subprocess.PIPE,
                              stderr=subprocess.PIPE, timeout=300, check=False)
        assert proc.returncode == 0, proc.stderr.decode()[-2000:]
        return json.loads(proc.stdout)

    first = converge()
    assert first["section"]["state"] == "CONVERGED", first["section"]
    assert len(first["plan"]) == MAX_ASSIGNMENTS
    # three rated requests a hold (spec, env file, slice), all within the burst
    assert len(names(world.node("/etc/cdi"), SPEC_FILE_RE)) == MAX_ASSIGNMENTS
    assert len(os.listdir(world.node("/run/bcd/allocations"))) == MAX_ASSIGNMENTS
    assert len(os.listdir(world.node("/run/bcd/slices"))) == MAX_ASSIGNMENTS
    assert "rate limited" not in world.helper_log() and "quota" not in world.helper_log()
    second = converge()
    assert second["section"]["state"] == "CONVERGED" and not second["changed"]


# -- a pass through the helper retries what the limits refuse ----------------------------------

class InProcessHelper(ServedHelper):
    """``listen`` + ``serve`` in a thread, with the given ``RateLimit``; the pass runs in this process."""

    def __init__(self, base, limiter=None):
        self.root = os.path.join(base, "root")
        os.makedirs(self.root)
        self.fakehw = os.path.join(base, "fakehw.json")
        Path(self.fakehw).write_text(json.dumps(HARDWARE))
        super().__init__(FakeHwHost(self.root, self.fakehw), os.path.join(base, "run", "helper.sock"), limiter=limiter)

    def node(self, path):
        return os.path.join(self.root, path.lstrip("/"))

    def run_pass(self, generation, devices):
        host = FakeHwHost(self.root, self.fakehw, writer=_writers.HelperWriter(HelperClient(self.socket, timeout=10)))
        return run_pass(host, generation, devices, lock_timeout=5)


@pytest.fixture
def base():
    path = tempfile.mkdtemp(prefix="bcd-quota-test-")
    yield path
    shutil.rmtree(path, ignore_errors=True)


def test_a_pass_the_rate_limit_cuts_short_retries_and_converges_after_the_window(base, monkeypatch):
    now = [1000.0]  # the limiter's clock stands still within a pass: a slow machine must not refill the bucket
    helper = InProcessHelper(base, RateLimit(rate=20, burst=3, exempt=(), clock=lambda: now[0]))
    monkeypatch.setattr(os, "geteuid", lambda: 1000)  # the pass's side; the helper thread limits its real uid
    try:
        devices = [slot("a1", GPU_A + "/s0", reservation_id="r-a1"), slot("a2", GPU_A + "/s1", reservation_id="r-a2")]
        cut = helper.run_pass(1, devices)
        assert cut.section["state"] == "PROGRESSING" and cut.retry
        (error,) = cut.errors
        assert error.startswith("a2: the root helper refused hold.write: rate limited: uid %d asked for more than 3 "
                                % os.getuid()), error
        assert [e["body"]["allocation_id"] for e in cut.events if e["type"] == "AllocationBound"] == ["a1"]
        now[0] += 1.0  # the window passes: 20 tokens a second, 3 at most
        done = helper.run_pass(1, devices)
        assert done.section["state"] == "CONVERGED", done.section
        assert "a2" in [e["body"]["allocation_id"] for e in done.events if e["type"] == "AllocationBound"]
        assert os.path.exists(helper.node("/run/bcd/allocations/a2.env"))
    finally:
        helper.close()


def test_a_pass_the_quota_refuses_retries_and_converges_once_there_is_room(base, monkeypatch):
    helper = InProcessHelper(base)
    try:
        # specs in /var/run/cdi, which every runtime loads too and no pass of this section releases, naming
        # all the atoms a node's holds may (slots of GPU_B, written by root for "x<n>", as many a hold as a
        # request line carries)
        run_cdi = helper.node("/var/run/cdi")
        os.makedirs(run_cdi)
        each = MAX_DEVICES // 2
        for index in range(MAX_ATOMS // each):
            request = {"op": "hold.write", "kind": "cdi", "hold": _hold("x%d" % index, devices=[
                {"id": "%s/s%d" % (GPU_B, index * each + number), "device_class": "gpu.slot"}
                for number in range(each)])}
            assert HelperClient(helper.socket).request(request) == {"ok": True}
            os.rename(helper.node("/etc/cdi/bcd-x%d.json" % index), os.path.join(run_cdi, "bcd-x%d.json" % index))
        monkeypatch.setattr(os, "geteuid", lambda: 1000)
        devices = [slot("a1", GPU_A + "/s0", reservation_id="r-a1")]
        refused = helper.run_pass(1, devices)
        assert refused.section["state"] == "PROGRESSING"
        assert refused.errors == [
            "a1: the root helper refused hold.write: quota: 1 atoms would take the holds on the node to %d, past "
            "the %d atoms a pass honours (%d taken by the other holds); /run/bcd/allocations/a1.env is not written "
            "until they name fewer" % (MAX_ATOMS + 1, MAX_ATOMS, MAX_ATOMS)]
        assert not [e for e in refused.events if e["type"] == "AllocationBound"]
        os.unlink(os.path.join(run_cdi, "bcd-x0.json"))
        done = helper.run_pass(1, devices)
        assert done.section["state"] == "CONVERGED", done.section
        assert [e["body"]["allocation_id"] for e in done.events if e["type"] == "AllocationBound"] == ["a1"]
    finally:
        helper.close()


# -- the parts ---------------------------------------------------------------------------------

def test_the_count_is_by_name_stops_at_enough_and_is_bounded(tmp_path):
    for index in range(10):
        (tmp_path / ("bcd-a%d.json" % index)).write_text("{}")
    for name in ("bcd-a.json.damaged-20260101T000000Z", ".bcd-a.json.tmp-0a1b", "vendor.json", "bcd-a.yaml"):
        (tmp_path / name).write_text("{}")
    os.mkdir(tmp_path / "bcd-dir.json")
    assert count_node_files(str(tmp_path), SPEC_FILE_RE, 100) == 11
    assert count_node_files(str(tmp_path), SPEC_FILE_RE, 4) == 4
    assert count_node_files(str(tmp_path / "missing"), SPEC_FILE_RE, 4) == 0
    with pytest.raises(TooManyEntries, match="has more than 5 entries; not counted further"):
        count_node_files(str(tmp_path), re.compile("^nothing$"), 100, scan_limit=5)
    os.symlink(str(tmp_path), str(tmp_path.parent / "linked"))
    with pytest.raises(OSError):  # a directory reached through a link is not counted
        count_node_files(str(tmp_path.parent / "linked"), SPEC_FILE_RE, 100)
    os.unlink(str(tmp_path.parent / "linked"))


def test_copies_of_one_second_are_numbered_past_every_earlier_one_so_the_oldest_go(tmp_path):
    directory = str(tmp_path)
    now = 1764669600.0
    made = []
    for round_ in range(6):
        Path(directory, "bcd-a1.json").write_text(str(round_))
        made.append(set_aside(directory, "a1", now))
    assert made == ["bcd-a1.json.damaged-20251202T100000Z"] + [
        "bcd-a1.json.damaged-20251202T100000Z-%d" % n for n in range(2, 7)]
    kept = sorted(os.listdir(directory))
    assert [Path(directory, name).read_text() for name in kept] == ["3", "4", "5"]
    assert set_aside(directory, "a9", now) is None  # nothing to set aside
    assert set_aside(str(tmp_path / "missing"), "a1", now) is None


def test_pruning_keeps_the_newest_in_all_and_spares_what_root_did_not_make(tmp_path):
    directory = str(tmp_path)
    for index in range(10):
        Path(directory, "bcd-b%d.json" % index).write_text("x")
        set_aside(directory, "b%d" % index, 1764669600.0 + index, per_hold=3, total=4)
    kept = sorted(name for name in os.listdir(directory) if DAMAGED_FILE_RE.fullmatch(name))
    assert [DAMAGED_FILE_RE.fullmatch(name).group(1) for name in kept] == ["b6", "b7", "b8", "b9"]
    old = os.path.join(directory, "bcd-c1.json.damaged-19990101T000000Z")
    os.symlink("/etc/passwd", old)
    os.mkdir(old + "-2")
    Path(directory, "bcd-c1.json").write_text("x")
    set_aside(directory, "c1", 1764669700.0, per_hold=3, total=4)
    assert os.path.islink(old) and os.path.isdir(old + "-2")
    if os.geteuid() == 0:  # a file another uid owns is never root's to remove
        foreign = os.path.join(directory, "bcd-c1.json.damaged-19990101T000001Z")
        Path(foreign).write_text("theirs")
        os.chown(foreign, 65534, 65534)
        Path(directory, "bcd-c1.json").write_text("x")
        set_aside(directory, "c1", 1764669800.0, per_hold=1, total=1)
        assert Path(foreign).read_text() == "theirs"
