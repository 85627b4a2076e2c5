# -*- coding: utf-8 -*-
# Copyright: contributors to bcd.devices
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""``bcd-holds deliver``: a fakehw node posts its own journal to the collection's real gateway.

The gateway is the event source ``bcd.devices.gateway`` (extensions/eda/plugins/event_source/gateway.py),
loaded with ``runpy`` and run on an event loop of its own thread as ansible-rulebook runs it, listening on
127.0.0.1 port 0. What a rulebook would see is what comes off its queue; what the node kept is what
``bcd-holds events`` lists afterwards. The node's events are journaled by real passes (and, where a
rejection is wanted, one event naming a node the gateway does not know)."""

from __future__ import annotations

import asyncio
import datetime
import json
import os
import runpy
import socket
import threading
from http.server import BaseHTTPRequestHandler, HTTPServer
from pathlib import Path

import pytest

from ansible_collections.bcd.devices.plugins.module_utils.entry import deliver as deliver_module
from ansible_collections.bcd.devices.plugins.module_utils.entry.cli import EX_CHECK, EX_ERROR, EX_OK, EX_RETRY, main
from ansible_collections.bcd.devices.plugins.module_utils.state.events import Journal, NodeKey
from ansible_collections.bcd.devices.tests.unit.builders import hold
from ansible_collections.bcd.devices.tests.unit.conftest import GPU_B, GPU_C, open_to_all

REPO = Path(__file__).resolve().parents[5]
SOURCE = REPO / "extensions" / "eda" / "plugins" / "event_source" / "gateway.py"
TOKEN = "tok-0f3b8c2d5e6a4b19"
CONFIG = "/etc/bcd-holds/deliver.json"
TOKEN_FILE = "/etc/bcd-holds/gateway-token"
BACKOFF = "/var/lib/bcd/delivery-backoff.json"


class Source:
    """The source's ``main(queue, args)`` on its own event loop and thread, as ansible-rulebook runs it."""

    def __init__(self, **args):
        module = runpy.run_path(str(SOURCE))
        self.loop = asyncio.new_event_loop()
        self.thread = threading.Thread(target=self.loop.run_forever, daemon=True)
        self.thread.start()
        self.queue = self._call(self._make(asyncio.Queue))
        ready = self._call(self._future())
        self.task = asyncio.run_coroutine_threadsafe(
            module["main"](self.queue, dict(args, host="127.0.0.1", port=0, _ready=ready)), self.loop)
        host, port = asyncio.run_coroutine_threadsafe(self._await(ready), self.loop).result(10)
        self.url = "http://%s:%d/v1/events" % (host, port)

    def _call(self, coroutine):
        return asyncio.run_coroutine_threadsafe(coroutine, self.loop).result(10)

    @staticmethod
    async def _make(kind):
        return kind()

    @staticmethod
    async def _future():
        return asyncio.get_running_loop().create_future()

    @staticmethod
    async def _await(future):
        return await future

    def queued(self):
        """``[(node, seq, type)]`` of what is on the queue now, taken off it."""
        async def drain():
            items = []
            while not self.queue.empty():
                items.append(self.queue.get_nowait())
            return items
        return [(e["bcd"]["node"], e["bcd"]["seq"], e["bcd"]["type"]) for e in self._call(drain())]

    def stop(self):
        async def cancel_all():
            tasks = [t for t in asyncio.all_tasks() if t is not asyncio.current_task()]
            for task in tasks:
                task.cancel()
            await asyncio.gather(*tasks, return_exceptions=True)
        self._call(cancel_all())
        self.loop.call_soon_threadsafe(self.loop.stop)
        self.thread.join(10)
        self.loop.close()


@pytest.fixture(name="start")
def fixture_start():
    running = []

    def start(**args):
        running.append(Source(**args))
        return running[-1]

    yield start
    for source in running:
        source.stop()


