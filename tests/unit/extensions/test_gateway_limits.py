# -*- coding: utf-8 -*-
# Copyright: contributors to bcd.devices
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""The source bcd.devices.gateway stays up for everyone (issue 45): a connection flood from one address leaves
another client served, a refused request is answered and closed at once, the keys directory is read when it
changes and never once per event, a big delivery does not keep a small one waiting, TLS connections count before
their handshake, and bad options stop the source at its start with the reason."""

from __future__ import annotations

import asyncio
import datetime
import json
import os
import resource
import runpy
import socket
import ssl
import subprocess
import sys
import threading
import time
import urllib.request

import pytest

from ansible_collections.bcd.devices.plugins.module_utils.state.events import NodeKey
from ansible_collections.bcd.devices.tests.unit.extensions.test_gateway_source import (  # noqa: F401 (fixtures)  pylint: disable=unused-import
    GPU_A,
    REPO,
    SOURCE,
    Node,
    fixture_node_a,
    fixture_node_b,
    fixture_start,
)

MODULE = runpy.run_path(str(SOURCE))


def raw_request(port, data, host="127.0.0.1", source="127.0.0.1", timeout=10):
    """Send ``data`` on a new connection and read until the server closes it: ``(bytes read, how it ended)``."""
    with socket.create_connection((host, port), timeout=timeout, source_address=(source, 0)) as conn:
        conn.sendall(data)
        return read_all(conn)


def read_all(conn):
    chunks = []
    try:
        while True:
            chunk = conn.recv(65536)
            if not chunk:
                return b"".join(chunks), "closed"
            chunks.append(chunk)
    except ConnectionResetError:
        return b"".join(chunks), "reset"


def delivery(events, token=None):
    body = json.dumps({"events": events}).encode()
    head = "POST /v1/events HTTP/1.1\r\nHost: gateway\r\nContent-Type: application/json\r\nContent-Length: %d\r\n" % len(body)
    if token:
        head += "Authorization: Bearer %s\r\n" % token
    return head.encode() + b"\r\n" + body


def answer_of(data):
    head, _sep, body = data.partition(b"\r\n\r\n")
    return int(head.split(b" ")[1]), json.loads(body)


# --- connections ------------------------------------------------------------------------------------------------

FLOOD = """
import asyncio, json, resource, runpy, sys, logging
resource.setrlimit(resource.RLIMIT_NOFILE, (1024, resource.getrlimit(resource.RLIMIT_NOFILE)[1]))
logging.basicConfig(level=logging.ERROR)
main = runpy.run_path(sys.argv[1])["main"]
async def run():
    loop = asyncio.get_running_loop()
    ready = loop.create_future()
    queue = asyncio.Queue()
    task = asyncio.ensure_future(main(queue, dict(json.loads(sys.argv[2]), host="127.0.0.1", port=0, _ready=ready)))
    host, port = await ready
    print(port, flush=True)
    while True:
        item = await queue.get()
        print(json.dumps(item["bcd"]["seq"]), flush=True)
