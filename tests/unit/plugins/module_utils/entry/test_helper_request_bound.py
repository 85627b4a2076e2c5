# -*- coding: utf-8 -*-
# Copyright: contributors to bcd.devices
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""What a request line may carry, and what root parses for it (issue 33, item 2, follow-ups).

* The request line was 64 KiB, about 760 slots: a hold the module accepts (1 024 slots, 256 env lines of
  4 096 characters) could not be bound through the helper. Now ``MAX_REQUEST`` is a devices section's
  bytes and a frame around them, and the largest hold the module accepts binds through the helper.
* The vendor spec was parsed for every ``hold.write`` (PyYAML: milliseconds for NVIDIA's one-GPU spec, more
  for eight GPUs): an account rewriting one hold 16 times a second kept root parsing. Now the helper keeps
  it parsed while its file is the same (``vendor_spec.ParsedSpecCache``), and parses it again once it changes.
"""

from __future__ import annotations

import json
import os
import socket
import subprocess

import pytest

from ansible_collections.bcd.devices.plugins.module_utils.domain.input.assignment import (
    MAX_DEVICES,
    MAX_ENV_LINES,
    MAX_SECTION_BYTES,
    TEXT_MAX,
    hold_request,
    parse_assignment,
    section_size,
)
from ansible_collections.bcd.devices.plugins.module_utils.entry.converge import run_pass
from ansible_collections.bcd.devices.plugins.module_utils.entry.helper import MAX_REQUEST, NodeView
from ansible_collections.bcd.devices.plugins.module_utils.node import vendor_spec as vendor_spec_module
from ansible_collections.bcd.devices.plugins.module_utils.node.helper_client import HelperClient
from ansible_collections.bcd.devices.plugins.module_utils.node.hosts import MAX_HOLD_SPEC_BYTES, FakeHwHost
from ansible_collections.bcd.devices.plugins.module_utils.node.writers import HelperWriter
from ansible_collections.bcd.devices.tests.unit import attackers
from ansible_collections.bcd.devices.tests.unit.attackers import (  # noqa: F401 (fixtures)  pylint: disable=unused-import
    attacker,
    world,
)
from ansible_collections.bcd.devices.tests.unit.conftest import DEFAULT_GPUS, GPU_A
from ansible_collections.bcd.devices.tests.unit.served_helper import ServedHelper

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


def count_parses(monkeypatch):
    """How many times a vendor spec's bytes are parsed (PyYAML or json), by anyone."""
    parses = []
    real = vendor_spec_module.parse_spec_text

    def counted(text, name):
        parses.append(name)
        return real(text, name)

    monkeypatch.setattr(vendor_spec_module, "parse_spec_text", counted)
    return parses


def test_the_helper_parses_the_vendor_spec_once_until_its_file_changes(make_node, monkeypatch):
    """Twenty writes of a hold parse NVIDIA's spec once; a changed spec (content and mtime) is parsed again,
    and the next spec root writes has its edits. A pass parses it each time it reads it, as before."""
    node = make_node(vendor="full")
    parses = count_parses(monkeypatch)
    helper = served(node)
    hold = {"allocation_id": "a1", "reservation_id": "r1", "binding": "BINDING_HOLD",
            "devices": [{"id": GPU_A, "device_class": "gpu"}]}
    message = {"op": "hold.write", "kind": "cdi", "hold": hold_request(parse_assignment(hold), 1)}
    vendor = node.path("/var/run/cdi/nvidia.yaml")
    try:
        for _write in range(20):
            assert send(helper.socket, (json.dumps(message) + "\n").encode()) == {"ok": True}
        assert parses == ["/var/run/cdi/nvidia.yaml"]
        written = open(node.path("/etc/cdi/bcd-a1.json"), encoding="utf-8").read()
        assert "/dev/nvidia-changed" not in written
        # the vendor's spec changes: an edit of its own on every device node, and a later mtime
        before = os.stat(vendor)
        text = open(vendor, encoding="utf-8").read()
        assert text.count("/dev/nvidiactl") >= 1
        with open(vendor, "w", encoding="utf-8") as handle:
            handle.write(text.replace("/dev/nvidiactl", "/dev/nvidia-changed"))
        os.utime(vendor, ns=(before.st_atime_ns, before.st_mtime_ns + 10 ** 9))
        for _write in range(5):
            assert send(helper.socket, (json.dumps(message) + "\n").encode()) == {"ok": True}
        assert parses == ["/var/run/cdi/nvidia.yaml"] * 2
        assert "/dev/nvidia-changed" in open(node.path("/etc/cdi/bcd-a1.json"), encoding="utf-8").read()
    finally:
        helper.close()
    # a pass (a host of its own, no cache) parses it for every read, as it did
    node.host().vendor_spec()
    node.host().vendor_spec()
    assert len(parses) == 4


def test_a_file_of_the_same_times_and_size_but_other_bytes_is_parsed_again(make_node, monkeypatch):
    """The cache trusts nothing but the bytes it parsed: a spec rewritten in place to the same size, its file's
    identity the same throughout (as device, inode, size, mtime and ctime may all be on a coarse clock), is
    still parsed again."""
    node = make_node(vendor="full")
    parses = count_parses(monkeypatch)
    real = vendor_spec_module.read_regular_identified
    monkeypatch.setattr(vendor_spec_module, "read_regular_identified", lambda path, cap: (real(path, cap)[0], (1, 2, 3, 4, 5)))
    view = NodeView(node.host(), seconds=0)
    vendor = node.path("/var/run/cdi/nvidia.yaml")
    first = view.fresh().vendor_spec()
    assert view.fresh().vendor_spec().digest == first.digest and len(parses) == 1
    before = os.stat(vendor)
    text = open(vendor, encoding="utf-8").read()
    with open(vendor, "r+", encoding="utf-8") as handle:  # in place: the same inode, the same size
        handle.write(text.replace("/dev/nvidiactl", "/dev/nvidiaxtl"))
    os.utime(vendor, ns=(before.st_atime_ns, before.st_mtime_ns))
    again = view.fresh().vendor_spec()
    assert len(parses) == 2 and again.digest != first.digest
    assert "/dev/nvidiaxtl" in json.dumps(again.common_edits) + json.dumps(again.devices)


def test_long_lines_are_parsed_at_most_big_parses_at_a_time(monkeypatch):
    """Sixteen peers each sending a line of 4 MiB of ``[{},{},...]`` would have root hold some 2 GB of objects at
    once, past the unit's MemoryMax: lines past the old 64 KiB are parsed BIG_PARSES at a time; short ones never
    wait for them."""
    import threading
    import time as time_module

    from ansible_collections.bcd.devices.plugins.module_utils.entry import helper as helper_module

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
