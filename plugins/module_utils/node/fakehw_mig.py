# -*- coding: utf-8 -*-
# Copyright: contributors to bcd.devices
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""The MIG side of a fakehw node: its GPUs' MIG layout read from the hardware file, one ``MigOp`` carried out in it,
and a reboot (docs/fakehw.md, "MIG").

What a GPU can be cut into is its product's entry of the profile catalog (``node/mig_catalog.capability_for`` of
its ``name``); what it is cut into now is its entry's ``mig`` list (``node/fakehw_mig_fields.py`` checks the
fields). ``apply_mig`` does to the file what ``nvidia-smi`` does to a GPU, and refuses what it refuses, in its
words (``MigDone.error``, never raised); the file is validated before and after, and written again as JSON,
atomically, as ``reset_fakehw_gpus`` writes it. A file that cannot be read, is not valid, or says what the catalog
contradicts (a profile the product does not have, a placement that is not one of the profile's, two GPU instances
that overlap) raises ``FakeHwError``.

The words are nvidia-smi's (its recorded outputs under ``tests/data/nvidia-smi-mig/``, and what it prints when
it refuses): ``Unable to destroy GPU instance ID  1 from GPU  0: In use by another client``, ``Unable to create a
GPU instance on GPU  0 using profile 9: Insufficient Resources``, ``Unable to disable MIG Mode for GPU
00000000:01:00.0: In use by another client``, ``Unable to enable MIG Mode for GPU ...: Not Supported``.
"""

from __future__ import annotations

import uuid as uuidlib
from typing import TYPE_CHECKING, Any, Callable, Dict, List, Optional, Tuple, Union

from ansible_collections.bcd.devices.plugins.module_utils.domain.mig.model import (
    ComputeInstance,
    GpuInstance,
    MigDone,
    MigGpu,
    MigNode,
    Placement,
    ci_profile_name,
    ci_slices,
)
from ansible_collections.bcd.devices.plugins.module_utils.node.fakehw import (
    FakeHw,
    FakeHwError,
    fakehw_from_data,
    load_fakehw,
    read_fakehw_data,
    write_fakehw_data,
)
from ansible_collections.bcd.devices.plugins.module_utils.node.fakehw_mig_fields import (
    FakeGpuInstance,
    FakeMigGpu,
    settle_mig_mode,
)
from ansible_collections.bcd.devices.plugins.module_utils.node.mig_catalog import capability_for

if TYPE_CHECKING:
    from ansible_collections.bcd.devices.plugins.module_utils.domain.inventory_model import Gpu, Inventory
    from ansible_collections.bcd.devices.plugins.module_utils.domain.mig.model import (
        GiProfile,
        GpuProcess,
        MigCapability,
        MigOp,
    )

# What a GPU model can be cut into, by product name (``mig_catalog.capability_for``; tests pass their own).
Catalog = Callable[[Optional[str]], Optional["MigCapability"]]

IN_USE = "In use by another client"
NOT_FOUND = "Not Found"
INVALID = "Invalid Argument"
NO_ROOM = "Insufficient Resources"
NOT_SUPPORTED = "Not Supported"


# --------------------------------------------------------------------------
# Reading


def read_mig(fakehw: FakeHw, inventory: Inventory, catalog: Catalog = capability_for) -> MigNode:
    """Every GPU of ``inventory`` with its MIG mode (``mig_mode``; without it, on when ``mig`` lists instances), the
    mode it takes at its next reset or reboot (``mig_mode_pending``, else the mode), its capability (``catalog`` of
    its ``name``; None: the GPU cannot do MIG, and its mode is None unless the file says one) and its GPU
    instances, and the ``processes`` of the file. What the file says that the catalog contradicts is the node's
    ``error`` (``source`` fakehw, no GPUs)."""
    if inventory.error is not None:
        return MigNode(source="fakehw", error=inventory.error)
    try:
        return _node(fakehw, inventory, catalog)
    except FakeHwError as exc:
        return MigNode(source="fakehw", error=str(exc))


def read_mig_file(path: str, catalog: Catalog = capability_for) -> MigNode:
    """``read_mig`` of the fakehw file at ``path`` and its GPUs; ``FakeHwError`` when it cannot be read or is not
    valid."""
    fakehw = load_fakehw(path)
    return read_mig(fakehw, fakehw.inventory, catalog)


def _node(fakehw: FakeHw, inventory: Inventory, catalog: Catalog) -> MigNode:
    """The node's MIG side; ``FakeHwError`` (naming the field) for what the catalog contradicts."""
    gpus: List[MigGpu] = []
    processes: List[GpuProcess] = []
    for gpu in inventory.gpus:
        side = fakehw.mig.get(gpu.uuid) or FakeMigGpu(where="gpus[%d]" % gpu.index)
        gpus.append(_mig_gpu(gpu, side, catalog(gpu.name) if gpu.name else None))
        processes.extend(side.processes)
    return MigNode(gpus=gpus, processes=processes, source="fakehw")


