# -*- coding: utf-8 -*-
# Copyright: contributors to bcd.devices
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""A fakehw GPU's MIG side, checked field by field: its ``mig`` entries with the GPU instance each sits in
(``profile``, ``ci_profile``, ``placement``), ``mig_mode``, ``mig_mode_pending``, ``mig_mode_needs_reset`` and the
``processes`` using it (docs/fakehw.md, "MIG").

``fakehw_data`` checks each GPU entry's other fields and calls these; every refusal is a ``FakeHwError`` naming
the field (``gpus[0].mig[1].placement: required with profile``). Every field is optional, so a file written before
MIG layouts were modelled reads as it did: a ``mig`` entry without ``profile`` is a compute instance of a GPU
instance whose profile and placement the file does not say. What needs the GPU's profile catalog (a profile the
product has, a placement that is one of the profile's and overlaps no other) is checked where the catalog is
read, in ``fakehw_mig``.
"""

from __future__ import annotations

from typing import Any, Dict, Optional, Tuple

from ansible_collections.bcd.devices.plugins.module_utils.domain.inventory_model import MigInstance
from ansible_collections.bcd.devices.plugins.module_utils.domain.mig.model import (
    ComputeInstance,
    GiProfile,
    GpuProcess,
    ci_slices,
)
from ansible_collections.bcd.devices.plugins.module_utils.node.fakehw_checks import (
    MIG_UUID_RE,
    boolean,
    checked_list,
    err,
    mapping,
    optional_int,
    required_int,
    required_text,
    text,
)
from ansible_collections.bcd.devices.plugins.module_utils.support.records import record
from ansible_collections.bcd.devices.plugins.module_utils.support.speed import lazy_pattern

MIG_FIELDS = ("gi", "ci", "uuid", "profile", "ci_profile", "placement")
PROCESS_FIELDS = ("pid", "name", "gi", "ci")
# A GPU has 7 compute slices (so at most 7 compute instances) and 8 memory slices (placements 0 to 7): the
# bounds leave room for GPUs to come.
MAX_MIG_ENTRIES = 64
MAX_PROCESSES = 256
MAX_PLACEMENT = 63
# A GPU instance profile as nvidia-smi mig -lgip names it, without "MIG ": 3g.40gb, 1g.10gb+me, 1g.24gb+me.all, 1g.24gb-me
_GI_PROFILE_RE = lazy_pattern(r"^([1-9])g\.[1-9][0-9]{0,3}gb([+-][a-z]{1,8}(\.[a-z]{1,8})?)?$")


@record(frozen=True)
class FakeGpuInstance:
    """A GPU instance as a GPU's ``mig`` entries list it (those of one ``gi``). ``profile`` None: they do not say
    (entries written before MIG layouts were modelled), nor its ``placement`` (its start slice)."""

    gi: int
    profile: Optional[str]
    placement: Optional[int]
    compute: Tuple[ComputeInstance, ...]  # none: a GPU instance without compute instances
    where: str  # its first entry's field (gpus[1].mig[0]), for messages


@record(frozen=True)
class FakeMigGpu:
    """A GPU's MIG side as its entry says it: ``mig_mode`` and ``mig_mode_pending`` (None: not said),
    ``mig_mode_needs_reset``, its GPU instances and the ``processes`` using it. ``where``: its entry (gpus[1])."""

    where: str
    mode: Optional[bool] = None
    pending: Optional[bool] = None
    needs_reset: bool = False
    instances: Tuple[FakeGpuInstance, ...] = ()
    processes: Tuple[GpuProcess, ...] = ()


def claim_uuid(seen: Dict[str, str], uuid: str, where: str) -> None:
    """A GPU or MIG UUID named once in the whole file (``seen``: where each was named)."""
    if uuid in seen:
        raise err(where, "duplicate UUID %s (also at %s)" % (uuid, seen[uuid]))
    seen[uuid] = where


def mig_entries(value: object, where: str, seen: Dict[str, str]) -> Tuple[Tuple[MigInstance, ...], Tuple[FakeGpuInstance, ...]]:
    """A GPU's ``mig``: each compute instance with a ``gi``/``ci`` pair of its own on the GPU and a UUID, the
    entries of one ``gi`` agreeing on its ``profile`` and ``placement``; an entry with neither ``ci``, ``uuid`` nor
    ``ci_profile`` is a GPU instance without compute instances. The MIG devices, and the GPU instances."""
    entries = checked_list(value, where + ".mig")
    if len(entries) > MAX_MIG_ENTRIES:
        raise err(where + ".mig", "lists %d instances; at most %d" % (len(entries), MAX_MIG_ENTRIES))
    mig = []
    pairs: Dict[Tuple[int, int], str] = {}
    gis: Dict[int, FakeGpuInstance] = {}
    for j, inst in enumerate(entries):
        mwhere = "%s.mig[%d]" % (where, j)
        mapping(inst, mwhere, MIG_FIELDS)
        gi = required_int(inst.get("gi"), mwhere + ".gi")
        profile, placement = _gi_profile(inst, mwhere)
        first = gis.get(gi)
        if first is not None and (first.profile, first.placement) != (profile, placement):
            raise err(mwhere + (".profile" if first.profile != profile else ".placement"), "GPU instance %d %s (%s)"
                      % (gi, _gi_words(first.profile, first.placement), first.where))
        if all(inst.get(name) is None for name in ("ci", "uuid", "ci_profile")):
            if first is not None:
                raise err(mwhere, ("GPU instance %d is listed with compute instances (at %s)" if first.compute
                                   else "duplicate GPU instance %d (also at %s)") % (gi, first.where))
            gis[gi] = FakeGpuInstance(gi=gi, profile=profile, placement=placement, compute=(), where=mwhere)
            continue
        if first is not None and not first.compute:
            raise err(mwhere, "GPU instance %d is listed without compute instances (at %s)" % (gi, first.where))
        ci = required_int(inst.get("ci"), mwhere + ".ci")
        muuid = required_text(inst.get("uuid"), mwhere + ".uuid", pattern=MIG_UUID_RE, shape="a MIG UUID (MIG-...)")
        if (gi, ci) in pairs:
            raise err(mwhere, "duplicate gi %d ci %d (also at %s)" % (gi, ci, pairs[(gi, ci)]))
        pairs[(gi, ci)] = mwhere
        claim_uuid(seen, muuid, mwhere + ".uuid")
        mig.append(MigInstance(gi=gi, ci=ci, uuid=muuid))
        compute = ComputeInstance(gi=gi, ci=ci, profile=_ci_profile(inst.get("ci_profile"), profile, mwhere), uuid=muuid)
        before = first.compute if first is not None else ()
        _ci_fit(before + (compute,), profile, mwhere)
        gis[gi] = FakeGpuInstance(gi=gi, profile=profile, placement=placement, compute=before + (compute,),
                                  where=first.where if first is not None else mwhere)
    return tuple(mig), tuple(gis.values())


def _gi_words(profile: Optional[str], placement: Optional[int]) -> str:
    return "has no profile" if profile is None else "is a %s at placement %d" % (profile, placement or 0)


def _gi_profile(inst: Dict[str, Any], where: str) -> Tuple[Optional[str], Optional[int]]:
    """A ``mig`` entry's GPU instance ``profile`` and ``placement`` (start slice): both, or neither."""
    profile = inst.get("profile")
    placement = optional_int(inst.get("placement"), where + ".placement")
    if profile is None:
        for name in ("placement", "ci_profile"):
            if inst.get(name) is not None:
                raise err(where + ".profile", "required with %s" % name)
        return None, None
    profile = required_text(profile, where + ".profile", pattern=_GI_PROFILE_RE,
                            shape="a GPU instance profile such as 3g.40gb")
    if placement is None:
        raise err(where + ".placement", "required with profile (the GPU instance's start slice)")
    if placement > MAX_PLACEMENT:
        raise err(where + ".placement", "must be at most %d, not %d" % (MAX_PLACEMENT, placement))
    return profile, placement


