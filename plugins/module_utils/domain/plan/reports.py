# -*- coding: utf-8 -*-
# Copyright: contributors to bcd.devices
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""What a pass reports of a hold: the bodies of its events and its summary.

``AllocationBound`` carries the hold's devices, CDI names, spec and env file
paths and, for a hold with a slice, its cgroup parent; ``AllocationReleased``
only the devices (docs/events.md). ``holds`` and ``holds_info`` return a hold
with the same fields plus its reservation id and binding. The order of the
kept holds' reports (``in_report_order``).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, Dict, Iterable, List, Optional, Sequence, Set, Tuple

from ansible_collections.bcd.devices.plugins.module_utils.domain.cdi.hold_spec import cdi_device, cdi_spec_path, env_file_path, lowered
from ansible_collections.bcd.devices.plugins.module_utils.domain.cdi.staleness import stale_condition
from ansible_collections.bcd.devices.plugins.module_utils.domain.cdi.versions import (
    EARLIEST_VERSION,
    KNOWN_VERSIONS,
    CdiVersionError,
    version_key,
)
from ansible_collections.bcd.devices.plugins.module_utils.domain.event_types import (
    ALLOCATION_BOUND,
    ALLOCATION_RELEASED,
    HOLD_CHANGE_REFUSED,
    HOLD_SPEC_DAMAGED,
    VENDOR_SPEC_UNSUPPORTED,
)
from ansible_collections.bcd.devices.plugins.module_utils.domain.input.assignment import BINDING_HOLD, BINDING_KUBERNETES
from ansible_collections.bcd.devices.plugins.module_utils.domain.input.atoms import atoms_of
from ansible_collections.bcd.devices.plugins.module_utils.domain.plan.actions import Action, FileChange, ReportBound
from ansible_collections.bcd.devices.plugins.module_utils.domain.plan.seams import NodeFileKind

if TYPE_CHECKING:
    from ansible_collections.bcd.devices.plugins.module_utils.domain.cdi.hold_spec import LiveHold
    from ansible_collections.bcd.devices.plugins.module_utils.domain.cdi.runtimes import Runtime
    from ansible_collections.bcd.devices.plugins.module_utils.domain.cdi.vendor import VendorSpec
    from ansible_collections.bcd.devices.plugins.module_utils.domain.input.atoms import Atom, AtomKey
    from ansible_collections.bcd.devices.plugins.module_utils.domain.input.refusals import Refusal
    from ansible_collections.bcd.devices.plugins.module_utils.domain.ledger import Ledger
    from ansible_collections.bcd.devices.plugins.module_utils.domain.plan.observed import Observed

Body = Dict[str, Any]  # an event's body (docs/events.md)
Event = Dict[str, Any]  # {"type": one of event_types.EVENT_TYPES, "body": Body}
Summary = Dict[str, Any]  # a hold as ``holds`` and ``holds_info`` return it
Condition = Dict[str, Any]  # a node condition: type, status, reason, message (and what it names)


def base_body(observed: Observed, allocation_id: str, generation: Optional[int], device_ids: Iterable[str]) -> Body:
    """What every attested event's body carries."""
    return {"node_id": observed.node_id, "boot_id": observed.boot_id, "allocation_id": allocation_id,
            "generation": generation, "device_ids": list(device_ids)}


def bound_event(observed: Observed, allocation_id: str, generation: int, atoms: Sequence[Atom],
                cgroup_parent: Optional[str] = None) -> Event:
    body = base_body(observed, allocation_id, generation, [atom.id for atom in atoms])
    body["cdi_devices"] = [cdi_device(atom.id) for atom in atoms]
    body["cdi_spec_path"] = cdi_spec_path(allocation_id)
    body["env_file"] = env_file_path(allocation_id)
    if cgroup_parent:
        body["cgroup_parent"] = cgroup_parent
    return {"type": ALLOCATION_BOUND, "body": body}


def released_event(observed: Observed, allocation_id: str, generation: Optional[int], device_ids: Iterable[str]) -> Event:
    return {"type": ALLOCATION_RELEASED, "body": base_body(observed, allocation_id, generation, device_ids)}


