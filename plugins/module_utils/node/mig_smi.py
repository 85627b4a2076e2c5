# -*- coding: utf-8 -*-
# Copyright: contributors to bcd.devices
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""A real node's MIG side through ``nvidia-smi``: what each GPU can be cut into, what it is cut into, one change.

Read (``read_mig``): ``nvidia-smi -q -x`` (MIG mode now and pending, the processes with their GPU and compute
instance ids: ``node/nvidia_smi.py`` parses it), then, only when a GPU is in MIG mode, ``nvidia-smi mig -lgip``
(profiles), ``-lgipp`` (their placements), ``-lgi`` (GPU instances and where they sit) and ``-lci`` (compute
instances). MIG UUIDs come from the inventory the caller read (``-L`` joined with ``-q -x``).

Change (``apply_mig``), one ``MigOp`` at a time; the command lines, as NVIDIA documents them:

* mode: ``nvidia-smi -i <GPU-uuid> -mig 1`` (or ``0``). MIG user guide, "Enable MIG Mode"
  (https://docs.nvidia.com/datacenter/tesla/mig-user-guide/getting-started-with-mig.html: ``nvidia-smi -i
  <GPU IDs> -mig 1``); ``-i`` takes an index, PCI bus id or UUID (nvidia-smi(1)). A GPU that needs a reset
  answers "Warning: MIG mode is in pending enable state ..." and rc 0: ``read_mig`` then shows it pending.
* create a GPU instance: ``nvidia-smi mig -i <index> -cgi <profile id>:<start>``. ``nvidia-smi mig -h``: "A
  profile tuple consists of a profile name or ID and an optional placement specifier, which consists of a
  colon and a placement start index" (quoted in HuaizhengZhang/MIGProfiler
  ``migperf/controller/mig_controller.py``). The profile id is the GPU's own ``-lgip`` id, read right before.
* then each compute instance: ``nvidia-smi mig -i <index> -gi <gi> -cci <ci profile id>`` (MIG user guide,
  "Creating GPU Instances": ``nvidia-smi mig -cci 0,0,0 -gi 1``); the ci profile id is NVML's number for its
  slice count (``domain/mig/model.CI_PROFILE_IDS``: the recorded ``-C`` outputs print ``(ID 0)`` for 1g, ``(ID 2)``
  for 3g, ``(ID 3)`` for 4g).
* destroy a compute instance: ``nvidia-smi mig -i <index> -gi <gi> -ci <ci> -dci``; a GPU instance: first
  ``nvidia-smi mig -i <index> -gi <gi> -dci`` (all its compute instances; "none found" is not a failure), then
  ``nvidia-smi mig -i <index> -gi <gi> -dgi`` (MIG user guide, "Destroying GPU Instances": ``nvidia-smi mig
  -dci -ci 0,1,2 -gi 1``, ``nvidia-smi mig -dgi -gi 1``).

