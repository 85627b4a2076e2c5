# -*- coding: utf-8 -*-
# Copyright: contributors to bcd.devices
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""What a delivery of events to a gateway achieved, and so what the node may acknowledge.

The role posts the unacknowledged events, oldest first, and the gateway answers
``200 {"accepted": [seq, ...]}`` (and, if it likes, ``"rejected": [...]``). Events are acknowledged
through the highest seq of the contiguous accepted prefix: an event the gateway did not take stays,
with everything after it, and is posted again next time. An answer that is not 200 with such a
mapping acknowledges nothing. Pure: it reads the events and the ``ansible.builtin.uri`` result.
"""

from __future__ import annotations

import json
from typing import Any, Dict, List, Optional


def _seq(value):
    # type: (Any) -> Optional[int]
    """A JSON integer (never a boolean), else None."""
    if isinstance(value, int) and not isinstance(value, bool):
        return value
    return None


def _status(post):
    # type: (Dict[str, Any]) -> int
    status = post.get("status", -1)
    return status if _seq(status) is not None else -1


def ack_through(posted, accepted):
    # type: (List[int], List[int]) -> Optional[int]
    """The highest seq of the prefix of ``posted`` (oldest first) that ``accepted`` holds in full;
    None when the first event was not accepted."""
    taken = set(accepted)
    through = None
    for seq in posted:
        if seq not in taken:
            break
        through = seq
    return through


def delivery(events, post, gateway_url):
    # type: (Any, Any, str) -> Dict[str, Any]
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
    accepted = []  # type: List[int]
    rejected = []  # type: Any
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


def _listed(rejected):
    # type: (Any) -> str
    items = rejected if isinstance(rejected, list) else [rejected]
    return ", ".join(json.dumps(item) for item in items)
