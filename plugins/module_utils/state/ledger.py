# -*- coding: utf-8 -*-
# Copyright: contributors to bcd.devices
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""The ledger's file: ``<state_dir>/ledger.json`` (0600), what the node has *reported*.

The ledger itself, what each of its fields means and how the planner uses it, is
``domain/ledger.py``'s ``Ledger``; this module is its file format. The file is one JSON object
(``support/json_bytes``: compact, keys sorted) of the ledger's fields under their own names,
``conditions`` only when a condition is raised (a node with none writes the ledger it always
did) and ``problem`` never. Reading it back checks every field (the unprivileged account
writes this directory): a record of the wrong shape is dropped, and so reported or released
again, never lost; a file that is not JSON is an empty ledger with ``problem`` set. ledger.json
of 0.1.0 called the unfinished plain releases ``releasing``: it is read, the new name written.
The file is read once, into the domain's records (``BoundHold``, ``UnfinishedRelease``,
``JournaledRefusal``, the limits as ``Limits``): no reader of the ledger parses a record of it, and
``ledger_bytes`` writes each back as the file had it (a record's ``cgroup_parent`` and ``limits``
keys where it had them).

A pass that died between journaling an event and recording it is caught up from the journal:
``settles`` and ``record_event`` say what an event means for the ledger, applied after each
append and again by ``NodeState.load`` for every event after ``journal_seq``.

