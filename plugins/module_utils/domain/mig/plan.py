# -*- coding: utf-8 -*-
# Copyright: contributors to bcd.devices
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""The layout planner: the wanted layout and the GPUs' MIG side as they are, in; for each GPU the instances that
stay, the ops that destroy and make the rest, or why nothing on it changes, out. Pure: check mode is this plan
without the apply (``entry/mig_layout.py``).

* **Bad input is refused before anything changes** (``LayoutRefused``, every problem of every GPU named): a
  profile the GPU does not have, a compute profile that is not one of its GPU instance's, more instances of a
  profile or more compute slices than the GPU has, a placement that is not one of the profile's or overlaps
  another, instances that do not fit the GPU's memory slices together, MIG asked of a GPU that cannot do it.
* **Instances that match stay.** A wanted instance matches a GPU instance of the same profile (and start slice,
  when the operator gave one), held ones first; within it, compute instances match by profile. What matches is
  never destroyed and made again: its GI/CI and ``MIG-`` UUID stay.
* **What does not match goes, what is missing is made**, each new GPU instance at a placement chosen here
  (``placement.fit``) around those that stay. When they do not fit around them, the unheld ones that match are
  made again elsewhere too; when they do not fit around the held ones, the GPU is refused.
* **Never under a hold.** Every op is checked by ``guard.op_refusal`` against the GPU's claims; one refused op
  refuses the whole GPU (``GpuPlan.refused``, naming the GPU and who holds what), and its ops are dropped.
* **MIG mode.** Turning it on or off is an op of its own, after the destroys; an instance can be made only once
  the mode is on, so a GPU whose mode change is pending (it waits for a reset or reboot) plans no create and
  says so (``reset_needed``).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Dict, List, Mapping, Optional, Sequence, Tuple

from ansible_collections.bcd.devices.plugins.module_utils.domain.mig.guard import GpuClaims, first_refusal
from ansible_collections.bcd.devices.plugins.module_utils.domain.mig.model import (
    ComputeInstance,
    GiProfile,
    GpuInstance,
    MigCapability,
    MigGpu,
    MigNode,
    MigOp,
    Placement,
    ci_slices,
)
from ansible_collections.bcd.devices.plugins.module_utils.domain.mig.placement import ToPlace, fit, placement_at
from ansible_collections.bcd.devices.plugins.module_utils.support.errors import BcdError
from ansible_collections.bcd.devices.plugins.module_utils.support.records import record

if TYPE_CHECKING:
    from ansible_collections.bcd.devices.plugins.module_utils.domain.mig.layout import WantedGpu, WantedInstance


class LayoutRefused(BcdError):
    """The wanted layout cannot be made on these GPUs, whatever holds them; the message names each problem."""


@record(frozen=True)
class NewInstance:
    """A GPU instance to make: ``profile`` at ``placement``'s start, with compute instances of ``compute``."""

    profile: str
    placement: int
    compute: Tuple[str, ...]


@record(frozen=True)
class GpuPlan:
    """One GPU's part of a plan. ``keep``: the GPU instances that stay (with the compute instances that stay);
    ``ops``: in the order they run; ``refused``: why nothing on it changes (then ``ops`` is empty);
    ``reset_needed``: its MIG mode change waits for a GPU reset or a reboot."""

    uuid: str
    index: int
    source: str
    mig_enabled: bool
    before: Tuple[GpuInstance, ...] = ()
    keep: Tuple[GpuInstance, ...] = ()
    ops: Tuple[MigOp, ...] = ()
    refused: Optional[str] = None
    reset_needed: bool = False

    @property
    def name(self) -> str:
        return "%s (GPU %d)" % (self.uuid, self.index)


@record(frozen=True)
class LayoutPlan:
    """Every wanted GPU's plan, in GPU index order."""

    gpus: Tuple[GpuPlan, ...] = ()

    @property
    def ops(self) -> Tuple[MigOp, ...]:
        return tuple(op for gpu in self.gpus for op in gpu.ops)


def plan_layout(wanted: Mapping[str, WantedGpu], node: MigNode, claims: Mapping[str, GpuClaims]) -> LayoutPlan:
    """The plan that turns ``node`` into ``wanted``; ``LayoutRefused`` naming every problem of the input first."""
    problems: List[str] = []
    plans: List[GpuPlan] = []
    for want in sorted(wanted.values(), key=lambda w: w.index):
        gpu = node.gpu(want.uuid)
        if gpu is None:
            problems.append("%s (GPU %d): %s" % (want.uuid, want.index, "its MIG side could not be read"
                                                 + (": %s" % node.error if node.error else "")))
            continue
        found = check_wanted(want, gpu)
        if found:
            problems.extend("%s (GPU %d), %s: %s" % (want.uuid, want.index, want.source, text) for text in found)
            continue
        plans.append(_plan_gpu(want, gpu, claims.get(want.uuid) or GpuClaims(uuid=want.uuid)))
    if problems:
        raise LayoutRefused("; ".join(problems))
    return LayoutPlan(gpus=tuple(plans))


