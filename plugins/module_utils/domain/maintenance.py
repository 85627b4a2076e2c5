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

A record may also carry what a recovery (the playbook ``bcd.devices.gpu_recover``) left there:

* ``lease``: ``{id, until, reraise_after}``, the recovery that took the GPU out of service and is working on it.
  A lease is live until ``until``; the recovery refreshes it while it waits for the GPU's holds to go, so a
  second recovery of the node finds it and ends at once. One that is no longer live (its recovery ended, or the
  engine running it died) is kept, ended, for the pass to see: a GPU still unhealthy ``reraise_after`` seconds
  after its lease ended has its ``GPUUnhealthy`` raised again (``domain/health.py``).
* ``reset``: ``{at, healthy, problems}``, the last reset of the GPU (``bcd.devices.gpu_reset``) and its health read
  right after it. A GPU whose reset left it unhealthy stays in maintenance with the condition
  ``GPUResetIneffective`` until a person acts.

An older ``bcd-holds`` reads the records and ignores both.
"""

from __future__ import annotations

import calendar
import math
import time
from typing import Any, Dict, Iterable, List, Mapping, Optional, Sequence, Tuple

from ansible_collections.bcd.devices.plugins.module_utils.support import bounded_json
from ansible_collections.bcd.devices.plugins.module_utils.support.errors import BcdError
from ansible_collections.bcd.devices.plugins.module_utils.support.json_bytes import json_bytes
from ansible_collections.bcd.devices.plugins.module_utils.support.speed import lazy_pattern

MAX_GPUS = 256
MAX_REASON = 256
MAX_PROBLEMS = 16  # of a reset's record
MAX_PROBLEM = 512
DEFAULT_LEASE_SECONDS = 300
MAX_LEASE_SECONDS = 3600
DEFAULT_RERAISE_AFTER = 900
MAX_RERAISE_AFTER = 7 * 86400
MAX_LEASE_ID = 64
LEASE_ID_RE = lazy_pattern(r"^[A-Za-z0-9][A-Za-z0-9_.-]{0,%d}$" % (MAX_LEASE_ID - 1))
GPU_UUID_RE = lazy_pattern(r"^GPU-[A-Za-z0-9-]{1,128}$")
_REASON_RE = lazy_pattern(r"^[^\x00-\x1f\x7f]{1,%d}$" % MAX_REASON)
_PROBLEM_RE = lazy_pattern(r"^[^\x00-\x1f\x7f{}]{1,%d}$" % MAX_PROBLEM)
ISO_UTC = "%Y-%m-%dT%H:%M:%SZ"

# A GPU's record, the JSON object maintenance.json keeps for it: ``{reason, since}``, with ``lease`` and ``reset``
# when a recovery left them (as ``parse_maintenance`` checked them); and the file, ``{uuid: record}``.
MaintenanceRecord = Dict[str, Any]
Records = Dict[str, MaintenanceRecord]


class MaintenanceError(BcdError, ValueError):
    """A maintenance request that cannot be taken; the message names the field."""


def check_gpus(gpus: object) -> List[str]:
    """The GPU UUIDs of a request, checked: a list of 1 to ``MAX_GPUS`` GPU UUIDs, each once."""
    if not isinstance(gpus, list) or not gpus:
        raise MaintenanceError("gpus: must be a non-empty list of GPU UUIDs")
    if len(gpus) > MAX_GPUS:
        raise MaintenanceError("gpus: %d GPUs; at most %d" % (len(gpus), MAX_GPUS))
    out: List[str] = []
    for index, uuid in enumerate(gpus):
        if not isinstance(uuid, str) or not GPU_UUID_RE.match(uuid):
            raise MaintenanceError("gpus[%d]: must be a GPU UUID (GPU-...), not %r" % (index, str(uuid)[:80]))
        if uuid not in out:
            out.append(uuid)
    return out


def check_reason(reason: object) -> str:
    if not isinstance(reason, str) or not _REASON_RE.match(reason.strip() or "x\x00"):
        raise MaintenanceError("reason: must be text of 1 to %d characters without control characters" % MAX_REASON)
    return reason.strip()


def parse_maintenance(content: Optional[bytes], where: str) -> Tuple[Records, Optional[str]]:
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
    records: Records = {}
    for uuid, record in list(data.items())[:MAX_GPUS]:
        reason = record.get("reason") if isinstance(record, dict) else None
        since = record.get("since") if isinstance(record, dict) else None
        if not GPU_UUID_RE.match(str(uuid)) or not isinstance(reason, str) or not _REASON_RE.match(reason):
            return {}, "%s has an entry that is not {GPU UUID: {reason, since}}; no GPU counts as in maintenance" \
                % where
        records[uuid] = {"reason": reason, "since": _epoch(since)}
        lease, reset = _lease(record.get("lease")), _reset(record.get("reset"))
        if lease is not None:
            records[uuid]["lease"] = lease
        if reset is not None:
            records[uuid]["reset"] = reset
    return records, None


def _number(value: object) -> Optional[float]:
    """A finite number of the file, else None."""
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value):
        return None
    return value


def _lease(value: object) -> Optional[Dict[str, Any]]:
    """A record's ``lease`` as ``{id, until, reraise_after}``, or None for anything else (no lease)."""
    if not isinstance(value, dict):
        return None
    lease_id, until, after = value.get("id"), _number(value.get("until")), _number(value.get("reraise_after"))
    if not isinstance(lease_id, str) or not LEASE_ID_RE.match(lease_id) or until is None:
        return None
    if after is None or not 0 <= after <= MAX_RERAISE_AFTER:
        after = DEFAULT_RERAISE_AFTER
    return {"id": lease_id, "until": until, "reraise_after": after}