``state.store.NodeState`` reads and writes the file, through the bounded reader
(``node/state_files.py``: at most 16 MiB, JSON within ``support/bounded_json``'s bounds).
"""

from __future__ import annotations

from typing import Any, Dict, List, Mapping, Optional, Tuple, Type, Union

from ansible_collections.bcd.devices.plugins.module_utils.domain.event_types import (
    ALLOCATION_BOUND,
    ALLOCATION_CONDITION_TYPES,
    ALLOCATION_FAILED,
    ALLOCATION_RELEASED,
    CLEARED,
    CONDITION_EVENT_TYPES,
    CONDITION_TYPES,
    GPU_UNHEALTHY,
    HOLD_CHANGE_REFUSED,
    condition_key,
)
from ansible_collections.bcd.devices.plugins.module_utils.domain.input.assignment import (
    ALLOCATION_ID,
    InvalidAssignment,
    Limits,
    limits_record,
    parse_limits,
)
from ansible_collections.bcd.devices.plugins.module_utils.domain.input.refusals import Refusal
from ansible_collections.bcd.devices.plugins.module_utils.domain.ledger import BoundHold, JournaledRefusal, Ledger, UnfinishedRelease
from ansible_collections.bcd.devices.plugins.module_utils.support import bounded_json
from ansible_collections.bcd.devices.plugins.module_utils.support.json_bytes import json_bytes
from ansible_collections.bcd.devices.plugins.module_utils.support.speed import lazy_pattern

# ledger.json of 0.1.0 called the unfinished plain releases "releasing"; read it, write the new name.
_LEGACY_UNFINISHED = "releasing"
_ALLOCATION_ID_RE = lazy_pattern(ALLOCATION_ID)

Json = Dict[str, Any]  # a JSON object of the file


def ledger_bytes(ledger: Ledger) -> bytes:
    """The ledger as its file holds it."""
    data: Json = {
        "bound": dict((allocation_id, _bound_record(bound)) for allocation_id, bound in ledger.bound.items()),
        "unfinished_releases": dict((allocation_id, {"generation": release.generation,
                                                     "device_ids": list(release.device_ids)})
                                    for allocation_id, release in ledger.unfinished_releases.items()),
        "failures": dict((allocation_id, _failure_record(journaled))
                         for allocation_id, journaled in ledger.failures.items()),
        "vfio": ledger.vfio, "renders": ledger.renders, "observed_generation": ledger.observed_generation,
        "last_state": ledger.last_state, "journal_seq": ledger.journal_seq}
    if ledger.conditions:  # a node with no condition raised writes the ledger it always did
        data["conditions"] = ledger.conditions
    return json_bytes(data)


def _bound_record(bound: BoundHold) -> Json:
    record: Json = {"generation": bound.generation, "device_ids": list(bound.device_ids)}
    if bound.parent_recorded:
        record["cgroup_parent"] = bound.cgroup_parent
    if bound.limits_recorded:
        record["limits"] = limits_record(bound.limits)
    return record


def _failure_record(journaled: JournaledRefusal) -> Json:
    record: Json = {"generation": journaled.generation}
    if journaled.refusal is not None:
        record.update(reason=journaled.refusal.reason, message=journaled.refusal.message)
    return record


def limits_from_record(value: object) -> Optional[Limits]:
    """The ``Limits`` a record of limits (``assignment.limits_record``: the ledger's, or a step's for it) keeps:
    None when it keeps none, or none that pass the input's checks (the ledger is data like any other)."""
    try:
        return parse_limits(value)
    except InvalidAssignment:
        return None


def _dict_of(value: object, kind: Union[Type[Any], Tuple[Type[Any], ...]]) -> Dict[str, Any]:
    if not isinstance(value, dict):
        return {}
    return dict((key, item) for key, item in value.items() if isinstance(key, str) and isinstance(item, kind))


def _int_or_none(value: object) -> Optional[int]:
    return value if isinstance(value, int) and not isinstance(value, bool) else None


def _allocation_records(value: object) -> Dict[str, Tuple[Optional[int], Tuple[str, ...], Json]]:
    """Bound or unfinished-release records, under allocation ids (they name files and slices), whose
    ``generation`` is an integer and ``device_ids`` strings where they have them, each as ``(generation,
    device_ids, record)``; the rest is dropped (reported or released again, never lost: the account writes
    this file)."""
    records = {}
    for allocation_id, entry in _dict_of(value, dict).items():
        device_ids = entry.get("device_ids", [])
        generation = entry.get("generation")
        if not _ALLOCATION_ID_RE.fullmatch(allocation_id) or not isinstance(device_ids, list) \
                or not all(isinstance(device, str) for device in device_ids) \
                or (generation is not None and _int_or_none(generation) is None):
            continue
        records[allocation_id] = (generation, tuple(device_ids), entry)
    return records


def _bound(value: object) -> Dict[str, BoundHold]:
    """The reported holds; one whose cgroup parent is not text (or null) is dropped as well, and limits that do
    not pass the input's checks are none."""
    holds = {}
    for allocation_id, (generation, device_ids, entry) in _allocation_records(value).items():
        parent = entry.get("cgroup_parent")
        if not isinstance(parent, (str, type(None))):
            continue
        holds[allocation_id] = BoundHold(generation, device_ids, parent, limits_from_record(entry.get("limits")),
                                         parent_recorded="cgroup_parent" in entry,
                                         limits_recorded="limits" in entry)
    return holds


def _unfinished(value: object) -> Dict[str, UnfinishedRelease]:
    return dict((allocation_id, UnfinishedRelease(generation, device_ids))
                for allocation_id, (generation, device_ids, _entry) in _allocation_records(value).items())


def _failures(value: object) -> Dict[str, JournaledRefusal]:
    """Refusal records; 0.1.0 kept the generation alone (then a refusal is not replayed, only not
    reported twice)."""
    records = {}
    for allocation_id, entry in _dict_of(value, (dict, int)).items():
        if isinstance(entry, bool):
            continue
        if isinstance(entry, int):
            entry = {"generation": entry}
        generation = _int_or_none(entry.get("generation"))
        if generation is None:
            continue
        records[allocation_id] = _journaled(allocation_id, generation, entry.get("reason"), entry.get("message"))
    return records


def _journaled(allocation_id: str, generation: int, reason: object, message: object) -> JournaledRefusal:
    """A refusal journaled at ``generation``: with its reason when it has one (text), and its message (text, or
    none)."""
    if not isinstance(reason, str):
        return JournaledRefusal(generation)
    return JournaledRefusal(generation, Refusal(allocation_id, reason, message if isinstance(message, str) else ""))


def _renders(value: object) -> Dict[str, Json]:
    """Render records whose fields have the right types (anything else is dropped: rendered again)."""
    records = {}
    for allocation_id, entry in _dict_of(value, dict).items():
        notes = entry.get("notes")
        if all(isinstance(entry.get(name), str) for name in ("key", "spec")) \
                and isinstance(entry.get("env"), (str, type(None))) \
                and isinstance(notes, list) and all(isinstance(note, str) for note in notes):
            records[allocation_id] = {"key": entry["key"], "spec": entry["spec"], "env": entry.get("env"),
                                      "notes": list(notes)}
    return records


# What the record of a raised HoldChangeRefused keeps of its message (bcd-holds status and holds_info show it; they
# plan nothing): a refusal's text is a few hundred characters; past this the record keeps none, and they say it
# their own way.
MAX_CONDITION_MESSAGE = 4096


def _condition_record(device_ids: List[str], allocation_id: Optional[str], message: object = None) -> Json:
    record: Json = {"device_ids": list(device_ids)}
    if allocation_id is not None:
        record["allocation_id"] = allocation_id
    if isinstance(message, str) and message and len(message) <= MAX_CONDITION_MESSAGE:
        record["message"] = message
    return record


def _conditions(value: object) -> Dict[str, Json]:
    """Raised conditions whose key is a condition's and whose record has the fields a pass writes (anything else
    is dropped: a condition still there is reported again)."""
    records = {}
    for key, entry in _dict_of(value, dict).items():
        device_ids, allocation_id = entry.get("device_ids"), entry.get("allocation_id")
        if not isinstance(device_ids, list) or not all(isinstance(device, str) for device in device_ids) \
                or not (allocation_id is None or isinstance(allocation_id, str)):
            continue
        kind = key.split("/", 1)[0]
        if kind in CONDITION_TYPES and condition_key(kind, device_ids, allocation_id) == key:
            records[key] = _condition_record(device_ids, allocation_id, entry.get("message"))
    return records


def parse_ledger(content: Optional[bytes], where: str) -> Ledger:
    """The ledger in ``content`` (None: no file yet, an empty ledger); a damaged one is empty with
    ``problem`` set, so reports may repeat but nothing is lost. Content past the bounded parser's
    limits is no damage a crash leaves: ``StateFileError``."""
    if content is None:
        return Ledger()
    try:
        data = bounded_json.loads(content, where)
        if not isinstance(data, dict):
            raise ValueError("not a JSON object")
    except ValueError as exc:
        return Ledger(problem="%s is unreadable (%s); reports may repeat" % (where, exc))
    unfinished = data.get("unfinished_releases", data.get(_LEGACY_UNFINISHED))
    return Ledger(
        bound=_bound(data.get("bound")),
        unfinished_releases=_unfinished(unfinished),
        failures=_failures(data.get("failures")),
        vfio=_dict_of(data.get("vfio"), str),
        renders=_renders(data.get("renders")),
        observed_generation=_int_or_none(data.get("observed_generation")),
        last_state=data.get("last_state") if isinstance(data.get("last_state"), str) else None,
        journal_seq=_int_or_none(data.get("journal_seq")) or 0,
        conditions=_conditions(data.get("conditions")),
    )


def settles(event: object) -> bool:
    """Whether a journaled event may change the ledger: a known type, and a body whose fields have the
    types a pass writes (an allocation id, an integer generation, device ids as text, a reason and a
    message as text). The journal is the account's file: an event a crash kept from being recorded is
    read back from it, so whatever else lies there is passed over, never a key or a sort of root's."""
    if not isinstance(event, dict):
        return False
    body = event.get("body")
    if isinstance(body, dict) and event.get("type") in CONDITION_EVENT_TYPES:
        return _condition_settles(event, body)
    if not isinstance(body, dict) or event.get("type") not in (ALLOCATION_BOUND, ALLOCATION_RELEASED, ALLOCATION_FAILED):
        return False
    allocation_id, generation, device_ids = body.get("allocation_id"), body.get("generation"), body.get("device_ids")
    return (isinstance(allocation_id, str) and _ALLOCATION_ID_RE.fullmatch(allocation_id) is not None
            and (generation is None or _int_or_none(generation) is not None)
            and (device_ids is None or (isinstance(device_ids, list) and all(isinstance(d, str) for d in device_ids)))
            and all(body.get(key) is None or isinstance(body.get(key), str) for key in ("reason", "message"))
            and (event.get("seq") is None or _int_or_none(event.get("seq")) is not None))


def _condition_settles(event: Mapping[str, Any], body: Mapping[str, Any]) -> bool:
    """A condition's event: its body names its type, its devices are text, its allocation (a stuck release's, a
    hold kept as bound's) an allocation id, and the GPU or allocation its key needs is there."""
    kind, device_ids, allocation_id = event["type"], body.get("device_ids"), body.get("allocation_id")
    base = kind[:-len(CLEARED)] if kind.endswith(CLEARED) else kind
    return (body.get("type") == kind
            and isinstance(device_ids, list) and all(isinstance(d, str) for d in device_ids)
            and (allocation_id is None or (isinstance(allocation_id, str) and _ALLOCATION_ID_RE.fullmatch(allocation_id) is not None))
            and (base != GPU_UNHEALTHY or len(device_ids) == 1)
            and (base not in ALLOCATION_CONDITION_TYPES or allocation_id is not None)
            and (event.get("seq") is None or _int_or_none(event.get("seq")) is not None))


def record_event(ledger: Ledger, event: Mapping[str, Any], limits: Optional[Json] = None) -> None:
    """What journaling ``event`` means for the ledger: applied after each append, and again for an
    event a crash kept from being recorded; one that does not ``settle`` changes nothing."""
    if not settles(event):
        return
    body, kind = event["body"], event["type"]
    if kind in CONDITION_EVENT_TYPES:
        _record_condition(ledger, kind, body)
    else:
        _record_allocation(ledger, kind, body, limits)
    ledger.journal_seq = max(ledger.journal_seq, event.get("seq") or 0)


def _record_condition(ledger: Ledger, kind: str, body: Mapping[str, Any]) -> None:
    """A condition journaled as raised, or as cleared."""
    base = kind[:-len(CLEARED)] if kind.endswith(CLEARED) else kind
    key = condition_key(base, body["device_ids"], body.get("allocation_id"))
    if base == kind:
        # a kept hold's refusal says why in its message, which status and holds_info cannot work out again
        message = body.get("message") if base == HOLD_CHANGE_REFUSED else None
        ledger.conditions[key] = _condition_record(body["device_ids"], body.get("allocation_id"), message)
    else:
        ledger.conditions.pop(key, None)


def _record_allocation(ledger: Ledger, kind: str, body: Mapping[str, Any], limits: Optional[Json]) -> None:
    """An allocation journaled bound (with the ``limits`` it books), released, or refused."""
    allocation_id: str = body["allocation_id"]  # settled: an allocation id
    generation = body.get("generation")
    if kind == ALLOCATION_BOUND:
        parent = body.get("cgroup_parent")
        ledger.bound[allocation_id] = BoundHold(generation, tuple(body.get("device_ids") or ()),
                                                parent if isinstance(parent, str) else None,
                                                limits_from_record(limits), limits_recorded=bool(limits))
    elif kind == ALLOCATION_RELEASED:
        ledger.unfinished_releases.pop(allocation_id, None)
        bound = ledger.bound.get(allocation_id)
        # a late Kubernetes release of old devices leaves a newer hold of the same id reported
        if bound is not None and bound.reported_on(body.get("device_ids") or ()):
            ledger.bound.pop(allocation_id, None)
    elif kind == ALLOCATION_FAILED and isinstance(generation, int):
        ledger.failures[allocation_id] = _journaled(allocation_id, generation, body.get("reason"), body.get("message"))