def _mig_gpu(gpu: Gpu, side: FakeMigGpu, cap: Optional[MigCapability]) -> MigGpu:
    said = side.mode is not None or side.pending is not None or bool(side.instances)
    mode: Optional[bool] = None
    if said or cap is not None:
        mode = side.mode if side.mode is not None else bool(side.instances)
    pending = side.pending if side.pending is not None else mode
    instances: List[GpuInstance] = []
    for inst in side.instances:
        made = GpuInstance(gi=inst.gi, profile=inst.profile or "unknown", placement=_placement(inst, gpu, cap),
                           compute=inst.compute)
        _fits(made, instances, inst, cap)
        instances.append(made)
    return MigGpu(uuid=gpu.uuid, index=gpu.index, product=gpu.name, mode=mode, pending=pending, capability=cap,
                  instances=tuple(instances))


def _placement(inst: FakeGpuInstance, gpu: Gpu, cap: Optional[MigCapability]) -> Placement:
    """Where a GPU instance of the file sits: its profile's placement that starts at its ``placement``;
    ``Placement(0, 0)`` when the file does not say its profile."""
    if inst.profile is None:
        return Placement(0, 0)
    if cap is None:
        raise FakeHwError("%s.profile: the GPU's name (%s) is not a product the MIG profile catalog knows"
                          % (inst.where, gpu.name or "none"))
    profile = cap.profile(inst.profile)
    if profile is None:
        raise FakeHwError("%s.profile: %s is not a GPU instance profile of %s (%s)"
                          % (inst.where, inst.profile, cap.product, ", ".join(p.name for p in cap.profiles)))
    for placement in profile.placements:
        if placement.start == inst.placement:
            return placement
    raise FakeHwError("%s.placement: %s is not a placement of %s on %s (%s)" % (
        inst.where, inst.placement, profile.name, cap.product, _starts(profile)))


def _fits(made: GpuInstance, before: List[GpuInstance], inst: FakeGpuInstance, cap: Optional[MigCapability]) -> None:
    """A GPU instance of the file overlaps none listed before it, and its profile has room for one more."""
    for other in before:
        if made.placement.overlaps(other.placement):
            raise FakeHwError("%s.placement: GPU instance %d (%s at %d) overlaps GPU instance %d (%s at %d)" % (
                inst.where, made.gi, made.profile, made.placement.start, other.gi, other.profile,
                other.placement.start))
    profile = cap.profile(made.profile) if cap is not None else None
    if profile is not None and sum(1 for other in before if other.profile == profile.name) >= profile.instances:
        raise FakeHwError("%s.profile: more %s GPU instances than %s has room for (%d)"
                          % (inst.where, profile.name, cap.product if cap else "the GPU", profile.instances))


