# -*- coding: utf-8 -*-
# Copyright: contributors to bcd.devices
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""``bcd.devices.mig_layout`` and ``bcd-holds mig-layout``: converge the GPUs' MIG layout, never under a hold.

One run, under the node's pass lock (exclusive: no hold is bound while a layout changes):

1. read the MIG side (``host.mig_side()``: ``nvidia-smi``, the fakehw file, or the root helper), the holds, the
   pending Kubernetes releases and the VMs, and sort their claims per GPU (``domain/mig/guard.py``);
2. journal what changed since the layout was last recorded, in this boot, by someone else (``ChangedOutside``);
3. plan (``domain/mig/plan.py``): bad input refuses the whole run before anything changes; a GPU whose change
   would touch a claim is refused, naming who holds what, and the others go ahead. Check mode stops here;
4. carry out each GPU's ops in order: each instance made or destroyed and each mode change is journaled as a
   signed event right after the tool did it (``MIGInstanceCreated``, ``MIGInstanceDestroyed``,
   ``MIGModeChanged``), and the layout recorded after each GPU (``state/mig_record.py``). An op that fails stops
   its GPU; a mode change that waits for a reset stops it too (``reset_needed``). A run that stops anywhere
   leaves a node the next run converges: it plans from what it finds;
5. record the layout as it now is, for the boot unit (``--boot``: the recorded layout made again).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, Dict, List, Mapping, Optional, Sequence, Tuple

from ansible_collections.bcd.devices.plugins.module_utils.domain.busy import claims_on
from ansible_collections.bcd.devices.plugins.module_utils.domain.event_types import (
    BOOT_LAYOUT,
    CHANGED_OUTSIDE,
    LAYOUT_APPLIED,
    MIG_INSTANCE_CREATED,
    MIG_INSTANCE_DESTROYED,
    MIG_MODE_CHANGED,
)
from ansible_collections.bcd.devices.plugins.module_utils.domain.mig.guard import GpuClaims, gpu_claims, planned_vm_claims
from ansible_collections.bcd.devices.plugins.module_utils.domain.mig.layout import LayoutError, WantedGpu, WantedInstance, wanted_from_layout
from ansible_collections.bcd.devices.plugins.module_utils.domain.mig.mig_parted import wanted_from_mig_parted
from ansible_collections.bcd.devices.plugins.module_utils.domain.mig.model import ComputeInstance, GpuInstance, MigDone, MigNode, MigOp
from ansible_collections.bcd.devices.plugins.module_utils.domain.mig.plan import GpuPlan, LayoutPlan, LayoutRefused, plan_layout
from ansible_collections.bcd.devices.plugins.module_utils.entry.busy import _room
from ansible_collections.bcd.devices.plugins.module_utils.entry.helper.mig import live_holds
from ansible_collections.bcd.devices.plugins.module_utils.node.sysfs_pci import read_pci_device_id
from ansible_collections.bcd.devices.plugins.module_utils.state.mig_record import MigRecord, recorded
from ansible_collections.bcd.devices.plugins.module_utils.state.store import DEFAULT_STATE_DIR, NodeState
from ansible_collections.bcd.devices.plugins.module_utils.support.errors import BcdError

if TYPE_CHECKING:
    from ansible_collections.bcd.devices.plugins.module_utils.node.hosts import Host
    from ansible_collections.bcd.devices.plugins.module_utils.node.mig_side import MigSide

# Events one op may journal at most: a GPU instance of 7 compute instances, or a mode change.
EVENTS_PER_OP = 7


class MigLayoutError(BcdError):
    """Bad input, or a node that refuses the run whole; the message is fit for a user."""


# -- what the run is asked -------------------------------------------------------------------------------------

def wanted_of(host: Host, layout: Optional[object] = None, mig_parted: Optional[object] = None,
              mig_config: Optional[object] = None) -> Dict[str, WantedGpu]:
    """The wanted layout per GPU from the module's ``layout``, or mig-parted's document and the config named (its
    ``device-filter`` matched against each GPU's PCI device id from sysfs under the host's root)."""
    inventory = host.inventory()
    try:
        if mig_parted is not None:
            pci_ids = dict((gpu.uuid, read_pci_device_id(gpu.pci_bus_id, host.root)) for gpu in inventory.gpus)
            return wanted_from_mig_parted(mig_parted, mig_config, inventory,
                                          dict((uuid, pci) for uuid, pci in pci_ids.items() if pci is not None))
        return wanted_from_layout(layout if layout is not None else [], inventory)
    except LayoutError as exc:
        raise MigLayoutError(str(exc))