@pytest.fixture(autouse=True)
def clean_environment(monkeypatch):
    """Neither systemd's credentials nor its journal: each test sets what it means to."""
    monkeypatch.delenv("CREDENTIALS_DIRECTORY", raising=False)
    monkeypatch.delenv("JOURNAL_STREAM", raising=False)
    monkeypatch.setattr(deliver_module.random, "random", lambda: 0.5)  # the backoff's jitter: none


def configure(node, url, token=TOKEN, mode=0o644, **settings):
    """The settings the role writes (/etc/bcd-holds/deliver.json), and the token's file, root's 0600."""
    data = dict({"url": url, "timeout": 10}, **settings)
    if token is not None:
        node.write(TOKEN_FILE, token + "\n")
        os.chmod(node.path(TOKEN_FILE), 0o600)
        data.setdefault("token_file", TOKEN_FILE)
    node.write(CONFIG, json.dumps(data))
    os.chmod(node.path(CONFIG), mode)


def deliver(capsys, node, *argv):
    code = main(["deliver", "--root", node.root] + list(argv))
    out, err = capsys.readouterr()
    assert "Traceback" not in out + err
    return code, out, err


def journal(node):
    return [event["seq"] for event in Journal(node.state()).unacked()]


def key_of(node):
    return NodeKey.load(node.state("node.key")).public_key_b64()


def bound(node, *allocations, generation=1):
    """A pass that binds each allocation on its GPU: one AllocationBound each, in order."""
    gpus = {"a1": GPU_B, "a2": GPU_C}
    result = node.run(generation, [hold(allocation, gpus[allocation]) for allocation in allocations])
    return [event["seq"] for event in result.events]


def foreign_failure(node):
    """An event the gateway rejects: a refusal that names a node it has no key for."""
    return Journal(node.state()).append("AllocationFailed", {
        "node_id": "node-zz", "allocation_id": "a9", "generation": 1, "reason": "overlap", "message": "x"})["seq"]


def closed_port_url():
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    return "http://127.0.0.1:%d/v1/events" % port


# -- delivered ---------------------------------------------------------------------------------

def test_the_events_reach_the_queue_and_the_accepted_ones_are_acknowledged(capsys, node, start):
    assert bound(node, "a1", "a2") == [1, 2]
    source = start(node_keys={"node-a": key_of(node)}, token=TOKEN)
    configure(node, source.url)

    code, out, err = deliver(capsys, node)

    assert (code, err) == (EX_OK, "")
    assert out == ("delivered to %s: posted 2 events in 1 request, 2 accepted, acknowledged 2 through seq 2, "
                   "0 left\n" % source.url)
    assert source.queued() == [("node-a", 1, "AllocationBound"), ("node-a", 2, "AllocationBound")]
    assert journal(node) == []
    # the next run finds nothing, and posts nothing
    assert deliver(capsys, node) == (EX_OK, "nothing to deliver to %s: no unacknowledged event\n" % source.url, "")
    assert source.queued() == []


def test_a_rejected_event_stays_with_everything_after_it(capsys, node, start):
    bound(node, "a1")
    assert foreign_failure(node) == 2
    bound(node, "a1", "a2", generation=2)
    assert journal(node) == [1, 2, 3]
    source = start(node_keys={"node-a": key_of(node)}, token=TOKEN)
    configure(node, source.url)

    code, out, err = deliver(capsys, node)

    assert (code, out) == (EX_CHECK, "")
    assert err == ('ERROR: delivery to %s: posted 3 events in 1 request, 2 accepted, acknowledged 1 through seq 1, '
                   '2 left: the gateway rejected seq 2 (unknown node "node-zz": no public key is configured for it '
                   '(node_keys, node_keys_dir))\n' % source.url)
    assert source.queued() == [("node-a", 1, "AllocationBound"), ("node-a", 3, "AllocationBound")]
    assert journal(node) == [2, 3]  # 3 was accepted, but it follows 2: it stays, and is posted again
    assert not node.exists(BACKOFF)  # the gateway answered: no backoff


