# -*- coding: utf-8 -*-
# Copyright: contributors to bcd.devices
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""Maintenance: GPUs an operator took out of service on the node.

While a GPU is in maintenance no new hold may claim it or a part of it (refused with
``overlap`` and ``GPU-… is in maintenance (<reason>)``); kept holds stay, because releasing
them is the control plane's decision. The record lives in the node's state directory
(``maintenance.json``: ``{uuid: {reason, since}}``, ``since`` in seconds since the epoch; a module returns it
in ISO 8601 UTC), so the timers' passes honour it too,
and is changed only under the pass lock (``bcd.devices.maintenance``).

Maintenance is not a claim a reset must wait for: it is how an operator keeps new holds off
a GPU so that it can be reset or re-partitioned once its holds are gone (``domain/busy.py``).
"""

from __future__ import annotations

import calendar
import math
import time
from typing import Dict, List, Tuple

from ansible_collections.bcd.devices.plugins.module_utils.support import bounded_json
from ansible_collections.bcd.devices.plugins.module_utils.support.errors import BcdError
from ansible_collections.bcd.devices.plugins.module_utils.support.json_bytes import json_bytes
from ansible_collections.bcd.devices.plugins.module_utils.support.patterns import lazy_pattern

MAX_GPUS = 256
MAX_REASON = 256
GPU_UUID_RE = lazy_pattern(r"^GPU-[A-Za-z0-9-]{1,128}$")
_REASON_RE = lazy_pattern(r"^[^\x00-\x1f\x7f]{1,%d}$" % MAX_REASON)
ISO_UTC = "%Y-%m-%dT%H:%M:%SZ"


class MaintenanceError(BcdError, ValueError):
    """A maintenance request that cannot be taken; the message names the field."""


def check_gpus(gpus):
    """The GPU UUIDs of a request, checked: a list of 1 to ``MAX_GPUS`` GPU UUIDs, each once."""
    if not isinstance(gpus, list) or not gpus:
        raise MaintenanceError("gpus: must be a non-empty list of GPU UUIDs")
    if len(gpus) > MAX_GPUS:
        raise MaintenanceError("gpus: %d GPUs; at most %d" % (len(gpus), MAX_GPUS))
    out = []
    for index, uuid in enumerate(gpus):
        if not isinstance(uuid, str) or not GPU_UUID_RE.match(uuid):
            raise MaintenanceError("gpus[%d]: must be a GPU UUID (GPU-...), not %r" % (index, str(uuid)[:80]))
        if uuid not in out:
            out.append(uuid)
    return out


def check_reason(reason):
    if not isinstance(reason, str) or not _REASON_RE.match(reason.strip() or "x\x00"):
        raise MaintenanceError("reason: must be text of 1 to %d characters without control characters" % MAX_REASON)
    return reason.strip()


def parse_maintenance(content, where):
    """``(records, problem)`` from the file's bytes (None: no file; ``where``: its node path, as the bounded
    reader read it, at most its cap). A file that cannot be read gives no records and a problem to warn
    about: it is the unprivileged account's to write, so nothing in it is trusted beyond these checks.
    Content past the bounded parser's limits (``support/bounded_json``) is ``StateFileError``, as for
    every state file."""
    if content is None:
        return {}, None
    try:
        data = bounded_json.loads(content, where)
    except ValueError as exc:
        return {}, "%s is unreadable (%s); no GPU counts as in maintenance" % (where, exc)
    if not isinstance(data, dict):
        return {}, "%s is not a mapping; no GPU counts as in maintenance" % where
    records = {}
    for uuid, record in list(data.items())[:MAX_GPUS]:
        reason = record.get("reason") if isinstance(record, dict) else None
        since = record.get("since") if isinstance(record, dict) else None
        if not GPU_UUID_RE.match(str(uuid)) or not isinstance(reason, str) or not _REASON_RE.match(reason):
            return {}, "%s has an entry that is not {GPU UUID: {reason, since}}; no GPU counts as in maintenance" \
                % where
        records[uuid] = {"reason": reason, "since": _epoch(since)}
    return records, None


def _epoch(since):
    """A record's ``since`` as seconds since the epoch: the file keeps a number (as every release wrote it,
    so an older ``bcd-holds`` reads a newer file), and an ISO 8601 UTC time is read too. None for anything else."""
    if isinstance(since, bool):
        return None
    if isinstance(since, (int, float)):
        return since if math.isfinite(since) else None
    if isinstance(since, str):
        try:
            return float(calendar.timegm(time.strptime(since, ISO_UTC)))
        except (ValueError, OverflowError):
            return None
    return None


def iso_utc(since):
    """``since`` (seconds since the epoch) as the collection writes times for a person or a playbook: ISO 8601
    in UTC, ``2026-12-05T09:00:00Z`` (as a pending Kubernetes release's ``since``). None stays None."""
    if since is None:
        return None
    try:
        return time.strftime(ISO_UTC, time.gmtime(since))
    except (ValueError, OverflowError, OSError):  # a number no calendar holds, from a hand-edited file
        return None


def render_maintenance(records):
    """The records as the file keeps them."""
    return json_bytes(records)


def change(records, gpus, present, reason, now):
    """``(new records, changed GPUs)``: ``gpus`` put in maintenance with ``reason`` (a GPU already in it
    keeps its ``since``, and takes the new reason), or taken out of it."""
    new = dict((uuid, dict(record)) for uuid, record in records.items())
    changed = []  # type: List[str]
    for uuid in gpus:
        if present:
            if uuid not in new:
                new[uuid] = {"reason": reason, "since": now}
                changed.append(uuid)
            elif new[uuid]["reason"] != reason:
                new[uuid]["reason"] = reason
                changed.append(uuid)
        elif uuid in new:
            del new[uuid]
            changed.append(uuid)
    return new, changed


def listing(records):
    # type: (Dict[str, dict]) -> List[dict]
    """The records as a module returns them, by UUID, ``since`` in ISO 8601 UTC."""
    return [{"uuid": uuid, "reason": records[uuid]["reason"], "since": iso_utc(records[uuid].get("since"))}
            for uuid in sorted(records)]


def refusal(uuid, records):
    # type: (str, Dict[str, dict]) -> Tuple[bool, str]
    """``(in maintenance, the overlap message)`` for GPU ``uuid``."""
    record = records.get(uuid)
    if record is None:
        return False, ""
    return True, "%s is in maintenance (%s)" % (uuid, record["reason"])
