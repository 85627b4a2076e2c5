# -*- coding: utf-8 -*-
# Copyright: contributors to bcd.devices
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""The generation of a pass: the one its input carries, or the one the node numbers it with.

A control plane numbers its NodeSpecs and sends each with its generation; the spec's rules (a refusal
is final at its generation, one ``AllocationFailed`` per allocation and generation) hold for it as they
are. A person writing a playbook does not raise a number with every edit, so an input without a
generation is numbered by the node: the stored input's generation when the devices and instances are
the same (the same input: nothing new to do), else one more. Given, a generation the node already
applied with another input is refused before anything is written: the fixed input would otherwise be
judged by the refusals of the input it replaces. A generation left ``PROGRESSING`` is not finished and
takes a fixed input, but not one that sends an allocation refused at it with another assignment, for the
same reason."""

from __future__ import annotations

import json
from typing import Any, Dict, Iterable, List, Optional, Tuple

from ansible_collections.bcd.devices.plugins.module_utils.domain.input.assignment import InvalidAssignment, parse_assignment
from ansible_collections.bcd.devices.plugins.module_utils.support import records
from ansible_collections.bcd.devices.plugins.module_utils.support.errors import BcdError

# The stored input as ``NodeState.load_nodespec`` reads it: ``(generation, devices, instances, cdi_runtimes,
# env_allow)``, each section as written (JSON).
StoredSpec = Tuple[Optional[int], List[Any], List[Dict[str, Any]], Any, Any]


class GenerationConflict(BcdError):
    """A generation given with an input other than the one the node applied at it."""


def _instances(instances: Optional[Iterable[Any]]) -> List[Dict[str, Any]]:
    return [{"instance_id": instance.get("instance_id"), "gpus": list(instance.get("gpus") or [])}
            for instance in instances or [] if isinstance(instance, dict)]


def _meaning(devices: Any) -> Any:
    """The devices section as the pass reads it: each assignment checked (``"4294967296"`` and ``4294967296``
    are one limit, a key order is no change), an entry the pass refuses as written."""
    if not isinstance(devices, list):
        return devices
    meant: List[Any] = []
    for index, raw in enumerate(devices):
        try:
            meant.append(records.asdict(parse_assignment(raw, index)))
        except InvalidAssignment:
            meant.append(raw)
    return meant


def _same(left: object, right: object) -> bool:
    return json.dumps(left, sort_keys=True, default=repr) == json.dumps(right, sort_keys=True, default=repr)


def differing_sections(stored: Optional[StoredSpec], devices: Any, instances: Optional[Iterable[Any]]) -> List[str]:
    """The sections (``devices``, ``instances``) in which ``devices``/``instances`` differ from ``stored``
    ``(generation, devices, instances, ...)``; every section when nothing is stored."""
    if stored is None:
        return ["devices", "instances"]
    differ: List[str] = []
    # the same text is the same meaning: only a section that differs as written is read as the pass reads it
    # (a no-op of the worst accepted section would parse 4096 atoms twice more for nothing)
    if not _same(stored[1], devices) and not _same(_meaning(stored[1]), _meaning(devices)):
        differ.append("devices")
    if not _same(_instances(stored[2]), _instances(instances)):
        differ.append("instances")
    return differ


def _by_allocation(devices: Any) -> Dict[str, List[Any]]:
    """``{allocation_id: [each entry of it, as the pass reads it]}`` of a devices section (an id sent twice
    has both entries, in order; an entry without a string id is left out)."""
    found: Dict[str, List[Any]] = {}
    for raw, meant in zip(devices if isinstance(devices, list) else [], _meaning(devices)):
        allocation_id = raw.get("allocation_id") if isinstance(raw, dict) else None
        if isinstance(allocation_id, str):
            found.setdefault(allocation_id, []).append(meant)
    return found


def changed_refusals(stored_devices: Any, devices: Any, refused: Iterable[str]) -> List[str]:
    """The allocations of ``refused`` (refused at the stored input's generation) that ``devices`` sends with an
    assignment other than the one the stored input had, which is the one the refusal judged (or that the
    stored input no longer had), sorted; an allocation ``devices`` leaves out is no change to judge."""
    if not refused:
        return []
    before, now = _by_allocation(stored_devices), _by_allocation(devices)
    return sorted(allocation_id for allocation_id in set(refused)
                  if allocation_id in now and not _same(before.get(allocation_id), now[allocation_id]))


def pass_generation(given: Optional[int], stored: Optional[StoredSpec], observed: Optional[int], devices: List[Any],
                    instances: Optional[Iterable[Any]], refused: Iterable[str] = ()) -> int:
    """The generation of a pass over ``devices``/``instances``: ``given`` when it is not None, else the
    node's numbering. ``stored`` is the stored input ``(generation, devices, instances, cdi_runtimes)`` or
    None, ``observed`` the ledger's observed generation or None, ``refused`` the allocations refused at
    ``given`` (the ledger's). ``GenerationConflict`` for a ``given`` generation equal to the stored one,
    which the node finished (observed), with another input; a pass left ``PROGRESSING`` at it may still be
    sent its fixed input, but not one that sends an allocation refused at it with another assignment: a
    refusal is final at its generation, and the fixed assignment would be judged by it (given the refusal
    of a device it no longer asks for)."""
    differ = differing_sections(stored, devices, instances)
    if given is not None:
        if stored is not None and given == stored[0] == observed and differ:
            sections = " and ".join(differ) + (" sections" if len(differ) > 1 else " section")
            raise GenerationConflict(
                "generation %d was already applied with a different %s; raise generation, or leave it out to let "
                "the node number its inputs" % (given, sections))
        changed = changed_refusals(stored[1], devices, refused) if stored is not None and given == stored[0] \
            and "devices" in differ else []
        if changed:
            raise GenerationConflict(
                "generation %d refused %s for the assignment%s it was sent then, and a refusal is final at its "
                "generation: %s sent with another assignment would be judged by it; raise generation, or leave it "
                "out to let the node number its inputs" % (
                    given, _listed(changed), "s" if len(changed) > 1 else "", _listed(changed)))
        return given
    numbered = (stored[0] or 0) if stored is not None else 0  # a stored input always has its generation
    base = max(numbered, observed or 0)
    if not differ and stored is not None and numbered >= (observed or 0):
        return base
    return base + 1


def _listed(names: Iterable[str], shown: int = 8) -> str:
    """``a1``, ``a1 and a2``, ``a1, a2 and a3``; past ``shown`` names, the count of the rest."""
    listed = list(names)
    if len(listed) > shown:
        listed = listed[:shown] + ["%d more" % (len(listed) - shown)]
    return listed[0] if len(listed) == 1 else "%s and %s" % (", ".join(listed[:-1]), listed[-1])