def test_requests_are_chunked_oldest_first_and_stop_at_the_first_not_wholly_accepted(capsys, node, start):
    bound(node, "a1")                                 # 1
    bound(node, "a1", "a2", generation=2)             # 2
    foreign_failure(node)                             # 3
    bound(node, "a2", generation=3)                   # 4: a1 released
    bound(node, "a1", "a2", generation=4)             # 5
    assert journal(node) == [1, 2, 3, 4, 5]
    source = start(node_keys={"node-a": key_of(node)}, token=TOKEN)
    configure(node, source.url, max_events=2)

    code, _out, err = deliver(capsys, node, "--json")

    assert code == EX_CHECK
    assert "posted 4 of 5 events in 2 requests, 3 accepted, acknowledged 2 through seq 2, 3 left" in err
    # [1, 2] taken and acknowledged; [3, 4]: 3 rejected, 4 queued but kept; [5] never posted
    assert [seq for _node, seq, _type in source.queued()] == [1, 2, 4]
    assert journal(node) == [3, 4, 5]


def test_the_json_output_says_what_the_run_did(capsys, node, start):
    bound(node, "a1")
    source = start(node_keys={"node-a": key_of(node)}, token=TOKEN)
    configure(node, source.url)
    code, out, err = deliver(capsys, node, "--json")
    assert (code, err) == (EX_OK, "")
    assert json.loads(out) == {
        "url": source.url, "skipped": False, "events": 1, "requests": 1, "posted": [1], "accepted": [1],
        "rejected": [], "ack_through": 1, "acknowledged": 1, "left": [], "error": "", "backoff": None,
        "token": TOKEN_FILE, "message": "delivered to %s: posted 1 event in 1 request, 1 accepted, acknowledged 1 "
                                        "through seq 1, 0 left" % source.url}


def test_under_systemd_a_run_that_delivers_nothing_logs_at_debug_priority(capsys, node, start, monkeypatch):
    """The timer runs it every 30 s: the unit's LogLevelMax=info drops the <7> lines; a delivery is <6> (stdout's
    default), a gateway that is down a warning, <4>."""
    monkeypatch.setenv("JOURNAL_STREAM", "8:12345")
    bound(node, "a1")
    source = start(node_keys={"node-a": key_of(node)}, token=TOKEN)
    configure(node, source.url)
    code, out, _err = deliver(capsys, node)
    assert code == EX_OK and out.startswith("delivered to ")
    assert deliver(capsys, node) == (EX_OK, "<7>nothing to deliver to %s: no unacknowledged event\n" % source.url, "")
    bound(node, "a1", "a2", generation=2)
    configure(node, closed_port_url())
    code, out, err = deliver(capsys, node)
    assert (code, out) == (EX_RETRY, "") and err.startswith("<4>WARNING: delivery to ")
    assert deliver(capsys, node)[1].startswith("<7>not delivering to ")


def test_an_event_larger_than_a_request_may_be_stays_with_what_follows(capsys, node, start):
    bound(node, "a1", "a2")
    source = start(node_keys={"node-a": key_of(node)}, token=TOKEN)
    configure(node, source.url, max_bytes=1024)
    big = Journal(node.state()).append("AllocationFailed", {
        "node_id": "node-a", "allocation_id": "a3", "generation": 2, "reason": "overlap", "message": "m" * 2000})
    bound(node, "a1", generation=3)
    code, _out, err = deliver(capsys, node)
    assert code == EX_CHECK
    assert ("posted 2 of 4 events in 2 requests, 2 accepted, acknowledged 2 through seq 2, 2 left: event seq %d is "
            % big["seq"]) in err
    assert "more than max_bytes (1024)" in err
    assert journal(node) == [3, 4]


# -- the gateway down ----------------------------------------------------------------------------