def _starts(profile: GiProfile) -> str:
    return ", ".join(str(p.start) for p in profile.placements) or "none"


# --------------------------------------------------------------------------
# Changing


def apply_mig(path: str, op: MigOp, catalog: Catalog = capability_for) -> MigDone:
    """Carry out ``op`` in the fakehw file at ``path``, as nvidia-smi would on the GPU (docs/fakehw.md, "MIG"):

    * ``mode``: MIG mode ``enabled`` at once, or pending until a reset or reboot when the GPU's
      ``mig_mode_needs_reset``; enabling it on a GPU the catalog does not know, or disabling it while the GPU has GPU
      instances, is refused;
    * ``destroy``: compute instance ``ci`` of GPU instance ``gi``, or the GPU instance and its compute instances;
      refused for one that does not exist or that a process of ``processes`` uses;
    * ``create``: a GPU instance of ``profile`` (one of the GPU's) at ``placement`` (one of the profile's, over no
      other GPU instance; None: the first free one) with the lowest free GPU instance id from 1, then a compute
      instance of each profile of ``compute`` in it (ids from 0, fresh ``MIG-`` UUIDs); with ``gi`` set, only the
      compute instances, in that GPU instance. Nothing is made unless all of it fits.

    What nvidia-smi would refuse is ``MigDone.error``, in its words, and the file is left as it was; ``FakeHwError``
    when the file cannot be read or written, or is not valid."""
    data, fakehw = read_fakehw_data(path)
    node = _node(fakehw, fakehw.inventory, catalog)
    gpu = node.gpu(op.gpu)
    item = _item(data, op.gpu)
    listed = fakehw.inventory.gpu(op.gpu)
    if gpu is None or item is None or listed is None:
        return MigDone(op=op, error="No GPU with UUID %s was found" % op.gpu)
    side = fakehw.mig.get(op.gpu) or FakeMigGpu(where="")
    if op.kind == "mode":
        error, made, changed = _mode(item, gpu, listed, side, op)
    elif op.kind == "destroy":
        error, made, changed = _destroy(item, gpu, side, op)
    elif op.kind == "create":
        error, made, changed = _create(item, gpu, op)
    else:
        error, made, changed = "unknown MIG op kind %r" % op.kind, None, False
    if error is not None:
        return MigDone(op=op, error=error)
    if changed:
        _write(path, data, catalog)
    return MigDone(op=op, made=made)


def fakehw_reboot(path: str) -> str:
    """A reboot of the fakehw node at ``path``: every GPU's MIG instances and ``processes`` are gone, its pending MIG
    mode is its mode, and the file has a fresh ``boot_id`` (returned). (``<root>/proc/sys/kernel/random/boot_id``,
    which a node reads first, is the caller's to change.)"""
    data, _fakehw = read_fakehw_data(path)
    data = data if isinstance(data, dict) else {}
    for item in data.get("gpus") or []:
        settle_mig_mode(item, reboot=True)
    boot_id = str(uuidlib.uuid4())
    data["boot_id"] = boot_id
    _write(path, data, None)
    return boot_id


def _write(path: str, data: Any, catalog: Optional[Catalog]) -> None:
    """Write the changed file, once it reads as a pass reads it."""
    fakehw = fakehw_from_data(data, source="fakehw file %s" % path)
    if catalog is not None:
        _node(fakehw, fakehw.inventory, catalog)
    try:
        write_fakehw_data(path, data)
    except OSError as exc:
        raise FakeHwError("cannot write fakehw file %s: %s" % (path, exc.strerror or exc))


def _item(data: Any, uuid: str) -> Optional[Dict[str, Any]]:
    """The file's entry of GPU ``uuid``."""
    for item in (data or {}).get("gpus") or []:
        if isinstance(item, dict) and item.get("uuid") == uuid:
            return item
    return None


# What one op did: (nvidia-smi's refusal, what it made, whether the file changed).
Outcome = Tuple[Optional[str], Optional[GpuInstance], bool]


