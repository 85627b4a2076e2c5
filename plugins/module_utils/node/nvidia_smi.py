# -*- coding: utf-8 -*-
# Copyright: contributors to bcd.devices
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""The GPUs as ``nvidia-smi`` lists them, with MIG devices only where their ids are certain.

``nvidia-smi -L`` gives GPU index, name, UUID and the MIG devices with their UUIDs and "Device N"
index, which is the MIG device index, not a GI id. Modern UUIDs (``MIG-<uuid>``) carry no GI/CI;
legacy ones (``MIG-GPU-<uuid>/<GI>/<CI>``, drivers before R470) do. ``nvidia-smi -q -x`` gives, per
GPU UUID, the minor number, the PCI bus id, each MIG device's index with its GI and CI ids, and the
driver's health state that NVML gives too (page retirement pending, row remapping failed or pending:
``domain/health.py``); joining the two on (GPU UUID, MIG device index) maps each modern MIG UUID to
its GI/CI. When that fails, ``nvidia-smi mig -lci`` (GPU index, GI, CI, profile, no UUID) is used
for the devices it pins down unambiguously: a profile that occurs exactly once on the GPU in both
lists.

The parsers take text; the reader takes its runner and ``which`` as parameters.
"""

from __future__ import annotations

import re
import shutil
import xml.etree.ElementTree as ET
from typing import Callable, Dict, List, Optional, Set, Tuple

from ansible_collections.bcd.devices.plugins.module_utils.domain.health import problems
from ansible_collections.bcd.devices.plugins.module_utils.domain.inventory_model import Gpu, Inventory, MigInstance, normalize_pci_address
from ansible_collections.bcd.devices.plugins.module_utils.node.commands import (
    MAX_OUTPUT_CHARS,
    InventoryError,
    RunCommand,
    Which,
    default_run_command,
    failure_text,
    first_line,
    parse_xml,
    run_tool,
    xml_int,
    xml_text,
)
from ansible_collections.bcd.devices.plugins.module_utils.node.sysfs_pci import read_numa_node
from ansible_collections.bcd.devices.plugins.module_utils.support.records import record
from ansible_collections.bcd.devices.plugins.module_utils.support.speed import lazy_pattern

# --------------------------------------------------------------------------
# nvidia-smi -L


@record(frozen=True)
class ListedMig:
    """A MIG device as ``nvidia-smi -L`` prints it.

    ``device`` is the "Device N" number: the MIG device index on its GPU (the
    key to join with ``nvidia-smi -q -x``), not the GPU instance id. ``gi``
    and ``ci`` are set only for a legacy ``MIG-GPU-<uuid>/<GI>/<CI>`` UUID.
    """

    device: int
    uuid: str
    profile: str
    gi: Optional[int] = None
    ci: Optional[int] = None


@record(frozen=True)
class ListedGpu:
    """A GPU as ``nvidia-smi -L`` prints it, with its MIG devices."""

    index: int
    name: str
    uuid: str
    mig: Tuple[ListedMig, ...] = ()


_GPU_LINE_RE = lazy_pattern(r"^GPU\s+(\d+)\s*:\s*(.*?)\s*\(UUID:\s*(GPU-[^\s()]+)\s*\)\s*$")
_MIG_LINE_RE = lazy_pattern(
    r"^MIG\s+(\S+)\s+Device\s+(\d+)\s*:\s*\(UUID:\s*(MIG-[^\s()]+)\s*\)\s*$"
)
_LEGACY_MIG_RE = lazy_pattern(r"^MIG-(GPU-[^/\s]+)/(\d+)/(\d+)$")


def parse_nvidia_smi_list(text: str) -> List[ListedGpu]:
    """Parse ``nvidia-smi -L`` into GPUs and their MIG devices.

    Tolerates CRLF and varying spacing; ignores lines it does not know
    (``No devices were found``, warnings). A MIG line before any GPU line, a
    repeated GPU or MIG UUID, or a legacy MIG UUID naming another GPU is
    dropped. Legacy UUIDs give ``gi``/``ci``; modern ones leave them None.
    """
    gpus: List[ListedGpu] = []
    current: Optional[Tuple[int, str, str]] = None
    migs: List[ListedMig] = []
    seen: Set[str] = set()

    def flush() -> None:
        if current is not None:
            gpus.append(ListedGpu(index=current[0], name=current[1], uuid=current[2], mig=tuple(migs)))

    for raw in (text or "").splitlines():
        line = raw.strip()
        if not line:
            continue
        gpu_match = _GPU_LINE_RE.match(line)
        if gpu_match:
            flush()
            migs = []
            uuid = gpu_match.group(3)
            if uuid in seen:
                current = None
                continue
            seen.add(uuid)
            current = (int(gpu_match.group(1)), gpu_match.group(2), uuid)
            continue
        mig_match = _MIG_LINE_RE.match(line)
        if not mig_match or current is None:
            continue
        uuid = mig_match.group(3)
        if uuid in seen:
            continue
        gi = ci = None
        legacy = _LEGACY_MIG_RE.match(uuid)
        if legacy:
            if legacy.group(1) != current[2]:
                continue  # names another GPU: not trustworthy
            gi, ci = int(legacy.group(2)), int(legacy.group(3))
        elif "/" in uuid:
            continue
        seen.add(uuid)
        migs.append(ListedMig(device=int(mig_match.group(2)), uuid=uuid,
                              profile=mig_match.group(1), gi=gi, ci=ci))
    flush()
    return gpus


def _to_gpu(listed: ListedGpu, mig: List[MigInstance], minor: Optional[int] = None, pci_bus_id: Optional[str] = None,
            numa_node: Optional[int] = None, health: Tuple[str, ...] = ()) -> Gpu:
    unique: Dict[Tuple[int, int], MigInstance] = {}
    for inst in mig:
        unique.setdefault((inst.gi, inst.ci), inst)
    return Gpu(
        uuid=listed.uuid,
        index=listed.index,
        minor=minor,
        numa_node=numa_node,
        pci_bus_id=pci_bus_id,
        name=listed.name or None,
        mig=tuple(unique[key] for key in sorted(unique)),
        health=health,
    )


# --------------------------------------------------------------------------
# nvidia-smi -q -x


@record(frozen=True)
class QueriedGpu:
    """One ``<gpu>`` of ``nvidia-smi -q -x``: what ``-L`` lacks.

    ``mig_devices`` maps the MIG device index to ``(gi, ci)``. ``health``: the
    problems ``domain/health.problems`` gives for the driver's own state, as
    NVML's reader builds them; empty when nothing is wrong or nothing is known.
    """

    uuid: str
    pci_bus_id: Optional[str] = None
    minor: Optional[int] = None
    name: Optional[str] = None
    mig_devices: Tuple[Tuple[int, int, int], ...] = ()  # (index, gi, ci)
    health: Tuple[str, ...] = ()  # domain/health.problems
    mig_mode: Optional[bool] = None  # <mig_mode><current_mig>: None when N/A (no MIG) or absent
    mig_pending: Optional[bool] = None  # <pending_mig>: the mode after the next reset
    processes: Tuple[Tuple[int, str, Optional[int], Optional[int]], ...] = ()  # (pid, name, gi, ci)

    def mig_map(self) -> Dict[int, Tuple[int, int]]:
        return {index: (gi, ci) for index, gi, ci in self.mig_devices}


def _yes(gpu: ET.Element, *paths: str) -> bool:
    """Whether any of ``paths`` under ``gpu`` reads exactly ``Yes``. ``No``, ``N/A``, a missing element or
    any other text is not a fault: it is not known to be one."""
    return any(xml_text(gpu, path) == "Yes" for path in paths)


def _query_health(gpu: ET.Element) -> Tuple[str, ...]:
    """The driver's own health state as ``nvidia-smi -q -x`` prints it, NVML's facts under their XML names:
    ``retired_pages/pending_retirement`` (``pending_blacklist`` on older drivers) is
    ``nvmlDeviceGetRetiredPagesPendingStatus``; ``remapped_rows/remapped_row_failure`` and
    ``remapped_row_pending`` are ``nvmlDeviceGetRemappedRows``' ``failureOccurred`` and ``isPending``."""
    return problems(
        retired_pages_pending=_yes(gpu, "retired_pages/pending_retirement", "retired_pages/pending_blacklist"),
        row_remap_failure=_yes(gpu, "remapped_rows/remapped_row_failure"),
        row_remap_pending=_yes(gpu, "remapped_rows/remapped_row_pending"),
    )


