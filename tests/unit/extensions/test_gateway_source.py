# -*- coding: utf-8 -*-
# Copyright: contributors to bcd.devices
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""The event source bcd.devices.gateway, driven as ansible-rulebook drives it: loaded with ``runpy.run_path``, its
``main(queue, args)`` run with an ``asyncio.Queue``, and a real HTTP client posting deliveries of events a real node
journal signed with its own key (state/events.py). What a rulebook sees is what comes off the queue; what the role
acknowledges is what the answer's ``accepted`` says."""

from __future__ import annotations

import asyncio
import json
import os
import runpy
import socket
import subprocess
import sys
import threading
import time
import urllib.error
import urllib.request
from pathlib import Path

import pytest

from ansible_collections.bcd.devices.plugins.module_utils.state.events import Journal, NodeKey
from ansible_collections.bcd.devices.tests.unit.conftest import DEFAULT_GPUS
from ansible_collections.bcd.devices.tests.unit.conftest import GPU_B as FAKE_GPU_B
from ansible_collections.bcd.devices.tests.unit.plugins.modules.test_gpu_health import sick
from ansible_collections.bcd.devices.tests.unit.plugins.modules.test_holds import run

REPO = Path(__file__).resolve().parents[3]
SOURCE = REPO / "extensions" / "eda" / "plugins" / "event_source" / "gateway.py"
GPU_A = "GPU-5f1c2a90-0001-4000-8000-000000000001"
GPU_B = "GPU-5f1c2a90-0001-4000-8000-000000000002"
TOKEN = "tok-5b0e1d7c9a2f4e31"
KEYS_RECHECK = runpy.run_path(str(SOURCE))["KEYS_RECHECK"]


class Node:
    """A node's state directory: its key and its journal, made by the collection's own code."""

    def __init__(self, path, node_id):
        self.node_id = node_id
        self.key = NodeKey.load_or_create(str(path / "node.key"))
        self.journal = Journal(str(path))

    @property
    def public_key(self):
        return self.key.public_key_b64()

    def append(self, event_type, body, sealed=True):
        """Journal one event as a pass does: signed when its type is, sealed (format 2) unless ``sealed`` is
        false (a node whose collection predates seals)."""
        key = self.key if event_type != "AllocationFailed" else None
        [event] = self.journal.append_many([(event_type, body, key)], seal_with=self.key if sealed else None)
        return event

    def bind(self, allocation, gpu, generation=1, sealed=True):
        return self.append("AllocationBound", {
            "node_id": self.node_id, "boot_id": "6f0c1e9e-1c7a-4a43-9a9e-000000000001", "allocation_id": allocation,
            "generation": generation, "device_ids": [gpu], "cdi_devices": ["bcd.dev/gpu=" + gpu],
            "cdi_spec_path": "/etc/cdi/bcd-%s.json" % allocation,
            "env_file": "/run/bcd/allocations/%s.env" % allocation}, sealed)

    def release(self, allocation, gpu, generation=2, sealed=True):
        return self.append("AllocationReleased", {
            "node_id": self.node_id, "boot_id": "6f0c1e9e-1c7a-4a43-9a9e-000000000001", "allocation_id": allocation,
            "generation": generation, "device_ids": [gpu]}, sealed)

    def refuse(self, allocation, generation=1, sealed=True):
        return self.append("AllocationFailed", {
            "node_id": self.node_id, "allocation_id": allocation, "generation": generation, "reason": "overlap",
            "message": "%s is in maintenance (firmware)" % GPU_A}, sealed)

    def condition(self, event_type, gpu, generation=4, sealed=True, message=None):
        cleared = event_type.endswith("Cleared")
        return self.append(event_type, {
            "type": event_type, "node_id": self.node_id, "boot_id": "6f0c1e9e-1c7a-4a43-9a9e-000000000001",
            "generation": generation, "device_ids": [gpu], "reason": "ConditionCleared" if cleared else "GPUFaulted",
            "message": message or (
                "GPUUnhealthy (%s) no longer holds" % gpu if cleared
                else "%s is unhealthy: Xid 79: GPU has fallen off the bus (reboot the node)" % gpu)},
            sealed)

    def seal(self, event):
        """``event`` sealed anew by this node's key, whatever it says (a node's key speaking for it)."""
        return self.key_seal(self.key, event)

    @staticmethod
    def key_seal(key, event):
        return dict(event, format=2, seal=key.seal(event["seq"], event["type"], event["body"]))

    def unacked(self):
        return self.journal.unacked()