def test_a_gateway_that_is_down_leaves_the_journal_whole_and_backs_off(capsys, node, start):
    bound(node, "a1")
    url = closed_port_url()
    configure(node, url)

    code, out, err = deliver(capsys, node)

    assert (code, out) == (EX_RETRY, "")
    assert err.startswith("WARNING: delivery to %s: posted 1 event in 1 request, 0 accepted, nothing acknowledged, "
                          "1 left: the gateway could not be reached: " % url)
    assert "Connection refused" in err
    assert err.endswith("; the next try is in 30 s (1 failure in a row)\n")
    assert journal(node) == [1]
    record = json.loads(node.read(BACKOFF))
    assert record["failures"] == 1 and record["error"].startswith("the gateway could not be reached: ")
    assert os.stat(node.path(BACKOFF)).st_mode & 0o777 == 0o600

    # within the backoff a run posts nothing, even to a gateway that is up again
    source = start(node_keys={"node-a": key_of(node)}, token=TOKEN)
    configure(node, source.url)
    code, out, err = deliver(capsys, node)
    assert (code, err) == (EX_OK, "")
    assert out.startswith("not delivering to %s yet: 1 failed try in a row, the last: the gateway could not be "
                          "reached: " % source.url)
    assert out.endswith("; the next try is in 30 s (bcd-holds deliver --now tries at once)\n")
    assert source.queued() == [] and journal(node) == [1]

    # --now tries at once; the success clears the backoff
    code, out, _err = deliver(capsys, node, "--now")
    assert code == EX_OK and out.startswith("delivered to ")
    assert source.queued() == [("node-a", 1, "AllocationBound")]
    assert journal(node) == [] and not node.exists(BACKOFF)


def test_each_failure_in_a_row_doubles_the_wait_up_to_15_minutes(capsys, node):
    bound(node, "a1")
    configure(node, closed_port_url())
    waits = []
    for _run in range(7):
        code, _out, err = deliver(capsys, node, "--now")
        assert code == EX_RETRY, err
        waits.append(json.loads(node.read(BACKOFF))["failures"])
        waits[-1] = (waits[-1], err.rsplit("the next try is in ", 1)[1].split(" s ")[0])
    assert waits == [(1, "30"), (2, "60"), (3, "120"), (4, "240"), (5, "480"), (6, "900"), (7, "900")]


def test_the_wait_has_a_tenth_of_jitter(capsys, node, monkeypatch):
    bound(node, "a1")
    configure(node, closed_port_url())
    seen = []
    for spread in (0.0, 0.999):
        monkeypatch.setattr(deliver_module.random, "random", lambda spread=spread: spread)
        node.write(BACKOFF, json.dumps({"failures": 5, "next_attempt": 0, "error": "x"}))
        assert deliver(capsys, node)[0] == EX_RETRY
        record = json.loads(node.read(BACKOFF))
        seen.append(record["failures"])
        seen.append(round((record["next_attempt"] - os.stat(node.path(BACKOFF)).st_mtime) / 90) * 90)
    assert seen == [6, 810, 6, 990]  # 900 s a tenth less, and a tenth more


def test_a_gateway_answering_429_is_backed_off_from_as_it_asks(capsys, node, start):
    bound(node, "a1")
    source = start(node_keys={"node-a": key_of(node)}, token=TOKEN, rate=0.001, burst=1)
    configure(node, source.url)
    assert deliver(capsys, node)[0] == EX_OK                     # the one request the bucket holds
    bound(node, "a1", "a2", generation=2)
    code, _out, err = deliver(capsys, node)
    assert code == EX_RETRY
    assert "the gateway answered HTTP 429: more than 0.001 requests a second from 127.0.0.1" in err
    assert journal(node) == [2] and json.loads(node.read(BACKOFF))["failures"] == 1


def test_a_wrong_token_is_an_error_without_backoff_and_nothing_is_acknowledged(capsys, node, start):
    bound(node, "a1")
    source = start(node_keys={"node-a": key_of(node)}, token=TOKEN)
    configure(node, source.url, token="tok-wrong")
    code, _out, err = deliver(capsys, node)
    assert code == EX_CHECK
    assert err.endswith("1 left: the gateway answered HTTP 401: a missing or wrong token in the header "
                        "authorization\n")
    assert journal(node) == [1] and not node.exists(BACKOFF) and source.queued() == []