def wanted_from_record(rec: MigRecord, node: MigNode) -> Dict[str, WantedGpu]:
    """The boot unit's wanted layout: each recorded GPU the node has, as recorded, every GPU instance at its
    recorded placement, in GI id order (the order the driver gave out their ids); MIG mode as the GPU takes it at a
    reboot (a pending change done)."""
    wanted: Dict[str, WantedGpu] = {}
    for uuid, gpu in sorted(rec.gpus.items()):
        seen = node.gpu(uuid)
        if seen is None:
            continue
        instances = tuple(WantedInstance(profile=inst.profile, placement=inst.placement.start,
                                         compute=tuple(ci.profile for ci in sorted(inst.compute, key=lambda c: c.ci)))
                          for inst in sorted(gpu.instances, key=lambda i: i.gi) if inst.profile != "unknown")
        wanted[uuid] = WantedGpu(uuid=uuid, index=seen.index, mig_enabled=gpu.mode_after_reset, instances=instances,
                                 source="the recorded layout")
    return wanted


# -- events --------------------------------------------------------------------------------------------------

def instance_id(gpu: str, gi: int, ci: int) -> str:
    """The atom id of a MIG instance: what a hold names it by."""
    return "%s/gi%d/ci%d" % (gpu, gi, ci)


def _event(host: Host, state: NodeState, kind: str, device_id: str, reason: str, message: str) -> Dict[str, Any]:
    generation = state.ledger.observed_generation
    return {"type": kind, "body": {
        "type": kind, "node_id": host.node_id(), "boot_id": host.boot_id(),
        "generation": generation if generation is not None else 0, "device_ids": [device_id], "reason": reason,
        "message": message}}


def _made_events(host: Host, state: NodeState, gpu: str, inst: GpuInstance, reason: str) -> List[Dict[str, Any]]:
    return [_event(host, state, MIG_INSTANCE_CREATED, instance_id(gpu, ci.gi, ci.ci), reason,
                   "%s: MIG instance gi%d/ci%d (%s in GPU instance %s at memory slice %d) made%s" % (
                       gpu, ci.gi, ci.ci, ci.profile, inst.profile, inst.placement.start,
                       ", %s" % ci.uuid if ci.uuid else "")) for ci in inst.compute]


def _gone_events(host: Host, state: NodeState, gpu: str, inst: GpuInstance, cis: Sequence[ComputeInstance],
                 reason: str) -> List[Dict[str, Any]]:
    return [_event(host, state, MIG_INSTANCE_DESTROYED, instance_id(gpu, ci.gi, ci.ci), reason,
                   "%s: MIG instance gi%d/ci%d (%s in GPU instance %s at memory slice %d) destroyed%s" % (
                       gpu, ci.gi, ci.ci, ci.profile, inst.profile, inst.placement.start,
                       ", %s" % ci.uuid if ci.uuid else "")) for ci in cis]


def drift_events(host: Host, state: NodeState, rec: MigRecord, node: MigNode) -> List[Dict[str, Any]]:
    """What changed since the layout was recorded in this boot, by anyone but a run that journaled it."""
    if not rec.boot_id or rec.boot_id != host.boot_id():
        return []
    events: List[Dict[str, Any]] = []
    for gpu in node.gpus:
        before = rec.gpus.get(gpu.uuid)
        if before is None:
            continue
        old = dict(((ci.gi, ci.ci), (inst, ci)) for inst in before.instances for ci in inst.compute)
        new = dict(((ci.gi, ci.ci), (inst, ci)) for inst in gpu.instances for ci in inst.compute)
        for key in sorted(old):
            if key not in new or new[key][1].uuid != old[key][1].uuid:
                events += _gone_events(host, state, gpu.uuid, old[key][0], [old[key][1]], CHANGED_OUTSIDE)
        for key in sorted(new):
            if key not in old or new[key][1].uuid != old[key][1].uuid:
                events += _made_events(host, state, gpu.uuid, GpuInstance(
                    gi=new[key][0].gi, profile=new[key][0].profile, placement=new[key][0].placement,
                    compute=(new[key][1],)), CHANGED_OUTSIDE)
        if bool(gpu.mode) not in (before.mig_enabled, before.mode_after_reset):  # a pending change done: journaled
            events.append(_event(host, state, MIG_MODE_CHANGED, gpu.uuid, CHANGED_OUTSIDE, "%s: MIG mode is %s" % (
                gpu.uuid, "on" if gpu.mode else "off")))
    return events


# -- the run -------------------------------------------------------------------------------------------------