def _reset(value: object) -> Optional[Dict[str, Any]]:
    """A record's ``reset`` as ``{at, healthy, problems}``, or None for anything else (no reset recorded)."""
    if not isinstance(value, dict):
        return None
    at, healthy, found = _number(value.get("at")), value.get("healthy"), value.get("problems")
    if at is None or not isinstance(healthy, bool) or not isinstance(found, list) or len(found) > MAX_PROBLEMS \
            or not all(isinstance(text, str) and _PROBLEM_RE.match(text) for text in found):
        return None
    return {"at": at, "healthy": healthy, "problems": list(found)}


def _epoch(since: object) -> Optional[float]:
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


def iso_utc(since: Optional[float]) -> Optional[str]:
    """``since`` (seconds since the epoch) as the collection writes times for a person or a playbook: ISO 8601
    in UTC, ``2026-12-05T09:00:00Z`` (as a pending Kubernetes release's ``since``). None stays None."""
    if since is None:
        return None
    try:
        return time.strftime(ISO_UTC, time.gmtime(since))
    except (ValueError, OverflowError, OSError):  # a number no calendar holds, from a hand-edited file
        return None


def render_maintenance(records: Records) -> bytes:
    """The records as the file keeps them."""
    return json_bytes(records)


def change(records: Records, gpus: Iterable[str], present: bool, reason: Optional[str], now: float) -> Tuple[Records, List[str]]:
    """``(new records, changed GPUs)``: ``gpus`` put in maintenance with ``reason`` (a GPU already in it
    keeps its ``since``, and takes the new reason), or taken out of it."""
    new = dict((uuid, dict(record)) for uuid, record in records.items())
    changed: List[str] = []
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


def listing(records: Records, now: Optional[float] = None) -> List[Dict[str, Any]]:
    """The records as a module returns them, by UUID, times in ISO 8601 UTC: ``lease`` (``{id, until, live}``, live
    as of ``now``) and ``reset`` (``{at, healthy, problems}``) null when the record has none."""
    out = []
    for uuid in sorted(records):
        record = records[uuid]
        lease, reset = record.get("lease"), record.get("reset")
        out.append({
            "uuid": uuid, "reason": record["reason"], "since": iso_utc(record.get("since")),
            "lease": None if lease is None else {"id": lease["id"], "until": iso_utc(lease["until"]),
                                                 "live": now is not None and lease["until"] > now},
            "reset": None if reset is None else {"at": iso_utc(reset["at"]), "healthy": reset["healthy"],
                                                 "problems": list(reset["problems"])},
        })
    return out


# -- a recovery's lease ------------------------------------------------------------------------------