def test_systemds_credential_is_the_token_when_the_unit_hands_it_over(capsys, node, start, tmp_path, monkeypatch):
    bound(node, "a1")
    source = start(node_keys={"node-a": key_of(node)}, token=TOKEN)
    configure(node, source.url, token="tok-stale-file")
    credentials = tmp_path / "credentials"
    credentials.mkdir()
    (credentials / "gateway-token").write_text(TOKEN + "\n")
    monkeypatch.setenv("CREDENTIALS_DIRECTORY", str(credentials))
    code, out, _err = deliver(capsys, node, "--json")
    assert code == EX_OK
    assert json.loads(out)["token"] == "the credential gateway-token (%s/gateway-token)" % credentials
    assert journal(node) == []


def test_a_token_in_a_header_of_its_own(capsys, node, start):
    bound(node, "a1")
    source = start(node_keys={"node-a": key_of(node)}, token=TOKEN, token_header="X-Bcd-Token")
    configure(node, source.url, token_header="X-Bcd-Token")
    assert deliver(capsys, node)[0] == EX_OK
    assert journal(node) == []


def self_signed(tmp_path):
    """A certificate for localhost and its key, as PEM files."""
    from cryptography import x509
    from cryptography.hazmat.primitives import hashes, serialization
    from cryptography.hazmat.primitives.asymmetric import ec
    from cryptography.x509.oid import NameOID

    key = ec.generate_private_key(ec.SECP256R1())
    name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "localhost")])
    now = datetime.datetime.now(datetime.timezone.utc)
    cert = (x509.CertificateBuilder().subject_name(name).issuer_name(name).public_key(key.public_key())
            .serial_number(1).not_valid_before(now - datetime.timedelta(days=1))
            .not_valid_after(now + datetime.timedelta(days=1))
            .add_extension(x509.SubjectAlternativeName([x509.DNSName("localhost")]), critical=False)
            .sign(key, hashes.SHA256()))
    certfile, keyfile = tmp_path / "tls.crt", tmp_path / "tls.key"
    certfile.write_bytes(cert.public_bytes(serialization.Encoding.PEM))
    keyfile.write_bytes(key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8,
                                          serialization.NoEncryption()))
    return certfile, keyfile


def test_an_https_gateway_s_certificate_is_checked_against_the_ca_file(capsys, node, start, tmp_path):
    bound(node, "a1")
    certfile, keyfile = self_signed(tmp_path)
    source = start(node_keys={"node-a": key_of(node)}, token=TOKEN, certfile=str(certfile), keyfile=str(keyfile))
    url = source.url.replace("http://127.0.0.1:", "https://localhost:")
    configure(node, url)  # the system's CAs do not know this certificate: nothing is sent to it
    code, _out, err = deliver(capsys, node)
    assert code == EX_RETRY and "the gateway could not be reached: [SSL: CERTIFICATE_VERIFY_FAILED]" in err
    assert journal(node) == [1] and source.queued() == []
    node.write("/etc/bcd-holds/gateway-ca.pem", certfile.read_bytes())
    configure(node, url, ca_file="/etc/bcd-holds/gateway-ca.pem")
    code, out, _err = deliver(capsys, node, "--now")
    assert (code, out) == (EX_OK, "delivered to %s: posted 1 event in 1 request, 1 accepted, acknowledged 1 through "
                                  "seq 1, 0 left\n" % url)
    assert source.queued() == [("node-a", 1, "AllocationBound")] and journal(node) == []


class Redirecting(BaseHTTPRequestHandler):
    """Answers every POST 307 to ``target``; the target records the headers it is sent."""
    target = ""
    seen = []

    def do_POST(self):  # noqa: N802 (http.server's name)
        Redirecting.seen.append(dict(self.headers))
        self.rfile.read(int(self.headers.get("Content-Length") or 0))
        self.send_response(307 if Redirecting.target and self.path == "/v1/events" else 200)
        self.send_header("Location", Redirecting.target)
        self.send_header("Content-Length", "0")
        self.end_headers()

    def log_message(self, *args):  # pylint: disable=arguments-differ
        del args