New ids are read from nvidia-smi's "Successfully created GPU instance ID  2 on GPU  0 using profile MIG 3g.20gb
(ID  9)" and "Successfully created compute instance ID  0 on GPU  0 GPU instance ID  2 ..." lines (the recorded
outputs under ``tests/data/nvidia-smi-mig/``), the new MIG UUIDs from ``-L`` and ``-q -x`` read again. A failed
step is ``MigDone(error=...)`` with nvidia-smi's own words; a create whose compute instance step fails destroys
the GPU instance it has just made, so no half-made instance is left behind. The GPU index comes from the
inventory by UUID: a UUID it does not list is an error naming it, never another GPU.
"""

from __future__ import annotations

import re
from typing import TYPE_CHECKING, Dict, List, Optional, Sequence, Tuple

from ansible_collections.bcd.devices.plugins.module_utils.domain.mig.model import (
    CI_PROFILE_IDS,
    ComputeInstance,
    GiProfile,
    GpuInstance,
    GpuProcess,
    MigCapability,
    MigDone,
    MigGpu,
    MigNode,
    MigOp,
    Placement,
    ci_slices,
)
from ansible_collections.bcd.devices.plugins.module_utils.node.commands import (
    MAX_OUTPUT_CHARS,
    InventoryError,
    failure_text,
    run_tool,
)
from ansible_collections.bcd.devices.plugins.module_utils.node.mig_catalog import capability_for
from ansible_collections.bcd.devices.plugins.module_utils.node.nvidia_smi import (
    ComputeInstanceRow,
    QueriedGpu,
    mig_ids_from_lci,
    mig_ids_from_query,
    parse_nvidia_smi_list,
    parse_nvidia_smi_mig_lci,
    parse_nvidia_smi_query_xml,
)
from ansible_collections.bcd.devices.plugins.module_utils.support.records import record
from ansible_collections.bcd.devices.plugins.module_utils.support.speed import lazy_pattern

if TYPE_CHECKING:  # pragma: no cover - types only
    from ansible_collections.bcd.devices.plugins.module_utils.domain.inventory_model import Inventory
    from ansible_collections.bcd.devices.plugins.module_utils.node.commands import RunCommand

SMI = "nvidia-smi"
MAX_ID = 99999  # no GPU, profile, instance or slice number nvidia-smi prints comes near this
_PROFILE_RE = lazy_pattern(r"^\d{1,2}g\.\d{1,5}gb(?:\+[a-z][a-z.]{0,15})?$")
_NUM = r"(\d{1,5})"


@record(frozen=True)
class LgipRow:
    """One profile row of ``nvidia-smi mig -lgip``."""

    gpu: int
    profile: str  # "3g.20gb" (without nvidia-smi's "MIG ")
    id: int
    free: int
    total: int
    memory_mib: int  # the GiB column times 1024, rounded


@record(frozen=True)
class LgiRow:
    """One row of ``nvidia-smi mig -lgi``."""

    gpu: int
    profile: str
    profile_id: int
    gi: int
    placement: Placement


_LGIP_RE = lazy_pattern(r"^\|\s*" + _NUM + r"\s+MIG\s+(\S{1,40})\s+" + _NUM + r"\s+" + _NUM + "/" + _NUM
                        + r"\s+(\d{1,7}(?:\.\d{1,3})?)\s")
_LGIPP_RE = lazy_pattern(r"^GPU\s+" + _NUM + r"\s+Profile\s+ID\s+" + _NUM
                         + r"\s+Placements?\s*:\s*\{([\d,\s]{0,200})\}\s*:\s*" + _NUM + r"\s*$")
_LGI_RE = lazy_pattern(r"^\|\s*" + _NUM + r"\s+MIG\s+(\S{1,40})\s+" + _NUM + r"\s+" + _NUM + r"\s+" + _NUM + ":"
                       + _NUM + r"\s*\|$")
_CREATED_GI_RE = lazy_pattern(r"Successfully created GPU instance ID\s+" + _NUM + r"\s+on GPU\s+" + _NUM)
_CREATED_CI_RE = lazy_pattern(r"Successfully created compute instance ID\s+" + _NUM + r"\s+on GPU\s+" + _NUM
                              + r"\s+GPU instance ID\s+" + _NUM)
_NONE_FOUND_RE = lazy_pattern(r"No (?:MIG-enabled devices|GPU instances|compute instances) found", re.IGNORECASE)


def _lines(text: str) -> List[str]:
    return [line.strip() for line in (text or "")[:MAX_OUTPUT_CHARS].splitlines()]


def _profile_name(name: str) -> Optional[str]:
    return name if _PROFILE_RE.match(name) else None


def parse_lgip(text: str) -> List[LgipRow]:
    """The profile rows of ``nvidia-smi mig -lgip`` (its second line per profile, rulers and headers are skipped;
    a name outside the ``<n>g.<m>gb[+ext]`` grammar, or a repeated (GPU, profile id), is dropped)."""
    rows: List[LgipRow] = []
    seen = set()
    for line in _lines(text):
        match = _LGIP_RE.match(line)
        if not match:
            continue
        name = _profile_name(match.group(2))
        gpu, pid, free, total = (int(match.group(i)) for i in (1, 3, 4, 5))
        if name is None or (gpu, pid) in seen or free > total:
            continue
        seen.add((gpu, pid))
        rows.append(LgipRow(gpu=gpu, profile=name, id=pid, free=free, total=total,
                            memory_mib=int(round(float(match.group(6)) * 1024))))
    return rows


def parse_lgipp(text: str) -> Dict[int, Dict[int, Tuple[Placement, ...]]]:
    """``nvidia-smi mig -lgipp``: GPU index -> profile id -> its placements (``{0,4}:4`` is starts 0 and 4, 4 slices
    long). A line naming no start, or a start or size out of any GPU's range, is dropped."""
    found: Dict[int, Dict[int, Tuple[Placement, ...]]] = {}
    for line in _lines(text):
        match = _LGIPP_RE.match(line)
        if not match:
            continue
        gpu, pid, size = int(match.group(1)), int(match.group(2)), int(match.group(4))
        starts = [part.strip() for part in match.group(3).split(",")]
        if not starts or not all(part.isdigit() and len(part) <= 2 for part in starts) or not 0 < size <= 64:
            continue
        found.setdefault(gpu, {}).setdefault(pid, tuple(Placement(int(part), size) for part in starts))
    return found