def _mig_mode(gpu: ET.Element, path: str) -> Optional[bool]:
    return {"Enabled": True, "Disabled": False}.get(xml_text(gpu, path) or "")


def _query_processes(gpu: ET.Element) -> Tuple[Tuple[int, str, Optional[int], Optional[int]], ...]:
    """``<processes><process_info>``: pid, name and, on a MIG device, its GPU and compute instance ids."""
    found: List[Tuple[int, str, Optional[int], Optional[int]]] = []
    for proc in gpu.findall("processes/process_info"):
        pid = xml_int(proc, "pid")
        if pid is not None:
            found.append((pid, (xml_text(proc, "process_name") or "")[:256], xml_int(proc, "gpu_instance_id"),
                          xml_int(proc, "compute_instance_id")))
    return tuple(found)


def parse_nvidia_smi_query_xml(text: str) -> List[QueriedGpu]:
    """Parse ``nvidia-smi -q -x``: per GPU its UUID, PCI bus id (normalised,
    see ``normalize_pci_address``), minor number and MIG devices
    (``<mig_device><index>``, ``<gpu_instance_id>``, ``<compute_instance_id>``),
    its health (``_query_health``: only a ``Yes`` is a fault), its MIG mode now and
    pending, and the processes using it (``node/mig_smi.py`` reads these two).

    Raises ``InventoryError`` when the text is not XML of that shape. A GPU
    without a ``GPU-`` UUID and a MIG device without all three numbers are
    skipped.
    """
    root = parse_xml(text, "nvidia-smi -q -x")
    if root.tag != "nvidia_smi_log":
        raise InventoryError("nvidia-smi -q -x: unexpected root element <%s>" % root.tag)
    result: List[QueriedGpu] = []
    for gpu in root.findall("gpu"):
        uuid = xml_text(gpu, "uuid")
        if not uuid or not uuid.startswith("GPU-") or any(c.isspace() for c in uuid):
            continue
        pci = normalize_pci_address(xml_text(gpu, "pci/pci_bus_id")) or normalize_pci_address(
            gpu.get("id")
        )
        migs = []
        seen_index = set()
        for mig in gpu.findall("mig_devices/mig_device"):
            index = xml_int(mig, "index")
            gi = xml_int(mig, "gpu_instance_id")
            ci = xml_int(mig, "compute_instance_id")
            if index is None or gi is None or ci is None or index in seen_index:
                continue
            seen_index.add(index)
            migs.append((index, gi, ci))
        result.append(
            QueriedGpu(
                uuid=uuid,
                pci_bus_id=pci,
                minor=xml_int(gpu, "minor_number"),
                name=xml_text(gpu, "product_name"),
                mig_devices=tuple(sorted(migs)),
                health=_query_health(gpu),
                mig_mode=_mig_mode(gpu, "mig_mode/current_mig"),
                mig_pending=_mig_mode(gpu, "mig_mode/pending_mig"),
                processes=_query_processes(gpu),
            )
        )
    return result


