# -*- coding: utf-8 -*-
# Copyright: contributors to bcd.devices
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""What a peer may send the root helper (``entry/helper/request.py``), spoken to over its real socket.

Ids and kinds that try to leave the root, keys the protocol does not have, holds checked by the rules
network input is, garbage: each gets ``"ok": false`` and a reason, nothing is written, and the helper
keeps answering. And what a request line may carry (issue 33, item 2, follow-ups): the line was 64 KiB,
about 760 slots, so a hold the module accepts (1 024 slots, 256 env lines of 4 096 characters) could not
be bound through the helper. Now ``MAX_REQUEST`` is a devices section's bytes and a frame around them,
the largest hold the module accepts binds through the helper, and long lines are parsed a few at a time.
"""

from __future__ import annotations

import json
import os
import socket
import subprocess
import threading

import pytest

from ansible_collections.bcd.devices.plugins.module_utils.domain.input.assignment import (
    MAX_DEVICES,
    MAX_ENV_LINES,
    MAX_SECTION_BYTES,
    TEXT_MAX,
    hold_request,
    parse_assignment,
)
from ansible_collections.bcd.devices.plugins.module_utils.domain.input.section import section_size
from ansible_collections.bcd.devices.plugins.module_utils.entry.converge import run_pass
from ansible_collections.bcd.devices.plugins.module_utils.entry.helper.request import MAX_REQUEST
from ansible_collections.bcd.devices.plugins.module_utils.node.helper_client import HelperClient
from ansible_collections.bcd.devices.plugins.module_utils.node.hosts import MAX_HOLD_SPEC_BYTES, FakeHwHost
from ansible_collections.bcd.devices.plugins.module_utils.node.writers import HelperWriter
from ansible_collections.bcd.devices.tests.unit import attackers
from ansible_collections.bcd.devices.tests.unit.attackers import (  # noqa: F401 (fixtures)  pylint: disable=unused-import
    attacker,
    world,
)
from ansible_collections.bcd.devices.tests.unit.builders import request
from ansible_collections.bcd.devices.tests.unit.conftest import DEFAULT_GPUS, GPU_A
from ansible_collections.bcd.devices.tests.unit.served_helper import ServedHelper


# -- what a request may say --------------------------------------------------------------------------

@pytest.mark.parametrize("allocation_id", [
    "../../outside/x", "../x", "a/b", "a1\n", "a1/", "", "x" * 81, ".", "..", "a b", "a-1", 7, None, ["a1"],
])
def test_an_allocation_id_that_is_not_an_id_is_refused_and_nothing_is_written(helper, allocation_id):
    before = helper.files()
    for message in ({"op": "hold.remove", "kind": "allocation-env", "allocation_id": allocation_id},
                    {"op": "slice.apply", "allocation_id": allocation_id, "limits": {"cpus": "0"}},
                    {"op": "slice.stop", "allocation_id": allocation_id},
                    {"op": "hold.write", "kind": "allocation-env", "hold": request(allocation_id)}):
        reply = helper.request(message)
        assert reply["ok"] is False
        # the helper's own check of an id, or hold.write's (the module's invalid-assignment message, in words)
        assert "allocation_id" in reply["error"] and ("does not match" in reply["error"] or (
            message["op"] == "hold.write" and "is not an allocation id" in reply["error"])), (message, reply)
    assert helper.files() == before


@pytest.mark.parametrize("kind", ["../cdi", "cdi/../../outside", "../../outside/x", "/etc/passwd", "env", "", None,
                                  ["cdi"], {"cdi": 1}])
def test_a_kind_that_is_not_one_of_the_two_is_refused(helper, kind):
    before = helper.files()
    for message in ({"op": "hold.write", "kind": kind, "hold": request()},
                    {"op": "hold.remove", "kind": kind, "allocation_id": "a1"}):
        reply = helper.request(message)
        assert reply["ok"] is False
        assert "unknown kind" in reply["error"] and "allocation-env, cdi" in reply["error"]
    assert helper.files() == before


@pytest.mark.parametrize("message, error", [
    ({"op": "hold.write", "kind": "cdi", "hold": request(), "content": "{}"}, "hold.write takes no content"),
    ({"op": "hold.remove", "kind": "cdi", "allocation_id": "a1", "path": "/etc/shadow"}, "hold.remove takes no path"),
    ({"op": "slice.apply", "allocation_id": "a1", "limits": {"cpus": "0"}, "properties": {"ExecStart": "/bin/sh"}},
     "slice.apply takes no properties"),
    ({"op": "slice.stop", "allocation_id": "a1", "force": True}, "slice.stop takes no force"),
    ({"op": "kube.look", "socket": "/tmp/x"}, "kube.look takes no socket"),
])
def test_a_key_the_operation_does_not_take_is_refused_by_name(helper, message, error):
    assert helper.request(message) == {"ok": False, "error": error}
    assert helper.files() == {}


@pytest.mark.parametrize("fields, error", [
    ({"env": ["NVIDIA_VISIBLE_DEVICES=all"]}, "env[0]: NVIDIA_VISIBLE_DEVICES is set by bcd and cannot be overridden"),
    ({"devices": [{"id": "all"}]}, "all not present"),
    ({"devices": [{"id": "GPU-5f1c2a90-0000-4000-8000-0000000000ff"}]},
     "GPU-5f1c2a90-0000-4000-8000-0000000000ff not present"),
    ({"generation": None}, "generation: required"),
    ({"binding": None}, "binding is missing"),
    ({"binding": "BINDING_INSTANCE"}, "binding BINDING_INSTANCE is not supported"),
    ({"devices": [{"id": GPU_A + "/gi01/ci0", "device_class": "gpu.mig"}]},
     '"%s/gi01/ci0" is not a MIG instance id (<gpu>/gi<n>/ci<n>)' % GPU_A),
    ({"containerEdits": {"hooks": []}}, "hold.containerEdits: unknown field"),
    ({"limits": {"cpus": "0-30000000"}}, "limits.cpus: CPU 30000000 is beyond 8191, the most any host has"),
])
def test_a_hold_is_checked_by_the_rules_network_input_is(helper, fields, error):
    reply = {"ok": False, "error": error}
    if error.endswith(" not present"):  # a device root does not see now may be there later; the rest never passes
        reply["retryable"] = True
    for kind in ("cdi", "allocation-env"):
        assert helper.request({"op": "hold.write", "kind": kind, "hold": request(**fields)}) == reply
    assert helper.files() == {}


@pytest.mark.parametrize("data, error", [
    (b"this is not json\n", "malformed request"),
    (b"\xff\xfe\n", "malformed request"),
    (b"[1, 2, 3]\n", "a request must be a JSON object, not a list"),
    (b'{"op": "file.write", "kind": "cdi", "allocation_id": "a1", "content": "{}"}\n',
     "unknown op 'file.write'; known: hold.remove, hold.set_aside, hold.write, kube.look, mig.change, mig.look, "
     "slice.apply, slice.stop"),
    (b'{"op": ["hold.write"]}\n', "unknown op a list"),
    (b"[" * 5000 + b"]" * 5000 + b"\n", "a request nests deeper than 16 levels"),
    (b'{"op": "slice.stop", "allocation_id": "a1\\u0000"}\n', "a request must not contain NUL characters"),
])
def test_garbage_gets_a_clear_refusal_and_the_helper_goes_on(helper, data, error):
    [reply] = helper.send(data)
    assert reply["ok"] is False
    assert reply["error"].startswith(error), reply
    assert helper.request({"op": "slice.stop", "allocation_id": "a9"}) == {"ok": True}


# -- how long a request line may be ------------------------------------------------------------------

def test_a_line_past_max_request_is_refused_and_the_helper_still_answers_afterwards(helper):
    replies = []

    def flood():
        try:
            with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as connection:
                connection.settimeout(10)
                connection.connect(helper.socket)
                try:
                    connection.sendall(b'{"op": "hold.write", "hold": "' + b"x" * (MAX_REQUEST + 1) + b'"}\n')
                except OSError:
                    pass                                     # the helper hung up mid-line, as it should
                data = b""
                while True:
                    try:
                        chunk = connection.recv(65536)
                    except OSError:
                        break
                    if not chunk:
                        break
                    data += chunk
                replies.extend(json.loads(line) for line in data.decode().splitlines())
        except OSError as exc:
            replies.append({"client error": str(exc)})

    worker = threading.Thread(target=flood)
    worker.start()
    worker.join(20)
    assert not worker.is_alive()
    assert replies == [{"ok": False, "error": "request longer than %d bytes" % MAX_REQUEST}]
    assert helper.files() == {}
    # a fresh connection is served as before
    assert helper.request({"op": "hold.write", "kind": "allocation-env", "hold": request()}) == {"ok": True}


FIRST_SLOT = 1000  # every slot number of four digits: every id of one length
LONG_GPU = "GPU-" + "7" * 128  # the longest GPU UUID a node may have (fakehw's bound; NVIDIA's are 40 characters)
ASTRAL = "\U0001F600"  # one character that json.dumps writes in 12 bytes


def largest_entry(gpu):
    """The largest entry of a devices section the module accepts: MAX_DEVICES slots of ``gpu``, the longest
    allocation and reservation ids, MAX_ENV_LINES lines of 4 096 characters, as many of them made of characters
    json.dumps writes in 12 bytes as the section's bytes allow (the rest plain letters)."""
    entry = {"allocation_id": "a" * 80, "reservation_id": ASTRAL * TEXT_MAX, "binding": "BINDING_HOLD",
             "devices": [{"id": "%s/s%d" % (gpu, FIRST_SLOT + number), "device_class": "gpu.slot"}
                         for number in range(MAX_DEVICES)]}
    keys = ["K%03d" % line for line in range(MAX_ENV_LINES)]

    def env(wide):
        return ["%s=%s" % (key, (ASTRAL if index < wide else "v") * (4096 - len(key) - 1))
                for index, key in enumerate(keys)]

    none, one = (section_size([dict(entry, env=env(wide))], limit=1 << 40) for wide in (0, 1))
    entry["env"] = env(min(MAX_ENV_LINES, (MAX_SECTION_BYTES - none) // (one - none)))  # each wide line adds as much
    return entry


def request_line(entry):
    """The hold.write line a pass sends for ``entry``'s env file (the larger of its two kinds)."""
    message = {"op": "hold.write", "kind": "allocation-env", "hold": hold_request(parse_assignment(entry), 1)}
    return (json.dumps(message) + "\n").encode("utf-8")


def send(socket_path, data):
    """``data`` on one connection; the reply (the helper hangs up mid-line when it refuses a long one)."""
    with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as connection:
        connection.settimeout(30)
        connection.connect(socket_path)
        try:
            connection.sendall(data)
        except OSError:
            pass
        return json.loads(connection.makefile("rb").readline())


def served(node):
    directory = node.root + "-run"
    os.makedirs(directory, exist_ok=True)
    return ServedHelper(node.host(), os.path.join(directory, "helper.sock"))


@pytest.mark.parametrize("gpu", [LONG_GPU, GPU_A], ids=["longest-ids", "vendor-edits-on-each"])
def test_the_largest_hold_the_module_accepts_fits_a_request_line_and_binds_through_the_helper(make_node, monkeypatch, gpu):
    """1 024 slots of the longest GPU UUID a node has (ids of 138 characters), the longest allocation and
    reservation ids, and env lines up to the section's bytes: the request line is some 4 MiB (the 64 KiB line
    before held about 760 slots), within MAX_REQUEST, and a pass through the helper binds it: its spec names
    the 1 024 slots, its env file has every line. Of GPU_A, NVIDIA's edits are on each slot (1.3 KiB each), and
    the spec stays within what a pass reads back."""
    node = make_node(gpus=DEFAULT_GPUS + [{"uuid": LONG_GPU, "index": 3, "minor": 3}], vendor="full")
    entry = largest_entry(gpu)
    assert section_size([entry]) <= MAX_SECTION_BYTES
    line = request_line(entry)
    assert MAX_SECTION_BYTES * 0.9 < len(line) <= MAX_REQUEST, len(line)
    helper = served(node)
    try:
        monkeypatch.setattr(os, "geteuid", lambda: 1000)  # the pass's side: root's work through the helper
        host = FakeHwHost(node.root, node.fakehw, writer=HelperWriter(HelperClient(helper.socket, timeout=60)))
        result = run_pass(host, 1, [entry], state_dir=node.state_dir, lock_timeout=5)
    finally:
        helper.close()
    assert result.section["state"] == "CONVERGED", (result.errors[:3], result.section)
    spec = json.loads(open(node.path("/etc/cdi/bcd-%s.json" % entry["allocation_id"]), "rb").read())
    visible = [line for line in spec["containerEdits"]["env"] if line.startswith("NVIDIA_VISIBLE_DEVICES=")]
    assert visible == ["NVIDIA_VISIBLE_DEVICES=" + gpu]
    assert len(spec["devices"]) == MAX_DEVICES and os.path.getsize(node.path("/etc/cdi/bcd-%s.json" % entry["allocation_id"])) \
        <= MAX_HOLD_SPEC_BYTES
    env_file = open(node.path("/run/bcd/allocations/%s.env" % entry["allocation_id"]), encoding="utf-8").read()
    assert all(line in env_file.splitlines() for line in entry["env"])
    assert "BCD_RESERVATION_ID=" + ASTRAL * TEXT_MAX in env_file.splitlines()


@pytest.mark.skipif(not attackers.CAN_PLAY, reason=attackers.CANNOT_PLAY)
def test_a_pass_as_the_account_binds_the_largest_hold_through_a_helper_process(world):
    """The same through the helper as it runs, a process of its own serving the account, and a pass of
    ``bcd-holds converge`` run as that account: the largest hold of the node's GPU binds, spec and env file."""
    if world.attacker.run(["/usr/bin/python3", "-c", "import cryptography"]).returncode != 0:
        pytest.skip("the account's /usr/bin/python3 has no cryptography")
    entry = largest_entry(attackers.GPU_A)
    assert len(request_line(entry)) > MAX_SECTION_BYTES * 0.9
    spec = os.path.join(world.base, "spec.json")
    with open(spec, "w", encoding="utf-8") as handle:
        json.dump({"generation": 1, "devices": [entry]}, handle)
    os.chmod(spec, 0o644)
    proc = subprocess.run(["/usr/bin/python3", "-c", attackers.LAUNCHER, attackers.COLLECTIONS_PARENT, "converge",
                           "--spec", spec, "--root", world.root, "--fakehw", world.fakehw, "--json",
                           "--helper-socket", world.socket],
                          preexec_fn=world.attacker.demote, cwd="/", stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                          timeout=300, check=False)
    assert proc.returncode == 0, proc.stderr.decode()[-2000:]
    assert json.loads(proc.stdout)["section"]["state"] == "CONVERGED"
    with open(world.node("/etc/cdi/bcd-%s.json" % entry["allocation_id"]), "rb") as handle:
        assert len(json.load(handle)["devices"]) == MAX_DEVICES
    with open(world.node("/run/bcd/allocations/%s.env" % entry["allocation_id"]), encoding="utf-8") as handle:
        lines = handle.read().splitlines()
    assert all(line in lines for line in entry["env"])
    assert world.alive()


def test_a_line_of_max_request_bytes_is_read_and_one_byte_more_is_refused(make_node):
    """The bound is exact: a line of MAX_REQUEST bytes is parsed (and refused for what it says), one of a byte
    more is refused for its length, with the message the helper always gave; the helper answers after."""
    node = make_node()
    helper = served(node)
    try:
        head, tail = b'{"op": "kube.look", "pad": "', b'"}'
        at_bound = head + b"x" * (MAX_REQUEST - len(head) - len(tail)) + tail
        assert len(at_bound) == MAX_REQUEST
        assert send(helper.socket, at_bound + b"\n") == {"ok": False, "error": "kube.look takes no pad"}
        assert send(helper.socket, at_bound[:-2] + b'x"}\n') == {
            "ok": False, "error": "request longer than %d bytes" % MAX_REQUEST}
        assert send(helper.socket, b'{"op": "kube.look"}\n')["ok"] is True
    finally:
        helper.close()


# The account's client for long lines: ``size`` bytes of a kube.look padded, one connection each.
LONG_LINES = r"""
import json, socket, sys
replies = []
for size in sys.argv[2:]:
    head, tail = b'{"op": "kube.look", "pad": "', b'"}'
    line = head + b"x" * (int(size) - len(head) - len(tail)) + tail + b"\n"
    with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as connection:
        connection.settimeout(20)
        connection.connect(sys.argv[1])
        try:
            connection.sendall(line)
        except OSError:
            pass
        replies.append(json.loads(connection.makefile("rb").readline()))
print(json.dumps(replies))
"""


@pytest.mark.skipif(not attackers.CAN_PLAY, reason=attackers.CANNOT_PLAY)
def test_the_account_gets_the_bound_from_a_helper_process(world):
    """The account's lines of MAX_REQUEST bytes and of one more, to the helper as it runs: the first is read,
    the second refused for its length; the helper goes on."""
    replies = world.attacker.python_json(LONG_LINES, world.socket, MAX_REQUEST, MAX_REQUEST + 1)
    assert replies == [{"ok": False, "error": "kube.look takes no pad"},
                       {"ok": False, "error": "request longer than %d bytes" % MAX_REQUEST}]
    assert world.alive()


def test_long_lines_are_parsed_at_most_big_parses_at_a_time(monkeypatch):
    """Sixteen peers each sending a line of 4 MiB of ``[{},{},...]`` would have root hold some 2 GB of objects at
    once, past the unit's MemoryMax: lines past the old 64 KiB are parsed BIG_PARSES at a time; short ones never
    wait for them."""
    import threading
    import time as time_module

    from ansible_collections.bcd.devices.plugins.module_utils.entry.helper import request as helper_module

    state = {"now": 0, "most": 0, "short_while_long": 0}
    guard = threading.Lock()
    real = json.loads

    def slow_loads(text, *args, **kwargs):
        long_line = len(text) > helper_module.REQUEST_FRAME
        with guard:
            if long_line:
                state["now"] += 1
                state["most"] = max(state["most"], state["now"])
            elif state["now"]:
                state["short_while_long"] += 1
        try:
            if long_line:
                time_module.sleep(0.05)
            return real(text, *args, **kwargs)
        finally:
            if long_line:
                with guard:
                    state["now"] -= 1

    monkeypatch.setattr(helper_module.json, "loads", slow_loads)
    long_line = ("[" + ",".join(["{}"] * (helper_module.REQUEST_FRAME // 3 + 10)) + "]").encode()
    short_line = b'{"op": "kube.look"}'
    threads = [threading.Thread(target=helper_module._parse_request, args=(long_line,)) for _number in range(8)]
    for thread in threads:
        thread.start()
    time_module.sleep(0.02)
    for _attempt in range(5):
        assert helper_module._parse_request(short_line) == {"op": "kube.look"}
    for thread in threads:
        thread.join()
    assert state["most"] == helper_module.BIG_PARSES
    assert state["short_while_long"] >= 1  # short lines went ahead while long ones were being parsed