def test_a_redirect_is_not_followed_and_the_token_goes_nowhere_else(capsys, node):
    bound(node, "a1")
    server = HTTPServer(("127.0.0.1", 0), Redirecting)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    try:
        base = "http://127.0.0.1:%d" % server.server_address[1]
        Redirecting.target, Redirecting.seen = base + "/elsewhere", []
        configure(node, base + "/v1/events")
        code, _out, err = deliver(capsys, node)
    finally:
        server.shutdown()
        server.server_close()
    assert code == EX_CHECK and "the gateway answered HTTP 307" in err
    assert len(Redirecting.seen) == 1 and Redirecting.seen[0]["Authorization"] == "Bearer " + TOKEN
    assert journal(node) == [1]


# -- what cannot run -----------------------------------------------------------------------------

@pytest.mark.parametrize("settings, message", [
    ({"url": "ftp://gateway.example/v1/events"}, 'url "ftp://gateway.example/v1/events" is not http:// or https://'),
    ({"url": "gateway.example:5050"}, 'url "gateway.example:5050" is not http:// or https://'),
    ({"url": "http:///v1/events"}, 'url "http:///v1/events" names no host'),
    ({"url": "https://user:secret@gateway.example/"}, 'url "https://gateway.example/" carries a user or password; '
                                                      'give the gateway\'s token in token_file instead'),
    ({"url": "http://gateway.example:99999/"}, "has a port that is not a number from 0 to 65535"),
    ({"url": "http://gateway.example/a b"}, "has a space, a control or a non-ASCII character"),
    ({"url": 5050}, "url must be the gateway's http:// or https:// URL, got an integer"),
    ({}, "url is missing: the gateway's http:// or https:// URL"),
    ({"url": "http://g/", "tiemout": 5}, 'unknown setting "tiemout" (the settings are url, ca_file, timeout, '
                                         'token_file, token_header, max_events, max_bytes)'),
    ({"url": "http://g/", "timeout": 0}, "timeout must be a number of seconds from 1 to 600, got 0"),
    ({"url": "http://g/", "max_events": True}, "max_events must be an integer from 1 to 100000, got a boolean"),
    ({"url": "http://g/", "token_file": "gateway-token"}, 'token_file must be an absolute path on the node, got '
                                                          '"gateway-token"'),
    ({"url": "http://g/", "token_header": "Bad Header"}, 'token_header must be an HTTP header name'),
])
def test_a_bad_setting_is_a_clear_error(capsys, node, settings, message):
    bound(node, "a1")
    node.write(CONFIG, json.dumps(settings))
    code, out, err = deliver(capsys, node)
    assert (code, out) == (EX_ERROR, "")
    assert err.startswith("ERROR: %s: " % CONFIG) and err.endswith("\n") and err.count("\n") == 1
    assert message in err and "secret" not in err
    assert journal(node) == [1]


def test_the_settings_missing_not_json_or_writable_by_others_are_refused(capsys, node):
    bound(node, "a1")
    assert deliver(capsys, node)[2] == (
        "ERROR: no delivery configuration at /etc/bcd-holds/deliver.json: the role bcd.devices.bcd_holds writes it "
        "when bcd_holds_gateway_url is set (--config names another file)\n")
    node.write(CONFIG, "{url: x}")
    assert deliver(capsys, node)[2].startswith("ERROR: /etc/bcd-holds/deliver.json is not JSON: ")
    configure(node, "http://127.0.0.1:9/", mode=0o666)
    assert deliver(capsys, node)[2] == (
        "ERROR: /etc/bcd-holds/deliver.json is writable by others (mode 0666); refused: the delivery takes its "
        "settings and token only from files no other account can change\n")
    os.chmod(node.path(CONFIG), 0o644)
    os.chmod(node.path(TOKEN_FILE), 0o620)
    assert deliver(capsys, node)[2] == (
        "ERROR: /etc/bcd-holds/gateway-token is writable by its group (mode 0620); refused: the delivery takes its "
        "settings and token only from files no other account can change\n")
    os.unlink(node.path(TOKEN_FILE))
    assert deliver(capsys, node)[:3:2] == (
        EX_ERROR, "ERROR: the gateway token file /etc/bcd-holds/gateway-token does not exist\n")
    node.write(TOKEN_FILE, "\n")
    os.chmod(node.path(TOKEN_FILE), 0o600)
    assert deliver(capsys, node)[2] == "ERROR: the gateway token /etc/bcd-holds/gateway-token is empty\n"
    assert journal(node) == [1]


