# -*- coding: utf-8 -*-
# Copyright: contributors to bcd.devices
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""A compromised ``bcd`` account against a real root helper and against root passes.

The module starts ``bcd-holds helper`` as a root process for a fakehw node, creates a
throwaway system account (the "attacker", removed at the end), and plays that account:
its code runs in subprocesses with the account's uid and gid. Every attack of
docs/security.md is a test here — content it would have root write, env lines, devices the
node lacks, links planted for root passes, floods, slow peers, malformed requests,
running the helper out of file descriptors, slices it would have root kill or squeeze —
and every socket and subprocess has a deadline, so nothing here can hang.

Skipped unless run as root with ``useradd`` (CI runs as root).
"""

from __future__ import annotations

import base64
import json
import os
import pwd
import shutil
import stat
import subprocess
import time
from pathlib import Path

import pytest

from ansible_collections.bcd.devices.tests.unit.attackers import (  # noqa: F401 (fixtures)  pylint: disable=unused-import
    attacker,
    world,
)
from ansible_collections.bcd.devices.tests.unit.attackers import CAN_PLAY, CANNOT_PLAY, CLIENT, GPU_A, hold, target_untouched
from ansible_collections.bcd.devices.tests.unit.plugins.module_utils.entry.helper.test_slices import check_a_populated_slice_is_kept

if not CAN_PLAY:
    pytest.skip(CANNOT_PLAY, allow_module_level=True)

# Floods the helper: opens N idle connections, asks once more, closes them all, asks again.
FLOOD = r"""
import json, socket, sys, time
path, count, during = sys.argv[1], int(sys.argv[2]), sys.argv[3] == "ask-during"
held, refused = [], 0
for _ in range(count):
    connection = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    connection.settimeout(5)
    try:
        connection.connect(path)
    except OSError:
        refused += 1
        continue
    held.append(connection)
time.sleep(0.5)
def ask():
    with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as connection:
        connection.settimeout(20)
        connection.connect(path)
        try:
            connection.sendall(b'{"op": "slice.stop", "allocation_id": "nothing_here"}\n')
        except BrokenPipeError:  # a busy helper answers at once and closes, maybe before the request is sent
            pass
        got = b""
        while b"\n" not in got:
            chunk = connection.recv(65536)
            if not chunk:
                break
            got += chunk
        return json.loads(got.decode().splitlines()[0])
start = time.monotonic()
result = ask() if during else None
during_seconds = time.monotonic() - start
for connection in held:
    connection.close()
# the helper frees a thread once it reads the peer's end: on a loaded machine that can take longer than
# a moment, so "served after" is asked until it is no longer busy (10 s at most)
deadline = time.monotonic() + 10
after = ask()
while after.get("error", "").startswith("busy") and time.monotonic() < deadline:
    time.sleep(0.2)
    after = ask()
print(json.dumps({"during": result, "during_seconds": during_seconds, "after": after, "held": len(held)}))
"""
# A slow peer: one byte a second, never a newline, for longer than the helper's deadline.
SLOW = r"""
import json, socket, sys, time
with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as connection:
    connection.settimeout(30)
    connection.connect(sys.argv[1])
    start, got = time.monotonic(), b""
    for byte in b'{"op": "slice.stop", "allocation_id": "aaaaaaaaaaaaaaaaaaaaaaaaaaaaaa':
        try:
            connection.sendall(bytes([byte]))
        except OSError:
            break
        connection.settimeout(1.0)
        try:
            got = connection.recv(65536)
        except socket.timeout:
            continue
        break
    print(json.dumps({"reply": json.loads(got.decode().splitlines()[0]) if got else None,
                      "seconds": time.monotonic() - start}))