@pytest.fixture(name="node_a")
def fixture_node_a(tmp_path):
    return Node(tmp_path / "node-a", "node-a")


@pytest.fixture(name="node_b")
def fixture_node_b(tmp_path):
    return Node(tmp_path / "node-b", "node-b")


class Running:
    """The source's ``main`` on an event loop of its own thread, as ansible-rulebook runs it, and an HTTP client."""

    def __init__(self, args):
        self.module = runpy.run_path(str(SOURCE))  # how ansible-rulebook loads a collection's source
        self.loop = asyncio.new_event_loop()
        self.thread = threading.Thread(target=self.loop.run_forever, daemon=True)
        self.thread.start()
        self.queue = self._call(self._make_queue())
        self.ready = self._call(self._future())
        self.task = asyncio.run_coroutine_threadsafe(
            self.module["main"](self.queue, dict(args, host="127.0.0.1", port=0, _ready=self.ready)), self.loop)
        host, port = asyncio.run_coroutine_threadsafe(self._await(self.ready), self.loop).result(10)
        self.url = "http://%s:%d/v1/events" % (host, port)
        self.port = port

    def _call(self, coroutine):
        return asyncio.run_coroutine_threadsafe(coroutine, self.loop).result(10)

    @staticmethod
    async def _make_queue():
        return asyncio.Queue()

    @staticmethod
    async def _future():
        return asyncio.get_running_loop().create_future()

    @staticmethod
    async def _await(future):
        return await future

    def post(self, body, headers=None):
        """``(status, answer)`` of a POST of ``body`` (bytes, or data made JSON)."""
        data = body if isinstance(body, bytes) else json.dumps(body).encode()
        request = urllib.request.Request(self.url, data=data, method="POST",
                                         headers=dict({"Content-Type": "application/json"}, **(headers or {})))
        try:
            with urllib.request.urlopen(request, timeout=10) as response:
                return response.status, json.loads(response.read())
        except urllib.error.HTTPError as exc:
            return exc.code, json.loads(exc.read())

    def deliver(self, events, headers=None):
        return self.post({"events": events}, headers)

    def queued(self):
        """The events on the queue now, taken off it, oldest first."""
        async def drain():
            items = []
            while not self.queue.empty():
                items.append(self.queue.get_nowait())
            return items
        return self._call(drain())

    def stop(self):
        if self.loop.is_closed():  # stopped by the test already
            return

        async def cancel_all():  # the source and its connections, waited for: nothing is left pending
            tasks = [t for t in asyncio.all_tasks() if t is not asyncio.current_task()]
            for task in tasks:
                task.cancel()
            await asyncio.gather(*tasks, return_exceptions=True)
        self._call(cancel_all())
        assert self.task.cancelled()
        self.loop.call_soon_threadsafe(self.loop.stop)
        self.thread.join(10)
        self.loop.close()


@pytest.fixture(name="start")
def fixture_start():
    running = []

    def start(**args):
        source = Running(args)
        running.append(source)
        return source

    yield start
    for source in running:
        source.stop()


def seqs(events):
    return [event["seq"] for event in events]


