# -*- coding: utf-8 -*-
# Copyright: contributors to bcd.devices
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""A small event gateway: receives the events nodes post and says which it accepted.

An example of the receiving end of the role's event delivery
(``bcd_holds_gateway_url``), standard library only. A node posts its
unacknowledged events, oldest first::

    POST /events   {"events": [{"seq": 1, "type": "AllocationBound", "body": {...}, "signature": "..."}, ...]}

and gets ``200 {"accepted": [1, ...], "rejected": [{"seq": 2, "reason": "..."}]}``.
The node acknowledges its events through the highest seq of the contiguous
accepted prefix, so whatever is rejected (and everything after it) is posted
again by its next run. An event is accepted when its ``body.node_id`` is a node
this gateway knows and it is either an attested event (``AllocationBound``,
``AllocationReleased``) whose signature verifies against that node's public
key (``bcd.devices.verify_report``'s own check) or an ``AllocationFailed``
(unsigned by design). Accepted events are appended to ``--store``, each event
once, so a delivery repeated after a lost answer stores nothing twice.

Node keys (base64 of the raw 32-byte Ed25519 key, ``node_public_key`` of
``bcd.devices.holds_info`` or ``bcd-holds status --json``) come from
``--key NODE_ID=KEY`` or from ``--keys-dir DIR`` (one ``<node_id>.pub`` file
each, read again on every request, so nodes can be enrolled while it runs).

    python3 docs/examples/gateway.py --listen 127.0.0.1:8080 --keys-dir /etc/bcd-gateway/keys \\
        --store /var/lib/bcd-gateway/events.jsonl

``--fail-first N`` answers 503 to the first N requests (to show that a node
whose delivery fails loses nothing); ``--port-file`` writes the bound port
(with ``--listen 127.0.0.1:0``). This is an example: it has no TLS and no
authentication of its own; put it behind a proxy that has both.
"""

import argparse
import json
import os
import re
import sys
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer


def _import_verify_report():
    """``verify_report`` from the collection, found on sys.path or above this file."""
    try:
        from ansible_collections.bcd.devices.plugins.module_utils.state.events import verify_report
        return verify_report
    except ImportError:
        pass
    here = os.path.dirname(os.path.abspath(__file__))
    candidates = []
    path = here
    while os.path.dirname(path) != path:
        if os.path.basename(path) == "ansible_collections":
            candidates.append(os.path.dirname(path))      # an installed collection
        candidates.append(os.path.join(path, ".build"))   # a checkout (make links .build/ansible_collections)
        path = os.path.dirname(path)
    for candidate in candidates:
        if os.path.isdir(os.path.join(candidate, "ansible_collections", "bcd", "devices")):
            sys.path.insert(0, candidate)
            from ansible_collections.bcd.devices.plugins.module_utils.state.events import verify_report
            return verify_report
    raise ImportError("cannot find the bcd.devices collection: put the directory that holds "
                      "ansible_collections/bcd/devices on PYTHONPATH")


verify_report = _import_verify_report()

ATTESTED = ("AllocationBound", "AllocationReleased")
FAILED = "AllocationFailed"
NODE_ID_RE = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.-]{0,252}$")
MAX_BODY = 16 << 20


class Gateway(object):
    """What the gateway knows and keeps; ``receive`` answers one delivery."""

    def __init__(self, keys=(), keys_dir=None, store=None, fail_first=0, log=None):
        self.keys = {}
        for item in keys:
            node_id, sep, key = item.partition("=")
            if not sep or not node_id or not key:
                raise ValueError("a key is NODE_ID=BASE64, not %r" % item)
            self.keys[node_id] = key.strip()
        self.keys_dir = keys_dir
        self.store = store
        self.failures_left = fail_first
        self.log = log or (lambda line: sys.stderr.write(line + "\n"))
        self.lock = threading.Lock()
        self.seen = set()
        if store and os.path.exists(store):
            with open(store) as handle:
                for line in handle:
                    try:
                        event = json.loads(line)
                        self.seen.add(self._identity(event))
                    except (ValueError, TypeError):
                        continue

    @staticmethod
    def _identity(event):
        """The same event posted again (a lost answer) is stored once."""
        return json.dumps(event, sort_keys=True, separators=(",", ":"))

    def key_for(self, node_id):
        """The node's public key: from --key, else ``<keys_dir>/<node_id>.pub``; None when unknown."""
        if node_id in self.keys:
            return self.keys[node_id]
        if self.keys_dir and isinstance(node_id, str) and NODE_ID_RE.match(node_id):
            try:
                with open(os.path.join(self.keys_dir, node_id + ".pub")) as handle:
                    return handle.read().strip() or None
            except OSError:
                return None
        return None

    def judge(self, event):
        """None when the event is accepted, else the reason."""
        if not isinstance(event, dict) or isinstance(event.get("seq"), bool) or not isinstance(event.get("seq"), int):
            return "not an event (a JSON object with an integer seq)"
        body = event.get("body")
        if not isinstance(body, dict) or not isinstance(body.get("node_id"), str):
            return "the event has no body.node_id"
        key = self.key_for(body["node_id"])
        if key is None:
            return "unknown node %s" % body["node_id"]
        if event.get("type") in ATTESTED:
            return None if verify_report(event, key) else "the signature does not verify against %s's key" % (
                body["node_id"])
        if event.get("type") == FAILED:
            missing = [name for name in ("allocation_id", "generation", "reason", "message") if name not in body]
            return "AllocationFailed without %s" % ", ".join(missing) if missing else None
        return "unknown event type %r" % (event.get("type"),)

    def receive(self, payload):
        """``(status, answer)`` for one delivery ``{"events": [...]}``."""
        with self.lock:
            if self.failures_left > 0:
                self.failures_left -= 1
                return 503, {"error": "failing on purpose (--fail-first): %d more" % self.failures_left}
            if not isinstance(payload, dict) or not isinstance(payload.get("events"), list):
                return 400, {"error": 'expected {"events": [...]}'}
            accepted, rejected, new = [], [], []
            for event in payload["events"]:
                reason = self.judge(event)
                if reason is not None:
                    seq = event.get("seq") if isinstance(event, dict) else None
                    rejected.append({"seq": seq, "reason": reason})
                    continue
                accepted.append(event["seq"])
                identity = self._identity(event)
                if identity not in self.seen:
                    self.seen.add(identity)
                    new.append(event)
            if new and self.store:
                with open(self.store, "a") as handle:
                    for event in new:
                        handle.write(json.dumps(event, sort_keys=True) + "\n")
                    handle.flush()
                    os.fsync(handle.fileno())
            nodes = sorted(set(e["body"]["node_id"] for e in payload["events"]
                               if isinstance(e, dict) and isinstance(e.get("body"), dict)
                               and isinstance(e["body"].get("node_id"), str)))
            rejected_seqs = [r["seq"] for r in rejected]
            self.log("%s: accepted %s, rejected %s" % (", ".join(nodes) or "-", accepted, rejected_seqs))
            return 200, {"accepted": accepted, "rejected": rejected}


def make_server(host, port, gateway, path="/events"):
    """An HTTP server for ``gateway`` (not started: call ``serve_forever``)."""

    class Handler(BaseHTTPRequestHandler):
        server_version = "bcd-example-gateway/1"

        def _answer(self, status, answer):
            data = (json.dumps(answer) + "\n").encode("utf-8")
            self.send_response(status)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(data)))
            self.end_headers()
            self.wfile.write(data)

        def do_GET(self):  # noqa: N802 (http.server's naming)
            if self.path == "/healthz":
                self._answer(200, {"ok": True})
            else:
                self._answer(404, {"error": "POST events to %s" % path})

        def do_POST(self):  # noqa: N802
            if self.path != path:
                self._answer(404, {"error": "POST events to %s" % path})
                return
            try:
                length = int(self.headers.get("Content-Length", ""))
            except ValueError:
                self._answer(411, {"error": "a Content-Length is required"})
                return
            if length < 0 or length > MAX_BODY:
                self._answer(413, {"error": "at most %d bytes" % MAX_BODY})
                return
            try:
                payload = json.loads(self.rfile.read(length).decode("utf-8"))
            except (ValueError, UnicodeDecodeError) as exc:
                self._answer(400, {"error": "not JSON: %s" % exc})
                return
            status, answer = gateway.receive(payload)
            self._answer(status, answer)

        def log_message(self, format, *args):  # noqa: A002 (the base class's signature)
            gateway.log("%s %s" % (self.address_string(), format % args))

    server = ThreadingHTTPServer((host, port), Handler)
    server.daemon_threads = True
    return server


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--listen", default="127.0.0.1:8080", metavar="HOST:PORT", help="default 127.0.0.1:8080")
    parser.add_argument("--path", default="/events", help="where nodes POST (default /events)")
    parser.add_argument("--key", action="append", default=[], metavar="NODE_ID=BASE64",
                        help="a node's public key (repeatable)")
    parser.add_argument("--keys-dir", help="a directory of <node_id>.pub files, read on every request")
    parser.add_argument("--store", help="append accepted events here, one JSON object a line")
    parser.add_argument("--fail-first", type=int, default=0, metavar="N", help="answer 503 to the first N requests")
    parser.add_argument("--port-file", help="write the bound port here once listening")
    args = parser.parse_args(argv)
    host, _sep, port = args.listen.rpartition(":")
    try:
        gateway = Gateway(args.key, args.keys_dir, args.store, args.fail_first)
        server = make_server(host or "127.0.0.1", int(port), gateway, args.path)
    except (ValueError, OSError) as exc:
        sys.stderr.write("gateway: %s\n" % exc)
        return 2
    bound = server.server_address[1]
    if args.port_file:
        temporary = args.port_file + ".tmp"
        with open(temporary, "w") as handle:
            handle.write("%d\n" % bound)
        os.rename(temporary, args.port_file)
    gateway.log("listening on http://%s:%d%s" % (host or "127.0.0.1", bound, args.path))
    try:
        server.serve_forever()
    except KeyboardInterrupt:
        pass
    finally:
        server.server_close()
    return 0


if __name__ == "__main__":
    sys.exit(main())