# -- what the GPU can take ------------------------------------------------------------------------------------

def _compute(want: WantedInstance) -> Tuple[str, ...]:
    return tuple(want.compute) or (want.profile,)


def check_wanted(want: WantedGpu, gpu: MigGpu) -> List[str]:
    """What in ``want`` this GPU cannot take, whatever holds it; empty when nothing."""
    cap = gpu.capability
    if not want.mig_enabled:
        return []
    if cap is None:
        return ["%s cannot do MIG" % (gpu.product or "this GPU")]
    found: List[str] = []
    profiles: List[GiProfile] = []
    for i, inst in enumerate(want.instances):
        profile = cap.profile(inst.profile)
        if profile is None:
            found.append("instance %d: %s is not a MIG profile of %s (it has %s)" % (
                i, inst.profile, cap.product, ", ".join(p.name for p in cap.profiles)))
            continue
        profiles.append(profile)
        slices = [ci_slices(name, profile) for name in _compute(inst)]
        bad = [name for name, n in zip(_compute(inst), slices) if n is None]
        if bad:
            found.append("instance %d: %s %s not a compute profile of %s" % (
                i, ", ".join(bad), "is" if len(bad) == 1 else "are", profile.name))
        elif sum(n for n in slices if n is not None) > profile.slices:
            found.append("instance %d: its compute instances (%s) take %d compute slices; a %s has %d" % (
                i, ", ".join(_compute(inst)), sum(n for n in slices if n is not None), profile.name, profile.slices))
        if inst.placement is not None and placement_at(profile, inst.placement) is None:
            found.append("instance %d: %s cannot start at memory slice %d (its placements start at %s)" % (
                i, profile.name, inst.placement, ", ".join(str(p.start) for p in profile.placements) or "none"))
    if found:
        return found
    for profile in _distinct(profiles):
        count = sum(1 for p in profiles if p.name == profile.name)
        if count > profile.instances:
            found.append("%d instances of %s; %s has room for %d" % (count, profile.name, cap.product, profile.instances))
    total = sum(p.slices for p in profiles)
    if total > cap.compute_slices:
        found.append("more instances than the GPU has slices: %s take %d compute slices; %s has %d" % (
            " + ".join(p.name for p in profiles), total, cap.product, cap.compute_slices))
    if not found and fit(list(zip(profiles, (inst.placement for inst in want.instances))), []) is None:
        found.append("the instances do not fit %s's %d memory slices together (%s)" % (
            cap.product, cap.memory_slices, ", ".join(_shown(inst) for inst in want.instances)))
    return found


def _distinct(profiles: Sequence[GiProfile]) -> List[GiProfile]:
    seen: Dict[str, GiProfile] = {}
    for profile in profiles:
        seen.setdefault(profile.name, profile)
    return list(seen.values())


def _shown(inst: WantedInstance) -> str:
    return str(inst.profile) + (" at %d" % inst.placement if inst.placement is not None else "")


# -- one GPU ------------------------------------------------------------------------------------------------

def _plan_gpu(want: WantedGpu, gpu: MigGpu, claims: GpuClaims) -> GpuPlan:
    base = GpuPlan(uuid=gpu.uuid, index=gpu.index, source=want.source, mig_enabled=want.mig_enabled,
                   before=gpu.instances)
    if not want.mig_enabled:
        ops = [MigOp(kind="destroy", gpu=gpu.uuid, gi=inst.gi) for inst in gpu.instances]
        reset_needed = False
        if gpu.pending or (gpu.mode and gpu.pending is None):
            ops.append(MigOp(kind="mode", gpu=gpu.uuid, enabled=False))
        elif gpu.mode:  # disabling is pending already: it waits for a reset
            reset_needed = True
        return _checked(base, (), ops, claims, reset_needed)
    cap = gpu.capability
    if cap is None:  # check_wanted refused it
        raise LayoutRefused("%s cannot do MIG" % gpu.uuid)
    if not gpu.mode:
        if gpu.pending:  # enabling is pending: nothing can be made before the reset
            return _checked(base, (), [], claims, True)
        creates = _creates(gpu.uuid, want.instances, cap, [])
        if creates is None:
            raise LayoutRefused("%s: the instances do not fit" % gpu.uuid)  # check_wanted found they do
        return _checked(base, (), [MigOp(kind="mode", gpu=gpu.uuid, enabled=True)] + creates, claims, False)
    cancel: List[MigOp] = [MigOp(kind="mode", gpu=gpu.uuid, enabled=True)] if gpu.pending is False else []
    matched = _match(want.instances, gpu.instances, claims)
    planned = _around(want.instances, gpu, matched, cap, claims)
    if planned is None:
        held = [inst for inst in gpu.instances if claims.held(inst.gi)]
        texts = [text for inst in held for text in claims.held(inst.gi)]
        return GpuPlan(uuid=gpu.uuid, index=gpu.index, source=want.source, mig_enabled=True, before=gpu.instances,
                       keep=gpu.instances, refused="the layout needs the memory slices of %s: %s" % (
                           ", ".join("GPU instance gi%d (%s at %d)" % (i.gi, i.profile, i.placement.start) for i in held),
                           "; ".join(texts)))
    keep, destroys, creates = planned
    return _checked(base, keep, destroys + cancel + creates, claims, False)


