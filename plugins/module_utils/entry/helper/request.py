# -*- coding: utf-8 -*-
# Copyright: contributors to bcd.devices
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""What a peer may ask of the root helper: one line of JSON, its operations and its bounds.

``bcd-holds helper`` listens on a unix socket (``server``). A peer sends one JSON object on one
line and gets one line back, ``{"ok": true}`` or ``{"ok": false, "error": …}``; then the
helper hangs up. No file content crosses the socket: the peer asks for typed
operations carrying data, and root checks that data with the rules the module
applies to network input, resolves it against the node, and builds every byte it
writes itself (docs/security.md; ``handle`` carries them out):

* ``{"op": "hold.write", "kind": "cdi"|"allocation-env", "hold": {allocation_id,
  reservation_id, generation, binding, devices, limits, env}}``: the hold's spec or
  env file, rendered by root from its own inventory and vendor spec;
* ``{"op": "hold.remove", "kind": …, "allocation_id": …}``;
* ``{"op": "hold.set_aside", "allocation_id": …}``: a damaged spec renamed aside
  in ``/etc/cdi`` (``bcd-<id>.json.damaged-<UTC time>``), the oldest copies beyond
  ``writers.ASIDE_PER_HOLD`` per allocation and ``writers.ASIDE_TOTAL`` in all removed;
* ``{"op": "slice.apply", "allocation_id": …, "limits": {…}}``: the slice's
  properties built by root from the limits, with headroom over what its workload uses
  a CPUQuota floor, and ``cpus``/``mems`` the host has that never narrow under a running
  workload (``domain.slices.check_slice_change``);
* ``{"op": "slice.stop", "allocation_id": …}``: only once the slice is empty, checked
  again with the slice closed and frozen;
* ``{"op": "kube.look"}``: what pods hold, asked of the kubelet; the reply carries
  ``"view"``;
* ``{"op": "mig.look"}``: the GPUs' MIG layout as root reads it (``nvidia-smi`` or the
  fakehw file); the reply carries ``"mig"`` (``domain/mig/wire.node_to_data``);