def test_accepted_events_are_queued_in_order_with_the_documented_shape(start, node_a):
    bound = node_a.bind("alloc_train", GPU_A)
    failed = node_a.refuse("alloc_vfio")
    released = node_a.release("alloc_train", GPU_A)
    source = start(node_keys={"node-a": node_a.public_key})

    status, answer = source.deliver(node_a.unacked())

    assert (status, answer) == (200, {"accepted": [1, 2, 3], "rejected": []})
    queued = source.queued()
    assert [(e["bcd"]["seq"], e["bcd"]["type"]) for e in queued] == [
        (1, "AllocationBound"), (2, "AllocationFailed"), (3, "AllocationReleased")]
    assert queued[0] == {
        "bcd": {"type": "AllocationBound", "node": "node-a", "seq": 1, "allocation": "alloc_train",
                "devices": [GPU_A], "reason": None, "generation": 1, "signed": True, "sealed": True, "format": 2,
                "body": bound["body"]},
        "meta": {"hosts": "node-a"}}
    # a refusal carries no signature, but its seal is the node key's: it is the node's word, and says so
    assert queued[1]["bcd"] == {"type": "AllocationFailed", "node": "node-a", "seq": 2, "allocation": "alloc_vfio",
                                "devices": [], "reason": "overlap", "generation": 1, "signed": True, "sealed": True,
                                "format": 2, "body": failed["body"]}
    assert queued[2]["bcd"]["body"] == released["body"] and queued[2]["bcd"]["generation"] == 2


def test_a_delivery_posted_again_is_accepted_and_not_queued_twice(start, node_a):
    node_a.bind("alloc_train", GPU_A)
    node_a.bind("alloc_notebook", GPU_B)
    source = start(node_keys={"node-a": node_a.public_key})
    assert source.deliver(node_a.unacked()) == (200, {"accepted": [1, 2], "rejected": []})
    assert seqs(e["bcd"] for e in source.queued()) == [1, 2]

    # the run died before acknowledging: the next run posts 1 and 2 again, with 3
    node_a.release("alloc_train", GPU_A)
    assert source.deliver(node_a.unacked()) == (200, {"accepted": [1, 2, 3], "rejected": []})
    assert seqs(e["bcd"] for e in source.queued()) == [3]
    # and once more, the same: nothing new
    assert source.deliver(node_a.unacked()) == (200, {"accepted": [1, 2, 3], "rejected": []})
    assert source.queued() == []


def test_the_events_of_two_nodes_are_told_apart_by_node_and_seq(start, node_a, node_b):
    node_a.bind("alloc_a", GPU_A)
    node_b.bind("alloc_b", GPU_A)
    source = start(node_keys={"node-a": node_a.public_key, "node-b": node_b.public_key})
    assert source.deliver(node_a.unacked())[1]["accepted"] == [1]
    assert source.deliver(node_b.unacked())[1]["accepted"] == [1]
    assert [(e["bcd"]["node"], e["bcd"]["seq"]) for e in source.queued()] == [("node-a", 1), ("node-b", 1)]


def test_a_forged_event_is_rejected_with_a_reason_and_the_rest_queued(start, node_a):
    node_a.bind("alloc_train", GPU_A)
    node_a.bind("alloc_notebook", GPU_B)
    events = node_a.unacked()
    events[0]["body"]["device_ids"] = [GPU_B]  # someone between the node and the gateway changed the GPU
    passed_off = dict(events[1], type="AllocationReleased", body=dict(events[1]["body"]))  # a bind passed off as a release
    for field in ("cdi_devices", "cdi_spec_path", "env_file"):
        del passed_off["body"][field]
    source = start(node_keys={"node-a": node_a.public_key})

    status, answer = source.deliver([events[0], passed_off])

    assert status == 200 and answer["accepted"] == []
    assert answer["rejected"] == [
        {"seq": 1, "node": "node-a", "reason": "bad seal: the AllocationBound at seq 1 is not sealed by the key of node "
                                               "node-a (its seq, type or body was changed, or another key sealed it)"},
        {"seq": 2, "node": "node-a", "reason": "bad seal: the AllocationReleased at seq 2 is not sealed by the key of "
                                               "node node-a (its seq, type or body was changed, or another key sealed "
                                               "it)"}]
    assert source.queued() == []
    # the node's own events still go through: the forgery poisoned nothing
    assert source.deliver(node_a.unacked()) == (200, {"accepted": [1, 2], "rejected": []})
    assert seqs(e["bcd"] for e in source.queued()) == [1, 2]