asyncio.run(run())
"""


def test_a_connection_flood_from_one_address_leaves_another_client_served(node_a, request):
    """1 100 connections from one address, each kept open by its client, against a source whose process may open
    1 024 files: past max_connections_per_client each is answered 429 and closed at once, so the source keeps its
    files, and a delivery from another address is served."""
    node_a.bind("alloc_train", GPU_A)
    # this client holds the 1 100 connections open: it needs the files the source is kept from (a test earlier in
    # this worker may have lowered its soft limit, as the helper's own limits do in-process)
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    wanted = 4096 if hard == resource.RLIM_INFINITY else min(4096, hard)
    if soft != resource.RLIM_INFINITY and soft < wanted:
        resource.setrlimit(resource.RLIMIT_NOFILE, (wanted, hard))
        request.addfinalizer(lambda: resource.setrlimit(resource.RLIMIT_NOFILE, (soft, hard)))
    args = {"node_keys": {"node-a": node_a.public_key}}
    server = subprocess.Popen([sys.executable, "-c", FLOOD, str(SOURCE), json.dumps(args)], stdout=subprocess.PIPE,
                              stderr=subprocess.PIPE, text=True, env=dict(os.environ, PYTHONPATH=str(REPO / ".build")))
    flood = []
    try:
        port = int(server.stdout.readline())
        for _n in range(1100):
            conn = socket.create_connection(("127.0.0.1", port), timeout=10, source_address=("127.0.0.1", 0))
            flood.append(conn)
        answers = {}
        for conn in flood[8:]:  # the first 8 are open, waiting for a request; every other one was refused at once
            data, ended = read_all(conn)
            answers[(data.split(b"\r\n", 1)[0], ended)] = answers.get((data.split(b"\r\n", 1)[0], ended), 0) + 1
        assert answers == {(b"HTTP/1.1 429 Too Many Requests", "closed"): 1092}, answers
        data, _ended = raw_request(port, delivery(node_a.unacked()), source="127.0.0.2")
        assert answer_of(data) == (200, {"accepted": [1], "rejected": []})
        assert server.stdout.readline().strip() == "1"  # queued
        # and the flood's 8 open connections are served too, once they send their request
        flood[0].sendall(delivery(node_a.unacked()))
        assert answer_of(read_all(flood[0])[0]) == (200, {"accepted": [1], "rejected": []})
    finally:
        for conn in flood:
            conn.close()
        server.kill()
        _out, err = server.communicate(timeout=10)
    assert "Too many open files" not in err, err[-2000:]


def test_past_max_connections_a_connection_is_answered_503_and_closed(start, node_a):
    node_a.bind("alloc_train", GPU_A)
    source = start(node_keys={"node-a": node_a.public_key}, max_connections=4, max_connections_per_client=2)
    held = []

    def hold_one(address):
        held.append(socket.create_connection(("127.0.0.1", source.port), timeout=10, source_address=(address, 0)))
        time.sleep(0.05)  # counted by the source before the next one

    try:
        hold_one("127.0.0.1")
        hold_one("127.0.0.1")
        data, _ended = raw_request(source.port, delivery(node_a.unacked()), source="127.0.0.1")
        assert data.startswith(b"HTTP/1.1 429 Too Many Requests\r\n") and b"Retry-After: 1\r\n" in data
        assert answer_of(data)[1] == {"error": "2 connections from 127.0.0.1 are open, max_connections_per_client",
                                      "accepted": []}
        hold_one("127.0.0.2")
        hold_one("127.0.0.2")
        data, ended = raw_request(source.port, delivery(node_a.unacked()), source="127.0.0.3")
        assert data.startswith(b"HTTP/1.1 503 Service Unavailable\r\n") and b"Retry-After: 1\r\n" in data
        assert answer_of(data)[1] == {"error": "4 connections are open, max_connections; try again later", "accepted": []}
        assert ended in ("closed", "reset")
    finally:
        for conn in held:
            conn.close()
    deadline = time.monotonic() + 10
    while True:  # the held connections' ends reach the source; then it serves again
        data, _ended = raw_request(source.port, delivery(node_a.unacked()), source="127.0.0.3")
        if answer_of(data)[0] == 200 or time.monotonic() > deadline:
            break
        time.sleep(0.05)
    assert answer_of(data) == (200, {"accepted": [1], "rejected": []})


def test_a_flood_of_refusals_does_not_flood_the_log(start, node_a, caplog):
    node_a.bind("alloc_train", GPU_A)
    source = start(node_keys={"node-a": node_a.public_key}, max_connections_per_client=1)
    with socket.create_connection(("127.0.0.1", source.port), timeout=10):
        time.sleep(0.05)
        for _n in range(100):
            assert raw_request(source.port, b"")[0].startswith(b"HTTP/1.1 429 ")
    lines = [r.getMessage() for r in caplog.records if " 429 " in r.getMessage()]
    assert len(lines) <= 2 * MODULE["LOG_LINES"], len(lines)  # a second's worth, or two across a second's turn


def test_a_refused_request_is_answered_and_closed_at_once_whatever_the_client_goes_on_sending(start, node_a):
    """No lingering read loop: after a 413 the source reads at most DRAIN_BYTES for DRAIN_SECONDS and closes, though
    the client trickles its body on (the source used to read a MiB, for 2 s a chunk)."""
    node_a.bind("alloc_train", GPU_A)
    source = start(node_keys={"node-a": node_a.public_key}, max_body_bytes=1024)
    assert MODULE["DRAIN_BYTES"] <= 4096 and MODULE["DRAIN_SECONDS"] <= 0.1
    with socket.create_connection(("127.0.0.1", source.port), timeout=10) as conn:
        conn.sendall(b"POST / HTTP/1.1\r\nContent-Length: 100000000\r\n\r\n" + b"x" * 100)
        started = time.monotonic()
        answer = b""
        ended = None
        while time.monotonic() - started < 5 and ended is None:
            try:
                conn.sendall(b"x" * 512)  # the client goes on, a little at a time
            except (BrokenPipeError, ConnectionResetError):
                ended = "refused to send"
            conn.settimeout(0.02)
            try:
                while True:  # what came back (the answer is read before a reset is)
                    chunk = conn.recv(65536)
                    if not chunk:
                        ended = ended or "closed"
                        break
                    answer += chunk
            except socket.timeout:
                pass
            except (ConnectionResetError, BrokenPipeError):
                ended = ended or "reset"
        took = time.monotonic() - started
    assert ended is not None, "the source kept reading a refused request for 5 s"
    assert took < 2.0, took  # DRAIN_SECONDS is 0.1: a loaded machine is far from 2 s
    assert answer.startswith(b"HTTP/1.1 413 Content Too Large\r\n")
    # a client that sent a little more than its headers still reads the answer, not a reset
    data, _ended = raw_request(source.port, b"GET /v1/events HTTP/1.1\r\nHost: x\r\n\r\n" + b"y" * 2000)
    assert data.startswith(b"HTTP/1.1 405 Method Not Allowed\r\n")


# --- the keys directory --------------------------------------------------------------------------------------------

def enrol(directory, count):
    """``count`` nodes' keys in ``directory`` (one key shared: reading is what is counted, not the key)."""
    key = NodeKey.load_or_create(str(directory / ".shared.key")).public_key_b64()
    for number in range(count):
        (directory / ("gpu-%04d.pub" % number)).write_text(key + "\n")


