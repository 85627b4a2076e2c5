# -*- coding: utf-8 -*-
# Copyright: contributors to bcd.devices
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""The node's conditions as events: one signed event when a condition appears, one when it clears.

A pass returns the conditions that need a person or a playbook (``GPUUnhealthy``, ``VendorSpecStale``,
``VendorSpecUnsupported``, ``KubernetesReleaseStuck``, ``KubernetesReleasesUnreadable``,
``HoldSpecDamaged``, ``GPUResetIneffective``, ``GPURecoveryStalled``, ``HoldChangeRefused``). The ledger keeps
those whose appearing was journaled (``state/ledger.py``, ``conditions``), by key: one per GPU for the GPU
conditions, one per stuck Kubernetes release and per hold kept as bound, one for each other type. A key present now and not in the ledger is journaled as the
condition's type; a key in the ledger and not present now, as the type with ``Cleared`` appended; an unhealthy GPU
(or one whose recovery stalled) clears only when the inventory lists it (one fallen off the bus, or an inventory
that could not be read, clears nothing). A pass that finds what the last one found journals nothing, with one
exception: when ``GPURecoveryStalled`` appears for a GPU whose ``GPUUnhealthy`` was raised before, the pass
journals that ``GPUUnhealthy`` again (a new occurrence, a new seq) after it, so that a rulebook that runs the
recovery on ``GPUUnhealthy`` runs it again (``domain/health.py``). docs/events.md, "Conditions".