def test_an_event_signed_by_another_nodes_key_is_rejected(start, node_a, node_b):
    node_b.bind("alloc_b", GPU_A)
    event = node_b.unacked()[0]
    event["body"]["node_id"] = "node-a"  # node-b's key cannot speak for node-a
    event["signature"] = node_b.key.sign(event["body"])
    event = node_b.seal(event)
    source = start(node_keys={"node-a": node_a.public_key, "node-b": node_b.public_key})
    assert source.deliver([event])[1]["rejected"] == [{"seq": 1, "node": "node-a", "reason": (
        "bad seal: the AllocationBound at seq 1 is not sealed by the key of node node-a (its seq, type or body was "
        "changed, or another key sealed it)")}]
    assert source.queued() == []


def test_an_unknown_node_is_rejected_with_a_reason(start, node_a, node_b):
    node_b.bind("alloc_b", GPU_A)
    source = start(node_keys={"node-a": node_a.public_key})
    status, answer = source.deliver(node_b.unacked())
    assert status == 200 and answer["accepted"] == []
    assert answer["rejected"] == [{"seq": 1, "node": "node-b", "reason": (
        'unknown node "node-b": no public key is configured for it (node_keys, node_keys_dir)')}]
    assert source.queued() == []


def test_a_node_enrolled_in_the_keys_directory_is_known_without_a_restart(start, tmp_path, node_a, node_b):
    keys = tmp_path / "keys"
    keys.mkdir()
    (keys / "node-a.pub").write_text(node_a.public_key + "\n")
    (keys / "README").write_text("not a key\n")  # ignored, with a warning
    node_a.bind("alloc_a", GPU_A)
    node_b.bind("alloc_b", GPU_A)
    source = start(node_keys_dir=str(keys))
    assert source.deliver(node_a.unacked())[1]["accepted"] == [1]
    assert source.deliver(node_b.unacked())[1]["accepted"] == []
    (keys / "node-b").write_text(node_b.public_key)
    time.sleep(KEYS_RECHECK + 0.1)  # the directory is looked at once a second at most, never once per event
    assert source.deliver(node_b.unacked())[1]["accepted"] == [1]
    assert [(e["bcd"]["node"], e["bcd"]["seq"]) for e in source.queued()] == [("node-a", 1), ("node-b", 1)]


def test_a_signed_condition_is_queued_and_one_passed_off_as_another_type_is_not(start, node_a):
    condition = node_a.condition("GPUUnhealthy", GPU_A)
    renamed = node_a.seal(dict(condition, type="GPUUnhealthyCleared"))  # sealed anew, its body still says GPUUnhealthy
    unsigned = node_a.seal({"seq": 9, "type": "GPUUnhealthy", "body": condition["body"]})
    source = start(node_keys={"node-a": node_a.public_key})

    status, answer = source.deliver([condition, renamed, unsigned])

    assert status == 200 and answer["accepted"] == [1]
    assert [r["reason"] for r in answer["rejected"]] == [
        'body.type: must name the event\'s own type, GPUUnhealthyCleared, got "GPUUnhealthy"',
        "purpose: every GPUUnhealthy carries attested-report, got null"]
    assert [e["bcd"] for e in source.queued()] == [{
        "type": "GPUUnhealthy", "node": "node-a", "seq": 1, "allocation": None, "devices": [GPU_A],
        "reason": "GPUFaulted", "generation": 4, "signed": True, "sealed": True, "format": 2,
        "body": condition["body"]}]


def test_a_gpu_unhealthy_a_pass_journaled_on_a_fakehw_node_is_verified_and_queued(start, capsys, node):
    """Not a body made up here: the pass of bcd.devices.holds on a fakehw node whose GPU logged Xid 79 journals the
    signed GPUUnhealthy (docs/events.md, "Conditions"), and the source verifies it against the node's key."""
    node.set_hardware(gpus=sick(DEFAULT_GPUS, 1, xids=[79]))
    result = run(capsys, node, generation=3, devices=[])
    [event] = [e for e in result["events"] if e["type"] == "GPUUnhealthy"]
    key = NodeKey.load(node.state("node.key")).public_key_b64()
    source = start(node_keys={"node-a": key})

    status, answer = source.deliver(result["events"])
    assert status == 200 and answer == {"accepted": [event["seq"]], "rejected": []}
    [queued] = source.queued()
    assert queued["bcd"] == {"type": "GPUUnhealthy", "node": "node-a", "seq": event["seq"], "allocation": None,
                             "devices": [FAKE_GPU_B], "reason": "GPUFaulted", "generation": 3, "signed": True,
                             "sealed": True, "format": 2, "body": event["body"]}
    assert queued["meta"] == {"hosts": "node-a"}