def test_the_keys_directory_is_not_read_per_event_and_a_changed_key_is_read_alone(tmp_path, node_a, node_b):
    keys = tmp_path / "keys"
    keys.mkdir()
    enrol(keys, 200)
    (keys / "node-a.pub").write_text(node_a.public_key)
    for number in range(50):
        node_a.bind("alloc_%d" % number, GPU_A)
    clock = [time.monotonic()]  # moved on by the test, from where the source read the directory first

    async def scenario():
        gateway = MODULE["Gateway"](asyncio.Queue(), {"node_keys_dir": str(keys)})
        gateway.keys.clock = lambda: clock[0]  # the keys' clock, moved by the test
        assert gateway.keys.reads == 201  # read once, at the start
        assert (await gateway.deliver(json.dumps({"events": node_a.unacked()}).encode()))["accepted"] == list(range(1, 51))
        assert gateway.keys.reads == 201  # 50 events, no file read again, the directory not even listed
        clock[0] += 5
        (keys / "node-b.pub").write_text(node_b.public_key)  # a node enrolled: the directory changed
        node_b.bind("alloc_b", GPU_A)
        assert (await gateway.deliver(json.dumps({"events": node_b.unacked()}).encode()))["accepted"] == [1]
        assert gateway.keys.reads == 202  # that one file alone
        looks = gateway.keys.looks
        clock[0] += 0.5  # within the second: not even a stat of the directory
        await gateway.deliver(json.dumps({"events": node_b.unacked()}).encode())
        assert gateway.keys.looks == looks and gateway.keys.reads == 202
        return gateway.queue.qsize()

    assert asyncio.run(scenario()) == 51


def test_a_key_rewritten_in_place_is_read_within_the_rescan(tmp_path, node_a):
    keys = tmp_path / "keys"
    keys.mkdir()
    other = NodeKey.load_or_create(str(tmp_path / "other.key"))
    (keys / "node-a.pub").write_text(other.public_key_b64())  # the wrong key first
    node_a.bind("alloc_train", GPU_A)
    clock = [time.monotonic()]  # moved on by the test, from where the source read the directory first

    async def scenario():
        gateway = MODULE["Gateway"](asyncio.Queue(), {"node_keys_dir": str(keys)})
        gateway.keys.clock = lambda: clock[0]
        body = json.dumps({"events": node_a.unacked()}).encode()
        assert (await gateway.deliver(body))["rejected"][0]["reason"].startswith("bad seal")
        stamp = os.stat(keys)
        with open(str(keys / "node-a.pub"), "r+") as handle:  # rewritten in place: the directory does not change
            handle.write(node_a.public_key)
        os.utime(str(keys), ns=(stamp.st_atime_ns, stamp.st_mtime_ns))
        clock[0] += MODULE["KEYS_RECHECK"] + 0.1  # looked at, but the directory did not change
        assert (await gateway.deliver(body))["rejected"][0]["reason"].startswith("bad seal")
        clock[0] += MODULE["KEYS_RESCAN"]  # every file looked at again: this one changed
        return await gateway.deliver(body)

    assert asyncio.run(scenario()) == {"accepted": [1], "rejected": []}


# --- a big delivery and a small one ---------------------------------------------------------------------------------