def _slices_of(profile: str) -> GiProfile:
    """The GPU instance profile ``profile`` names, as far as its name says (its compute slices)."""
    return GiProfile(name=profile, id=0, slices=int(profile.split("g.", 1)[0]), instances=1, memory_mib=0)


def _ci_profile(value: object, profile: Optional[str], where: str) -> str:
    """A ``mig`` entry's compute instance profile: ``ci_profile``, else its GPU instance's (``unknown`` when the
    entry does not say it)."""
    if profile is None:
        return "unknown"
    if value is None:
        return profile
    name = required_text(value, where + ".ci_profile")
    if ci_slices(name, _slices_of(profile)) is None:
        raise err(where + ".ci_profile", "must be %s or <n>c.%s with n under %d, not %r"
                  % (profile, profile, _slices_of(profile).slices, name[:80]))
    return name


def _ci_fit(compute: Tuple[ComputeInstance, ...], profile: Optional[str], where: str) -> None:
    """The compute instances of one GPU instance take no more compute slices than it has."""
    if profile is None:
        return
    gi_profile = _slices_of(profile)
    taken = sum(ci_slices(ci.profile, gi_profile) or 0 for ci in compute)
    if taken > gi_profile.slices:
        raise err(where + ".ci_profile", "the compute instances of GPU instance %d take %d compute slices; a %s has %d"
                  % (compute[0].gi, taken, profile, gi_profile.slices))