A clearing is its own type, not the same type with a ``status``: a rule that matches on the type alone
(``event.bcd.type == "GPUUnhealthy"``: take the GPU out of service and reset it) never acts on a GPU
that has just come back.
"""

from __future__ import annotations

from typing import Any, Dict, FrozenSet, List, Mapping, Optional, Sequence, Tuple

from ansible_collections.bcd.devices.plugins.module_utils.domain.event_types import (
    CLEARED,
    CONDITION_CLEARED,
    CONDITION_TYPES,
    GPU_CONDITION_TYPES,
    GPU_RECOVERY_STALLED,
    GPU_RESET_INEFFECTIVE,
    GPU_UNHEALTHY,
    HOLD_CHANGE_REFUSED,
    KUBERNETES_RELEASE_STUCK,
    condition_key,
)
from ansible_collections.bcd.devices.plugins.module_utils.domain.health import (
    gpu_health,
    ineffective_resets,
    stalled_recoveries,
    unhealthy_message,
)
from ansible_collections.bcd.devices.plugins.module_utils.domain.kube_release import STUCK_AFTER
from ansible_collections.bcd.devices.plugins.module_utils.domain.plan.actions import ReportCondition
from ansible_collections.bcd.devices.plugins.module_utils.domain.plan.observed import Observed

CLEARED_REASON = CONDITION_CLEARED
# a clearing that waits until the GPU is seen again: one not listed may have fallen off the bus
_SEEN_TO_CLEAR = (GPU_UNHEALTHY, GPU_RECOVERY_STALLED)

# key -> (type, device_ids, allocation_id, reason, message)
_Raised = Dict[str, Tuple[str, List[str], Optional[str], str, str]]


def raised_now(observed: Observed, conditions: Sequence[Dict[str, Any]], pending_releases: Sequence[Dict[str, Any]]) -> _Raised:
    """The keys of the conditions a pass found, each with what its event says."""
    found: _Raised = {}
    for condition in conditions:
        kind = condition.get("type")
        if kind not in CONDITION_TYPES:
            continue
        reason, message = condition.get("reason") or "", condition.get("message") or ""
        if kind == GPU_UNHEALTHY:
            for gpu in observed.inventory.gpus:
                health = gpu_health(gpu, observed.health_cleared)
                if health:
                    found[condition_key(kind, [gpu.uuid])] = (kind, [gpu.uuid], None, reason,
                                                              unhealthy_message(gpu.uuid, health))
        elif kind == GPU_RESET_INEFFECTIVE:
            for uuid, message in ineffective_resets(observed.inventory, observed.maintenance, observed.health_cleared):
                found[condition_key(kind, [uuid])] = (kind, [uuid], None, reason, message)
        elif kind == GPU_RECOVERY_STALLED:
            for uuid, message, _again in _stalled(observed):
                found[condition_key(kind, [uuid])] = (kind, [uuid], None, reason, message)
        elif kind == KUBERNETES_RELEASE_STUCK:
            for release in pending_releases:
                if release.get("age_seconds", 0) >= STUCK_AFTER:
                    allocation_id = release["allocation_id"]
                    found[condition_key(kind, (), allocation_id)] = (
                        kind, list(release.get("device_ids") or []), allocation_id, reason,
                        "%s was released over %d minutes ago and pods still hold its devices"
                        % (allocation_id, STUCK_AFTER // 60))
        elif kind == HOLD_CHANGE_REFUSED:  # one per hold kept as bound, its devices those it holds
            allocation_id = condition.get("allocation_id")
            found[condition_key(kind, (), allocation_id)] = (kind, list(condition.get("device_ids") or []),
                                                             allocation_id, reason, message)
        else:
            found[condition_key(kind)] = (kind, [], None, reason, message)
    return found


def _stalled(observed: Observed) -> List[Tuple[str, str, str]]:
    return stalled_recoveries(observed.inventory, observed.maintenance, observed.health_cleared, observed.now)


def _body(observed: Observed, kind: str, generation: int, device_ids: List[str], allocation_id: Optional[str], reason: str,
          message: str) -> Dict[str, Any]:
    body: Dict[str, Any] = {"type": kind, "node_id": observed.node_id, "boot_id": observed.boot_id,
                            "generation": generation, "device_ids": list(device_ids), "reason": reason, "message": message}
    if allocation_id is not None:
        body["allocation_id"] = allocation_id
    return body


def condition_reports(observed: Observed, conditions: Sequence[Dict[str, Any]], pending_releases: Sequence[Dict[str, Any]],
                      generation: int, passing: FrozenSet[str] = frozenset()) -> List[ReportCondition]:
    """The steps that journal the conditions that cleared since the last pass, then those that appeared, each
    in key order; none when the pass found what the ledger says the last one did.

    ``passing``: the keys of conditions this pass finds and also ends (an unreadable ``releasing.json`` it sets
    aside and whose marker it clears at once). Each is journaled as appeared, then cleared, in this pass, so
    the ledger does not keep it and the next pass with the same input has nothing to report."""
    now = raised_now(observed, conditions, pending_releases)
    before = observed.ledger.conditions
    after = set(now) - set(passing)
    seen = set(gpu.uuid for gpu in observed.inventory.gpus)
    steps: List[ReportCondition] = []
    for key in sorted(set(before) - after):
        device_ids, allocation_id = list(before[key].get("device_ids") or []), before[key].get("allocation_id")
        if key.split("/", 1)[0] in _SEEN_TO_CLEAR and not seen.issuperset(device_ids):
            continue  # a GPU clears when it is seen healthy, not when it is not seen (off the bus, inventory unread)
        steps.append(_cleared(observed, key, generation, device_ids, allocation_id))
    again = _raised_again(observed, now, before)
    for key in sorted(set(now) - set(before)):
        kind, device_ids, allocation_id, reason, message = now[key]
        event = {"type": kind, "body": _body(observed, kind, generation, device_ids, allocation_id, reason, message)}
        steps.append(ReportCondition("", event, tuple(device_ids)))
        if key in passing:
            steps.append(_cleared(observed, key, generation, device_ids, allocation_id))
        if key in again:
            unhealthy = now[condition_key(GPU_UNHEALTHY, device_ids)]
            body = _body(observed, GPU_UNHEALTHY, generation, device_ids, None, unhealthy[3], again[key])
            steps.append(ReportCondition("", {"type": GPU_UNHEALTHY, "body": body}, tuple(device_ids)))
    return steps


def _raised_again(observed: Observed, now: _Raised, before: Mapping[str, Dict[str, Any]]) -> Dict[str, str]:
    """``{GPURecoveryStalled key: message}`` of the stalled recoveries that appear in this pass on a GPU whose
    ``GPUUnhealthy`` was raised before and still is: its ``GPUUnhealthy`` is journaled again, with this message."""
    if not any(key.split("/", 1)[0] == GPU_RECOVERY_STALLED for key in set(now) - set(before)):
        return {}
    again: Dict[str, str] = {}
    for uuid, _message, raised in _stalled(observed):
        key, unhealthy = condition_key(GPU_RECOVERY_STALLED, [uuid]), condition_key(GPU_UNHEALTHY, [uuid])
        if key in now and key not in before and unhealthy in now and unhealthy in before:
            again[key] = raised
    return again


def _cleared(observed: Observed, key: str, generation: int, device_ids: List[str],
             allocation_id: Optional[str]) -> ReportCondition:
    """The step that journals the clearing of the condition ``key``."""
    kind = key.split("/", 1)[0]
    subject = " ".join(device_ids) if kind in GPU_CONDITION_TYPES else (allocation_id or "")
    message = "%s%s no longer holds" % (kind, " (%s)" % subject if subject else "")
    event = {"type": kind + CLEARED,
             "body": _body(observed, kind + CLEARED, generation, device_ids, allocation_id, CLEARED_REASON, message)}
    return ReportCondition("", event, tuple(device_ids))
