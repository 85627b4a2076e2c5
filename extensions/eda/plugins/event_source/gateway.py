# -*- coding: utf-8 -*-
# Copyright: contributors to bcd.devices
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""ansible-rulebook event source bcd.devices.gateway: the gateway the role bcd_holds delivers a node's events to.

The role posts ``{"events": [...]}`` and acknowledges, on the node, the contiguous prefix of what this answers
``200 {"accepted": [seq, ...]}``. An event is accepted only once it is on the rulebook's queue (or was already
put there by an earlier delivery), so an acknowledgement never loses one. HTTP/1.1 on asyncio's streams: the
standard library and ``cryptography`` (for Ed25519, through the collection's own ``state/events.py``).
docs/event-driven.md has the architecture, the arguments and the shape of the events put on the queue.
"""

from __future__ import annotations

import asyncio
import base64
import hmac
import json
import logging
import os
import ssl
import sys
import time
from typing import Any, Dict, List, Optional, Set, Tuple

DOCUMENTATION = r"""
---
short_description: Receive a GPU node's signed events from the role's delivery, verified, once each
description:
  - >-
    An ansible-rulebook event source. It is the gateway the role P(bcd.devices.bcd_holds#role) delivers to
    (C(bcd_holds_gateway_url)) - the role posts C({"events": [...]}), the node's events not yet acknowledged,
    oldest first, and acknowledges the contiguous prefix of the C(accepted) seqs this answers.
  - >-
    Each event is checked against the public key of the node it names (C(body.node_id)). C(AllocationBound)
    and C(AllocationReleased) must carry a valid signature by that key (as the filter bcd.devices.verify_report
    checks it). C(AllocationFailed) is never signed, so it is passed on as an unverified report
    (C(bcd.signed=false)). Any other type must be signed by the node's key and name its own type in its body
    (C(body.type)), since the signature covers the body and not the event's C(type).
  - >-
    An event of an unknown node, with a bad signature, or malformed, is not put on the queue and is listed in
    the answer's C(rejected) with its C(seq) and a C(reason); the node keeps it and posts it again.
  - >-
    Each accepted event is put on the queue once, as C({"bcd": {...}, "meta": {"hosts": <node>}}) (docs/event-driven.md
    has the fields). A delivery posted again (a run that died before acknowledging) is answered as accepted and
    queued nothing more - duplicates are recognised by node and C(seq), in bounded memory, for as long as the
    source runs.
  - >-
    Requests past O(max_body_bytes) are answered 413, past O(rate) 429, without the token 401, and anything that
    is not a POST of a JSON object with a list C(events) 400 with the reason; nothing of them is queued, and the
    source goes on serving.
options:
  host:
    description: The address to listen on.
    type: str
    default: "0.0.0.0"
  port:
    description: The TCP port to listen on; V(0) picks a free one (written to the log).
    type: int
    required: true
  node_keys:
    description:
      - >-
        The node public keys, node id (the C(node_id) of the node's events, its host name) to the base64 Ed25519
        public key M(bcd.devices.holds_info) returns as C(node_public_key).
      - >-
        At least one of O(node_keys) and O(node_keys_dir) is required.
    type: dict
  node_keys_dir:
    description:
      - >-
        A directory of node public keys, one file per node, named C(<node_id>) or C(<node_id>.pub), holding the
        C(node_public_key) of M(bcd.devices.holds_info). Read again when a file in it changes, so a node is
        enrolled without a restart. O(node_keys) wins for a node named in both.
    type: str
  token:
    description:
      - >-
        The secret a delivery must carry in O(token_header) (the role sends it with C(bcd_holds_gateway_headers)).
        With the default header, C(Authorization), the value is C(Bearer <token>); with another, the token itself.
        Compared in constant time. Unset, no token is asked for.
    type: str
  token_header:
    description: The header that carries O(token).
    type: str
    default: Authorization
  certfile:
    description: A PEM certificate (chain) to serve HTTPS with; unset, plain HTTP.
    type: str
  keyfile:
    description: The private key of O(certfile), when it is not in the same file.
    type: str
  password:
    description: The password of O(keyfile).
    type: str
  cafile:
    description: CA certificates that client certificates must chain to (mutual TLS); needs O(certfile).
    type: str
  max_body_bytes:
    description:
      - >-
        The largest request body taken, in bytes; a larger one is answered 413 without being read. The default
        takes a node's full journal (12 MiB) in one delivery.
    type: int
    default: 16777216
  rate:
    description: Requests a second one client address may make, on average (a token bucket); past it, 429.
    type: float
    default: 5
  burst:
    description: Requests one client address may make at once before O(rate) applies.
    type: int
    default: 20
  max_events:
    description: The most events one delivery may carry (a node's journal holds at most 10 000); more is answered 400.
    type: int
    default: 10000
  timeout:
    description: Seconds a client has to send its whole request; a slower one is disconnected.
    type: float
    default: 60
"""

EXAMPLES = r"""
- name: GPU nodes' events
  hosts: all
  sources:
    - bcd.devices.gateway:
        host: 0.0.0.0
        port: 5050
        node_keys_dir: /etc/bcd-gateway/node-keys
        token: "{{ BCD_GATEWAY_TOKEN }}"
        certfile: /etc/bcd-gateway/tls.crt
        keyfile: /etc/bcd-gateway/tls.key
  rules:
    - name: A hold was refused
      condition: event.bcd.type == "AllocationFailed"
      action:
        debug:
          msg: "{{ event.bcd.node }} refused {{ event.bcd.allocation }}: {{ event.bcd.reason }}"
"""

logger = logging.getLogger(__name__)

# The types the node signs with a body that tells them apart (state/events.py), and the one it never signs.
_ATTESTED = ("AllocationBound", "AllocationReleased")
_UNSIGNED = ("AllocationFailed",)
_PURPOSE = "attested-report"
MAX_HEADER_BYTES = 16 * 1024  # the request line and headers together
MAX_SEEN = 10000  # seqs above the contiguous prefix remembered per node: a node's journal holds at most this many
MAX_CLIENTS = 4096  # client addresses the rate limit remembers
LINGER_BYTES = 1 << 20  # read and dropped after a refusal, at most, before the connection is closed
LINGER_SECONDS = 2.0
MAX_REASON = 300  # characters of input quoted in a reason
_STATUS = {200: "OK", 400: "Bad Request", 401: "Unauthorized", 404: "Not Found", 405: "Method Not Allowed",
           408: "Request Timeout", 411: "Length Required", 413: "Content Too Large", 429: "Too Many Requests",
           431: "Request Header Fields Too Large", 500: "Internal Server Error", 505: "HTTP Version Not Supported"}


def _collection_events():
    """The collection's ``state/events.py`` (signatures) and ``support/bounded_json.py`` (bounded parsing).

    ansible-rulebook runs a source with ``runpy.run_path``, so the collection's package is importable only when
    the folder holding ``ansible_collections`` is on ``sys.path``; when it is not, the folder this file is
    installed under (``<path>/ansible_collections/bcd/devices/extensions/eda/plugins/event_source/``) is added.
    """
    try:
        from ansible_collections.bcd.devices.plugins.module_utils.support import bounded_json  # pylint: disable=import-outside-toplevel
        from ansible_collections.bcd.devices.plugins.module_utils.state import events  # pylint: disable=import-outside-toplevel
        return events, bounded_json
    except ImportError:
        here = os.path.dirname(os.path.abspath(__file__))
        top = here
        for _level in range(7):  # event_source, plugins, eda, extensions, devices, bcd, ansible_collections
            top = os.path.dirname(top)
        mine = os.path.join(top, "ansible_collections", "bcd", "devices", "plugins", "module_utils", "state", "events.py")
        if not os.path.isfile(mine):
            raise ImportError("bcd.devices.gateway: ansible_collections.bcd.devices cannot be imported, and this source "
                              "(%s) is not installed in a collection tree that has it" % here)
        sys.path.insert(0, top)
        from ansible_collections.bcd.devices.plugins.module_utils.support import bounded_json  # pylint: disable=import-outside-toplevel
        from ansible_collections.bcd.devices.plugins.module_utils.state import events  # pylint: disable=import-outside-toplevel
        return events, bounded_json


class BadRequest(Exception):
    """A request answered with ``status`` and ``reason``, nothing of it queued."""

    def __init__(self, status, reason):
        # type: (int, str) -> None
        super().__init__(reason)
        self.status = status
        self.reason = reason


def _shown(value):
    # type: (Any) -> str
    try:
        text = json.dumps(value, ensure_ascii=False)
    except (TypeError, ValueError):
        text = repr(value)
    return text if len(text) <= MAX_REASON else text[:MAX_REASON] + "..."


class NodeKeys:
    """The node public keys: the ``node_keys`` mapping, over the files of ``node_keys_dir`` (read again when the
    directory or one of its files changes)."""

    def __init__(self, events, mapping, directory):
        # type: (Any, Any, Optional[str]) -> None
        self._events = events
        if mapping is not None and not isinstance(mapping, dict):
            raise ValueError("bcd.devices.gateway: node_keys must be a mapping of node id to public key, got %s"
                             % type(mapping).__name__)
        self._fixed = {}  # type: Dict[str, str]
        for node, key in (mapping or {}).items():
            self._fixed[str(node)] = self._checked(key, "node_keys[%s]" % node)
        if directory is not None and not os.path.isdir(directory):
            raise ValueError("bcd.devices.gateway: node_keys_dir %s is not a directory" % directory)
        if not self._fixed and directory is None:
            raise ValueError("bcd.devices.gateway: give the node public keys, in node_keys or node_keys_dir")
        self._dir = directory
        self._stamp = None  # type: Optional[Tuple[Any, ...]]
        self._from_dir = {}  # type: Dict[str, str]
        self._refresh()

    def _checked(self, key, where):
        # type: (Any, str) -> str
        try:
            self._events.decode_public_key(key)
        except self._events.EventsError as exc:
            raise ValueError("bcd.devices.gateway: %s: %s" % (where, exc))
        return key.strip()

    def _listing(self):
        # type: () -> Tuple[Any, ...]
        assert self._dir is not None
        entries = []
        with os.scandir(self._dir) as it:
            for entry in it:
                if entry.is_file():
                    st = entry.stat()
                    entries.append((entry.name, st.st_mtime_ns, st.st_size))
        return tuple(sorted(entries))

    def _refresh(self):
        # type: () -> None
        if self._dir is None:
            return
        try:
            stamp = self._listing()
        except OSError as exc:
            logger.warning("bcd.devices.gateway: cannot list node_keys_dir %s: %s", self._dir, exc)
            return
        if stamp == self._stamp:
            return
        keys = {}
        for name, _mtime, size in stamp:
            if name.startswith(".") or size > 4096:
                continue
            node = name[:-4] if name.endswith(".pub") else name
            path = os.path.join(self._dir, name)
            try:
                with open(path, encoding="ascii") as handle:
                    keys[node] = self._checked(handle.read(), path)
            except (OSError, UnicodeDecodeError, ValueError) as exc:
                logger.warning("bcd.devices.gateway: %s is not a node public key and is ignored: %s", path, exc)
        self._from_dir = keys
        self._stamp = stamp

    def get(self, node):
        # type: (str) -> Optional[str]
        if node in self._fixed:
            return self._fixed[node]
        self._refresh()
        return self._from_dir.get(node)


class Seen:
    """The seqs of one node already queued: every seq up to ``through``, and those in ``above``."""

    def __init__(self, through):
        # type: (int) -> None
        self.through = through
        self.above = set()  # type: Set[int]

    def has(self, seq):
        # type: (int) -> bool
        return seq <= self.through or seq in self.above

    def room(self):
        # type: () -> bool
        return len(self.above) < MAX_SEEN

    def add(self, seq):
        # type: (int) -> None
        self.above.add(seq)
        while self.through + 1 in self.above:
            self.through += 1
            self.above.discard(self.through)


class Gateway:
    """What a delivery does: check it, queue each new verified event once, answer what was taken."""

    def __init__(self, queue, args):
        # type: (Any, Dict[str, Any]) -> None
        self.events, self.bounded_json = _collection_events()
        try:
            self.events.import_cryptography()
        except self.events.EventsError as exc:
            raise RuntimeError("bcd.devices.gateway: %s" % exc)
        self.queue = queue
        self.keys = NodeKeys(self.events, args.get("node_keys"), args.get("node_keys_dir"))
        self.token = args.get("token") or None
        self.token_header = str(args.get("token_header") or "Authorization").lower()
        self.max_body = _positive(args, "max_body_bytes", 16 * 1024 * 1024, int)
        self.max_events = _positive(args, "max_events", 10000, int)
        self.rate = _positive(args, "rate", 5.0, float)
        self.burst = _positive(args, "burst", 20, int)
        self.timeout = _positive(args, "timeout", 60.0, float)
        self.seen = {}  # type: Dict[str, Seen]
        self.buckets = {}  # type: Dict[str, List[float]]
        self.lock = asyncio.Lock()

    # --- the checks before the body ---

    def allow(self, client):
        # type: (str) -> bool
        """A token bucket per client address: ``burst`` at once, ``rate`` a second after."""
        now = time.monotonic()
        bucket = self.buckets.get(client)
        if bucket is None:
            if len(self.buckets) >= MAX_CLIENTS:
                # forget the client idle longest
                del self.buckets[min(self.buckets, key=lambda c: self.buckets[c][1])]
            bucket = self.buckets[client] = [float(self.burst), now]
        bucket[0] = min(float(self.burst), bucket[0] + (now - bucket[1]) * self.rate)
        bucket[1] = now
        if bucket[0] < 1.0:
            return False
        bucket[0] -= 1.0
        return True

    def authorised(self, headers):
        # type: (Dict[str, str]) -> bool
        if self.token is None:
            return True
        expected = ("Bearer " + self.token) if self.token_header == "authorization" else self.token
        given = headers.get(self.token_header, "")
        return hmac.compare_digest(given.strip().encode("utf-8", "surrogateescape"), expected.encode("utf-8"))

    # --- the body ---

    def parse(self, body):
        # type: (bytes) -> List[Any]
        try:
            document = self.bounded_json.loads(body, "the request body")
        except UnicodeDecodeError:
            raise BadRequest(400, "the request body is not UTF-8 JSON")
        except ValueError as exc:  # json's own errors
            raise BadRequest(400, "the request body is not JSON: %s" % exc)
        except self.bounded_json.StateFileError as exc:  # past bounded_json's bounds (depth, items, numbers)
            raise BadRequest(400, "the request body is refused: %s" % exc)
        if not isinstance(document, dict) or not isinstance(document.get("events"), list):
            raise BadRequest(400, 'the request body must be a JSON object {"events": [...]}, got %s'
                             % _shown(document))
        if len(document["events"]) > self.max_events:
            raise BadRequest(400, "the delivery carries %d events, more than max_events (%d)"
                             % (len(document["events"]), self.max_events))
        return document["events"]

    def check(self, event):
        # type: (Any) -> Tuple[Optional[str], Optional[str], bool]
        """``(node, reason, signed)``: why the event is refused (None when it is not), and whether its signature
        was checked. ``node`` is None when the event names none."""
        if not isinstance(event, dict):
            return None, "not an event: %s" % _shown(event), False
        seq, kind, body = event.get("seq"), event.get("type"), event.get("body")
        if not isinstance(seq, int) or isinstance(seq, bool) or seq < 1 or seq > self.events.MAX_SEQ:
            return None, "seq must be a positive integer, got %s" % _shown(seq), False
        if not isinstance(kind, str) or not kind:
            return None, "type must be a non-empty string, got %s" % _shown(kind), False
        if not isinstance(body, dict):
            return None, "body must be a mapping, got %s" % _shown(body), False
        node = body.get("node_id")
        if not isinstance(node, str) or not node:
            return None, "body.node_id must name the node, got %s" % _shown(node), False
        key = self.keys.get(node)
        if key is None:
            return node, "unknown node %s: no public key is configured for it (node_keys, node_keys_dir)" % _shown(node), False
        if kind in _UNSIGNED:
            return node, None, False
        if kind in _ATTESTED:
            if self.events.verify_report(event, key):
                return node, None, True
            return node, "bad signature: the %s is not signed by the key of node %s" % (kind, node), False
        if body.get("type") != kind:
            return node, "a signed %s must name its type in its body (body.type), got %s" % (kind, _shown(body.get("type"))), False
        if event.get("purpose") != _PURPOSE or not self._signature_valid(event, key):
            return node, "bad signature: the %s is not signed by the key of node %s" % (kind, node), False
        return node, None, True

    def _signature_valid(self, event, key):
        # type: (Dict[str, Any], str) -> bool
        """An Ed25519 signature by ``key`` over ``attested-report\\n`` and the canonical body."""
        try:
            from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PublicKey  # pylint: disable=import-outside-toplevel
            signature = base64.b64decode(str(event.get("signature")).encode("ascii"), validate=True)
            Ed25519PublicKey.from_public_bytes(self.events.decode_public_key(key)).verify(
                signature, self.events.signed_payload(event["body"]))
            return True
        except Exception:  # InvalidSignature, a malformed signature or body
            return False

    async def deliver(self, body):
        # type: (bytes) -> Dict[str, Any]
        """Queue each new verified event of a delivery, in seq order; ``{"accepted": [...], "rejected": [...]}``."""
        events = self.parse(body)
        accepted = []  # type: List[int]
        rejected = []  # type: List[Dict[str, Any]]
        checked = []  # type: List[Tuple[int, str, Dict[str, Any], bool]]
        lowest = {}  # type: Dict[str, int]
        for event in events:
            node, reason, signed = self.check(event)
            seq = event.get("seq") if isinstance(event, dict) else None
            if reason is not None:
                rejected.append({"seq": seq if isinstance(seq, int) and not isinstance(seq, bool) else None,
                                 "node": node, "reason": reason})
                logger.warning("bcd.devices.gateway: rejected event %s: %s", _shown(seq), reason)
            else:
                assert node is not None and isinstance(seq, int)
                checked.append((seq, node, event, signed))
            if node is not None and isinstance(seq, int) and not isinstance(seq, bool) and seq > 0:
                lowest[node] = min(lowest.get(node, seq), seq)
        checked.sort(key=lambda item: (item[1], item[0]))
        async with self.lock:
            for node, low in lowest.items():
                if node not in self.seen and any(n == node for _s, n, _e, _g in checked):
                    # the first delivery of a node since the source started: what it no longer posts, it had
                    # acknowledged
                    self.seen[node] = Seen(low - 1)
            for seq, node, event, signed in checked:
                seen = self.seen[node]
                if seen.has(seq):
                    accepted.append(seq)
                    continue
                if not seen.room():
                    rejected.append({"seq": seq, "node": node, "reason": (
                        "%d events of node %s after a gap are waiting for the events before them; post those first"
                        % (MAX_SEEN, node))})
                    continue
                await self.queue.put(eda_event(event, node, signed))
                seen.add(seq)
                accepted.append(seq)
        return {"accepted": sorted(accepted), "rejected": rejected}


def _positive(args, name, default, kind):
    value = args.get(name)
    if value is None:
        return default
    try:
        number = kind(value)
    except (TypeError, ValueError):
        number = 0
    if isinstance(value, bool) or number <= 0:
        raise ValueError("bcd.devices.gateway: %s must be a positive number, got %r" % (name, value))
    return number


def eda_event(event, node, signed):
    # type: (Dict[str, Any], str, bool) -> Dict[str, Any]
    """The event put on the rulebook's queue (docs/event-driven.md, "The events on the queue")."""
    body = event["body"]
    devices = body.get("device_ids")
    return {
        "bcd": {
            "type": event["type"],
            "node": node,
            "seq": event["seq"],
            "allocation": body.get("allocation_id"),
            "devices": list(devices) if isinstance(devices, list) else [],
            "reason": body.get("reason"),
            "generation": body.get("generation"),
            "signed": signed,
            "body": body,
        },
        "meta": {"hosts": node},
    }


# --- HTTP/1.1, one request a connection ---

async def _read_request(reader, gateway):
    # type: (asyncio.StreamReader, Gateway) -> Tuple[str, str, Dict[str, str], int]
    try:
        head = await reader.readuntil(b"\r\n\r\n")
    except asyncio.LimitOverrunError:
        raise BadRequest(431, "the request line and headers are longer than %d bytes" % MAX_HEADER_BYTES)
    except asyncio.IncompleteReadError:
        raise BadRequest(400, "the request ended before its headers did")
    lines = head[:-4].decode("latin-1").split("\r\n")
    parts = lines[0].split(" ")
    if len(parts) != 3 or not parts[2].startswith("HTTP/"):
        raise BadRequest(400, "not an HTTP request line: %s" % _shown(lines[0]))
    method, target, version = parts
    if version not in ("HTTP/1.1", "HTTP/1.0"):
        raise BadRequest(505, "HTTP/1.1 only, got %s" % _shown(version))
    headers = {}  # type: Dict[str, str]
    for line in lines[1:]:
        name, sep, value = line.partition(":")
        if not sep or not name or name != name.strip():
            raise BadRequest(400, "a malformed header line: %s" % _shown(line))
        name = name.lower()
        if name in headers and name in ("content-length", "transfer-encoding", gateway.token_header):
            raise BadRequest(400, "the header %s is given twice" % name)
        headers[name] = value.strip()
    if "transfer-encoding" in headers:
        raise BadRequest(411, "send the body with a Content-Length, not Transfer-Encoding")
    length_text = headers.get("content-length", "0")
    if not length_text.isdigit() or len(length_text) > 18:
        raise BadRequest(400, "Content-Length must be a number of bytes, got %s" % _shown(length_text))
    return method, target, headers, int(length_text)


async def _answer(writer, status, document):
    # type: (asyncio.StreamWriter, int, Dict[str, Any]) -> None
    payload = json.dumps(document).encode("utf-8")
    head = ("HTTP/1.1 %d %s\r\nContent-Type: application/json\r\nContent-Length: %d\r\nConnection: close\r\n"
            % (status, _STATUS.get(status, "Error"), len(payload)))
    if status == 429:
        head += "Retry-After: 1\r\n"
    writer.write(head.encode("ascii") + b"\r\n" + payload)
    await writer.drain()


async def _linger(reader):
    # type: (asyncio.StreamReader) -> None
    """Read what a refused client still sends (a bounded amount, for a short while) before closing: a socket closed
    with unread input is reset, and the client would see the reset instead of the answer."""
    left = LINGER_BYTES
    try:
        while left > 0:
            chunk = await asyncio.wait_for(reader.read(min(left, 65536)), LINGER_SECONDS)
            if not chunk:
                return
            left -= len(chunk)
    except (asyncio.TimeoutError, ConnectionError, ssl.SSLError, OSError):
        return


async def _serve(gateway, reader, writer):
    # type: (Gateway, asyncio.StreamReader, asyncio.StreamWriter) -> None
    peer = writer.get_extra_info("peername")
    client = peer[0] if isinstance(peer, tuple) and peer else str(peer)
    status, document = 500, {"error": "the gateway failed"}  # type: Tuple[int, Dict[str, Any]]
    try:
        try:
            if not gateway.allow(client):
                raise BadRequest(429, "more than %s requests a second from %s" % (gateway.rate, client))
            method, _target, headers, length = await asyncio.wait_for(_read_request(reader, gateway), gateway.timeout)
            if method != "POST":
                raise BadRequest(405, 'POST {"events": [...]} here, not %s' % _shown(method))
            if not gateway.authorised(headers):
                raise BadRequest(401, "a missing or wrong token in the header %s" % gateway.token_header)
            if length > gateway.max_body:
                raise BadRequest(413, "the body of %d bytes is larger than max_body_bytes (%d)" % (length, gateway.max_body))
            try:
                body = await asyncio.wait_for(reader.readexactly(length), gateway.timeout)
            except asyncio.IncompleteReadError:
                raise BadRequest(400, "the body ended before its Content-Length (%d bytes)" % length)
            status, document = 200, await gateway.deliver(body)
            logger.info("bcd.devices.gateway: %s delivered %d events, %d rejected", client,
                        len(document["accepted"]), len(document["rejected"]))
        except BadRequest as exc:
            status, document = exc.status, {"error": exc.reason, "accepted": []}
            logger.warning("bcd.devices.gateway: %s: %d %s", client, exc.status, exc.reason)
        except asyncio.TimeoutError:
            status, document = 408, {"error": "the request took longer than %s seconds" % gateway.timeout, "accepted": []}
        except (ConnectionError, ssl.SSLError):
            return
        except asyncio.CancelledError:
            raise
        except Exception as exc:  # never the rulebook's end: the client is told, the source goes on
            logger.exception("bcd.devices.gateway: a request from %s failed", client)
            status, document = 500, {"error": "the gateway failed: %s" % type(exc).__name__, "accepted": []}
        try:
            await _answer(writer, status, document)
            if status != 200:
                await _linger(reader)
        except (ConnectionError, ssl.SSLError, OSError):
            pass
    finally:
        try:
            writer.close()
            await writer.wait_closed()
        except (ConnectionError, ssl.SSLError, OSError):
            pass


def _ssl_context(args):
    # type: (Dict[str, Any]) -> Optional[ssl.SSLContext]
    if not args.get("certfile"):
        if args.get("cafile") or args.get("keyfile"):
            raise ValueError("bcd.devices.gateway: keyfile and cafile need certfile")
        return None
    context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    context.minimum_version = ssl.TLSVersion.TLSv1_2
    context.load_cert_chain(args["certfile"], args.get("keyfile"), args.get("password"))
    if args.get("cafile"):
        context.load_verify_locations(cafile=args["cafile"])
        context.verify_mode = ssl.CERT_REQUIRED
    return context


async def main(queue, args):
    # type: (Any, Dict[str, Any]) -> None
    """Serve the role's deliveries until cancelled, putting each new verified event on ``queue``."""
    if args.get("port") is None:
        raise ValueError("bcd.devices.gateway: the argument port is required")
    port = int(args["port"])
    gateway = Gateway(queue, args)
    server = await asyncio.start_server(
        lambda r, w: _serve(gateway, r, w), args.get("host") or "0.0.0.0",  # a gateway listens on every address unless told
        port, ssl=_ssl_context(args), limit=MAX_HEADER_BYTES)
    bound = [s.getsockname() for s in server.sockets or []]
    logger.info("bcd.devices.gateway: listening on %s", ", ".join("%s:%s" % b[:2] for b in bound))
    ready = args.get("_ready")
    if ready is not None:  # tests: the address the server took
        ready.set_result(bound[0][:2])
    try:
        async with server:
            await server.serve_forever()
    except asyncio.CancelledError:
        logger.info("bcd.devices.gateway: stopped")
        raise


if __name__ == "__main__":
    class _PrintQueue(asyncio.Queue):
        async def put(self, item):
            print(json.dumps(item))

    asyncio.run(main(_PrintQueue(), json.loads(sys.argv[1]) if len(sys.argv) > 1 else {}))