def parse_lgi(text: str) -> List[LgiRow]:
    """The rows of ``nvidia-smi mig -lgi`` (GPU, profile name and id, GPU instance id, ``start:size``); "No GPU
    instances found" gives []. A repeated (GPU, GI) is dropped."""
    rows: List[LgiRow] = []
    seen = set()
    for line in _lines(text):
        match = _LGI_RE.match(line)
        if not match:
            continue
        name = _profile_name(match.group(2))
        gpu, pid, gi, start, size = (int(match.group(i)) for i in (1, 3, 4, 5, 6))
        if name is None or (gpu, gi) in seen or size == 0:
            continue
        seen.add((gpu, gi))
        rows.append(LgiRow(gpu=gpu, profile=name, profile_id=pid, gi=gi, placement=Placement(start, size)))
    return rows


def capability_from_tables(product: str, rows: Sequence[LgipRow],
                           placements: Dict[int, Tuple[Placement, ...]]) -> Optional[MigCapability]:
    """One GPU's ``MigCapability`` from its ``-lgip`` rows and ``-lgipp`` placements; None when it lists none."""
    profiles = tuple(
        GiProfile(name=row.profile, id=row.id, slices=int(row.profile.split("g", 1)[0]), instances=row.total,
                  memory_mib=row.memory_mib, placements=placements.get(row.id, ()))
        for row in rows)
    return MigCapability(product=product, profiles=profiles) if profiles else None


class _Failed(Exception):
    """A command failed; ``args[0]`` is what to tell."""


def _run(run_command: RunCommand, argv: List[str], none_found_ok: bool = False) -> str:
    rc, out, err = run_tool(run_command, argv)
    if rc != 0:
        if none_found_ok and (_NONE_FOUND_RE.search(out[:4096]) or _NONE_FOUND_RE.search(err[:4096])):
            return ""
        raise _Failed(failure_text(argv, rc, out, err))
    if len(out) > MAX_OUTPUT_CHARS:
        raise _Failed("`%s`: output too large" % " ".join(argv))
    return out


def _mig_gpu(listed: Tuple[str, int, Optional[str]], queried: Optional[QueriedGpu], lgip: List[LgipRow],
             lgipp: Dict[int, Dict[int, Tuple[Placement, ...]]], lgi: List[LgiRow], lci: List[ComputeInstanceRow],
             uuids: Dict[Tuple[int, int], str]) -> MigGpu:
    gpu_uuid, index, product = listed
    mode = queried.mig_mode if queried else None
    pending = queried.mig_pending if queried and queried.mig_pending is not None else mode
    if mode is None:
        return MigGpu(uuid=gpu_uuid, index=index, product=product, mode=None, pending=pending)
    rows = [row for row in lgip if row.gpu == index] if mode else []
    # A GPU in MIG mode lists its own profiles (-lgip, -lgipp); one with MIG off lists none (nvidia-smi answers
    # "No MIG-enabled devices found"), so its capability is the catalog's for its product (node/mig_catalog.py),
    # or None when the catalog does not know it.
    capability = capability_from_tables(product or "", rows, lgipp.get(index, {})) or capability_for(product)
    instances: List[GpuInstance] = []
    if mode:  # a GPU whose MIG mode is off has no instances, whatever a stale table says
        for row in lgi:
            if row.gpu != index:
                continue
            compute = tuple(ComputeInstance(gi=ci.gi, ci=ci.ci, profile=ci.profile, uuid=uuids.get((ci.gi, ci.ci)))
                            for ci in sorted(lci, key=lambda c: c.ci) if ci.gpu == index and ci.gi == row.gi)
            instances.append(GpuInstance(gi=row.gi, profile=row.profile, placement=row.placement, compute=compute))
    return MigGpu(uuid=gpu_uuid, index=index, product=product, mode=mode, pending=pending, capability=capability,
                  instances=tuple(sorted(instances, key=lambda inst: inst.gi)))