Match = Dict[int, GpuInstance]  # wanted instance's position -> the GPU instance it keeps


def _match(wanted: Sequence[WantedInstance], existing: Sequence[GpuInstance], claims: GpuClaims) -> Match:
    """Which GPU instance each wanted instance keeps: same profile (and start slice when given), held ones first,
    then the lowest GI id; those with a placement first."""
    free = sorted(existing, key=lambda inst: (not claims.held(inst.gi), inst.gi))
    matched: Match = {}
    for explicit in (True, False):
        for i, want in enumerate(wanted):
            if (want.placement is not None) != explicit:
                continue
            for inst in free:
                if inst.profile == want.profile and (want.placement is None or inst.placement.start == want.placement):
                    matched[i] = inst
                    free.remove(inst)
                    break
    return matched


def _around(wanted: Sequence[WantedInstance], gpu: MigGpu, matched: Match, cap: MigCapability,
            claims: GpuClaims) -> Optional[Tuple[Tuple[GpuInstance, ...], List[MigOp], List[MigOp]]]:
    """``(keep, destroys, creates)``: the matched instances kept and the rest made around them; else with only
    the held ones of them kept; None when the rest do not fit around the held ones."""
    for keeping in (matched, dict((i, inst) for i, inst in matched.items() if claims.held(inst.gi))):
        new = [(i, want) for i, want in enumerate(wanted) if i not in keeping]
        creates = _creates(gpu.uuid, [want for _i, want in new], cap, [inst.placement for inst in keeping.values()])
        if creates is None:
            continue
        kept_gis = set(inst.gi for inst in keeping.values())
        destroys = [MigOp(kind="destroy", gpu=gpu.uuid, gi=inst.gi) for inst in gpu.instances if inst.gi not in kept_gis]
        keep: List[GpuInstance] = []
        ci_destroys: List[MigOp] = []
        ci_creates: List[MigOp] = []
        for i in sorted(keeping):
            inst = keeping[i]
            stay, gone, missing = _match_compute(_compute(wanted[i]), inst, claims)
            keep.append(GpuInstance(gi=inst.gi, profile=inst.profile, placement=inst.placement, compute=stay))
            ci_destroys.extend(MigOp(kind="destroy", gpu=gpu.uuid, gi=inst.gi, ci=ci.ci) for ci in gone)
            if missing:
                ci_creates.append(MigOp(kind="create", gpu=gpu.uuid, gi=inst.gi, profile=inst.profile,
                                        placement=inst.placement.start, compute=missing))
        return tuple(sorted(keep, key=lambda k: k.gi)), ci_destroys + destroys, ci_creates + creates
    return None


def _match_compute(wanted: Sequence[str], inst: GpuInstance,
                   claims: GpuClaims) -> Tuple[Tuple[ComputeInstance, ...], List[ComputeInstance], Tuple[str, ...]]:
    """``(stay, gone, missing)``: the compute instances of ``inst`` that stay (by profile, held first), those that
    go, and the profiles still to make."""
    free = sorted(inst.compute, key=lambda ci: (not claims.held(ci.gi, ci.ci), ci.ci))
    stay: List[ComputeInstance] = []
    missing: List[str] = []
    for name in wanted:
        for ci in free:
            if ci.profile == name:
                stay.append(ci)
                free.remove(ci)
                break
        else:
            missing.append(name)
    return tuple(sorted(stay, key=lambda ci: ci.ci)), free, tuple(missing)


def _creates(uuid: str, wanted: Sequence[WantedInstance], cap: MigCapability,
             occupied: Sequence[Placement]) -> Optional[List[MigOp]]:
    """A create op per wanted instance at a placement that fits around ``occupied``, or None."""
    to_place: List[ToPlace] = []
    for want in wanted:
        profile = cap.profile(want.profile)
        if profile is None:
            return None
        to_place.append((profile, want.placement))
    placements = fit(to_place, occupied)
    if placements is None:
        return None
    return [MigOp(kind="create", gpu=uuid, profile=want.profile, placement=placement.start, compute=_compute(want))
            for want, placement in zip(wanted, placements)]


def _checked(base: GpuPlan, keep: Tuple[GpuInstance, ...], ops: Sequence[MigOp], claims: GpuClaims,
             reset_needed: bool) -> GpuPlan:
    """The GPU's plan with its ops; refused (no op) when ``guard`` refuses one."""
    why = first_refusal(ops, claims)
    if why is not None:
        return GpuPlan(uuid=base.uuid, index=base.index, source=base.source, mig_enabled=base.mig_enabled,
                       before=base.before, keep=base.before, refused=why, reset_needed=reset_needed)
    return GpuPlan(uuid=base.uuid, index=base.index, source=base.source, mig_enabled=base.mig_enabled,
                   before=base.before, keep=keep, ops=tuple(ops), reset_needed=reset_needed)
