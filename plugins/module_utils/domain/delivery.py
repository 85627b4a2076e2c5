# -*- coding: utf-8 -*-
# Copyright: contributors to bcd.devices
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""What a delivery of events to a gateway achieved, and so what the node may acknowledge.

The role (and ``bcd-holds deliver``) posts the unacknowledged events, oldest first, and the gateway answers
``200 {"accepted": [seq, ...]}`` (and, if it likes, ``"rejected": [...]``). Events are acknowledged
through the highest seq of the contiguous accepted prefix: an event the gateway did not take stays,
with everything after it, and is posted again next time. An answer that is not 200 with such a
mapping acknowledges nothing. Pure: it reads the events and the ``ansible.builtin.uri`` result (or
what ``bcd-holds deliver`` made of its own request, in the same shape).

``bcd-holds deliver`` also splits the journal into requests a gateway takes (``deliveries``) and backs
off from a gateway that is down (``backoff_seconds``, ``backs_off``, ``backoff_record``).
"""

from __future__ import annotations

import json
from typing import Any, Dict, Iterable, List, Optional, Tuple


def _seq(value: object) -> Optional[int]:
    """A JSON integer (never a boolean), else None."""
    if isinstance(value, int) and not isinstance(value, bool):
        return value
    return None


def _status(post: Dict[str, Any]) -> int:
    status = post.get("status", -1)
    return status if _seq(status) is not None else -1


def ack_through(posted: List[int], accepted: List[int]) -> Optional[int]:
    """The highest seq of the prefix of ``posted`` (oldest first) that ``accepted`` holds in full;
    None when the first event was not accepted."""
    taken = set(accepted)
    through = None
    for seq in posted:
        if seq not in taken:
            break
        through = seq
    return through


def delivery(events: Optional[Iterable[object]], post: object, gateway_url: str) -> Dict[str, Any]:
    """The outcome of posting ``events`` (the ``events`` of ``bcd.devices.events``) to ``gateway_url``,
    given the registered result of the post (``post``; skipped when there was nothing to post or in
    check mode).

    ``posted``, ``accepted``: seqs, oldest first; ``rejected``: what the gateway said of the others;
    ``ack_through``: the seq to acknowledge through, or None; ``error``: why nothing could be delivered
    ('' when the gateway answered 200); ``left``: the posted seqs that stay in the journal; ``message``:
    a line for the user when some stay ('' when none).
    """
    post = post if isinstance(post, dict) else {}
    skipped = bool(post.get("skipped"))
    posted = [] if skipped else sorted(s for s in (_seq(e.get("seq")) for e in (events or []) if isinstance(e, dict))
                                       if s is not None)
    status = _status(post)
    answer = post.get("json") if status == 200 else None
    accepted: List[int] = []
    rejected: object = []
    if isinstance(answer, dict):
        if isinstance(answer.get("accepted"), list):
            accepted = [s for s in (_seq(v) for v in answer["accepted"]) if s is not None]
        rejected = answer.get("rejected", [])
    error = ""
    if not skipped and status != 200:
        reason = post.get("msg", "no answer")
        if status < 0:
            error = "the gateway %s could not be reached: %s" % (gateway_url, reason)
        else:
            error = "the gateway %s answered %s: %s" % (gateway_url, status, reason)
    through = ack_through(posted, accepted)
    left = [seq for seq in posted if through is None or seq > through]
    message = ""
    if left:
        why = error or "the gateway accepted %d of %d events%s" % (
            len(accepted), len(posted), (", rejected: " + _listed(rejected)) if rejected else "")
        message = "%s; %d events stay in the journal for the next run" % (why, len(left))
    return {"posted": posted, "accepted": accepted, "rejected": rejected, "ack_through": through,
            "error": error.strip(), "left": left, "message": message}


def answer_problem(status: int, answer: object) -> str:
    """Why a 200 answer is not one a delivery can use ('' when it is ``{"accepted": [...]}``)."""
    if status == 200 and not (isinstance(answer, dict) and isinstance(answer.get("accepted"), list)):
        return 'it answered 200 with %s, not {"accepted": [seq, ...]}' % (
            "a mapping without a list accepted" if isinstance(answer, dict) else "no JSON mapping")
    return ""


# -- what bcd-holds deliver posts, and when --------------------------------------------------

# The gateway bcd.devices.gateway takes at most this many events (max_events) and bytes (max_body_bytes)
# a request by default; a node's journal holds at most 10 000 events in 12 MiB, so it goes in one request.
DEFAULT_MAX_EVENTS = 10000
DEFAULT_MAX_BYTES = 16 * 1024 * 1024
_HEAD, _TAIL = b'{"events":[', b"]}"


def event_bytes(event: object) -> bytes:
    """One event as a request carries it: compact JSON, every non-ASCII character escaped (a journal line
    may hold any string JSON can, a lone surrogate included)."""
    return json.dumps(event, ensure_ascii=True, separators=(",", ":"), sort_keys=True).encode("ascii")


def deliveries(events: List[Dict[str, Any]], max_events: int,
               max_bytes: int) -> Tuple[List[Tuple[List[Dict[str, Any]], bytes]], Optional[Dict[str, Any]]]:
    """``events`` (oldest first) as request bodies ``{"events": [...]}`` of at most ``max_events`` events and
    ``max_bytes`` bytes each, in order: ``([(events, body), ...], too_large)``. ``too_large`` is the first
    event that does not fit in a body alone (None when every one fits); the bodies stop before it, since
    nothing after an event may be acknowledged before it is."""
    bodies: List[Tuple[List[Dict[str, Any]], bytes]] = []
    chunk: List[Dict[str, Any]] = []
    pieces: List[bytes] = []
    size = len(_HEAD) + len(_TAIL)

    def flush() -> None:
        if chunk:
            bodies.append((list(chunk), _HEAD + b",".join(pieces) + _TAIL))

    for event in events:
        piece = event_bytes(event)
        if len(_HEAD) + len(piece) + len(_TAIL) > max_bytes:
            flush()
            return bodies, event
        if chunk and (len(chunk) >= max_events or size + 1 + len(piece) > max_bytes):
            flush()
            chunk, pieces, size = [], [], len(_HEAD) + len(_TAIL)
        size += len(piece) + (1 if chunk else 0)
        chunk.append(event)
        pieces.append(piece)
    flush()
    return bodies, None


# A gateway that cannot be reached, or answers 429 or 5xx, is left alone for a while: 30 s after the first
# failure in a row, doubling each time up to 15 minutes, a tenth more or less at random (so that the nodes of a
# fleet that lost their gateway together do not all come back in the same second). A success resets it.
BACKOFF_FIRST = 30.0
BACKOFF_MAX = 900.0
BACKOFF_SPREAD = 0.1


def backs_off(status: int) -> bool:
    """Whether an answer ``status`` (-1: no answer) means the gateway is down or overloaded: wait before the next try."""
    return status < 0 or status == 429 or 500 <= status <= 599


def backoff_seconds(failures: int, spread: float) -> float:
    """Seconds to wait after the ``failures``-th failure in a row; ``spread`` in [0, 1) picks the jitter."""
    base: float = min(BACKOFF_FIRST * 2 ** (min(max(failures, 1), 16) - 1), BACKOFF_MAX)
    return base * (1 - BACKOFF_SPREAD + 2 * BACKOFF_SPREAD * min(max(spread, 0.0), 1.0))


def backoff_record(data: object) -> Optional[Dict[str, Any]]:
    """A stored backoff ``{"failures", "next_attempt", "error"}`` checked, else None (no backoff)."""
    if not isinstance(data, dict):
        return None
    failures, next_attempt, error = _seq(data.get("failures")), data.get("next_attempt"), data.get("error", "")
    if failures is None or failures < 1 or isinstance(next_attempt, bool) \
            or not isinstance(next_attempt, (int, float)) or not isinstance(error, str):
        return None
    return {"failures": min(failures, 1 << 20), "next_attempt": float(next_attempt), "error": error[:1000]}


def _listed(rejected: object) -> str:
    items = rejected if isinstance(rejected, list) else [rejected]
    return ", ".join(json.dumps(item) for item in items)