def read_mig(run_command: RunCommand, inventory: Inventory) -> MigNode:
    """Every GPU of ``inventory`` with its MIG mode, pending mode, capability, instances, and the processes using
    GPUs (see the module docstring). Never raises: a command that fails gives ``MigNode(error=...)`` with
    nvidia-smi's words and no GPUs, as does an inventory that could not be read."""
    if inventory.error:
        return MigNode(source="none", error=inventory.error)
    if not inventory.gpus:
        return MigNode(source=SMI)
    try:
        queried = {q.uuid: q for q in parse_nvidia_smi_query_xml(_run(run_command, [SMI, "-q", "-x"]))}
        lgip: List[LgipRow] = []
        lgipp: Dict[int, Dict[int, Tuple[Placement, ...]]] = {}
        lgi: List[LgiRow] = []
        lci: List[ComputeInstanceRow] = []
        if any(q.mig_mode for q in queried.values()):
            lgip = parse_lgip(_run(run_command, [SMI, "mig", "-lgip"], none_found_ok=True))
            lgipp = parse_lgipp(_run(run_command, [SMI, "mig", "-lgipp"], none_found_ok=True))
            lgi = parse_lgi(_run(run_command, [SMI, "mig", "-lgi"], none_found_ok=True))
            lci = parse_nvidia_smi_mig_lci(_run(run_command, [SMI, "mig", "-lci"], none_found_ok=True))
        gpus: List[MigGpu] = []
        processes: List[GpuProcess] = []
        for gpu in sorted(inventory.gpus, key=lambda g: g.index):
            query = queried.get(gpu.uuid)
            uuids = {(inst.gi, inst.ci): inst.uuid for inst in gpu.mig}
            gpus.append(_mig_gpu((gpu.uuid, gpu.index, gpu.name or (query.name if query else None)), query,
                                 lgip, lgipp, lgi, lci, uuids))
            for pid, name, gi, ci in query.processes if query else ():
                processes.append(GpuProcess(gpu=gpu.uuid, pid=pid, name=name, gi=gi, ci=ci))
        return MigNode(gpus=gpus, processes=processes, source=SMI)
    except _Failed as exc:
        return MigNode(source=SMI, error=str(exc.args[0]))
    except InventoryError as exc:
        return MigNode(source=SMI, error=str(exc))
    except Exception as exc:  # a bug must not become a traceback on the node
        return MigNode(source=SMI, error="nvidia-smi MIG state could not be read: %s" % exc)


# --------------------------------------------------------------------------
# Command lines


def mode_argv(gpu_uuid: str, enabled: bool) -> List[str]:
    return [SMI, "-i", gpu_uuid, "-mig", "1" if enabled else "0"]


def create_gi_argv(index: int, profile_id: int, start: int) -> List[str]:
    return [SMI, "mig", "-i", str(index), "-cgi", "%d:%d" % (profile_id, start)]


def create_ci_argv(index: int, gi: int, ci_profile_id: int) -> List[str]:
    return [SMI, "mig", "-i", str(index), "-gi", str(gi), "-cci", str(ci_profile_id)]


def destroy_ci_argv(index: int, gi: int, ci: Optional[int] = None) -> List[str]:
    """One compute instance, or (``ci`` None) every compute instance of GPU instance ``gi``."""
    extra = ["-ci", str(ci)] if ci is not None else []
    return [SMI, "mig", "-i", str(index), "-gi", str(gi)] + extra + ["-dci"]


def destroy_gi_argv(index: int, gi: int) -> List[str]:
    return [SMI, "mig", "-i", str(index), "-gi", str(gi), "-dgi"]


def lgip_argv(index: int) -> List[str]:
    return [SMI, "mig", "-i", str(index), "-lgip"]