def hold_summary(allocation_id: str, reservation_id: str, generation: Optional[int], atoms: Sequence[Atom], kubernetes: bool,
                 cgroup_parent: Optional[str] = None) -> Summary:
    """A hold as ``holds`` and ``holds_info`` return it."""
    summary: Summary = {
        "allocation_id": allocation_id,
        "reservation_id": reservation_id,
        "generation": generation,
        "binding": BINDING_KUBERNETES if kubernetes else BINDING_HOLD,
        "device_ids": [atom.id for atom in atoms],
        "cdi_devices": [cdi_device(atom.id) for atom in atoms],
        "cdi_spec_path": cdi_spec_path(allocation_id),
        "env_file": env_file_path(allocation_id),
    }
    if cgroup_parent:
        summary["cgroup_parent"] = cgroup_parent
    return summary


def summary_of(hold: LiveHold) -> Summary:
    """A hold read back from its spec, summarised."""
    return hold_summary(hold.allocation_id, hold.reservation_id, hold.generation, hold.atoms, hold.kubernetes,
                        hold.cgroup_parent)


def damaged_condition(paths: Sequence[str]) -> Condition:
    """Damaged specs set aside in /etc/cdi: raised while any is there, so someone reads and removes them."""
    return {
        "type": HOLD_SPEC_DAMAGED,
        "status": "True",
        "reason": "SpecUnreadable",
        "message": "damaged hold specs set aside, never deleted: %s; find out who edits bcd's files in /etc/cdi, "
                   "then remove them" % ", ".join(paths),
    }


def kept_as_bound_condition(hold: LiveHold, generation: int, refusal: Refusal) -> Condition:
    """A live hold whose assignment at ``generation`` is refused (``refusal``) and that the node keeps as it was
    bound: the condition ``HoldChangeRefused`` of its allocation, naming the devices it still holds."""
    bound = " at generation %s" % hold.generation if hold.generation is not None else ""
    return {
        "type": HOLD_CHANGE_REFUSED,
        "status": "True",
        "reason": "KeptAsBound",
        "message": "%s is held as bound%s (%s), not as generation %d asks: %s: %s" % (
            hold.allocation_id, bound, ", ".join(hold.device_ids), generation, refusal.reason, refusal.message),
        "allocation_id": hold.allocation_id,
        "device_ids": list(hold.device_ids),
    }


def kept_as_bound_conditions(ledger: Ledger) -> List[Condition]:
    """``HoldChangeRefused`` as ``holds_info`` and ``bcd-holds status`` show it, read from what the last pass raised
    (the ledger's ``conditions``, its message as raised): they plan nothing, so they cannot judge an assignment
    again."""
    found: List[Condition] = []
    for key in sorted(ledger.conditions):
        record = ledger.conditions[key]
        if key.split("/", 1)[0] != HOLD_CHANGE_REFUSED or not record.get("allocation_id"):
            continue
        device_ids = list(record.get("device_ids") or [])
        found.append({"type": HOLD_CHANGE_REFUSED, "status": "True", "reason": "KeptAsBound",
                      "message": record.get("message") or (
                          "%s is held as bound (%s), not as the last pass's input asks (that pass's failures say why)"
                          % (record["allocation_id"], ", ".join(device_ids))),
                      "allocation_id": record["allocation_id"], "device_ids": device_ids})
    return found


_KNOWN_KEYS = frozenset(version_key(known) for known in KNOWN_VERSIONS)


def unknown_version_condition(vendor: Optional[VendorSpec], runtimes: Sequence[Runtime] = ()) -> Optional[Condition]:
    """The node condition a vendor spec raises whose ``cdiVersion`` no CDI library knows (later than any, or one
    no CDI release defines, such as 0.99.0), where a hold would take that version: a hold takes the vendor
    spec's version when it is later than what its content needs, lowered to what the oldest of the node's
    runtimes loads (``hold_spec.lowered``), and bcd writes no version a runtime refuses, so every bind and every
    kept hold's rewrite is retried until the spec is regenerated; this says why. None for a known version, one
    the runtimes lower to theirs (the holds are written at that), or no vendor spec."""
    if vendor is None or not vendor.path:
        return None
    version = vendor.cdi_version
    try:
        if not version or version_key(version) in _KNOWN_KEYS or lowered(version, runtimes) != version:
            return None
    except CdiVersionError:  # build_vendor_spec takes only X.Y.Z
        return None
    if version_key(version) > version_key(KNOWN_VERSIONS[-1]):
        what = ("later than any this bcd knows (%s at most): no hold can be written from it and every bind is "
                "retried; regenerate it at a known version (nvidia-ctk cdi generate) or upgrade bcd.devices"
                % KNOWN_VERSIONS[-1])
    else:
        what = ("which no CDI release defines (known: %s), so no runtime loads it: no hold can be written from "
                "it and every bind is retried; regenerate it (nvidia-ctk cdi generate)"
                % ", ".join(KNOWN_VERSIONS[KNOWN_VERSIONS.index(EARLIEST_VERSION):]))
    return {
        "type": VENDOR_SPEC_UNSUPPORTED,
        "status": "True",
        "reason": "UnknownCdiVersion",
        "message": "the vendor spec %s has cdiVersion %s, %s" % (vendor.path, version, what),
    }