def _mode(item: Dict[str, Any], gpu: MigGpu, listed: Gpu, side: FakeMigGpu, op: MigOp) -> Outcome:
    if op.enabled is None:
        return "a mode op names no mode (enabled)", None, False
    bus = listed.pci_bus_id or listed.uuid
    if gpu.capability is None and op.enabled and (gpu.mode, gpu.pending) != (True, True):
        return "Unable to enable MIG Mode for GPU %s: %s" % (bus, NOT_SUPPORTED), None, False
    if gpu.mode is None:
        return None, None, False  # disabling it: nvidia-smi says Not Supported, "Treating as warning and moving on."
    if not op.enabled and gpu.instances:
        return "Unable to disable MIG Mode for GPU %s: %s" % (bus, IN_USE), None, False
    mode = gpu.mode if side.needs_reset else op.enabled
    if (mode, op.enabled) == (gpu.mode, gpu.pending):
        return None, None, False
    item["mig_mode"] = mode
    item["mig_mode_pending"] = op.enabled
    return None, None, True


def _destroy(item: Dict[str, Any], gpu: MigGpu, side: FakeMigGpu, op: MigOp) -> Outcome:
    if op.gi is None:
        return "a destroy op names no GPU instance (gi)", None, False
    inst = gpu.instance(op.gi)
    used = [p for p in side.processes if p.gi == op.gi and (op.ci is None or p.ci == op.ci)]
    if op.ci is not None:
        words = "Unable to destroy compute instance ID %2d from GPU %2d GPU instance ID %2d: " % (op.ci, gpu.index, op.gi)
        if inst is None or not any(ci.ci == op.ci for ci in inst.compute):
            return words + NOT_FOUND, None, False
        if used:
            return words + IN_USE, None, False
        _rewrite(item, gpu, inst, tuple(ci for ci in inst.compute if ci.ci != op.ci))
        return None, None, True
    words = "Unable to destroy GPU instance ID %2d from GPU %2d: " % (op.gi, gpu.index)
    if inst is None:
        return words + NOT_FOUND, None, False
    if used:
        return words + IN_USE, None, False
    _rewrite(item, gpu, inst, None)
    return None, None, True


def _create(item: Dict[str, Any], gpu: MigGpu, op: MigOp) -> Outcome:
    cap = gpu.capability
    if gpu.mode is not True or cap is None:
        return "No MIG-enabled devices found.", None, False
    if op.gi is not None:
        inst = gpu.instance(op.gi)
        profile = cap.profile(inst.profile) if inst is not None else None
        if inst is None or profile is None:  # none, or one of a profile the file does not say
            return ("Unable to create a compute instance on GPU %2d GPU instance ID %2d: %s"
                    % (gpu.index, op.gi, NOT_FOUND if inst is None else INVALID)), None, False
    else:
        profile = cap.profile(op.profile or "")
        if profile is None:
            return ("Unable to create a GPU instance on GPU %2d using profile %s: %s"
                    % (gpu.index, op.profile, INVALID)), None, False
        found = _place(gpu, cap, profile, op.placement)
        if isinstance(found, str):
            return ("Unable to create a GPU instance on GPU %2d using profile %d: %s"
                    % (gpu.index, profile.id, found)), None, False
        inst = GpuInstance(gi=_lowest_free([i.gi for i in gpu.instances], 1), profile=profile.name, placement=found)
    error, compute = _compute(gpu, inst, profile, op)
    if error is not None:
        return error, None, False
    _rewrite(item, gpu, GpuInstance(gi=inst.gi, profile=inst.profile, placement=inst.placement,
                                    compute=inst.compute + compute), None, keep=True)
    return None, GpuInstance(gi=inst.gi, profile=inst.profile, placement=inst.placement, compute=compute), True