def test_a_small_delivery_is_answered_while_a_big_one_is_verified(start, tmp_path, node_b):
    """1 000 nodes enrolled, node-a's 10 000 sealed events in one delivery in flight: node-b's one event is answered
    first (the source checks the big one in chunks, giving the loop back between them)."""
    keys = tmp_path / "keys"
    keys.mkdir()
    enrol(keys, 1000)
    big_node = Node(tmp_path / "big", "node-a")
    (keys / "node-a.pub").write_text(big_node.public_key)
    (keys / "node-b.pub").write_text(node_b.public_key)
    body = {"node_id": "node-a", "boot_id": "6f0c1e9e-1c7a-4a43-9a9e-000000000001", "allocation_id": "a",
            "generation": 1, "device_ids": [GPU_A], "cdi_devices": ["bcd.dev/gpu=" + GPU_A],
            "cdi_spec_path": "/etc/cdi/bcd-a.json", "env_file": "/run/bcd/allocations/a.env"}
    big = big_node.journal.append_many([("AllocationBound", dict(body, allocation_id="a%d" % n,
                                                                 cdi_spec_path="/etc/cdi/bcd-a%d.json" % n,
                                                                 env_file="/run/bcd/allocations/a%d.env" % n), big_node.key)
                                        for n in range(10000)], seal_with=big_node.key)
    node_b.bind("alloc_b", GPU_A)
    source = start(node_keys_dir=str(keys))
    finished = {}

    def post(name, events):
        data, _ended = raw_request(source.port, delivery(events), timeout=120)
        finished[name] = (time.monotonic(), answer_of(data))

    started = time.monotonic()
    big_thread = threading.Thread(target=post, args=("big", big))
    big_thread.start()
    time.sleep(0.3)  # its body is sent; its events are being checked
    small_started = time.monotonic()
    post("small", node_b.unacked())
    big_thread.join(120)
    small_at, small_answer = finished["small"]
    big_at, big_answer = finished["big"]
    assert small_answer == (200, {"accepted": [1], "rejected": []})
    assert big_answer[0] == 200 and big_answer[1]["accepted"] == list(range(1, 10001)), big_answer[1].get("error")
    assert small_at < big_at, (small_at - small_started, big_at - started)
    print("small delivery answered in %.3f s while the big one took %.3f s" % (small_at - small_started, big_at - started))


# --- TLS ---------------------------------------------------------------------------------------------------------------

@pytest.fixture(name="certificate")
def fixture_certificate(tmp_path):
    from cryptography import x509  # pylint: disable=import-outside-toplevel
    from cryptography.hazmat.primitives import hashes, serialization  # pylint: disable=import-outside-toplevel
    from cryptography.hazmat.primitives.asymmetric import ec  # pylint: disable=import-outside-toplevel
    from cryptography.x509.oid import NameOID  # pylint: disable=import-outside-toplevel

    key = ec.generate_private_key(ec.SECP256R1())
    name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "localhost")])
    now = datetime.datetime.now(datetime.timezone.utc)
    cert = (x509.CertificateBuilder().subject_name(name).issuer_name(name).public_key(key.public_key())
            .serial_number(1).not_valid_before(now - datetime.timedelta(days=1))
            .not_valid_after(now + datetime.timedelta(days=1))
            .add_extension(x509.SubjectAlternativeName([x509.DNSName("localhost")]), critical=False)
            .sign(key, hashes.SHA256()))
    certfile = tmp_path / "tls.crt"
    keyfile = tmp_path / "tls.key"
    certfile.write_bytes(cert.public_bytes(serialization.Encoding.PEM))
    keyfile.write_bytes(key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8,
                                          serialization.NoEncryption()))
    return str(certfile), str(keyfile)


@pytest.mark.skipif(not MODULE["_START_TLS"], reason="before Python 3.11 asyncio's server does the handshake first")
def test_tls_deliveries_are_served_and_connections_count_before_their_handshake(start, node_a, certificate):
    node_a.bind("alloc_train", GPU_A)
    certfile, keyfile = certificate
    source = start(node_keys={"node-a": node_a.public_key}, certfile=certfile, keyfile=keyfile,
                   max_connections_per_client=2)
    context = ssl.create_default_context(cafile=certfile)
    url = "https://localhost:%d/v1/events" % source.port
    for _delivery in range(5):  # each a connection of its own, its hello sent at once
        request = urllib.request.Request(url, data=json.dumps({"events": node_a.unacked()}).encode(), method="POST")
        with urllib.request.urlopen(request, timeout=10, context=context) as response:
            assert (response.status, json.loads(response.read())) == (200, {"accepted": [1], "rejected": []})
    assert len(source.queued()) == 1
    time.sleep(0.1)  # the last delivery's connection is counted out
    # two connections that never say hello hold the client's two places; the third is closed before any handshake
    silent = [socket.create_connection(("127.0.0.1", source.port), timeout=10) for _n in range(2)]
    try:
        with socket.create_connection(("127.0.0.1", source.port), timeout=10) as third:
            assert read_all(third) in ((b"", "closed"), (b"", "reset"))
    finally:
        for conn in silent:
            conn.close()