def vendor_conditions(vendor: Optional[VendorSpec], runtimes: Sequence[Runtime] = ()) -> List[Condition]:
    """The conditions NVIDIA's spec raises on the node (a pass's and ``holds_info``'s alike): stale
    (``VendorSpecStale``), of a ``cdiVersion`` no hold can take (``VendorSpecUnsupported``)."""
    return [condition for condition in (stale_condition(vendor), unknown_version_condition(vendor, runtimes))
            if condition is not None]


def withdraw_files(observed: Observed, allocation_id: str) -> List[FileChange]:
    """The removals that withdraw a hold: its spec and env file, where present."""
    hold = observed.live.get(allocation_id)
    present: Tuple[Tuple[NodeFileKind, str, Optional[bytes]], ...] = (
        ("cdi", cdi_spec_path(allocation_id), hold.content if hold is not None else None),
        ("allocation-env", env_file_path(allocation_id), observed.env_files.get(allocation_id)))
    return [FileChange(kind, path, before, None) for kind, path, before in present if before is not None]


def in_report_order(actions: Sequence[Action]) -> List[Action]:
    """``actions`` with their ``report-bound`` steps reordered among themselves so that a hold reported on
    devices the node last reported as another hold's comes after that hold's report (on its new devices):
    the journal never says two holds have one device. Two holds whose binds a pass made but died before
    journaling (one moved off a GPU, the other bound on it) are reported by the next pass in this order
    rather than in spec order. The other steps keep their places; a cycle keeps spec order.

    A pass after a crash may report every hold of a 4096-atom section: each id is parsed once and matched
    through an index of what the moved holds left, so the cost grows with the atoms, not their pairs."""
    reports = [action for action in actions if isinstance(action, ReportBound)]
    if len(reports) < 2 or not any(report.reported_on for report in reports):
        return list(actions)
    waits = _waits(reports)
    placed = [False] * len(reports)
    left = list(range(len(reports)))
    ordered: List[ReportBound] = []
    while left:
        ready = next((i for i, position in enumerate(left) if all(placed[other] for other in waits[position])), 0)
        position = left.pop(ready)
        placed[position] = True
        ordered.append(reports[position])
    reordered = iter(ordered)
    return [next(reordered) if isinstance(action, ReportBound) else action for action in actions]


def _waits(reports: Sequence[ReportBound]) -> List[Set[int]]:
    """For each report (by position), the reports whose hold moved off devices it takes: the node last
    reported them on a part of them (the same atom, or one of them the whole GPU)."""
    on_gpu: Dict[str, Set[int]] = {}  # every moved hold that left a part of the GPU
    whole: Dict[str, Set[int]] = {}  # those that left the whole GPU
    by_key: Dict[AtomKey, Set[int]] = {}  # those that left that atom
    for position, report in enumerate(reports):
        for atom in atoms_of(report.reported_on):
            on_gpu.setdefault(atom.gpu_uuid, set()).add(position)
            (whole.setdefault(atom.gpu_uuid, set()) if atom.whole else by_key.setdefault(atom.key, set())).add(position)
    waits = []
    for position, report in enumerate(reports):
        found: Set[int] = set()
        for atom in atoms_of(report.device_ids):
            found |= on_gpu.get(atom.gpu_uuid, set()) if atom.whole else (
                whole.get(atom.gpu_uuid, set()) | by_key.get(atom.key, set()))
        found.discard(position)
        waits.append(found)
    return waits