@pytest.mark.skipif(os.geteuid() != 0, reason="needs root: a token file root owns, read by another account")
def test_a_token_file_the_account_cannot_read_is_a_clear_error(capsys, node):
    """As the unit's account would run it by hand: the token's file is root's 0600."""
    bound(node, "a1")
    configure(node, "http://127.0.0.1:9/v1/events")
    open_to_all(node.root)
    for path in (node.path("/etc"), node.path("/etc/bcd-holds")):
        os.chmod(path, 0o755)
    os.setegid(65534)
    os.seteuid(65534)  # nobody, for this call
    try:
        code, out, err = deliver(capsys, node)
    finally:
        os.seteuid(0)
        os.setegid(0)
    assert (code, out) == (EX_ERROR, "")
    assert err == (
        "ERROR: cannot read /etc/bcd-holds/gateway-token: Permission denied (it is root's: run bcd-holds deliver as "
        "root, or let bcd-holds-deliver.service hand it over as its credential gateway-token)\n")
    assert journal(node) == [1]


def test_a_ca_file_that_is_not_there_is_a_clear_error(capsys, node):
    configure(node, "https://gateway.example/v1/events", ca_file="/etc/bcd-holds/ca.pem")
    assert deliver(capsys, node)[:3:2] == (
        EX_ERROR, "ERROR: cannot use the CA file /etc/bcd-holds/ca.pem: No such file or directory\n")


def test_a_backoff_file_that_is_not_one_is_no_backoff_and_said(capsys, node, start):
    bound(node, "a1")
    source = start(node_keys={"node-a": key_of(node)}, token=TOKEN)
    configure(node, source.url)
    os.symlink("/etc/passwd", node.path(BACKOFF))
    code, out, err = deliver(capsys, node)
    assert code == EX_OK and out.startswith("delivered to ")
    assert err == ("WARNING: /var/lib/bcd/delivery-backoff.json cannot be read (Too many levels of symbolic links): "
                   "no backoff is kept\n")
    assert os.path.islink(node.path(BACKOFF))  # a success removes only a record it read


@pytest.mark.parametrize("make", [
    lambda path: path.write_bytes(b"not json"),
    lambda path: path.write_bytes(b"[" * 100000 + b"]" * 100000),
    lambda path: path.write_bytes(b'{"failures": 1, "next_attempt": "' + b"9" * 10000 + b'"}'),
    lambda path: path.write_bytes(b'{"failures": "many", "next_attempt": 1e30}'),
    lambda path: os.mkfifo(str(path)),
    lambda path: path.mkdir(),
], ids=["garbage", "deep", "huge", "wrong-types", "fifo", "directory"])
def test_a_backoff_file_planted_by_the_account_is_no_backoff_and_never_hangs(capsys, node, start, make):
    bound(node, "a1")
    source = start(node_keys={"node-a": key_of(node)}, token=TOKEN)
    configure(node, source.url)
    make(Path(node.path(BACKOFF)))
    code, out, err = deliver(capsys, node)
    assert (code, out.split(":")[0]) == (EX_OK, "delivered to http")
    assert err.startswith("WARNING: /var/lib/bcd/delivery-backoff.json ") and err.count("\n") == 1
    assert journal(node) == []
