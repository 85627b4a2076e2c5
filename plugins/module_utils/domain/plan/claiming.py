# -*- coding: utf-8 -*-
# Copyright: contributors to bcd.devices
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""Who claims what once a pass's releases are planned (``claims.Claims``, one value): the GPUs VMs have,
those in maintenance or unhealthy, the holds that stay, the Kubernetes releases pending on pods, the releases
the pass makes (claimed until made) and what all of them booked of the host's memory. The kept and the new
holds are checked against it, and add their own (``keep``, ``bind``)."""

from __future__ import annotations

from typing import Dict, Mapping, Optional, Sequence, Tuple

from ansible_collections.bcd.devices.plugins.module_utils.domain.cdi.hold_spec import LiveHold
from ansible_collections.bcd.devices.plugins.module_utils.domain.health import gpu_health, unhealthy_message
from ansible_collections.bcd.devices.plugins.module_utils.domain.input.atoms import atoms_of
from ansible_collections.bcd.devices.plugins.module_utils.domain.plan.claims import PENDING, RELEASING, SLICE, Claims
from ansible_collections.bcd.devices.plugins.module_utils.domain.plan.conflicts import UNREADABLE_RELEASES
from ansible_collections.bcd.devices.plugins.module_utils.domain.plan.decisions import Pass, Pending, Released
from ansible_collections.bcd.devices.plugins.module_utils.domain.plan.observed import Observed
from ansible_collections.bcd.devices.plugins.module_utils.domain.slices import allocation_of, limits_of_slice, slice_name


def vfio_claims(instances: Optional[Sequence[dict]], observed: Observed) -> Tuple[Dict[str, str], Dict[str, str]]:
    """GPUs VMs have or are to have: the instance specs, the running domains, and
    what still-running domains had at the last pass (a GPU dropped from a running
    VM's spec stays the VM's until its next start)."""
    claims = {}  # type: Dict[str, str]
    for instance in instances or []:
        for gpu in instance.get("gpus") or []:
            claims.setdefault(gpu, instance.get("instance_id") or "?")
    now = {}  # type: Dict[str, str]
    for domain in observed.domains:
        for gpu in domain.gpus:
            now.setdefault(gpu, domain.instance_id)
    if observed.domains_error is None:
        running = set(domain.instance_id for domain in observed.domains)
        remembered = dict((gpu, inst) for gpu, inst in observed.ledger.vfio.items() if inst in running)
    else:
        remembered = dict(observed.ledger.vfio)
    for gpu, instance_id in list(now.items()) + list(remembered.items()):
        claims.setdefault(gpu, instance_id)
    merged = dict(remembered)
    merged.update(now)
    return claims, merged


def marker_stays(ctx: Pass, released: Released) -> bool:
    """Whether releasing.unreadable is there once the releases are made: every GPU is claimed."""
    return ctx.marker and not released.marker_cleared


def claims_of(ctx: Pass, live: Mapping[str, LiveHold], released: Released, vfio: Mapping[str, str]) -> Claims:
    """Who claims what once the releases are planned, as one value: VMs (``vfio``: GPU -> instance),
    maintenance, unhealthy GPUs, the holds that stay, the Kubernetes releases pending on pods, the releases
    this pass makes (claimed until made), and what they booked of the host's memory."""
    observed = ctx.observed
    claims = Claims()
    for gpu_uuid, instance in vfio.items():
        claims = claims.pass_through(instance, [gpu_uuid])
    claims = claims.out_of_service(observed.maintenance)
    for gpu in observed.inventory.gpus:
        health = gpu_health(gpu, observed.health_cleared)
        if health:
            claims = claims.sick(gpu.uuid, unhealthy_message(gpu.uuid, health))
    claims = _pending_claims(ctx, live, released.pending, _live_claims(ctx, live, claims))
    for allocation_id, atoms in released.retained.items():  # the old devices its new hold takes: its own still
        claims = claims.hold(allocation_id, atoms)
    for allocation_id in sorted(released.freeing):
        freed = released.freeing[allocation_id]
        claims = claims.hold(allocation_id, freed.atoms, RELEASING).book(allocation_id, freed.booked, kind=RELEASING)
    for name in sorted(observed.slices):
        # A slice whose hold is gone but whose workload still runs keeps what it was promised.
        current = observed.slices[name]
        if current.populated and allocation_of(name) not in live:
            claims = claims.book(allocation_of(name), limits_of_slice(current), current.hugetlb_current, SLICE)
    if marker_stays(ctx, released):
        claims = claims.every_gpu(UNREADABLE_RELEASES, [gpu.uuid for gpu in observed.inventory.gpus])
    if observed.memory is not None:
        claims = claims.with_memory(observed.memory, observed.domains)
    return claims


def _live_claims(ctx: Pass, live: Mapping[str, LiveHold], claims: Claims) -> Claims:
    """``claims`` with the live holds' atoms, and what each was bound with (a kept hold's growth is admitted
    on top: ``_admit_growth``)."""
    observed, bound = ctx.observed, ctx.observed.ledger.bound
    for allocation_id in sorted(live):
        claims = claims.hold(allocation_id, live[allocation_id].atoms)
        assignment = ctx.wanted.get(allocation_id)
        if allocation_id in bound or assignment is None:
            limits = observed.ledger.limits_of(allocation_id)
        else:
            limits = assignment.limits
        current = observed.slices.get(slice_name(allocation_id))
        claims = claims.book(allocation_id, limits, current.hugetlb_current if current is not None else None)
    return claims


def _pending_claims(ctx: Pass, live: Mapping[str, LiveHold], pending: Mapping[str, Pending], claims: Claims) -> Claims:
    """``claims`` with the Kubernetes releases pending after this pass: their devices, and what they booked."""
    ledger = ctx.observed.ledger
    for allocation_id in sorted(pending):
        release = pending[allocation_id].release
        claims = claims.hold(allocation_id, atoms_of(release.device_ids), PENDING)
        if allocation_id not in live:  # a pending Kubernetes release keeps what it booked until reported
            booked = ledger.limits_of(allocation_id)
            if release.taken_back and allocation_id in ctx.superseded:
                # taken back for the allocation's new hold, whose AllocationBound replaces the old booking:
                # what it booked is freed by this pass, not counted against the new hold (or any other)
                claims = claims.book(allocation_id, booked, kind=RELEASING)
            else:
                claims = claims.book(allocation_id, booked)
    return claims