def lgi_argv(index: int) -> List[str]:
    return [SMI, "mig", "-i", str(index), "-lgi"]


# --------------------------------------------------------------------------
# Carrying out one op

_NOT_FOUND_RE = lazy_pattern(r"not found", re.IGNORECASE)


def _small(value: object) -> bool:
    return isinstance(value, int) and not isinstance(value, bool) and 0 <= value <= MAX_ID


def _said(argv: List[str], out: str) -> str:
    lines = [line.strip() for line in out[:4096].splitlines() if line.strip()]
    return "`%s` did not say what it made: %s" % (" ".join(argv), lines[0][:300] if lines else "no output")


def _new_uuids(run_command: RunCommand, gpu_uuid: str) -> Dict[Tuple[int, int], str]:
    """(gi, ci) -> MIG UUID of ``gpu_uuid``'s devices, from ``-L`` and ``-q -x`` read again (``-lci`` where those
    two disagree); empty when they cannot be read: the instances exist, only their UUIDs are not known."""
    try:
        listed = [g for g in parse_nvidia_smi_list(_run(run_command, [SMI, "-L"])) if g.uuid == gpu_uuid]
        ids = mig_ids_from_query(listed, parse_nvidia_smi_query_xml(_run(run_command, [SMI, "-q", "-x"])))
        if any(m.uuid not in ids and m.gi is None for g in listed for m in g.mig):
            lci = parse_nvidia_smi_mig_lci(_run(run_command, [SMI, "mig", "-lci"], none_found_ok=True))
            for uuid, pair in mig_ids_from_lci(listed, lci).items():
                ids.setdefault(uuid, pair)
    except (_Failed, InventoryError):
        return {}
    found = {pair: uuid for uuid, pair in ids.items()}
    for gpu in listed:
        for mig in gpu.mig:
            if mig.gi is not None and mig.ci is not None:
                found[(mig.gi, mig.ci)] = mig.uuid
    return found


def _undo(run_command: RunCommand, index: int, gi: int, made_gi: bool, made_cis: List[int]) -> str:
    """Destroy what a failed create made: its compute instances, and the GPU instance when the op made it."""
    try:
        for ci in reversed(made_cis):
            _run(run_command, destroy_ci_argv(index, gi, ci))
        if made_gi:
            _run(run_command, destroy_gi_argv(index, gi))
    except _Failed as exc:
        return "; what it made could not be destroyed again: %s" % exc.args[0]
    if made_gi:
        return "; the GPU instance %d it made was destroyed again" % gi
    return "; the compute instances it made were destroyed again" if made_cis else ""