def _place(gpu: MigGpu, cap: MigCapability, profile: GiProfile, start: Optional[int]) -> Union[Placement, str]:
    """The placement of a new GPU instance of ``profile`` starting at ``start`` (None: the first free one), or
    nvidia-smi's reason there is none."""
    candidates = [p for p in profile.placements if start is None or p.start == start]
    if not candidates:
        return INVALID
    profiles = [cap.profile(i.profile) for i in gpu.instances]
    taken = sum(p.slices for p in profiles if p is not None)
    if sum(1 for i in gpu.instances if i.profile == profile.name) >= profile.instances \
            or taken + profile.slices > cap.compute_slices:
        return NO_ROOM
    for placement in candidates:
        if not any(placement.overlaps(i.placement) for i in gpu.instances):
            return placement
    return NO_ROOM


def _compute(gpu: MigGpu, inst: GpuInstance, profile: GiProfile, op: MigOp) -> Tuple[Optional[str], Tuple[ComputeInstance, ...]]:
    """The compute instances ``op`` makes in ``inst``: each of its profiles one of the GPU instance's, all of them
    in the compute slices it has left, with the lowest free ids from 0 and fresh UUIDs."""
    used = sum(ci_slices(ci.profile, profile) or 0 for ci in inst.compute)
    ids = [ci.ci for ci in inst.compute]
    made: List[ComputeInstance] = []
    for name in op.compute:
        slices = ci_slices(name, profile)
        words = "Unable to create a compute instance on GPU %2d GPU instance ID %2d using profile %s: " % (
            gpu.index, inst.gi, name)
        if slices is None:
            return words + INVALID, ()
        used += slices
        if used > profile.slices:
            return words + NO_ROOM, ()
        ci = _lowest_free(ids, 0)
        ids.append(ci)
        made.append(ComputeInstance(gi=inst.gi, ci=ci, profile=ci_profile_name(slices, profile),
                                    uuid="MIG-%s" % uuidlib.uuid4()))
    return None, tuple(made)


def _lowest_free(taken: List[int], start: int) -> int:
    number = start
    while number in taken:
        number += 1
    return number


def _rewrite(item: Dict[str, Any], gpu: MigGpu, inst: GpuInstance, compute: Optional[Tuple[ComputeInstance, ...]],
             keep: bool = False) -> None:
    """The GPU's ``mig`` entries with GPU instance ``inst`` replaced: by its ``compute`` instances (an entry without
    ``ci`` when there are none), or gone (``compute`` None, unless ``keep``: then ``inst`` as it is). Its mode is
    written out, so that no default changes it."""
    old = item.get("mig") or []
    at = next((k for k, entry in enumerate(old) if entry.get("gi") == inst.gi), len(old))  # where it is listed
    entries = [entry for entry in old[:at] if entry.get("gi") != inst.gi]
    if compute is None and keep:
        compute = inst.compute
    if compute is not None:
        entries.extend(_entries(inst, compute))
    entries.extend(entry for entry in old[at:] if entry.get("gi") != inst.gi)
    if entries:
        item["mig"] = entries
    else:
        item.pop("mig", None)
    item["mig_mode"] = gpu.mode
    item["mig_mode_pending"] = gpu.pending


def _entries(inst: GpuInstance, compute: Tuple[ComputeInstance, ...]) -> List[Dict[str, Any]]:
    """The ``mig`` entries of one GPU instance: one per compute instance, or one without ``ci``."""
    where: Dict[str, Any] = {}
    if inst.profile != "unknown":
        where = {"profile": inst.profile, "placement": inst.placement.start}
    if not compute:
        return [dict({"gi": inst.gi}, **where)]
    entries = []
    for ci in compute:
        entry = dict({"gi": ci.gi, "ci": ci.ci, "uuid": ci.uuid}, **where)
        if inst.profile != "unknown" and ci.profile != inst.profile:
            entry["ci_profile"] = ci.profile
        entries.append(entry)
    return entries