# --------------------------------------------------------------------------
# nvidia-smi mig -lci


@record(frozen=True)
class ComputeInstanceRow:
    """One row of ``nvidia-smi mig -lci``. There is no UUID in this table."""

    gpu: int  # GPU index, as in nvidia-smi -L
    gi: int
    ci: int
    profile: str  # e.g. "4g.40gb" (the "MIG " prefix removed)
    profile_id: int


_LCI_ROW_RE = lazy_pattern(
    r"^\|\s*(\d+)\s+(\d+)\s+MIG\s+(\S+)\s+(\d+)\s+(\d+)(?:\s+\d+:\d+)?\s*\|$"
)


def parse_nvidia_smi_mig_lci(text: str) -> List[ComputeInstanceRow]:
    """Parse the ``nvidia-smi mig -lci`` table (columns GPU, GPU instance id,
    name, profile id, compute instance id, placement). Header, ruler and
    unknown lines are ignored; "No compute instances found" gives []."""
    rows: List[ComputeInstanceRow] = []
    seen = set()
    for raw in (text or "").splitlines():
        match = _LCI_ROW_RE.match(raw.strip())
        if not match:
            continue
        gpu, gi, profile_id, ci = (int(match.group(i)) for i in (1, 2, 4, 5))
        if (gpu, gi, ci) in seen:
            continue
        seen.add((gpu, gi, ci))
        rows.append(ComputeInstanceRow(gpu=gpu, gi=gi, ci=ci, profile=match.group(3), profile_id=profile_id))
    return rows


# --------------------------------------------------------------------------
# Joining


def mig_ids_from_query(listed: List[ListedGpu], queried: List[QueriedGpu]) -> Dict[str, Tuple[int, int]]:
    """MIG UUID -> (gi, ci) by joining ``-L`` and ``-q -x`` on (GPU UUID, MIG
    device index).

    A GPU whose two listings disagree on the set of MIG device indexes (MIG
    was reconfigured between the two commands) contributes nothing.
    """
    by_uuid = {q.uuid: q for q in queried}
    ids: Dict[str, Tuple[int, int]] = {}
    for gpu in listed:
        query = by_uuid.get(gpu.uuid)
        if query is None:
            continue
        mig_map = query.mig_map()
        if set(mig_map) != {m.device for m in gpu.mig}:
            continue
        for mig in gpu.mig:
            ids[mig.uuid] = mig_map[mig.device]
    return ids


