# -*- coding: utf-8 -*-
# Copyright: contributors to bcd.devices
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""ansible-rulebook event source bcd.devices.gateway: the gateway the role bcd_holds delivers a node's events to.

The role posts ``{"events": [...]}`` and acknowledges, on the node, the contiguous prefix of what this answers
``200 {"accepted": [seq, ...]}``. An event is accepted only once it is on the rulebook's queue (or was already
put there by an earlier delivery), so an acknowledgement never loses one. HTTP/1.1 on asyncio's streams: the
standard library and ``cryptography`` (for Ed25519, through the collection's own ``state/events.py``).
docs/event-driven.md has the architecture, the arguments and the shape of the events put on the queue.

It trusts no node and stays up for everyone: every event fits the collection's event grammar
(``domain/event_grammar.py``: no field holds a template delimiter, whoever signed it) before anything else
reads it; an event counts as a node's only under that node's seal; what was queued is remembered (on disk
with ``state_dir``) so that nothing is acted on twice; and connections, refusals and big deliveries are
bounded so that one client cannot keep the others waiting.
"""

from __future__ import annotations

import asyncio
import collections
import hashlib
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
short_description: Receive a GPU node's sealed events from the role's delivery, checked, once each
description:
  - >-
    An ansible-rulebook event source. It is the gateway the role P(bcd.devices.bcd_holds#role) delivers to
    (C(bcd_holds_gateway_url)) - the role posts C({"events": [...]}), the node's events not yet acknowledged,
    oldest first, and acknowledges the contiguous prefix of the C(accepted) seqs this answers.
  - >-
    Each event must first fit the grammar of the node's events (every field allowlisted, no curly bracket or
    control character anywhere, no field its type does not have), then name a node whose key is configured
    (C(body.node_id)), then carry a valid seal by that key (format 2 - the node's Ed25519 signature over its
    C(seq), C(type) and C(body)). C(AllocationBound), C(AllocationReleased) and the conditions must also carry
    a valid signature by that key (as the filter bcd.devices.verify_report checks it). An event of format 1
    (no seal, from a node not yet upgraded) is refused unless O(accept_unsealed) is set.
  - >-
    An event that fails a check is not put on the queue and is listed in the answer's C(rejected) with its
    C(seq) and a C(reason); the node keeps it and posts it again.
  - >-
    Each accepted event is put on the queue once, as C({"bcd": {...}, "meta": {"hosts": <node>}}) (docs/event-driven.md
    has the fields). A delivery posted again (a run that died before acknowledging) is answered as accepted and
    queued nothing more. A sealed event is remembered by node and C(seq), an accepted unsealed one by a digest of
    its node, type and body; with O(state_dir) that memory is written to disk before the answer, so a restarted
    source queues nothing it queued before, otherwise it lasts as long as the source runs.
  - >-
    Requests past O(max_body_bytes) are answered 413, past O(rate) 429, without the token 401, and anything that
    is not a POST of a JSON object with a list C(events) 400 with the reason; a connection past
    O(max_connections_per_client) is answered 429 and past O(max_connections) 503, and closed at once. Nothing of
    them is queued, and the source goes on serving.
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
        C(node_public_key) of M(bcd.devices.holds_info). O(node_keys) wins for a node named in both.
      - >-
        Looked at once a second at most, never once per event - a file added, removed or renamed into place is
        seen within a second, a file rewritten in place within 10 seconds; only the files whose modification
        time or size changed are read again. So a node is enrolled without a restart.
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
  accept_unsealed:
    description:
      - >-
        Accept events of format 1 (no seal), from nodes whose collection predates sealed events, while a fleet
        upgrades. Their signatures are checked as before; each is remembered by a digest of its node, type and
        body, never by its C(seq), and is queued with C(bcd.sealed=false) (an unsealed C(AllocationFailed) also
        with C(bcd.signed=false)). Unset, an unsealed event is rejected with the reason.
    type: bool
    default: false
  state_dir:
    description:
      - >-
        A directory the source owns (created, mode 0700, when missing) where it keeps, one file per node, what it
        has queued - the node's seqs and the digests of its unsealed events - written atomically after the events
        are put on the queue and before the answer. A restarted source then recognises what it queued before
        and queues none of it again. A damaged file is logged and read as empty for its node.
      - >-
        Unset, that memory lasts as long as the source runs - a source restarted before a node's acknowledgement
        arrived queues that delivery's events again.
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
  max_connections:
    description: Connections open at once, from all clients together; one more is answered 503 and closed at once.
    type: int
    default: 256
  max_connections_per_client:
    description: Connections open at once from one client address; one more is answered 429 and closed at once.
    type: int
    default: 8
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
        state_dir: /var/lib/bcd-gateway
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

MAX_HEADER_BYTES = 16 * 1024  # the request line and headers together
MAX_SEEN = 10000  # seqs above the contiguous prefix, and unsealed digests, remembered per node: a node's journal bound
MAX_CLIENTS = 4096  # client addresses the rate limit remembers
DRAIN_BYTES = 4096  # read and dropped after a refusal, at most, before the connection is closed
DRAIN_SECONDS = 0.1  # and for at most this long
MAX_REASON = 300  # characters of input quoted in a reason
TURN_SECONDS = 0.01  # checking or queueing a delivery's events gives the event loop back this often, to the others
KEYS_RECHECK = 1.0  # seconds between two looks at node_keys_dir, at least
KEYS_RESCAN = 10.0  # seconds after which every file's time and size is looked at again, directory unchanged or not
MAX_KEY_FILE = 4096
MAX_STATE_BYTES = 4 * 1024 * 1024  # a node's memory: 10 000 seqs and 10 000 digests are under 1 MiB
STATE_VERSION = 1
LOG_LINES = 20  # lines a second about refused connections, requests and events; past them, counted and said once
HANDSHAKE_SECONDS = 10.0  # a TLS client has this long to finish its handshake (or ``timeout``, when shorter)
_STATUS = {200: "OK", 400: "Bad Request", 401: "Unauthorized", 404: "Not Found", 405: "Method Not Allowed",
           408: "Request Timeout", 411: "Length Required", 413: "Content Too Large", 429: "Too Many Requests",
           431: "Request Header Fields Too Large", 500: "Internal Server Error", 503: "Service Unavailable",
           505: "HTTP Version Not Supported"}
_DIGEST_HEX = frozenset("0123456789abcdef")
# Python 3.11 upgrades an accepted connection to TLS itself (StreamWriter.start_tls): the connection is counted
# against the limits before its handshake. Before 3.11, asyncio's server does the handshake before the source
# sees the connection (within HANDSHAKE_SECONDS).
_START_TLS = hasattr(asyncio.StreamWriter, "start_tls")


def _collection():
    """The collection's ``state/events.py`` (seals and signatures), ``support/bounded_json.py`` (bounded parsing),
    ``domain/event_grammar.py`` (what each field may hold) and ``domain/event_types.py``.

    ansible-rulebook runs a source with ``runpy.run_path``, so the collection's package is importable only when
    the folder holding ``ansible_collections`` is on ``sys.path``; when it is not, the folder this file is
    installed under (``<path>/ansible_collections/bcd/devices/extensions/eda/plugins/event_source/``) is added.
    """
    try:
        return _imported()
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
        return _imported()


def _imported():
    from ansible_collections.bcd.devices.plugins.module_utils.domain import event_grammar, event_types  # pylint: disable=import-outside-toplevel
    from ansible_collections.bcd.devices.plugins.module_utils.state import events  # pylint: disable=import-outside-toplevel
    from ansible_collections.bcd.devices.plugins.module_utils.support import bounded_json  # pylint: disable=import-outside-toplevel
    return events, bounded_json, event_grammar, event_types


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


class LogLimit:
    """At most ``LOG_LINES`` warnings a second about what clients send (a flood of refusals must not flood the log
    too); those past it are counted, and the count is said with the next line let through."""

    def __init__(self):
        # type: () -> None
        self.second = -1
        self.lines = 0
        self.dropped = 0

    def warning(self, message, *args):
        # type: (str, Any) -> None
        second = int(time.monotonic())
        if second != self.second:
            self.second, self.lines = second, 0
        if self.lines >= LOG_LINES:
            self.dropped += 1
            return
        self.lines += 1
        if self.dropped:
            logger.warning("bcd.devices.gateway: %d more lines about refusals were not logged", self.dropped)
            self.dropped = 0
        logger.warning(message, *args)


class NodeKeys:
    """The node public keys: the ``node_keys`` mapping, over the files of ``node_keys_dir``.

    ``refresh`` looks at the directory at most once every ``KEYS_RECHECK`` seconds (one ``stat``), lists it when
    its modification time changed or ``KEYS_RESCAN`` seconds have passed, and reads again only the files whose
    modification time or size changed; ``get`` does no I/O. So the keys cost nothing per event, whatever the
    number of nodes enrolled."""

    def __init__(self, events, mapping, directory):
        # type: (Any, Any, Any) -> None
        self._events = events
        if mapping is not None and not isinstance(mapping, dict):
            raise ValueError("bcd.devices.gateway: node_keys must be a mapping of node id to public key, got %s"
                             % type(mapping).__name__)
        self._fixed = {}  # type: Dict[str, str]
        for node, key in (mapping or {}).items():
            self._fixed[str(node)] = self._checked(key, "node_keys[%s]" % node)
        if directory is not None and (not isinstance(directory, str) or not os.path.isdir(directory)):
            raise ValueError("bcd.devices.gateway: node_keys_dir %s is not a directory" % _shown(directory))
        if not self._fixed and directory is None:
            raise ValueError("bcd.devices.gateway: give the node public keys, in node_keys or node_keys_dir")
        self._dir = directory  # type: Optional[str]
        self._dir_mtime = None  # type: Optional[int]
        self._files = {}  # type: Dict[str, Tuple[int, int, Optional[str]]]  # name: (mtime_ns, size, key or None)
        self._from_dir = {}  # type: Dict[str, str]
        self._looked = float("-inf")
        self._listed = float("-inf")
        self.clock = time.monotonic
        self.looks = 0  # times the directory was looked at (a stat), and
        self.reads = 0  # key files read: the tests count them, a delivery costs none unless a file changed
        self.refresh()

    def _checked(self, key, where):
        # type: (Any, str) -> str
        try:
            self._events.decode_public_key(key)
        except self._events.EventsError as exc:
            raise ValueError("bcd.devices.gateway: %s: %s" % (where, exc))
        return key.strip()

    def _read(self, name, size):
        # type: (str, int) -> Optional[str]
        assert self._dir is not None
        path = os.path.join(self._dir, name)
        if size > MAX_KEY_FILE:
            logger.warning("bcd.devices.gateway: %s is larger than a node public key (%d bytes) and is ignored", path, size)
            return None
        self.reads += 1
        try:
            with open(path, encoding="ascii") as handle:
                return self._checked(handle.read(MAX_KEY_FILE + 1), path)
        except (OSError, UnicodeDecodeError, ValueError) as exc:
            logger.warning("bcd.devices.gateway: %s is not a node public key and is ignored: %s", path, exc)
            return None

    def refresh(self):
        # type: () -> None
        if self._dir is None:
            return
        now = self.clock()
        if now - self._looked < KEYS_RECHECK:
            return
        self._looked = now
        self.looks += 1
        try:
            mtime = os.stat(self._dir).st_mtime_ns
        except OSError as exc:
            logger.warning("bcd.devices.gateway: cannot read node_keys_dir %s: %s", self._dir, exc)
            return
        if mtime == self._dir_mtime and now - self._listed < KEYS_RESCAN:
            return
        try:
            files = {}  # type: Dict[str, Tuple[int, int, Optional[str]]]
            with os.scandir(self._dir) as entries:
                for entry in entries:
                    if entry.name.startswith(".") or not entry.is_file():
                        continue
                    st = entry.stat()
                    known = self._files.get(entry.name)
                    if known is not None and known[:2] == (st.st_mtime_ns, st.st_size):
                        files[entry.name] = known
                    else:
                        files[entry.name] = (st.st_mtime_ns, st.st_size, self._read(entry.name, st.st_size))
        except OSError as exc:
            logger.warning("bcd.devices.gateway: cannot list node_keys_dir %s: %s", self._dir, exc)
            return
        self._dir_mtime, self._listed, self._files = mtime, now, files
        keys = {}  # type: Dict[str, str]
        for name in sorted(files):  # <node>.pub over <node> when both are there
            key = files[name][2]
            if key is not None:
                keys[name[:-4] if name.endswith(".pub") else name] = key
        self._from_dir = keys

    def get(self, node):
        # type: (str) -> Optional[str]
        return self._fixed.get(node) or self._from_dir.get(node)


class NodeMemory:
    """What was queued of one node: every sealed seq up to ``through`` (None until its first sealed event), those in
    ``above``, and the digests of its accepted unsealed events (oldest first, at most ``MAX_SEEN``); ``key`` is the
    node key it was remembered under (a node with a new key is a new identity, remembered anew)."""

    def __init__(self, key):
        # type: (str) -> None
        self.key = key
        self.through = None  # type: Optional[int]
        self.above = set()  # type: Set[int]
        self.unsealed = collections.OrderedDict()  # type: collections.OrderedDict[str, None]
        self.dirty = False

    def has(self, seq):
        # type: (int) -> bool
        return self.through is not None and (seq <= self.through or seq in self.above)

    def room(self):
        # type: () -> bool
        return len(self.above) < MAX_SEEN

    def add(self, seq):
        # type: (int) -> None
        assert self.through is not None
        self.above.add(seq)
        while self.through + 1 in self.above:
            self.through += 1
            self.above.discard(self.through)
        self.dirty = True

    def has_digest(self, digest):
        # type: (str) -> bool
        return digest in self.unsealed

    def add_digest(self, digest):
        # type: (str) -> None
        self.unsealed[digest] = None
        while len(self.unsealed) > MAX_SEEN:
            self.unsealed.popitem(last=False)
        self.dirty = True

    def document(self, node):
        # type: (str) -> Dict[str, Any]
        return {"version": STATE_VERSION, "node": node, "key": self.key, "through": self.through,
                "above": sorted(self.above), "unsealed": list(self.unsealed)}

    @classmethod
    def from_document(cls, document, node, key):
        # type: (Any, str, str) -> Optional[NodeMemory]
        """The memory a state file holds, or None when it is not one of ``node``'s (``ValueError`` says why);
        None too when it was kept under another key (a new identity: nothing of the old one counts)."""
        if not isinstance(document, dict) or document.get("version") != STATE_VERSION or document.get("node") != node:
            raise ValueError("not a state file of node %s (version %d)" % (node, STATE_VERSION))
        through, above, unsealed = document.get("through"), document.get("above"), document.get("unsealed")
        if through is not None and (not isinstance(through, int) or isinstance(through, bool) or through < 0):
            raise ValueError("through must be a seq or null, got %s" % _shown(through))
        if (not isinstance(above, list) or len(above) > MAX_SEEN or (above and through is None)
                or not all(isinstance(s, int) and not isinstance(s, bool) and through is not None and s > through + 1
                           for s in above)):
            raise ValueError("above must be at most %d seqs past through + 1" % MAX_SEEN)
        if (not isinstance(unsealed, list) or len(unsealed) > MAX_SEEN
                or not all(isinstance(d, str) and len(d) == 64 and set(d) <= _DIGEST_HEX for d in unsealed)):
            raise ValueError("unsealed must be at most %d SHA-256 digests" % MAX_SEEN)
        if document.get("key") != key:
            return None
        memory = cls(key)
        memory.through = through
        memory.above = set(above)
        memory.unsealed = collections.OrderedDict((digest, None) for digest in unsealed)
        return memory


class StateUnwritable(Exception):
    """The memory of what was queued could not be written to ``state_dir``."""


class StateDir:
    """``state_dir``: one file per node, ``<node_id>.json`` (a node id is a host name by the grammar, so a safe
    file name), written atomically: a temporary file, fsynced, renamed over the old one, the directory fsynced."""

    def __init__(self, path, bounded_json):
        # type: (Any, Any) -> None
        self.bounded_json = bounded_json
        if not isinstance(path, str) or not path:
            raise ValueError("bcd.devices.gateway: state_dir must be a directory path, got %s" % _shown(path))
        try:
            os.makedirs(path, mode=0o700, exist_ok=True)
        except OSError as exc:
            raise ValueError("bcd.devices.gateway: state_dir %s cannot be created: %s" % (path, exc.strerror or exc))
        if not os.path.isdir(path):
            raise ValueError("bcd.devices.gateway: state_dir %s is not a directory" % path)
        if not os.access(path, os.W_OK | os.X_OK):
            raise ValueError("bcd.devices.gateway: state_dir %s is not writable by this process" % path)
        self.path = path

    def _file(self, node):
        # type: (str) -> str
        return os.path.join(self.path, node + ".json")

    def load(self, node, key):
        # type: (str, str) -> NodeMemory
        """What was queued of ``node`` by an earlier run; an empty memory when there is none, it is damaged
        (logged) or it was kept under another key."""
        path = self._file(node)
        try:
            with open(path, "rb") as handle:
                content = handle.read(MAX_STATE_BYTES + 1)
        except FileNotFoundError:
            return NodeMemory(key)
        except OSError as exc:
            logger.error("bcd.devices.gateway: %s cannot be read (%s); node %s is remembered from now on only",
                         path, exc.strerror or exc, node)
            return NodeMemory(key)
        try:
            if len(content) > MAX_STATE_BYTES:
                raise ValueError("larger than %d bytes" % MAX_STATE_BYTES)
            memory = NodeMemory.from_document(self.bounded_json.loads(content, path), node, key)
        except (ValueError, self.bounded_json.StateFileError) as exc:  # UnicodeDecodeError is a ValueError
            logger.warning("bcd.devices.gateway: %s is damaged and read as empty: %s", path, exc)
            return NodeMemory(key)
        if memory is None:
            logger.warning("bcd.devices.gateway: %s was kept under another key of node %s: the node has a new "
                           "identity, and what was queued under the old one no longer counts", path, node)
            return NodeMemory(key)
        return memory

    def save(self, node, memory):
        # type: (str, NodeMemory) -> None
        path = self._file(node)
        temporary = os.path.join(self.path, ".%s.json.tmp-%s" % (node, os.urandom(6).hex()))
        content = json.dumps(memory.document(node), separators=(",", ":")).encode("utf-8")
        try:
            fd = os.open(temporary, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
            try:
                view = memoryview(content)
                while view:
                    view = view[os.write(fd, view):]
                os.fsync(fd)
            finally:
                os.close(fd)
            os.replace(temporary, path)
            directory = os.open(self.path, os.O_RDONLY)
            try:
                os.fsync(directory)
            finally:
                os.close(directory)
        except OSError as exc:
            try:
                os.unlink(temporary)
            except OSError:
                pass
            raise StateUnwritable("%s cannot be written: %s" % (path, exc.strerror or exc))


class Checked:
    """One event of a delivery that passed every check."""

    __slots__ = ("event", "seq", "node", "sealed", "signed", "digest")

    def __init__(self, event, node, sealed, signed, digest):
        # type: (Dict[str, Any], str, bool, bool, Optional[str]) -> None
        self.event = event
        self.seq = event["seq"]  # type: int
        self.node = node
        self.sealed = sealed
        self.signed = signed
        self.digest = digest


class Gateway:
    """What a delivery does: check it, queue each new verified event once, answer what was taken."""

    def __init__(self, queue, args):
        # type: (Any, Dict[str, Any]) -> None
        self.events, self.bounded_json, self.grammar, self.types = _collection()
        try:
            self.events.import_cryptography()
        except self.events.EventsError as exc:
            raise RuntimeError("bcd.devices.gateway: %s" % exc)
        unknown = sorted(str(name) for name in args if str(name) not in OPTIONS and not str(name).startswith("_"))
        if unknown:
            logger.warning("bcd.devices.gateway: unknown arguments ignored: %s (it takes %s)",
                           ", ".join(unknown), ", ".join(sorted(OPTIONS)))
        self.queue = queue
        self.keys = NodeKeys(self.events, args.get("node_keys"), args.get("node_keys_dir"))
        self.token = args.get("token") or None
        self.token_header = str(args.get("token_header") or "Authorization").lower()
        self.max_body = _positive(args, "max_body_bytes", 16 * 1024 * 1024, int)
        self.max_events = _positive(args, "max_events", 10000, int)
        self.rate = _positive(args, "rate", 5.0, float)
        self.burst = _positive(args, "burst", 20, int)
        self.timeout = _positive(args, "timeout", 60.0, float)
        self.max_connections = _positive(args, "max_connections", 256, int)
        self.max_per_client = _positive(args, "max_connections_per_client", 8, int)
        self.accept_unsealed = _boolean(args, "accept_unsealed", False)
        self.state = StateDir(args["state_dir"], self.bounded_json) if args.get("state_dir") is not None else None
        self.memories = {}  # type: Dict[str, NodeMemory]
        self.locks = {}  # type: Dict[str, asyncio.Lock]
        self.buckets = {}  # type: Dict[str, List[float]]
        self.open = 0
        self.open_by_client = {}  # type: Dict[str, int]
        self.log = LogLimit()

    # --- the checks before the body ---

    def enter(self, client):
        # type: (str) -> Optional[Tuple[int, str]]
        """Count a new connection from ``client``; ``(status, reason)`` when it is one too many."""
        if self.open >= self.max_connections:
            return 503, "%d connections are open, max_connections; try again later" % self.open
        if self.open_by_client.get(client, 0) >= self.max_per_client:
            return 429, "%d connections from %s are open, max_connections_per_client" % (self.max_per_client, client)
        self.open += 1
        self.open_by_client[client] = self.open_by_client.get(client, 0) + 1
        return None

    def leave(self, client):
        # type: (str) -> None
        self.open -= 1
        left = self.open_by_client.get(client, 1) - 1
        if left > 0:
            self.open_by_client[client] = left
        else:
            self.open_by_client.pop(client, None)

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
        # type: (Any) -> Tuple[Optional[Checked], Optional[Dict[str, Any]]]
        """``(checked, None)`` for an event that passes every check, else ``(None, rejected)``: its answer's entry
        (``seq``, ``node``, ``reason``)."""
        seq = event.get("seq") if isinstance(event, dict) else None
        if not isinstance(seq, int) or isinstance(seq, bool) or not 0 < seq <= self.events.MAX_SEQ:
            seq = None
        node = self.grammar.node_of(event)
        why = self.grammar.check_event(event)
        if why is None:
            assert node is not None
            why, checked = self._verified(event, node)
            if checked is not None:
                return checked, None
        return None, {"seq": seq, "node": node, "reason": why}

    def _verified(self, event, node):
        # type: (Dict[str, Any], str) -> Tuple[str, Optional[Checked]]
        kind = event["type"]
        key = self.keys.get(node)
        if key is None:
            return "unknown node %s: no public key is configured for it (node_keys, node_keys_dir)" % _shown(node), None
        sealed = self.grammar.is_sealed_form(event)
        if sealed:
            if not self.events.verify_seal(event, key):
                return ("bad seal: the %s at seq %d is not sealed by the key of node %s (its seq, type or body was "
                        "changed, or another key sealed it)" % (kind, event["seq"], node)), None
        elif not self.accept_unsealed:
            return ("unsealed: the %s at seq %d has no seal (event format 1, from a node whose collection predates "
                    "sealed events); upgrade the node's collection, or set accept_unsealed while the fleet "
                    "upgrades" % (kind, event["seq"])), None
        signed = sealed  # the seal is the node key's signature of the whole event, a refusal's too
        if kind in self.types.SIGNED_TYPES:
            if not self.events.verify_report(event, key):
                return "bad signature: the %s is not signed by the key of node %s" % (kind, node), None
            signed = True
        digest = None
        if not sealed:
            digest = hashlib.sha256(json.dumps([node, kind, event["body"]], sort_keys=True, separators=(",", ":"),
                                               ensure_ascii=False).encode("utf-8")).hexdigest()
        return "", Checked(event, node, sealed, signed, digest)

    async def _memory(self, node):
        # type: (str) -> NodeMemory
        """What was queued of ``node`` (read from ``state_dir`` the first time), under its key now."""
        key = self.keys.get(node)
        assert key is not None
        memory = self.memories.get(node)
        if memory is not None and memory.key == key:
            return memory
        if memory is not None:
            logger.warning("bcd.devices.gateway: node %s has a new key: what was queued under the old one no longer "
                           "counts", node)
            memory = NodeMemory(key)
        elif self.state is not None:
            memory = await asyncio.get_running_loop().run_in_executor(None, self.state.load, node, key)
        else:
            memory = NodeMemory(key)
        self.memories[node] = memory
        return memory

    async def deliver(self, body):
        # type: (bytes) -> Dict[str, Any]
        """Queue each new verified event of a delivery, in seq order per node; ``{"accepted": [...],
        "rejected": [...]}``. Every ``TURN_SECONDS`` of checking or queueing, the other clients get a turn: a
        delivery of 10 000 events (seconds of signature checks) keeps no other waiting for it."""
        events = self.parse(body)
        self.keys.refresh()
        rejected = []  # type: List[Dict[str, Any]]
        by_node = {}  # type: Dict[str, List[Checked]]
        turn = _Turns()
        for event in events:
            await turn.taken()
            checked, refusal = self.check(event)
            if checked is not None:
                by_node.setdefault(checked.node, []).append(checked)
            else:
                assert refusal is not None
                rejected.append(refusal)
        if rejected:  # one line a delivery, naming the first
            self.log.warning("bcd.devices.gateway: rejected %d events of a delivery, the first %s of %s: %s",
                             len(rejected), _shown(rejected[0]["seq"]), _shown(rejected[0]["node"]),
                             rejected[0]["reason"])
        accepted = []  # type: List[int]
        for node in sorted(by_node):
            lock = self.locks.setdefault(node, asyncio.Lock())
            async with lock:
                accepted.extend(await self._queue_node(node, sorted(by_node[node], key=lambda c: c.seq), rejected))
        return {"accepted": sorted(set(accepted)), "rejected": rejected}

    async def _queue_node(self, node, items, rejected):
        # type: (str, List[Checked], List[Dict[str, Any]]) -> List[int]
        memory = await self._memory(node)
        sealed = [item.seq for item in items if item.sealed]
        if memory.through is None and sealed:
            # the first sealed delivery of a node this source knows of: what it no longer posts, it had acknowledged
            memory.through = sealed[0] - 1
            memory.dirty = True
        accepted = []  # type: List[int]
        turn = _Turns()
        for item in items:
            await turn.taken()
            if item.sealed:
                if memory.has(item.seq):
                    accepted.append(item.seq)
                    continue
                if not memory.room():
                    rejected.append({"seq": item.seq, "node": node, "reason": (
                        "%d events of node %s after a gap are waiting for the events before them; post those first"
                        % (MAX_SEEN, node))})
                    continue
                await self.queue.put(eda_event(item))
                memory.add(item.seq)
            else:
                assert item.digest is not None
                if not memory.has_digest(item.digest):
                    await self.queue.put(eda_event(item))
                    memory.add_digest(item.digest)
            accepted.append(item.seq)
        if self.state is not None and memory.dirty:
            try:
                await asyncio.get_running_loop().run_in_executor(None, self.state.save, node, memory)
            except StateUnwritable as exc:
                logger.error("bcd.devices.gateway: %s", exc)
                raise BadRequest(500, "the gateway queued the events but could not record them in its state_dir "
                                      "(%s); post them again: they are not queued twice while it runs" % exc)
            memory.dirty = False
        return accepted


class _Turns:
    """``await turns.taken()`` in a loop gives the event loop back once ``TURN_SECONDS`` have passed since it last
    did: the other connections are served between two pieces of a long piece of work, whatever each step costs."""

    def __init__(self):
        # type: () -> None
        self.since = time.monotonic()

    async def taken(self):
        # type: () -> None
        now = time.monotonic()
        if now - self.since >= TURN_SECONDS:
            await asyncio.sleep(0)
            self.since = time.monotonic()


OPTIONS = ("host", "port", "node_keys", "node_keys_dir", "token", "token_header", "certfile", "keyfile", "password",
           "cafile", "accept_unsealed", "state_dir", "max_body_bytes", "rate", "burst", "max_connections",
           "max_connections_per_client", "max_events", "timeout")


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


def _boolean(args, name, default):
    # type: (Dict[str, Any], str, bool) -> bool
    """A boolean option; the strings a rulebook's templated value may come as are read as YAML reads them."""
    value = args.get(name)
    if value is None:
        return default
    if isinstance(value, bool):
        return value
    if isinstance(value, str) and value.strip().lower() in ("true", "yes", "on", "false", "no", "off"):
        return value.strip().lower() in ("true", "yes", "on")
    raise ValueError("bcd.devices.gateway: %s must be true or false, got %r" % (name, value))


def eda_event(item):
    # type: (Checked) -> Dict[str, Any]
    """The event put on the rulebook's queue (docs/event-driven.md, "The events on the queue")."""
    event = item.event
    body = event["body"]
    return {
        "bcd": {
            "type": event["type"],
            "node": item.node,
            "seq": item.seq,
            "allocation": body.get("allocation_id"),
            "devices": list(body.get("device_ids") or []),
            "reason": body.get("reason"),
            "generation": body.get("generation"),
            "signed": item.signed,
            "sealed": item.sealed,
            "format": 2 if item.sealed else 1,
            "body": body,
        },
        "meta": {"hosts": item.node},
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


def _response(status, document):
    # type: (int, Dict[str, Any]) -> bytes
    payload = json.dumps(document).encode("utf-8")
    head = ("HTTP/1.1 %d %s\r\nContent-Type: application/json\r\nContent-Length: %d\r\nConnection: close\r\n"
            % (status, _STATUS.get(status, "Error"), len(payload)))
    if status in (429, 503):
        head += "Retry-After: 1\r\n"
    return head.encode("ascii") + b"\r\n" + payload


async def _drain_briefly(reader, writer):
    # type: (asyncio.StreamReader, asyncio.StreamWriter) -> None
    """After a refusal's answer: half-close (the client reads the answer, then the end), and read what the client
    already sent, at most ``DRAIN_BYTES`` for at most ``DRAIN_SECONDS``, so that closing a socket with a little
    unread input does not reset the connection before the client has read the answer. Never longer."""
    loop = asyncio.get_running_loop()
    deadline = loop.time() + DRAIN_SECONDS
    left = DRAIN_BYTES
    try:
        if writer.can_write_eof():
            writer.write_eof()
        while left > 0:
            remaining = deadline - loop.time()
            if remaining <= 0:
                return
            chunk = await asyncio.wait_for(reader.read(left), remaining)
            if not chunk:
                return
            left -= len(chunk)
    except (asyncio.TimeoutError, ConnectionError, ssl.SSLError, OSError, RuntimeError):
        return


def _client_of(writer):
    # type: (asyncio.StreamWriter) -> str
    peer = writer.get_extra_info("peername")
    return str(peer[0]) if isinstance(peer, tuple) and peer else str(peer)


async def _serve(gateway, context, reader, writer):
    # type: (Gateway, Optional[ssl.SSLContext], asyncio.StreamReader, asyncio.StreamWriter) -> None
    client = _client_of(writer)
    refusal = gateway.enter(client)
    if refusal is not None:  # answered in one write, unread, and closed at once: no await, no buffer kept
        status, reason = refusal
        gateway.log.warning("bcd.devices.gateway: %s: %d %s", client, status, reason)
        try:
            if context is None:
                writer.write(_response(status, {"error": reason, "accepted": []}))
            writer.close()
        except (ConnectionError, OSError, RuntimeError):
            pass
        return
    status, document = 500, {"error": "the gateway failed"}  # type: Tuple[int, Dict[str, Any]]
    try:
        if context is not None:
            # awaited here, in this task's first step, not through wait_for (a task of its own, a step later): the
            # connection stops reading before the client's hello can reach the stream, where TLS would not see it
            try:
                await writer.start_tls(context, ssl_handshake_timeout=min(gateway.timeout, HANDSHAKE_SECONDS))
            except (asyncio.TimeoutError, ConnectionError, ssl.SSLError, OSError, RuntimeError) as exc:
                logger.info("bcd.devices.gateway: %s: no TLS handshake: %s", client, exc or type(exc).__name__)
                return
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
            gateway.log.warning("bcd.devices.gateway: %s: %d %s", client, exc.status, exc.reason)
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
            writer.write(_response(status, document))
            await asyncio.wait_for(writer.drain(), gateway.timeout)
            if status != 200:
                await _drain_briefly(reader, writer)
        except (asyncio.TimeoutError, ConnectionError, ssl.SSLError, OSError):
            pass
    finally:
        gateway.leave(client)
        try:
            writer.close()
        except (ConnectionError, ssl.SSLError, OSError, RuntimeError):
            pass


def _ssl_context(args):
    # type: (Dict[str, Any]) -> Optional[ssl.SSLContext]
    if not args.get("certfile"):
        if args.get("cafile") or args.get("keyfile"):
            raise ValueError("bcd.devices.gateway: keyfile and cafile need certfile")
        return None
    context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    context.minimum_version = ssl.TLSVersion.TLSv1_2
    try:
        context.load_cert_chain(args["certfile"], args.get("keyfile"), args.get("password"))
        if args.get("cafile"):
            context.load_verify_locations(cafile=args["cafile"])
            context.verify_mode = ssl.CERT_REQUIRED
    except (OSError, ssl.SSLError) as exc:
        raise ValueError("bcd.devices.gateway: certfile, keyfile or cafile cannot be loaded: %s" % exc)
    return context


async def main(queue, args):
    # type: (Any, Dict[str, Any]) -> None
    """Serve the role's deliveries until cancelled, putting each new verified event on ``queue``."""
    if args.get("port") is None:
        raise ValueError("bcd.devices.gateway: the argument port is required")
    try:
        port = int(args["port"])
    except (TypeError, ValueError):
        port = -1
    if isinstance(args["port"], bool) or not 0 <= port <= 65535:
        raise ValueError("bcd.devices.gateway: port must be a TCP port (0 to 65535), got %r" % (args["port"],))
    gateway = Gateway(queue, args)
    context = _ssl_context(args)
    tls_here = context if _START_TLS else None  # upgraded in _serve, after the connection is counted

    async def serve(reader, writer):
        # type: (asyncio.StreamReader, asyncio.StreamWriter) -> None
        await _serve(gateway, tls_here, reader, writer)

    extra = {} if _START_TLS or context is None else {
        "ssl": context, "ssl_handshake_timeout": min(gateway.timeout, HANDSHAKE_SECONDS)}  # type: Dict[str, Any]
    server = await asyncio.start_server(serve, args.get("host") or "0.0.0.0",  # a gateway listens on every address unless told
                                        port, limit=MAX_HEADER_BYTES, **extra)
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
