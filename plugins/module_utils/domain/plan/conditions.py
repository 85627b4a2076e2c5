# -*- coding: utf-8 -*-
# Copyright: contributors to bcd.devices
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""What a pass finds wrong on the node that no single step fixes: its conditions (Kubernetes releases stuck on
pods or unreadable, a stale or unsupported vendor spec, unhealthy GPUs, GPUs a reset did not help, GPU recoveries
that stopped), and the pending releases it shows. Each that appears or clears is journaled once
(``condition_events``)."""

from __future__ import annotations

from typing import Any, Dict, FrozenSet, List, Mapping

from ansible_collections.bcd.devices.plugins.module_utils.domain.cdi.hold_spec import LiveHold
from ansible_collections.bcd.devices.plugins.module_utils.domain.event_types import KUBERNETES_RELEASES_UNREADABLE, condition_key
from ansible_collections.bcd.devices.plugins.module_utils.domain.health import recovery_conditions, unhealthy_condition
from ansible_collections.bcd.devices.plugins.module_utils.domain.kube_release import pending_summary, release_conditions
from ansible_collections.bcd.devices.plugins.module_utils.domain.plan.decisions import Pass, Released
from ansible_collections.bcd.devices.plugins.module_utils.domain.plan.observed import Observed
from ansible_collections.bcd.devices.plugins.module_utils.domain.plan.reports import vendor_conditions


def pass_conditions(ctx: Pass, live: Mapping[str, LiveHold], released: Released) -> List[Dict[str, Any]]:
    """The pass's conditions: Kubernetes releases stuck on pods or unreadable, a stale or unsupported vendor
    spec, unhealthy GPUs (with the holds on them), GPUs a reset did not help, GPU recoveries that stopped."""
    observed = ctx.observed
    # the pass that sets an unreadable file aside raises the condition even when it clears the marker too
    unreadable = ctx.marker_stays(released) or observed.releases.unreadable is not None
    conditions = list(release_conditions([pending.release for pending in released.pending.values()], unreadable,
                                         observed.now, observed.state_dir))
    conditions.extend(vendor_conditions(observed.vendor, observed.runtimes))
    by_gpu: Dict[str, List[str]] = {}
    for allocation_id in sorted(live):
        for atom in live[allocation_id].atoms:
            if allocation_id not in by_gpu.setdefault(atom.gpu_uuid, []):
                by_gpu[atom.gpu_uuid].append(allocation_id)
    sick = unhealthy_condition(observed.inventory, by_gpu, observed.health_cleared)
    if sick is not None:
        conditions.append(sick)
    conditions.extend(recovery_conditions(observed.inventory, observed.maintenance, observed.health_cleared,
                                          observed.now))
    return conditions


def passing_conditions(ctx: Pass, released: Released) -> FrozenSet[str]:
    """The keys of the conditions this pass raises and ends: an unreadable ``releasing.json`` set aside whose
    marker the same pass clears. The pass still returns the condition (the releases it held are lost), and
    journals it appearing and clearing, so the next pass has nothing to say."""
    if ctx.observed.releases.unreadable is not None and not ctx.marker_stays(released):
        return frozenset([condition_key(KUBERNETES_RELEASES_UNREADABLE)])
    return frozenset()


def pending_releases(observed: Observed, released: Released) -> List[Dict[str, Any]]:
    """The Kubernetes releases pending after the pass, as ``holds`` and ``holds_info`` show them."""
    return pending_summary([pending.release for pending in released.pending.values()], observed.now,
                           dict((allocation_id, pending.holders) for allocation_id, pending in released.pending.items()))