def node_claims(host: Host, state: NodeState, node: MigNode) -> Dict[str, GpuClaims]:
    """Every GPU's claims, read now: holds (the bcd specs of /etc/cdi and /var/run/cdi, and the env files beyond
    them, as root reads them for the helper's ``mig.change``), pending releases, VMs (running, as the last pass saw
    them, and those the stored node spec's instances are to give it), and the processes the driver lists."""
    holds = live_holds(host)  # as root reads them in the helper: one reading, whoever checks
    domains, _error = host.domains()
    try:
        stored = state.load_nodespec()
        instances: Optional[Sequence[Dict[str, Any]]] = stored[2] if stored is not None else []
    except BcdError:
        instances = None
    running = [domain.instance_id for domain in domains]
    return dict((gpu.uuid, gpu_claims(gpu.uuid, claims_on(
        gpu.uuid, holds, state.releases, domains, state.ledger.vfio, state.maintenance)
        + planned_vm_claims(gpu.uuid, instances, running), node.processes)) for gpu in node.gpus)


def converge_layout(host: Host, wanted: Optional[Mapping[str, WantedGpu]], state_dir: str = DEFAULT_STATE_DIR,
                    check_mode: bool = False, lock_timeout: float = 120.0) -> Dict[str, Any]:
    """Converge the MIG layout to ``wanted`` (None: the recorded one, as the boot unit does). Returns ``{changed,
    failed, gpus, ops, msg, held_missing}`` (``entry/modules/mig_layout.py`` documents them)."""
    boot = wanted is None
    reason = BOOT_LAYOUT if boot else LAYOUT_APPLIED
    state = NodeState(host.path(state_dir), state_dir)
    with state.lock(lock_timeout, create=not check_mode):
        state.load(write=not check_mode)
        side = host.mig_side()
        node = side.read()
        if node.error and not node.gpus:
            raise MigLayoutError("the GPUs' MIG side cannot be read: %s" % node.error)
        rec, problem = state.load_mig_record()
        if boot:
            if problem:
                raise MigLayoutError("%s/mig-layout.json %s: there is no layout to make again" % (state_dir, problem))
            wanted = wanted_from_record(rec, node)
        claims = node_claims(host, state, node)
        try:
            plan = plan_layout(wanted or {}, node, claims)
        except LayoutRefused as exc:
            raise MigLayoutError("the layout was refused, and nothing was changed: %s" % exc)
        drift = drift_events(host, state, rec, node)
        _room(state, len(drift) + EVENTS_PER_OP * len(plan.ops), "bcd.devices.mig_layout")
        if check_mode:
            return _result(plan, dict((g.uuid, _planned_after(g)) for g in plan.gpus), {}, True, state, host, node)
        for event in drift:
            state.report(event)
        if drift:
            with state.change():
                pass
        errors: Dict[str, str] = {}
        after: Dict[str, Tuple[GpuInstance, ...]] = {}
        waiting: Dict[str, bool] = {}
        for gpu_plan in plan.gpus:
            if gpu_plan.refused or not gpu_plan.ops:
                continue
            error, pending = _apply_gpu(host, state, side, gpu_plan, node, reason)
            if error:
                errors[gpu_plan.uuid] = error
            waiting[gpu_plan.uuid] = pending
        node = side.read() if any(gpu.ops for gpu in plan.gpus) else node
        for gpu in node.gpus:
            after[gpu.uuid] = gpu.instances
        state.save_mig_record(MigRecord(boot_id=host.boot_id(), gpus=dict(
            (gpu.uuid, recorded(gpu)) for gpu in node.gpus if gpu.capability is not None or gpu.mode)))
        return _result(plan, after, errors, False, state, host, node, waiting)


def _apply_gpu(host: Host, state: NodeState, side: MigSide, gpu_plan: GpuPlan, node: MigNode,
               reason: str) -> Tuple[Optional[str], bool]:
    """Carry out one GPU's ops in order, journaling each change once the tool made it. ``(error, reset_needed)``."""
    gpu = node.gpu(gpu_plan.uuid)
    instances = dict((inst.gi, inst) for inst in (gpu.instances if gpu is not None else ()))
    for op in gpu_plan.ops:
        done: MigDone = side.apply(op)
        if done.error:
            return "%s failed: %s" % (describe_op(op), done.error), False
        events: List[Dict[str, Any]] = []
        if op.kind == "destroy" and op.gi is not None:
            inst = instances.get(op.gi)
            if inst is not None:
                gone = [ci for ci in inst.compute if op.ci is None or ci.ci == op.ci]
                events = _gone_events(host, state, op.gpu, inst, gone, reason)
        elif op.kind == "create" and done.made is not None:
            events = _made_events(host, state, op.gpu, done.made, reason)
            instances[done.made.gi] = done.made
        elif op.kind == "mode":
            events = [_event(host, state, MIG_MODE_CHANGED, op.gpu, reason, "%s: MIG mode turned %s" % (
                op.gpu, "on" if op.enabled else "off"))]
        for event in events:
            state.report(event)
        if events:
            with state.change():
                pass
        if op.kind == "mode":
            now = side.read().gpu(op.gpu)
            if now is None or bool(now.mode) != bool(op.enabled):
                return None, True
    return None, False