def test_a_wrong_or_missing_token_is_refused_and_nothing_queued(start, node_a):
    node_a.bind("alloc_train", GPU_A)
    source = start(node_keys={"node-a": node_a.public_key}, token=TOKEN)
    for headers in ({}, {"Authorization": "Bearer wrong"}, {"Authorization": TOKEN}):
        status, answer = source.deliver(node_a.unacked(), headers)
        assert status == 401, headers
        assert answer == {"error": "a missing or wrong token in the header authorization", "accepted": []}
    assert source.queued() == []
    assert source.deliver(node_a.unacked(), {"Authorization": "Bearer " + TOKEN})[1]["accepted"] == [1]
    assert len(source.queued()) == 1


def test_a_token_in_a_header_of_its_own(start, node_a):
    node_a.bind("alloc_train", GPU_A)
    source = start(node_keys={"node-a": node_a.public_key}, token=TOKEN, token_header="X-Bcd-Token")
    assert source.deliver(node_a.unacked(), {"Authorization": "Bearer " + TOKEN})[0] == 401
    assert source.deliver(node_a.unacked(), {"X-Bcd-Token": TOKEN})[1]["accepted"] == [1]


def test_an_oversized_body_is_refused_413_unread(start, node_a):
    node_a.bind("alloc_train", GPU_A)
    source = start(node_keys={"node-a": node_a.public_key}, max_body_bytes=2048)
    padding = {"events": node_a.unacked(), "padding": "x" * 4096}
    status, answer = source.post(padding)
    assert status == 413
    assert answer["error"].startswith("the body of ") and answer["error"].endswith("is larger than max_body_bytes (2048)")
    assert source.queued() == []
    assert source.deliver(node_a.unacked()) == (200, {"accepted": [1], "rejected": []})


@pytest.mark.parametrize("body, reason", [
    (b"{not json", "the request body is not JSON: "),
    (b"\xff\xfe", "the request body is not UTF-8 JSON"),
    (b"[1, 2]", 'the request body must be a JSON object {"events": [...]}, got [1, 2]'),
    (b'{"events": {"seq": 1}}', 'the request body must be a JSON object {"events": [...]}, got {"events": {"seq": 1}}'),
    (b"[" * 100 + b"]" * 100, "the request body is refused: "),
])
def test_garbage_is_refused_400_with_a_reason_and_the_source_serves_on(start, node_a, body, reason):
    node_a.bind("alloc_train", GPU_A)
    source = start(node_keys={"node-a": node_a.public_key})
    status, answer = source.post(body)
    assert status == 400 and answer["error"].startswith(reason), answer
    assert answer["accepted"] == []
    assert source.queued() == []
    assert source.deliver(node_a.unacked()) == (200, {"accepted": [1], "rejected": []})


def test_malformed_events_in_a_delivery_are_rejected_one_by_one(start, node_a):
    node_a.bind("alloc_train", GPU_A)
    good = node_a.unacked()[0]
    source = start(node_keys={"node-a": node_a.public_key})
    status, answer = source.deliver(["text", {"seq": True, "type": "AllocationBound", "body": {}},
                                     {"seq": 5, "type": "AllocationFailed", "body": {"allocation_id": "x"}},
                                     {"seq": 6, "type": "AllocationFailed", "body": []}, good])
    assert status == 200 and answer["accepted"] == [1]
    assert [(r["seq"], r["node"], r["reason"]) for r in answer["rejected"]] == [
        (None, None, 'not an event: a mapping is expected, got "text"'),
        (None, None, "seq: must be an integer from 1 to 9223372036854775807, got true"),
        (5, None, "body.node_id: missing (every AllocationFailed carries it)"),
        (6, None, "body: must be a mapping, got []")]
    assert seqs(e["bcd"] for e in source.queued()) == [1]