"""


# -- root builds what it writes --------------------------------------------------------

@pytest.mark.parametrize("message, error", [
    ({"op": "hold.write", "kind": "cdi", "hold": hold(), "content": '{"containerEdits": {"hooks": []}}'},
     "hold.write takes no content"),
    ({"op": "hold.write", "kind": "cdi", "hold": hold(containerEdits={"mounts": [{"hostPath": "/"}]})},
     "hold.containerEdits: unknown field"),
    ({"op": "hold.write", "kind": "cdi", "hold": hold(hooks=[{"hookName": "createRuntime", "path": "/tmp/x"}])},
     "hold.hooks: unknown field"),
    ({"op": "hold.write", "kind": "cdi", "hold": hold(additionalGids=[0])}, "hold.additionalGids: unknown field"),
    ({"op": "hold.write", "kind": "cdi", "hold": hold(device_id="all")}, "all not present"),
    ({"op": "hold.write", "kind": "cdi", "hold": hold(device_id="/dev/sda")}, "\"/dev/sda\" cannot name a CDI device"),
    ({"op": "hold.write", "kind": "cdi", "hold": hold(device_id="GPU-5f1c2a90-00aa-4000-8000-0000000000ff")},
     "GPU-5f1c2a90-00aa-4000-8000-0000000000ff not present"),
    ({"op": "hold.write", "kind": "allocation-env", "hold": hold(env=["NVIDIA_VISIBLE_DEVICES=all"])},
     "env[0]: NVIDIA_VISIBLE_DEVICES is set by bcd and cannot be overridden"),
    ({"op": "hold.write", "kind": "allocation-env", "hold": hold(env=["BCD_ALLOCATION_ID=other"])},
     "env[0]: BCD_ALLOCATION_ID is set by bcd and cannot be overridden"),
    ({"op": "hold.write", "kind": "allocation-env", "hold": hold(env=["A=1\rNVIDIA_VISIBLE_DEVICES=all"])},
     "env[0]: the value of A holds U+000D (a carriage return) at character 1; a value is one line without "
     "control characters (docs/security.md, \"The env policy\")"),
    ({"op": "hold.write", "kind": "cdi", "hold": hold(devices=[{"id": GPU_A}, {"id": GPU_A}])},
     "overlap: a device is listed twice"),
    ({"op": "hold.write", "kind": "allocation-env", "hold": hold(env=["LD_PRELOAD=/tmp/x.so\nB=2"])},
     "env[0]: LD_PRELOAD changes what programs load or run; a hold's env may not set it "
     "(docs/security.md, \"The env policy\")"),
])
def test_root_writes_nothing_it_did_not_build(world, message, error):
    reply = {"ok": False, "error": error}
    if error.endswith(" not present"):  # a device root does not see now may be there later; the rest never passes
        reply["retryable"] = True
    assert world.request(message) == reply
    assert world.files("/etc") == {} and world.files("/run") == {}
    assert world.alive()


def test_a_hold_root_writes_carries_only_the_nodes_own_devices_and_bcds_env(world):
    for kind in ("cdi", "allocation-env"):
        assert world.request({"op": "hold.write", "kind": kind, "hold": hold(env=["TEAM=x"])}) == {"ok": True}
    spec_path = world.node("/etc/cdi/bcd-a1.json")
    spec = json.loads(Path(spec_path).read_text())
    info = os.stat(spec_path)
    assert (info.st_uid, stat.S_IMODE(info.st_mode)) == (0, 0o644)
    assert [device["name"] for device in spec["devices"]] == [GPU_A]
    edits = [spec["containerEdits"]] + [device["containerEdits"] for device in spec["devices"]]
    assert all(set(edit) == {"env"} for edit in edits), edits  # no hooks, mounts, device nodes or group ids
    env = Path(world.node("/run/bcd/allocations/a1.env")).read_text().splitlines()
    assert env == ["BCD_ALLOCATION_ID=a1", "BCD_RESERVATION_ID=r1", "NVIDIA_VISIBLE_DEVICES=%s" % GPU_A, "TEAM=x"]


# -- root never acts through a path the attacker controls ----------------------------------

STATE_FILES = ("lock", "ledger.json", "events.jsonl", "events.seq", "releasing.json", "nodespec.json", "node.key")


def plant(world, names, target):
    for name in names:
        result = world.attacker.run(["ln", "-sfn", target, os.path.join(world.state, name)])
        assert result.returncode == 0, result.stderr


def converge_as_root(world, generation=1):
    spec = os.path.join(world.base, "spec-%d.json" % generation)
    Path(spec).write_text(json.dumps({"generation": generation, "devices": [
        {"allocation_id": "a1", "reservation_id": "r1", "binding": "BINDING_HOLD", "devices": [{"id": GPU_A}]}]}))
    return world.root_cli("converge", "--spec", spec, "--json")


@pytest.mark.parametrize("name", STATE_FILES)
def test_a_link_planted_in_the_state_directory_leads_a_root_pass_nowhere(world, name):
    plant(world, [name], world.target)
    missing = os.path.join(world.secrets, "created-by-root")
    code, out, err = converge_as_root(world)
    assert "Traceback" not in out + err
    assert target_untouched(world)
    assert not os.path.exists(missing)
    assert "secret-hash" not in out + err
    for entry in os.listdir(world.state):  # nothing root-only came back into a file the attacker can read
        path = os.path.join(world.state, entry)
        if not os.path.islink(path) and os.path.isfile(path):
            assert b"secret-hash" not in Path(path).read_bytes(), entry
    # acknowledging events as root goes the same way
    code, out, err = world.root_cli("events", "--ack-through", "1")
    assert "Traceback" not in out + err
    assert target_untouched(world)


def test_links_to_a_file_that_does_not_exist_are_not_created_by_root(world):
    missing = os.path.join(world.secrets, "ld.so.preload")
    plant(world, STATE_FILES, missing)
    code, out, err = converge_as_root(world)
    assert "Traceback" not in out + err
    assert not os.path.exists(missing)
    assert sorted(os.listdir(world.secrets)) == ["shadow"]


def test_a_state_directory_that_is_a_link_is_refused(world):
    elsewhere = os.path.join(world.base, "elsewhere")
    os.makedirs(elsewhere, mode=0o700)
    os.chown(elsewhere, world.attacker.uid, world.attacker.gid)
    shutil.rmtree(world.state)
    os.symlink(elsewhere, world.state)
    code, out, err = converge_as_root(world)
    assert code != 0 and "Traceback" not in out + err
    assert "link" in (out + err).lower()
    assert os.listdir(elsewhere) == []
    assert not os.path.exists(world.node("/etc/cdi/bcd-a1.json"))


def test_root_hands_over_only_its_own_single_link_leftovers(world):
    leftover = os.path.join(world.state, "ledger.json")
    Path(leftover).write_text('{"bound": {}}')  # written by an earlier root-mode install
    linked = os.path.join(world.state, "old-copy")
    Path(linked).write_text("root's")
    os.link(linked, os.path.join(world.state, "old-copy-2"))  # two links: not root's to give away
    code, out, err = converge_as_root(world)
    assert code == 0, err
    assert os.stat(leftover).st_uid == world.attacker.uid
    assert os.stat(linked).st_uid == 0 and os.stat(linked).st_nlink == 2
    journal = os.path.join(world.state, "events.jsonl")
    assert os.stat(journal).st_uid == world.attacker.uid  # root's pass worked as the directory's owner


def test_a_journal_rewrite_keeps_only_what_the_attacker_could_read_anyway(world):
    code, out, err = converge_as_root(world)
    assert code == 0, err
    journal = os.path.join(world.state, "events.jsonl")
    with open(journal, "a") as handle:
        handle.write("not an event\n")
    os.chown(journal, world.attacker.uid, world.attacker.gid)
    code, out, err = world.root_cli("events", "--ack-through", "1")
    assert code == 0 and "Traceback" not in out + err
    info = os.stat(journal)
    assert (info.st_uid, stat.S_IMODE(info.st_mode)) == (world.attacker.uid, 0o600)
    assert b"secret-hash" not in Path(journal).read_bytes()


# -- the helper stays up and answers -------------------------------------------------------

@pytest.mark.parametrize("payload, error", [
    (b'{"op": "hold.write", "kind": ["cdi"], "hold": {}}\n', "unknown kind a list"),
    (b"[" * 20000 + b"]" * 20000 + b"\n", "a request nests deeper than 16 levels"),
    (b'{"op": "slice.stop", "allocation_id": "\xff\xfe"}\n', "malformed request"),
    (b'{"op": "slice.stop", "allocation_id": "a1\x00"}\n', "malformed request"),
    (b'{"op": "slice.stop", "allocation_id": "a1\\u0000"}\n', "a request must not contain NUL characters"),
    # a line past MAX_REQUEST (4 MiB and more, too long for an argv): test_request.py's own client
    (b"\x00" * 4096 + b"\n", "malformed request"),
    (b'{"op": "slice.apply", "allocation_id": "a1", "limits": {"mems": "0-30000000"}}\n',
     "limits.mems: NUMA node 30000000 is beyond 1023, the most any host has"),
    (b'{"op": "slice.apply", "allocation_id": "a1", "limits": {"cpus": "0-3;reboot"}}\n',
     "limits.cpus: '0-3;reboot' is not a cpulist such as 0-3,8"),
    (b'{"op": "slice.apply", "allocation_id": "a1", "limits": {}}\n', "the limits book nothing a slice enforces"),
])
def test_a_malformed_or_hostile_request_gets_a_clear_error_and_the_helper_goes_on(world, payload, error):
    (replies,) = world.send(payload)
    assert len(replies) == 1 and replies[0]["ok"] is False, replies
    assert replies[0]["error"].startswith(error), replies
    assert world.alive()


def test_a_flood_of_idle_peers_gets_busy_at_once_and_the_helper_serves_after(world):
    result = world.attacker.python_json(FLOOD, world.socket, 40, "ask-during", timeout=90)
    assert result["held"] == 40
    assert result["during"] == {"ok": False, "error": "busy: 16 requests are being served; try again", "retryable": True}
    assert result["during_seconds"] < 5
    assert result["after"] == {"ok": True}
    assert world.alive()


def test_a_slow_peer_is_cut_off_at_the_deadline_and_others_are_served_meanwhile(world):
    slow = subprocess.Popen(["/usr/bin/python3", "-c", SLOW, world.socket], preexec_fn=world.attacker.demote,
                            cwd="/", stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    try:
        time.sleep(1.5)
        started = time.monotonic()
        assert world.alive()  # served while the slow peer dribbles
        assert time.monotonic() - started < 5
        out, err = slow.communicate(timeout=40)
    finally:
        if slow.poll() is None:
            slow.kill()
    result = json.loads(out)
    assert result["reply"] == {"ok": False, "error": "no complete request within 10s", "retryable": True}, err
    assert 9 <= result["seconds"] < 20


def test_running_the_helper_out_of_file_descriptors_pauses_it_and_never_stops_it(world):
    limit = subprocess.run(["prlimit", "--pid", str(world.helper.pid), "--nofile=12:12"], timeout=30, check=False)
    if limit.returncode != 0:
        pytest.skip("prlimit cannot lower the helper's descriptor limit here")
    result = world.attacker.python_json(FLOOD, world.socket, 30, "no", timeout=120)
    assert world.helper.poll() is None, world.helper_log()
    assert result["after"] == {"ok": True}
    subprocess.run(["prlimit", "--pid", str(world.helper.pid), "--nofile=1024:1024"], timeout=30, check=False)
    assert world.alive()
    assert "accept failed" in world.helper_log()


def test_an_account_that_is_not_allowed_is_refused_by_its_credentials(world):
    nobody = pwd.getpwnam("nobody")
    os.chmod(world.socket, 0o666)  # only SO_PEERCRED stands in the way now
    proc = subprocess.run(["/usr/bin/python3", "-c", CLIENT, world.socket,
                           base64.b64encode(b'{"op": "slice.stop", "allocation_id": "a1"}\n').decode()],
                          preexec_fn=lambda: (os.setgroups([]), os.setgid(nobody.pw_gid), os.setuid(nobody.pw_uid)),
                          cwd="/", stdout=subprocess.PIPE, stderr=subprocess.PIPE, timeout=30, check=False)
    assert json.loads(proc.stdout) == [[{"ok": False, "error": "uid %d gid %d may not use this helper"
                                         % (nobody.pw_uid, nobody.pw_gid)}]]
    assert world.alive()


# -- the helper enforces the node's own rules on slices ----------------------------------------

def test_the_helper_never_kills_or_squeezes_a_workload(world):
    check_a_populated_slice_is_kept(world.request, world.node, 1 << 30)


def test_the_helper_never_starves_a_workload_or_leaves_it_no_headroom(world):
    """Issue 22 against a real helper process: CPUQuota 1 % on a fresh slice, then each limit at the edge of a
    running workload's use (MemoryMax at use, a huge page limit at what is faulted in) is refused."""
    apply = {"op": "slice.apply", "allocation_id": "a7"}
    reply = world.request(dict(apply, limits={"cpu_millis": 1}))
    assert reply["ok"] is False and "CPUQuota=1%, below the floor of 10% of one CPU" in reply["error"]
    reply = world.request(dict(apply, limits={"cpu_millis": 1 << 62}))
    assert reply["ok"] is False and ("CPUQuota=461168601842738791%, above the ceiling of 819200% (8192 CPUs, all a "
                                     "cpulist may name): at most 8192000 cpu_millis") in reply["error"], reply
    assert world.request(dict(apply, limits={"memory_bytes": 4 << 30, "hugepages_2mi": 4})) == {"ok": True}
    path = world.node("/run/bcd/slices/bcd-alloc-a7.slice.json")
    with open(path) as handle:
        record = json.load(handle)
    record.update(populated=True, memory_current=1 << 30, hugetlb_current={"2MB": 4 << 20})
    with open(path, "w") as handle:
        json.dump(record, handle)
    for limits, words in (({"memory_bytes": 1 << 30}, "leaves no headroom over the slice's current use 1073741824"),
                          ({"hugepages_2mi": 2}, "at least 3 pages (6291456 bytes, one page more) are needed")):
        reply = world.request(dict(apply, limits=limits))
        assert reply["ok"] is False and words in reply["error"], reply
    assert world.alive()