def describe_op(op: MigOp) -> str:
    """One line for ``op``, as the plan and the diff show it."""
    if op.kind == "mode":
        return "%s: turn MIG mode %s" % (op.gpu, "on" if op.enabled else "off")
    if op.kind == "destroy":
        if op.ci is None:
            return "%s: destroy GPU instance gi%s and its compute instances" % (op.gpu, op.gi)
        return "%s: destroy MIG instance gi%s/ci%s" % (op.gpu, op.gi, op.ci)
    if op.gi is not None:
        return "%s: make compute instances %s in GPU instance gi%d" % (op.gpu, ", ".join(op.compute), op.gi)
    return "%s: make GPU instance %s at memory slice %s with compute instances %s" % (
        op.gpu, op.profile, op.placement, ", ".join(op.compute))


def _planned_after(gpu: GpuPlan) -> Tuple[GpuInstance, ...]:
    return gpu.keep if not gpu.refused else gpu.before


def instance_list(gpu: str, instances: Sequence[GpuInstance]) -> List[Dict[str, Any]]:
    """The instances as the module returns them: one entry per compute instance."""
    return [{"device_id": instance_id(gpu, ci.gi, ci.ci), "gi": inst.gi, "ci": ci.ci, "gi_profile": inst.profile,
             "profile": ci.profile, "placement": inst.placement.start, "uuid": ci.uuid}
            for inst in sorted(instances, key=lambda i: i.gi) for ci in sorted(inst.compute, key=lambda c: c.ci)]


def _result(plan: LayoutPlan, after: Mapping[str, Sequence[GpuInstance]], errors: Mapping[str, str], check_mode: bool,
            state: NodeState, host: Host, node: MigNode, waiting: Optional[Mapping[str, bool]] = None) -> Dict[str, Any]:
    gpus: List[Dict[str, Any]] = []
    parts: List[str] = []
    for gpu in plan.gpus:
        reset_needed = gpu.reset_needed or bool((waiting or {}).get(gpu.uuid))
        entry = {"uuid": gpu.uuid, "index": gpu.index, "source": gpu.source, "mig_enabled": gpu.mig_enabled,
                 "before": instance_list(gpu.uuid, gpu.before), "after": instance_list(gpu.uuid, after.get(gpu.uuid, ())),
                 "kept": instance_list(gpu.uuid, gpu.keep if not gpu.refused else ()),
                 "ops": [dict(op.as_data(), text=describe_op(op)) for op in gpu.ops],
                 "changed": bool(gpu.ops) and not gpu.refused, "refused": gpu.refused,
                 "reset_needed": reset_needed, "error": errors.get(gpu.uuid)}
        gpus.append(entry)
        if gpu.refused:
            parts.append("%s is not changed: %s" % (gpu.name, gpu.refused))
        elif errors.get(gpu.uuid):
            parts.append("%s: %s" % (gpu.name, errors[gpu.uuid]))
        elif reset_needed:
            parts.append("%s: its MIG mode change waits for a GPU reset (bcd.devices.gpu_reset) or a reboot" % gpu.name)
        elif gpu.ops:
            parts.append("%s: %s %d change%s" % (
                gpu.name, "would make" if check_mode else "made", len(gpu.ops), "" if len(gpu.ops) == 1 else "s"))
    held_missing = _held_missing(host, node, after) if not check_mode else []
    parts.extend("%s is held by %s but the layout has no such instance" % (item["device_id"], item["allocation_id"])
                 for item in held_missing)
    return {"changed": any(g["changed"] for g in gpus), "failed": any(g["refused"] or g["error"] for g in gpus),
            "gpus": gpus, "held_missing": held_missing,
            "msg": "; ".join(parts) or "the MIG layout is as wanted", "check_mode": check_mode}


def _held_missing(host: Host, node: MigNode, after: Mapping[str, Sequence[GpuInstance]]) -> List[Dict[str, str]]:
    """The MIG instances live holds name that the layout now lacks (after a reboot: made again with other ids)."""
    missing: List[Dict[str, str]] = []
    for hold in live_holds(host):
        for atom in hold.atoms:
            if atom.gi is None or atom.ci is None or node.gpu(atom.gpu_uuid) is None:
                continue
            have = set((ci.gi, ci.ci) for inst in after.get(atom.gpu_uuid, ()) for ci in inst.compute)
            if (atom.gi, atom.ci) not in have:
                missing.append({"allocation_id": hold.allocation_id, "device_id": atom.id})
    return missing