def test_raw_http_garbage_gets_an_answer_and_the_source_serves_on(start, node_a):
    node_a.bind("alloc_train", GPU_A)
    source = start(node_keys={"node-a": node_a.public_key})

    def raw(data):
        with socket.create_connection(("127.0.0.1", source.port), timeout=10) as conn:
            conn.sendall(data)
            conn.shutdown(socket.SHUT_WR)
            return b"".join(iter(lambda: conn.recv(65536), b""))

    assert raw(b"GET /v1/events HTTP/1.1\r\nHost: x\r\n\r\n").startswith(b"HTTP/1.1 405 ")
    assert raw(b"hello\r\n\r\n").startswith(b"HTTP/1.1 400 ")
    assert raw(b"POST / HTTP/1.1\r\nTransfer-Encoding: chunked\r\n\r\n0\r\n\r\n").startswith(b"HTTP/1.1 411 ")
    assert raw(b"POST / HTTP/1.1\r\nContent-Length: 50\r\n\r\n{}").startswith(b"HTTP/1.1 400 ")
    assert raw(b"POST / HTTP/1.1\r\nX: " + b"a" * 20000 + b"\r\n\r\n").startswith(b"HTTP/1.1 431 ")
    assert raw(b"POST / HTTP/1.1\r\n").startswith(b"HTTP/1.1 400 Bad Request\r\n")
    assert source.queued() == []
    assert source.deliver(node_a.unacked()) == (200, {"accepted": [1], "rejected": []})


def test_past_the_rate_a_client_is_answered_429(start, node_a):
    node_a.bind("alloc_train", GPU_A)
    source = start(node_keys={"node-a": node_a.public_key}, rate=0.01, burst=3)
    answers = [source.deliver(node_a.unacked())[0] for _attempt in range(5)]
    assert answers == [200, 200, 200, 429, 429]
    assert len(source.queued()) == 1


def test_a_bad_configuration_stops_the_source_with_a_reason(tmp_path):
    module = runpy.run_path(str(SOURCE))

    async def started(args):
        await asyncio.wait_for(module["main"](asyncio.Queue(), args), 5)

    for args, message in (
            ({"port": 0}, "give the node public keys, in node_keys or node_keys_dir"),
            ({"port": 0, "node_keys": {"node-a": "not-a-key"}}, "node_keys[node-a]: a node public key is the base64"),
            ({"port": 0, "node_keys_dir": str(tmp_path / "none")}, "is not a directory"),
            ({"node_keys": {}}, "the argument port is required")):
        with pytest.raises(ValueError, match=message.replace("[", r"\[").replace("]", r"\]")):
            asyncio.run(started(args))


def test_the_source_finds_the_collection_from_where_it_is_installed(tmp_path, node_a):
    """In a decision environment ``ansible_collections`` is not on ``sys.path``: the source finds the collection it
    is installed in (here, a copy of the tree in a collections path) and verifies with its code."""
    tree = tmp_path / "collections" / "ansible_collections" / "bcd" / "devices"
    for part in ("plugins/module_utils", "extensions/eda/plugins/event_source"):
        (tree / part).parent.mkdir(parents=True, exist_ok=True)
        subprocess.run(["cp", "-r", str(REPO / part), str(tree / part)], check=True)
    for init in ("plugins/__init__.py",):
        (tree / init).touch()
    node_a.bind("alloc_train", GPU_A)
    event = node_a.unacked()[0]
    script = """
import asyncio, json, runpy, sys
gateway = runpy.run_path(sys.argv[1])["Gateway"]
async def main():
    queue = asyncio.Queue()
    answer = await gateway(queue, {"node_keys": {"node-a": sys.argv[2]}}).deliver(sys.argv[3].encode())
    print(json.dumps([answer, queue.qsize(), sys.modules["ansible_collections.bcd.devices.plugins.module_utils.state.events"].__file__]))
asyncio.run(main())
"""
    done = subprocess.run([sys.executable, "-I", "-c", script, str(tree / "extensions/eda/plugins/event_source/gateway.py"),
                           node_a.public_key, json.dumps({"events": [event]})],
                          capture_output=True, text=True, check=False, env={"PATH": os.environ["PATH"]})
    assert done.returncode == 0, done.stderr
    answer, queued, loaded = json.loads(done.stdout)
    assert answer == {"accepted": [1], "rejected": []} and queued == 1
    assert loaded == str(tree / "plugins/module_utils/state/events.py")