* ``{"op": "mig.change", "change": {kind, gpu, ...}}``: one MIG op (``domain/mig/wire.op_from_data``:
  a mode change, a destroy or a create on one GPU), carried out only once the claims root
  reads itself allow it (``domain/mig/guard.op_refusal``: the holds in ``/etc/cdi`` and
  ``/var/run/cdi`` and their env files, the pending releases, the VMs, the processes on the
  GPU); the reply carries ``"done"`` (``wire.done_to_data``: what was made, or the tool's words).

Every path is built from root's own ``--root``, a kind and a checked allocation id. Here is the
grammar of a request and what is refused before the node is touched: a line past ``MAX_REQUEST``
bytes, JSON nested deeper than ``MAX_DEPTH`` or holding a NUL, an unknown op or key, an id or kind
that is not one; ``Refused`` carries the reason back to the peer.
``node.helper_client.HelperClient`` is the other end.
"""

from __future__ import annotations

import json
import threading
from typing import TYPE_CHECKING, Any, Dict, List, Tuple, cast

from ansible_collections.bcd.devices.plugins.module_utils.domain.input.assignment import ALLOCATION_ID_RE, MAX_SECTION_BYTES
from ansible_collections.bcd.devices.plugins.module_utils.node.writers import NODE_FILE_KINDS
from ansible_collections.bcd.devices.plugins.module_utils.support.errors import BcdError, type_name

if TYPE_CHECKING:
    from ansible_collections.bcd.devices.plugins.module_utils.domain.plan.seams import NodeFileKind

# One request line: data only, no file content. A hold.write carries a whole entry of a devices section,
# which the module accepts only within MAX_SECTION_BYTES as section_size counts it (an upper bound of the
# entry's JSON: every value, key and bracket 10 bytes, a character of text up to json.dumps's 12); around
# it the op, kind, generation and the node's runtimes (MAX_RUNTIMES name and version pairs), and per device
# a device_class the section may leave out: REQUEST_FRAME, the whole request line before. So the largest
# hold the module accepts (1 024 slots of the longest ids, 256 env lines of 4 096 characters) fits:
# 4 MiB + 64 KiB, 16 peers at once.
REQUEST_FRAME = 64 * 1024
MAX_REQUEST = MAX_SECTION_BYTES + REQUEST_FRAME
MAX_DEPTH = 16  # nesting of a request's JSON
# op -> the keys its request carries besides "op"
OPS: Dict[str, Tuple[str, ...]] = {
    "hold.write": ("kind", "hold"),
    "hold.remove": ("kind", "allocation_id"),
    "hold.set_aside": ("allocation_id",),
    "slice.apply": ("allocation_id", "limits"),
    "slice.stop": ("allocation_id",),
    "kube.look": (),
    "mig.look": (),
    "mig.change": ("change",),
}
# Lines longer than the old whole line (REQUEST_FRAME) are parsed at most BIG_PARSES at a time: json.loads of
# 4 MiB of "[{},{},...]" makes some 130 MB of objects, and sixteen at once would pass the unit's MemoryMax=1G.
# A hold that long waits its turn (the largest the module accepts parses quickly: docs/performance.md, "Speed
# tricks, measured (issue 47)").
BIG_PARSES = 2
_BIG_PARSING = threading.BoundedSemaphore(BIG_PARSES)


class Refused(BcdError):
    """A request the helper will not carry out; the message goes back to the peer. ``retryable``: what the
    node has now refuses it (a full quota, a workload still running, a device not there yet), so the same
    request may be carried out later, and the reply says so (``"retryable": true``); otherwise the request
    itself is at fault (malformed, or never carried out as asked) and no pass should send it again."""

    def __init__(self, message: str, retryable: bool = False) -> None:
        super().__init__(message)
        self.retryable = retryable


def _depth(value: object) -> int:
    """How deeply a parsed JSON value nests (iteratively: hostile input must not recurse)."""
    deepest, pending = 0, [(value, 1)]
    while pending:
        item, level = pending.pop()
        deepest = max(deepest, level)
        if level > MAX_DEPTH:
            return level
        if isinstance(item, dict):
            pending.extend((child, level + 1) for child in item.values())
        elif isinstance(item, list):
            pending.extend((child, level + 1) for child in item)
    return deepest


def _has_nul(value: object) -> bool:
    """A NUL anywhere in parsed JSON (``\\u0000`` escapes pass the text check)."""
    pending: List[object] = [value]
    while pending:
        item = pending.pop()
        if isinstance(item, str) and "\0" in item:
            return True
        if isinstance(item, dict):
            pending.extend(list(item.keys()) + list(item.values()))
        elif isinstance(item, list):
            pending.extend(item)
    return False


def _parse_request(line: bytes) -> object:
    if len(line) <= REQUEST_FRAME:
        return json.loads(line.decode("utf-8"))
    with _BIG_PARSING:
        return json.loads(line.decode("utf-8"))


def read_request(line: bytes) -> object:
    """The JSON value of a request line, not deeper than ``MAX_DEPTH`` and without a NUL (else ``Refused``);
    a line that is not JSON raises ``ValueError`` or ``UnicodeDecodeError`` (``RecursionError`` past the
    parser's own depth), which the server answers as malformed."""
    request = _parse_request(line)
    if _depth(request) > MAX_DEPTH:
        raise Refused("a request nests deeper than %d levels" % MAX_DEPTH)
    if _has_nul(request):
        raise Refused("a request must not contain NUL characters")
    return request


def checked_request(request: object) -> Tuple[str, Dict[str, Any]]:
    """``(op, request)``: a JSON object whose op is one of ``OPS`` and whose keys are that op's; else
    ``Refused``. Its values are checked by the op that reads them."""
    if not isinstance(request, dict):
        raise Refused("a request must be a JSON object, not %s" % type_name(request))
    op = request.get("op")
    if not isinstance(op, str) or op not in OPS:
        raise Refused("unknown op %s; known: %s" % (shown(op), ", ".join(sorted(OPS))))
    unknown = sorted(str(key) for key in request if key != "op" and key not in OPS[op])
    if unknown:
        raise Refused("%s takes no %s" % (op, ", ".join(unknown)))
    return op, request


def checked_allocation_id(value: object) -> str:
    if not isinstance(value, str) or not ALLOCATION_ID_RE.fullmatch(value):
        raise Refused("allocation_id %s does not match %s" % (shown(value), ALLOCATION_ID_RE.pattern))
    return value


def checked_kind(value: object) -> NodeFileKind:
    if not isinstance(value, str) or value not in NODE_FILE_KINDS:
        raise Refused("unknown kind %s; known: %s" % (shown(value), ", ".join(sorted(NODE_FILE_KINDS))))
    return cast("NodeFileKind", value)  # NODE_FILE_KINDS is keyed by NodeFileKind's values, and no other


def shown(value: object) -> str:
    if isinstance(value, str):
        text = repr(value)
        return text if len(text) <= 90 else text[:87] + "..."
    return type_name(value)