def mig_ids_from_lci(listed: List[ListedGpu], rows: List[ComputeInstanceRow]) -> Dict[str, Tuple[int, int]]:
    """MIG UUID -> (gi, ci) from ``-L`` and ``mig -lci``, only where certain.

    The table has no UUID, so a device is placed only when the GPU has as
    many compute instances in the table as MIG devices in ``-L`` and the
    device's profile occurs exactly once on that GPU in both.
    """
    ids: Dict[str, Tuple[int, int]] = {}
    for gpu in listed:
        table = [r for r in rows if r.gpu == gpu.index]
        if not gpu.mig or len(table) != len(gpu.mig):
            continue
        for mig in gpu.mig:
            same_listed = [m for m in gpu.mig if m.profile == mig.profile]
            same_table = [r for r in table if r.profile == mig.profile]
            if len(same_listed) == 1 and len(same_table) == 1:
                ids[mig.uuid] = (same_table[0].gi, same_table[0].ci)
    return ids


def join_mig_ids(listed: List[ListedGpu], mig_ids: Dict[str, Tuple[int, int]], queried: Optional[List[QueriedGpu]] = None,
                 numa: Optional[Callable[[Optional[str]], Optional[int]]] = None) -> List[Gpu]:
    """Build ``Gpu`` objects from ``-L`` GPUs, a MIG UUID -> (gi, ci) map,
    and optionally ``-q -x`` data (minor number, PCI bus id, health).

    A MIG device gets its ids from its legacy UUID, else from ``mig_ids``;
    one with neither is left out of ``Gpu.mig``. ``numa(pci_bus_id)`` gives
    the NUMA node when supplied.
    """
    by_uuid = {q.uuid: q for q in (queried or [])}
    gpus = []
    for gpu in listed:
        mig: List[MigInstance] = []
        for dev in gpu.mig:
            # a legacy UUID gives both ids or neither
            ids = (dev.gi, dev.ci) if dev.gi is not None and dev.ci is not None else mig_ids.get(dev.uuid)
            if ids is not None:
                mig.append(MigInstance(gi=ids[0], ci=ids[1], uuid=dev.uuid))
        query = by_uuid.get(gpu.uuid)
        pci = query.pci_bus_id if query else None
        gpus.append(
            _to_gpu(
                gpu,
                mig,
                minor=query.minor if query else None,
                pci_bus_id=pci,
                numa_node=numa(pci) if (numa and pci) else None,
                health=query.health if query else (),
            )
        )
    return gpus


# --------------------------------------------------------------------------
# Readers


_NO_DEVICES_RE = lazy_pattern(r"no devices were found", re.IGNORECASE)


def read_nvidia_smi_inventory(run_command: Optional[RunCommand] = None, which: Optional[Which] = None,
                              sysfs_root: str = "/") -> Inventory:
    """The inventory from ``nvidia-smi`` (see the module docstring for the
    commands and how they are joined). Never raises; ``error`` says why the
    GPUs could not be listed. Missing extras (minor, PCI, some MIG ids) do not
    make it an error: those fields stay empty and such MIG devices are left
    out."""
    run_command = run_command or default_run_command
    which = which or shutil.which
    try:
        if not which("nvidia-smi"):
            return Inventory(gpus=[], source="none", error="nvidia-smi not found on PATH")
        argv = ["nvidia-smi", "-L"]
        rc, out, err = run_tool(run_command, argv)
        if rc != 0:
            if _NO_DEVICES_RE.search(out) or _NO_DEVICES_RE.search(err):
                return Inventory(gpus=[], source="nvidia-smi")
            return Inventory(gpus=[], source="none", error=failure_text(argv, rc, out, err))
        if len(out) > MAX_OUTPUT_CHARS:
            return Inventory(gpus=[], source="none", error="`nvidia-smi -L`: output too large")
        listed = parse_nvidia_smi_list(out)
        if not listed and out.strip() and not _NO_DEVICES_RE.search(out):
            return Inventory(
                gpus=[], source="none",
                error="`nvidia-smi -L`: no GPU line understood in: %s" % first_line(out),
            )
        queried: List[QueriedGpu] = []
        rc, out, err = run_tool(run_command, ["nvidia-smi", "-q", "-x"])
        if rc == 0:
            try:
                queried = parse_nvidia_smi_query_xml(out)
            except InventoryError:
                queried = []
        mig_ids = mig_ids_from_query(listed, queried)
        unplaced = [m for g in listed for m in g.mig if m.gi is None and m.uuid not in mig_ids]
        if unplaced:
            rc, out, err = run_tool(run_command, ["nvidia-smi", "mig", "-lci"])
            if rc == 0:
                for uuid, ids in mig_ids_from_lci(listed, parse_nvidia_smi_mig_lci(out)).items():
                    mig_ids.setdefault(uuid, ids)
        gpus = join_mig_ids(listed, mig_ids, queried, numa=lambda pci: read_numa_node(pci, sysfs_root))
        return Inventory(gpus=gpus, source="nvidia-smi")
    except Exception as exc:  # a bug must not become a traceback on the node
        return Inventory(gpus=[], source="none", error="nvidia-smi inventory failed: %s" % exc)