DELIVER = """
- hosts: nodes
  gather_facts: false
  tasks:
    - name: Bind a hold
      bcd.devices.holds:
        root: "{{ node_root }}"
        fakehw: "{{ node_root }}/fakehw.yml"
        generation: 1
        devices:
          - {allocation_id: a1, reservation_id: rsv_1, binding: BINDING_HOLD, devices: [{id: %s}]}
    - name: Deliver the events
      ansible.builtin.include_role:
        name: bcd.devices.bcd_holds
        tasks_from: deliver
      vars:
        bcd_holds_root: "{{ node_root }}"
        bcd_holds_gateway_url: "{{ gateway_url }}"
        bcd_holds_gateway_headers: {Authorization: "Bearer %s"}
        bcd_holds_gateway_required: true
    - name: Read the events left
      bcd.devices.events:
        root: "{{ node_root }}"
      register: left
    - name: Show what was delivered
      ansible.builtin.debug:
        msg: "delivered {{ bcd_holds_delivery.accepted }}, left {{ left.events | map(attribute='seq') | list }}"
""" % (GPU_A, TOKEN)


@pytest.mark.skipif(os.geteuid() != 0, reason="needs root (the role's delivery reads the node's state)")
def test_the_roles_delivery_to_the_source_is_queued_and_acknowledged(start, tmp_path):
    """The role's own delivery (tasks_from: deliver) against the running source: the event is queued once, and the
    node acknowledges it."""
    root = tmp_path / "node-a"
    subprocess.run([sys.executable, str(REPO / "hack" / "fakehw_node.py"), "--root", str(root), "--compact"],
                   check=True, capture_output=True)
    keys = tmp_path / "keys"
    keys.mkdir()
    state = root / "var" / "lib" / "bcd"
    NodeKey.load_or_create(str(state / "node.key"))  # the node's identity, as holds_info would report it
    (keys / "node-a.pub").write_text(NodeKey.load(str(state / "node.key")).public_key_b64())
    source = start(node_keys_dir=str(keys), token=TOKEN)
    (tmp_path / "hosts.yml").write_text(json.dumps({"nodes": {"hosts": {"node-a": {
        "ansible_connection": "local", "ansible_python_interpreter": sys.executable, "node_root": str(root)}}}}))
    (tmp_path / "play.yml").write_text(DELIVER)
    (tmp_path / "ansible.cfg").write_text("[defaults]\n")
    env = dict(os.environ, ANSIBLE_COLLECTIONS_PATH=str(REPO / ".build"), ANSIBLE_HOME=str(tmp_path / "home"),
               ANSIBLE_LOCAL_TEMP=str(tmp_path / "home" / "tmp"), ANSIBLE_NOCOLOR="1",
               ANSIBLE_CONFIG=str(tmp_path / "ansible.cfg"))
    done = subprocess.run([str(Path(sys.executable).parent / "ansible-playbook"), "-i", str(tmp_path / "hosts.yml"),
                           str(tmp_path / "play.yml"), "-e", json.dumps({"gateway_url": source.url})],
                          env=env, cwd=str(tmp_path), capture_output=True, text=True, timeout=300, check=False)
    output = done.stdout + done.stderr
    assert done.returncode == 0, output[-6000:]
    assert '"msg": "delivered [1], left []"' in output
    [event] = source.queued()
    assert (event["bcd"]["type"], event["bcd"]["node"], event["bcd"]["allocation"], event["bcd"]["signed"]) == (
        "AllocationBound", "node-a", "a1", True)