def _create(run_command: RunCommand, gpu_uuid: str, index: int, op: MigOp) -> MigDone:
    profile = op.profile if isinstance(op.profile, str) else ""
    if op.gi is not None:  # compute instances only, in a GPU instance that exists: -lgi says its profile
        if not _small(op.gi):
            return MigDone(op=op, error="create: GPU instance %r is not an id" % (op.gi,))
        have = [row for row in parse_lgi(_run(run_command, lgi_argv(index))) if row.gi == op.gi]
        if not have or (profile and have[0].profile != profile):
            return MigDone(op=op, error="create: GPU %s has no GPU instance %d%s" % (
                gpu_uuid, op.gi, " of profile " + profile if profile else ""))
        profile = have[0].profile
    if _profile_name(profile) is None:
        return MigDone(op=op, error="create: %r is not a GPU instance profile name" % (op.profile,))
    profile_id = -1
    if op.gi is None:  # a new GPU instance: its profile id is the one this GPU's -lgip gives the name
        if not _small(op.placement):
            return MigDone(op=op, error="create: placement %r is not a start slice" % (op.placement,))
        rows = [row for row in parse_lgip(_run(run_command, lgip_argv(index))) if row.profile == profile]
        if not rows:
            return MigDone(op=op, error="create: %s is not a profile GPU %s lists (nvidia-smi mig -lgip)"
                           % (profile, gpu_uuid))
        profile_id = rows[0].id
    gi_profile = GiProfile(name=profile, id=0, slices=int(profile.split("g", 1)[0]), instances=0, memory_mib=0)
    names = tuple(op.compute) or (profile,)
    if len(names) > 16:
        return MigDone(op=op, error="create: more than 16 compute instances asked for in one GPU instance")
    ci_ids: List[int] = []
    for name in names:
        slices = ci_slices(name, gi_profile) if isinstance(name, str) else None
        if slices is None or slices not in CI_PROFILE_IDS:
            return MigDone(op=op, error="create: %r is not a compute instance profile of %s" % (name, profile))
        ci_ids.append(CI_PROFILE_IDS[slices])
    if op.gi is None:
        argv = create_gi_argv(index, profile_id, int(op.placement or 0))
        out = _run(run_command, argv)
        match = _CREATED_GI_RE.search(out[:4096])
        if not match or int(match.group(2)) != index:
            return MigDone(op=op, error=_said(argv, out))
        gi, made_gi = int(match.group(1)), True
    else:
        gi, made_gi = int(op.gi), False
    made: List[int] = []
    for ci_id in ci_ids:
        argv = create_ci_argv(index, gi, ci_id)
        rc, out, err = run_tool(run_command, argv)
        match = _CREATED_CI_RE.search(out[:4096]) if rc == 0 else None
        if match is None or int(match.group(3)) != gi:
            why = failure_text(argv, rc, out, err) if rc != 0 else _said(argv, out)
            return MigDone(op=op, error=why + _undo(run_command, index, gi, made_gi, made))
        made.append(int(match.group(1)))
    try:
        placed = [row for row in parse_lgi(_run(run_command, lgi_argv(index))) if row.gi == gi]
    except _Failed:
        placed = []
    placement = placed[0].placement if placed else Placement(int(op.placement or 0), 0)
    uuids = _new_uuids(run_command, gpu_uuid)
    compute = tuple(ComputeInstance(gi=gi, ci=ci, profile=name, uuid=uuids.get((gi, ci)))
                    for ci, name in zip(made, names))
    return MigDone(op=op, made=GpuInstance(gi=gi, profile=profile, placement=placement, compute=compute))


def _destroy(run_command: RunCommand, index: int, op: MigOp) -> MigDone:
    if not _small(op.gi) or (op.ci is not None and not _small(op.ci)):
        return MigDone(op=op, error="destroy: GPU instance %r, compute instance %r are not ids" % (op.gi, op.ci))
    gi = int(op.gi or 0)
    if op.ci is not None:
        _run(run_command, destroy_ci_argv(index, gi, int(op.ci)))
        return MigDone(op=op)
    argv = destroy_ci_argv(index, gi)
    rc, out, err = run_tool(run_command, argv)
    # a GPU instance without compute instances: nvidia-smi says none were found; -dgi then tells the truth
    if rc != 0 and not (_NOT_FOUND_RE.search(out[:4096]) or _NOT_FOUND_RE.search(err[:4096])):
        return MigDone(op=op, error=failure_text(argv, rc, out, err))
    _run(run_command, destroy_gi_argv(index, gi))
    return MigDone(op=op)


def apply_mig(run_command: RunCommand, inventory: Inventory, op: MigOp) -> MigDone:
    """Carry out ``op`` (see the module docstring for the command lines). Never raises: what nvidia-smi refused
    is ``MigDone.error`` in its own words. The GPU is ``op.gpu`` looked up in ``inventory``; the index nvidia-smi
    mig takes is that GPU's, and a UUID the inventory does not list is refused by name."""
    try:
        gpu = inventory.gpu(op.gpu) if isinstance(op.gpu, str) else None
        if gpu is None:
            return MigDone(op=op, error="GPU %s is not one of the node's GPUs" % str(op.gpu)[:100])
        if op.kind == "mode":
            if not isinstance(op.enabled, bool):
                return MigDone(op=op, error="mode: enabled must be true or false")
            _run(run_command, mode_argv(gpu.uuid, op.enabled))
            return MigDone(op=op)
        if op.kind == "destroy":
            return _destroy(run_command, gpu.index, op)
        if op.kind == "create":
            return _create(run_command, gpu.uuid, gpu.index, op)
        return MigDone(op=op, error="unknown MIG op %r" % str(op.kind)[:40])
    except _Failed as exc:
        return MigDone(op=op, error=str(exc.args[0]))
    except Exception as exc:  # a bug must not become a traceback on the node
        return MigDone(op=op, error="nvidia-smi MIG change failed: %s" % exc)