def mig_side(item: Dict[str, Any], where: str, uuid: str, instances: Tuple[MigInstance, ...],
             gis: Tuple[FakeGpuInstance, ...]) -> FakeMigGpu:
    """A GPU's MIG mode fields and ``processes`` (each on the GPU, or on one of its MIG devices by gi and ci)."""
    mode = _optional_bool(item.get("mig_mode"), where + ".mig_mode")
    if mode is False and gis:
        raise err(where + ".mig_mode", "false, but mig lists MIG instances")
    entries = checked_list(item.get("processes"), where + ".processes")
    if len(entries) > MAX_PROCESSES:
        raise err(where + ".processes", "lists %d processes; at most %d" % (len(entries), MAX_PROCESSES))
    pairs = set((inst.gi, inst.ci) for inst in instances)
    processes = []
    for k, entry in enumerate(entries):
        pwhere = "%s.processes[%d]" % (where, k)
        mapping(entry, pwhere, PROCESS_FIELDS)
        pid = required_int(entry.get("pid"), pwhere + ".pid")
        gi, ci = optional_int(entry.get("gi"), pwhere + ".gi"), optional_int(entry.get("ci"), pwhere + ".ci")
        if (gi is None) != (ci is None):
            raise err(pwhere + (".ci" if ci is None else ".gi"), "required with %s" % ("gi" if ci is None else "ci"))
        if gi is not None and (gi, ci) not in pairs:
            raise err(pwhere, "no MIG device gi %d ci %d on this GPU" % (gi, ci or 0))
        name = text(entry.get("name"), pwhere + ".name") or ""
        processes.append(GpuProcess(gpu=uuid, pid=pid, name=name, gi=gi, ci=ci))
    pending = _optional_bool(item.get("mig_mode_pending"), where + ".mig_mode_pending")
    needs_reset = boolean(item.get("mig_mode_needs_reset"), where + ".mig_mode_needs_reset", False)
    return FakeMigGpu(where=where, mode=mode, pending=pending, needs_reset=needs_reset, instances=gis,
                      processes=tuple(processes))


def _optional_bool(value: object, where: str) -> Optional[bool]:
    return None if value is None else boolean(value, where, False)


def settle_mig_mode(item: Dict[str, Any], reboot: bool) -> None:
    """What a reboot does to a GPU entry of the file's data: its pending MIG mode (``mig_mode_pending``) becomes its
    mode, written out, and its MIG instances and ``processes`` are gone. With ``reboot`` false, what a GPU reset
    does: only a pending mode the entry states takes effect (and a GPU that leaves MIG mode loses its instances)."""
    pending = item.pop("mig_mode_pending", None)
    if reboot:
        item.pop("processes", None)
        if pending is None and item.get("mig_mode") is None and not item.get("mig"):
            return  # a GPU whose MIG mode the file does not say keeps saying nothing
        item["mig_mode"] = pending if pending is not None else item.get("mig_mode") is not False
        item.pop("mig", None)
        return
    if pending is None:
        return
    item["mig_mode"] = pending
    if pending is False:
        item.pop("mig", None)
        item["processes"] = [entry for entry in item.get("processes") or [] if entry.get("gi") is None]