# --- options ------------------------------------------------------------------------------------------------------

def test_bad_options_stop_the_source_at_its_start_with_the_reason(tmp_path, node_a):
    a_file = tmp_path / "file"
    a_file.write_text("")
    keys = {"node-a": node_a.public_key}

    async def started(args):
        await asyncio.wait_for(MODULE["main"](asyncio.Queue(), args), 5)

    for args, message in (
            ({"port": 0, "node_keys": keys, "state_dir": str(a_file)}, "state_dir %s cannot be created" % a_file),
            ({"port": 0, "node_keys": keys, "state_dir": ""}, "state_dir must be a directory path"),
            ({"port": 0, "node_keys": keys, "accept_unsealed": "maybe"}, "accept_unsealed must be true or false"),
            ({"port": 0, "node_keys": keys, "max_connections": 0}, "max_connections must be a positive number"),
            ({"port": 0, "node_keys": keys, "max_connections_per_client": "x"}, "max_connections_per_client must be"),
            ({"port": "http", "node_keys": keys}, "port must be a TCP port"),
            ({"port": 0, "node_keys": keys, "certfile": str(a_file)}, "certfile, keyfile or cafile cannot be loaded")):
        with pytest.raises(ValueError, match=message.replace("(", r"\(")):
            asyncio.run(started(args))
    assert MODULE["_boolean"]({"accept_unsealed": "True"}, "accept_unsealed", False) is True


def test_the_state_dir_is_created_owned_by_the_source(start, tmp_path, node_a):
    node_a.bind("alloc_train", GPU_A)
    state = tmp_path / "made" / "here"
    source = start(node_keys={"node-a": node_a.public_key}, state_dir=str(state))
    assert oct(state.stat().st_mode & 0o777) == "0o700"
    assert source.deliver(node_a.unacked())[1]["accepted"] == [1]
    assert [p.name for p in state.iterdir()] == ["node-a.json"]  # no temporary file left


def test_an_unwritable_state_dir_answers_500_and_queues_nothing_twice(start, tmp_path, node_a):
    node_a.bind("alloc_train", GPU_A)
    state = tmp_path / "state"
    source = start(node_keys={"node-a": node_a.public_key}, state_dir=str(state))
    os.rename(str(state), str(tmp_path / "moved"))  # the directory is gone (root writes through any mode)
    state.write_text("not a directory")
    status, answer = source.deliver(node_a.unacked())
    assert status == 500 and answer["accepted"] == []
    assert answer["error"].startswith("the gateway queued the events but could not record them in its state_dir (")
    assert answer["error"].endswith("); post them again: they are not queued twice while it runs")
    assert len(source.queued()) == 1
    assert source.deliver(node_a.unacked())[0] == 500  # posted again: still said, and not queued twice
    assert source.queued() == []
    state.unlink()
    os.rename(str(tmp_path / "moved"), str(state))
    assert source.deliver(node_a.unacked()) == (200, {"accepted": [1], "rejected": []})  # recorded now
    assert source.queued() == []
    assert json.loads((state / "node-a.json").read_text())["through"] == 1


def test_the_documentation_lists_every_option_with_the_default_the_source_takes(node_a):
    """The source's DOCUMENTATION (ansible-doc does not list event sources: it is the reference) says what runs."""
    import yaml  # pylint: disable=import-outside-toplevel

    documented = yaml.safe_load(MODULE["DOCUMENTATION"])["options"]
    assert sorted(documented) == sorted(MODULE["OPTIONS"])
    gateway = MODULE["Gateway"](asyncio.Queue(), {"node_keys": {"node-a": node_a.public_key}})
    taken = {"max_body_bytes": gateway.max_body, "rate": gateway.rate, "burst": gateway.burst,
             "max_connections": gateway.max_connections, "max_connections_per_client": gateway.max_per_client,
             "max_events": gateway.max_events, "timeout": gateway.timeout, "accept_unsealed": gateway.accept_unsealed,
             "token_header": "Authorization"}
    assert dict((name, documented[name].get("default")) for name in taken) == taken
    assert documented["state_dir"].get("default") is None and gateway.state is None
    yaml.safe_load(MODULE["EXAMPLES"])