def check_lease(lease: object) -> str:
    """A lease id, checked: what a recovery names itself by (the playbook makes one per run)."""
    if not isinstance(lease, str) or not LEASE_ID_RE.match(lease):
        raise MaintenanceError("lease: must be 1 to %d letters, digits, '_', '.' or '-', starting with a letter or a "
                               "digit, not %r" % (MAX_LEASE_ID, str(lease)[:80]))
    return lease


def check_seconds(value: object, name: str, low: int, high: int) -> float:
    """A number of seconds from ``low`` to ``high`` (an option of the module)."""
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value) \
            or not low <= value <= high:
        raise MaintenanceError("%s: must be a number of seconds from %d to %d, not %r" % (name, low, high, value))
    return value


def live_lease(record: Optional[MaintenanceRecord], now: float) -> Optional[Dict[str, Any]]:
    """The record's lease when it is live at ``now`` (a recovery is working on the GPU), else None."""
    lease = (record or {}).get("lease")
    return lease if lease is not None and lease["until"] > now else None


def lease_holder(records: Records, lease_id: str, now: float) -> Optional[Dict[str, Any]]:
    """``{id, until, gpus}`` of a live lease on the node that is not ``lease_id`` (another recovery is in progress),
    or None. ``until`` in ISO 8601 UTC. The one that ends last, when forged records hold several."""
    others: Dict[str, Dict[str, Any]] = {}
    for uuid in sorted(records):
        lease = live_lease(records[uuid], now)
        if lease is not None and lease["id"] != lease_id:
            held = others.setdefault(lease["id"], {"id": lease["id"], "until": lease["until"], "gpus": []})
            held["until"] = max(held["until"], lease["until"])
            held["gpus"].append(uuid)
    if not others:
        return None
    holder = max(others.values(), key=lambda held: (held["until"], held["id"]))
    return {"id": holder["id"], "until": iso_utc(holder["until"]), "gpus": holder["gpus"]}


def with_lease(records: Records, gpus: Iterable[str], lease_id: str, until: float, reraise_after: float) -> Records:
    """``records`` with ``gpus`` (in maintenance) under lease ``lease_id`` until ``until``."""
    new = dict(records)
    for uuid in gpus:
        new[uuid] = dict(new[uuid], lease={"id": lease_id, "until": until, "reraise_after": reraise_after})
    return new


def lease_ended(records: Records, lease_id: str, now: float) -> Records:
    """``records`` with lease ``lease_id`` ended at ``now`` on every GPU it covers: the records keep it, no longer
    live, so that a pass knows when the recovery ended (and raises the GPU's ``GPUUnhealthy`` again if it is still
    unhealthy later: ``domain/health.py``)."""
    new = dict(records)
    for uuid, record in records.items():
        lease = record.get("lease")
        if lease is not None and lease["id"] == lease_id and lease["until"] > now:
            new[uuid] = dict(record, lease=dict(lease, until=now))
    return new


def with_reset(records: Records, outcomes: Mapping[str, Tuple[float, bool, Sequence[str]]]) -> Records:
    """``records`` with each GPU's last reset: ``outcomes`` is ``{uuid: (at, healthy, problems)}``."""
    new = dict(records)
    for uuid, (at, healthy, found) in outcomes.items():
        if uuid in new:
            new[uuid] = dict(new[uuid], reset={"at": at, "healthy": bool(healthy),
                                               "problems": [one_line(text) for text in found][:MAX_PROBLEMS]})
    return new


def one_line(text: object, limit: int = MAX_PROBLEM) -> str:
    """``text`` as a record or an event message keeps it: one line, no control characters, no braces (a message
    is never a template), at most ``limit`` characters."""
    text = "".join(" " if ch < " " or ch == "\x7f" else ch for ch in str(text)).replace("{", "(").replace("}", ")")
    return " ".join(text.split())[:limit] or "unknown"


def reset_ineffective(record: Optional[MaintenanceRecord]) -> bool:
    """Whether the record says the GPU's last reset left it unhealthy (it waits for a person)."""
    reset = (record or {}).get("reset")
    return reset is not None and reset["healthy"] is False


def refusal(uuid: str, records: Records) -> Tuple[bool, str]:
    """``(in maintenance, the overlap message)`` for GPU ``uuid``."""
    record = records.get(uuid)
    if record is None:
        return False, ""
    return True, "%s is in maintenance (%s)" % (uuid, record["reason"])
