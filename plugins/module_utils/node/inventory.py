# -*- coding: utf-8 -*-
# Copyright: contributors to bcd.devices
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""Read a real node's GPUs (NVML or ``nvidia-smi``) and its libvirt domains.

Atoms are resolved against an ``Inventory``, so this module decides what a
real host "has". Its rule: report only what is certain. A GPU is listed when
the driver lists it; a MIG device is listed (as ``gi``/``ci``) only when its
GPU instance and compute instance ids are known for sure. A MIG device whose
ids cannot be determined is left out of ``Gpu.mig``: it cannot be held as a
``<gpu>/gi<N>/ci<M>`` atom, so binding it is refused as a missing device
rather than guessed at.

Sources, most reliable first:

* NVML (``pynvml`` from the ``nvidia-ml-py`` package), when importable: the
  ids come straight from ``nvmlDeviceGetGpuInstanceId`` and
  ``nvmlDeviceGetComputeInstanceId`` on each MIG device handle.
* ``nvidia-smi``: ``nvidia-smi -L`` gives GPU index, name, UUID and the MIG
  devices with their UUIDs and "Device N" index, which is the MIG device
  index, not a GI id. Modern UUIDs (``MIG-<uuid>``) carry no GI/CI; legacy
  ones (``MIG-GPU-<uuid>/<GI>/<CI>``, drivers before R470) do.
  ``nvidia-smi -q -x`` gives, per GPU UUID, the minor number, the PCI bus id
  and each MIG device's index with its GI and CI ids; joining the two on
  (GPU UUID, MIG device index) maps each modern MIG UUID to its GI/CI. When
  that fails, ``nvidia-smi mig -lci`` (GPU index, GI, CI, profile, no UUID)
  is used for the devices it pins down unambiguously: a profile that occurs
  exactly once on the GPU in both lists.

Everything here is pure (parsers take text) or takes its side effects as
parameters (``run_command``, ``which``, the NVML module, ``sysfs_root``), so
it is testable without a GPU. The standard library only; no Ansible.
"""

from __future__ import annotations

import dataclasses
import errno
import os
import re
import shutil
import subprocess
import time
import xml.etree.ElementTree as ET
from dataclasses import dataclass
from typing import Any, Callable, Dict, List, Optional, Sequence, Tuple, Union

from ansible_collections.bcd.devices.plugins.module_utils.domain.errors import BcdError
from ansible_collections.bcd.devices.plugins.module_utils.domain.health import MAX_LOG_BYTES, bus_of, problems, xids_from_log
from ansible_collections.bcd.devices.plugins.module_utils.domain.inventory_model import (  # also re-exported: the tests reach them through this module
    Domain,
    Gpu,
    Inventory,
    MigInstance,
    format_pci_address,
    normalize_pci_address,
)
from ansible_collections.bcd.devices.plugins.module_utils.node.fsutil import FsError, join_root

try:
    import pynvml as _pynvml  # the nvidia-ml-py package

    HAS_PYNVML = True
except Exception:  # ImportError, or a broken install: nvidia-smi is asked instead
    _pynvml = None
    HAS_PYNVML = False


# An injected runner may return bytes (AnsibleModule.run_command with encoding=None): _run decodes them.
RunCommand = Callable[[Sequence[str]], Tuple[int, Union[str, bytes], Union[str, bytes]]]
Which = Callable[[str], Optional[str]]

COMMAND_TIMEOUT_S = 60
# Output larger than this is not a GPU listing; refuse it rather than parse it.
MAX_OUTPUT_CHARS = 16 * 1024 * 1024


class InventoryError(BcdError):
    """Output of a GPU or libvirt tool that cannot be understood. The message
    says what and is fit to show to a user."""


# --------------------------------------------------------------------------
# Running commands


def default_run_command(argv):
    # type: (Sequence[str]) -> Tuple[int, str, str]
    """Run ``argv`` without a shell; return ``(rc, stdout, stderr)``.

    Never raises: a missing program is rc 127, a timeout rc 124, any other
    start failure rc 126, each with the reason in stderr.
    """
    try:
        # bcd-holds runs this code too, with no AnsibleModule and so no run_command (ansible-test 2.21's pylint).
        proc = subprocess.run(  # pylint: disable=ansible-bad-function
            list(argv),
            stdin=subprocess.DEVNULL,
            capture_output=True,
            timeout=COMMAND_TIMEOUT_S,
            check=False,
            env=dict(os.environ, LC_ALL="C"),  # messages are matched in English
        )
    except FileNotFoundError as exc:
        return 127, "", "%s: not found (%s)" % (argv[0], exc)
    except subprocess.TimeoutExpired:
        return 124, "", "%s: timed out after %d s" % (argv[0], COMMAND_TIMEOUT_S)
    except (OSError, ValueError) as exc:
        return 126, "", "%s: cannot run (%s)" % (argv[0], exc)
    out = proc.stdout.decode("utf-8", "replace")
    err = proc.stderr.decode("utf-8", "replace")
    return proc.returncode, out, err


def _run(run_command, argv):
    # type: (RunCommand, Sequence[str]) -> Tuple[int, str, str]
    """``run_command`` that cannot raise and always returns text."""
    try:
        rc, out, err = run_command(list(argv))
    except Exception as exc:  # an injected runner that raised
        return 126, "", "%s: cannot run (%s)" % (argv[0], exc)
    if isinstance(out, bytes):
        out = out.decode("utf-8", "replace")
    if isinstance(err, bytes):
        err = err.decode("utf-8", "replace")
    return rc, out or "", err or ""


def _first_line(text, limit=300):
    # type: (str, int) -> str
    for line in (text or "").splitlines():
        line = line.strip()
        if line:
            return line[:limit]
    return ""


def _failure(argv, rc, out, err):
    # type: (Sequence[str], int, str, str) -> str
    reason = _first_line(err) or _first_line(out) or "no output"
    return "`%s` failed (rc %s): %s" % (" ".join(argv), rc, reason)


# --------------------------------------------------------------------------
# PCI addresses


def _libvirt_number(value):
    # type: (Optional[str]) -> Optional[int]
    """libvirt writes PCI address parts as ``0x3b``; decimal is accepted too."""
    if value is None:
        return None
    value = value.strip()
    try:
        if value[:2].lower() == "0x":
            return int(value[2:], 16)
        return int(value, 10)
    except ValueError:
        return None


def pci_address_from_libvirt(domain, bus, slot, function):
    # type: (Optional[str], Optional[str], Optional[str], Optional[str]) -> Optional[str]
    """A libvirt ``<address domain= bus= slot= function=>`` as ``0000:3b:00.0``;
    None when a part is missing or out of range (``domain`` defaults to 0)."""
    parts = [
        _libvirt_number(domain) if domain is not None else 0,
        _libvirt_number(bus),
        _libvirt_number(slot),
        _libvirt_number(function),
    ]
    d, b, s, f = parts
    if d is None or b is None or s is None or f is None or min(d, b, s, f) < 0:
        return None
    if d > 0xFFFFFFFF or b > 0xFF or s > 0x1F or f > 0x7:
        return None
    return format_pci_address(d, b, s, f)


def read_numa_node(pci_bus_id, sysfs_root="/"):
    # type: (Optional[str], str) -> Optional[int]
    """The NUMA node of a PCI device from ``/sys/bus/pci/devices/<addr>/numa_node``
    (under ``sysfs_root``); None when unknown (no file, or ``-1``)."""
    address = normalize_pci_address(pci_bus_id)
    if address is None:
        return None
    path = os.path.join(sysfs_root, "sys", "bus", "pci", "devices", address, "numa_node")
    try:
        with open(path) as handle:
            value = int(handle.read(64).strip())
    except (OSError, ValueError):
        return None
    return value if value >= 0 else None


# --------------------------------------------------------------------------
# nvidia-smi -L


@dataclass(frozen=True)
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


@dataclass(frozen=True)
class ListedGpu:
    """A GPU as ``nvidia-smi -L`` prints it, with its MIG devices."""

    index: int
    name: str
    uuid: str
    mig: tuple = ()  # of ListedMig


_GPU_LINE_RE = re.compile(r"^GPU\s+(\d+)\s*:\s*(.*?)\s*\(UUID:\s*(GPU-[^\s()]+)\s*\)\s*$")
_MIG_LINE_RE = re.compile(
    r"^MIG\s+(\S+)\s+Device\s+(\d+)\s*:\s*\(UUID:\s*(MIG-[^\s()]+)\s*\)\s*$"
)
_LEGACY_MIG_RE = re.compile(r"^MIG-(GPU-[^/\s]+)/(\d+)/(\d+)$")


def parse_nvidia_smi_list(text):
    # type: (str) -> List[ListedGpu]
    """Parse ``nvidia-smi -L`` into GPUs and their MIG devices.

    Tolerates CRLF and varying spacing; ignores lines it does not know
    (``No devices were found``, warnings). A MIG line before any GPU line, a
    repeated GPU or MIG UUID, or a legacy MIG UUID naming another GPU is
    dropped. Legacy UUIDs give ``gi``/``ci``; modern ones leave them None.
    """
    gpus = []  # type: List[ListedGpu]
    current = None  # type: Optional[Tuple[int, str, str]]
    migs = []  # type: List[ListedMig]
    seen = set()

    def flush():
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


def _to_gpu(listed, mig, minor=None, pci_bus_id=None, numa_node=None):
    # type: (ListedGpu, List[MigInstance], Optional[int], Optional[str], Optional[int]) -> Gpu
    unique = {}  # type: Dict[Tuple[int, int], MigInstance]
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
    )


# --------------------------------------------------------------------------
# nvidia-smi -q -x


@dataclass(frozen=True)
class QueriedGpu:
    """One ``<gpu>`` of ``nvidia-smi -q -x``: what ``-L`` lacks.

    ``mig_devices`` maps the MIG device index to ``(gi, ci)``.
    """

    uuid: str
    pci_bus_id: Optional[str] = None
    minor: Optional[int] = None
    name: Optional[str] = None
    mig_devices: Tuple[Tuple[int, int, int], ...] = ()  # (index, gi, ci)

    def mig_map(self):
        # type: () -> Dict[int, Tuple[int, int]]
        return {index: (gi, ci) for index, gi, ci in self.mig_devices}


def _xml_int(element, path):
    # type: (ET.Element, str) -> Optional[int]
    found = element.find(path)
    if found is None or found.text is None:
        return None
    text = found.text.strip()
    if not text.isdigit():  # "N/A", "Not Supported", hostile text
        return None
    return int(text)


def _xml_text(element, path):
    # type: (ET.Element, str) -> Optional[str]
    found = element.find(path)
    if found is None or found.text is None:
        return None
    return found.text.strip() or None


def _parse_xml(text, what):
    # type: (str, str) -> ET.Element
    if len(text or "") > MAX_OUTPUT_CHARS:
        raise InventoryError("%s: output too large" % what)
    # nvidia-smi names a DTD in a DOCTYPE; ElementTree never fetches it.
    try:
        return ET.fromstring(text or "")
    except ET.ParseError as exc:
        raise InventoryError("%s: not well-formed XML (%s)" % (what, exc))
    except (ValueError, RecursionError) as exc:
        raise InventoryError("%s: unreadable XML (%s)" % (what, exc))


def parse_nvidia_smi_query_xml(text):
    # type: (str) -> List[QueriedGpu]
    """Parse ``nvidia-smi -q -x``: per GPU its UUID, PCI bus id (normalised,
    see ``normalize_pci_address``), minor number and MIG devices
    (``<mig_device><index>``, ``<gpu_instance_id>``, ``<compute_instance_id>``).

    Raises ``InventoryError`` when the text is not XML of that shape. A GPU
    without a ``GPU-`` UUID and a MIG device without all three numbers are
    skipped.
    """
    root = _parse_xml(text, "nvidia-smi -q -x")
    if root.tag != "nvidia_smi_log":
        raise InventoryError("nvidia-smi -q -x: unexpected root element <%s>" % root.tag)
    result = []  # type: List[QueriedGpu]
    for gpu in root.findall("gpu"):
        uuid = _xml_text(gpu, "uuid")
        if not uuid or not uuid.startswith("GPU-") or any(c.isspace() for c in uuid):
            continue
        pci = normalize_pci_address(_xml_text(gpu, "pci/pci_bus_id")) or normalize_pci_address(
            gpu.get("id")
        )
        migs = []
        seen_index = set()
        for mig in gpu.findall("mig_devices/mig_device"):
            index = _xml_int(mig, "index")
            gi = _xml_int(mig, "gpu_instance_id")
            ci = _xml_int(mig, "compute_instance_id")
            if index is None or gi is None or ci is None or index in seen_index:
                continue
            seen_index.add(index)
            migs.append((index, gi, ci))
        result.append(
            QueriedGpu(
                uuid=uuid,
                pci_bus_id=pci,
                minor=_xml_int(gpu, "minor_number"),
                name=_xml_text(gpu, "product_name"),
                mig_devices=tuple(sorted(migs)),
            )
        )
    return result


# --------------------------------------------------------------------------
# nvidia-smi mig -lci


@dataclass(frozen=True)
class ComputeInstanceRow:
    """One row of ``nvidia-smi mig -lci``. There is no UUID in this table."""

    gpu: int  # GPU index, as in nvidia-smi -L
    gi: int
    ci: int
    profile: str  # e.g. "4g.40gb" (the "MIG " prefix removed)
    profile_id: int


_LCI_ROW_RE = re.compile(
    r"^\|\s*(\d+)\s+(\d+)\s+MIG\s+(\S+)\s+(\d+)\s+(\d+)(?:\s+\d+:\d+)?\s*\|$"
)


def parse_nvidia_smi_mig_lci(text):
    # type: (str) -> List[ComputeInstanceRow]
    """Parse the ``nvidia-smi mig -lci`` table (columns GPU, GPU instance id,
    name, profile id, compute instance id, placement). Header, ruler and
    unknown lines are ignored; "No compute instances found" gives []."""
    rows = []  # type: List[ComputeInstanceRow]
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


def mig_ids_from_query(listed, queried):
    # type: (List[ListedGpu], List[QueriedGpu]) -> Dict[str, Tuple[int, int]]
    """MIG UUID -> (gi, ci) by joining ``-L`` and ``-q -x`` on (GPU UUID, MIG
    device index).

    A GPU whose two listings disagree on the set of MIG device indexes (MIG
    was reconfigured between the two commands) contributes nothing.
    """
    by_uuid = {q.uuid: q for q in queried}
    ids = {}  # type: Dict[str, Tuple[int, int]]
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


def mig_ids_from_lci(listed, rows):
    # type: (List[ListedGpu], List[ComputeInstanceRow]) -> Dict[str, Tuple[int, int]]
    """MIG UUID -> (gi, ci) from ``-L`` and ``mig -lci``, only where certain.

    The table has no UUID, so a device is placed only when the GPU has as
    many compute instances in the table as MIG devices in ``-L`` and the
    device's profile occurs exactly once on that GPU in both.
    """
    ids = {}  # type: Dict[str, Tuple[int, int]]
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


def join_mig_ids(listed, mig_ids, queried=None, numa=None):
    # type: (List[ListedGpu], Dict[str, Tuple[int, int]], Optional[List[QueriedGpu]], Optional[Callable[[Optional[str]], Optional[int]]]) -> List[Gpu]
    """Build ``Gpu`` objects from ``-L`` GPUs, a MIG UUID -> (gi, ci) map,
    and optionally ``-q -x`` data (minor number, PCI bus id).

    A MIG device gets its ids from its legacy UUID, else from ``mig_ids``;
    one with neither is left out of ``Gpu.mig``. ``numa(pci_bus_id)`` gives
    the NUMA node when supplied.
    """
    by_uuid = {q.uuid: q for q in (queried or [])}
    gpus = []
    for gpu in listed:
        mig = []
        for dev in gpu.mig:
            ids = (dev.gi, dev.ci) if dev.gi is not None else mig_ids.get(dev.uuid)
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
            )
        )
    return gpus


# --------------------------------------------------------------------------
# Readers


_NO_DEVICES_RE = re.compile(r"no devices were found", re.IGNORECASE)


def read_nvidia_smi_inventory(run_command=None, which=None, sysfs_root="/"):
    # type: (Optional[RunCommand], Optional[Which], str) -> Inventory
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
        rc, out, err = _run(run_command, argv)
        if rc != 0:
            if _NO_DEVICES_RE.search(out) or _NO_DEVICES_RE.search(err):
                return Inventory(gpus=[], source="nvidia-smi")
            return Inventory(gpus=[], source="none", error=_failure(argv, rc, out, err))
        if len(out) > MAX_OUTPUT_CHARS:
            return Inventory(gpus=[], source="none", error="`nvidia-smi -L`: output too large")
        listed = parse_nvidia_smi_list(out)
        if not listed and out.strip() and not _NO_DEVICES_RE.search(out):
            return Inventory(
                gpus=[], source="none",
                error="`nvidia-smi -L`: no GPU line understood in: %s" % _first_line(out),
            )
        queried = []  # type: List[QueriedGpu]
        rc, out, err = _run(run_command, ["nvidia-smi", "-q", "-x"])
        if rc == 0:
            try:
                queried = parse_nvidia_smi_query_xml(out)
            except InventoryError:
                queried = []
        mig_ids = mig_ids_from_query(listed, queried)
        unplaced = [m for g in listed for m in g.mig if m.gi is None and m.uuid not in mig_ids]
        if unplaced:
            rc, out, err = _run(run_command, ["nvidia-smi", "mig", "-lci"])
            if rc == 0:
                for uuid, ids in mig_ids_from_lci(listed, parse_nvidia_smi_mig_lci(out)).items():
                    mig_ids.setdefault(uuid, ids)
        gpus = join_mig_ids(listed, mig_ids, queried, numa=lambda pci: read_numa_node(pci, sysfs_root))
        return Inventory(gpus=gpus, source="nvidia-smi")
    except Exception as exc:  # a bug must not become a traceback on the node
        return Inventory(gpus=[], source="none", error="nvidia-smi inventory failed: %s" % exc)


def _nvml_text(value):
    if isinstance(value, bytes):
        return value.decode("utf-8", "replace")
    return str(value)


def _nvml_optional(func, *args):
    """Call an optional NVML getter; None when missing or unsupported."""
    if func is None:
        return None
    try:
        return func(*args)
    except Exception:
        return None


def _nvml_error_text(exc):
    return "%s: %s" % (type(exc).__name__, _first_line(str(exc)) or "no message")


def read_nvml_inventory(nvml, sysfs_root="/"):
    # type: (Any, str) -> Inventory
    """The inventory from NVML. ``nvml`` is the ``pynvml`` module (or a fake
    with the same functions). Never raises.

    Failing to initialise, count, or get a GPU's handle or UUID fails the
    whole read (``error`` set): a partial list would pass for the node's
    GPUs. Minor number, PCI bus id, name and NUMA node are optional. MIG
    devices are read on GPUs whose current MIG mode is enabled; a MIG device
    whose UUID, GI or CI cannot be read is left out.
    """
    try:
        nvml.nvmlInit()
    except Exception as exc:
        return Inventory(gpus=[], source="none", error="NVML could not start: %s" % _nvml_error_text(exc))
    try:
        gpus = []
        count = int(nvml.nvmlDeviceGetCount())
        for i in range(count):
            handle = nvml.nvmlDeviceGetHandleByIndex(i)
            uuid = _nvml_text(nvml.nvmlDeviceGetUUID(handle))
            minor = _nvml_optional(getattr(nvml, "nvmlDeviceGetMinorNumber", None), handle)
            pci_info = _nvml_optional(getattr(nvml, "nvmlDeviceGetPciInfo", None), handle)
            pci = None
            if pci_info is not None:
                pci = normalize_pci_address(_nvml_text(getattr(pci_info, "busId", "")))
            name = _nvml_optional(getattr(nvml, "nvmlDeviceGetName", None), handle)
            numa = _nvml_optional(getattr(nvml, "nvmlDeviceGetNumaNodeId", None), handle)
            if not isinstance(numa, int) or isinstance(numa, bool) or numa < 0:
                numa = read_numa_node(pci, sysfs_root) if pci else None
            gpus.append(
                Gpu(
                    uuid=uuid,
                    index=i,
                    minor=minor if isinstance(minor, int) and not isinstance(minor, bool) and minor >= 0 else None,
                    numa_node=numa,
                    pci_bus_id=pci,
                    name=_nvml_text(name) if name is not None else None,
                    mig=_nvml_mig(nvml, handle, uuid),
                    health=_nvml_health(nvml, handle),
                )
            )
        return Inventory(gpus=gpus, source="nvml")
    except Exception as exc:
        return Inventory(gpus=[], source="none", error="NVML could not list the GPUs: %s" % _nvml_error_text(exc))
    finally:
        try:
            nvml.nvmlShutdown()
        except Exception:
            pass


def _nvml_health(nvml, handle):
    # type: (Any, object) -> tuple
    """Pending page retirement and row remapping state (``domain/health.py``); a GPU or driver that does not
    support a query contributes nothing."""
    pending = _nvml_optional(getattr(nvml, "nvmlDeviceGetRetiredPagesPendingStatus", None), handle)
    enabled = getattr(nvml, "NVML_FEATURE_ENABLED", 1)
    rows = _nvml_optional(getattr(nvml, "nvmlDeviceGetRemappedRows", None), handle)
    try:
        remap_pending, remap_failed = bool(rows[2]), bool(rows[3])  # (corrRows, uncRows, isPending, failureOccurred)
    except (TypeError, IndexError, KeyError):
        remap_pending = remap_failed = False
    return problems(retired_pages_pending=pending == enabled and pending is not None, row_remap_failure=remap_failed,
                    row_remap_pending=remap_pending)


def boot_time(root="/"):
    # type: (str) -> Optional[float]
    """When the node booted (seconds since the epoch), from /proc/uptime under ``root``; None unknown."""
    try:
        with open(join_root(root, "/proc/uptime"), "rb") as handle:
            return time.time() - float(handle.read(64).split()[0])
    except (OSError, FsError, ValueError, IndexError):
        return None


def read_kernel_xids(root="/", max_bytes=MAX_LOG_BYTES):
    # type: (str, int) -> dict
    """``{bus id: [(xid, when), ...]}`` of the reset and reboot classes from this boot's kernel log
    (``/dev/kmsg`` under ``root``, read without blocking, at most ``max_bytes``); empty when it cannot
    be read (only root may read it on most nodes)."""
    try:
        fd = os.open(join_root(root, "/dev/kmsg"), os.O_RDONLY | os.O_NONBLOCK | getattr(os, "O_CLOEXEC", 0))
    except (OSError, FsError):
        return {}
    chunks, size = [], 0
    try:
        while size < max_bytes:
            try:
                record = os.read(fd, 8192)
            except BlockingIOError:  # the end of the ring buffer
                break
            except OSError as exc:
                if exc.errno == errno.EPIPE:  # a record was overwritten while reading: go on
                    continue
                break
            if not record:
                break
            chunks.append(record)
            size += len(record)
    finally:
        os.close(fd)
    return xids_from_log(b"".join(chunks).decode("utf-8", "replace"), boot_time(root))


def with_kernel_health(inventory, xids):
    # type: (Inventory, dict) -> Inventory
    """``inventory`` with each GPU's XIDs (found by PCI bus id)."""
    if not xids:
        return inventory
    gpus = []
    for gpu in inventory.gpus:
        found = xids.get(bus_of(gpu.pci_bus_id) or "")
        gpus.append(dataclasses.replace(gpu, xids=gpu.xids + tuple(found)) if found else gpu)
    return dataclasses.replace(inventory, gpus=gpus)


def _nvml_mig(nvml, handle, parent_uuid):
    # type: (Any, object, str) -> tuple
    mode = _nvml_optional(getattr(nvml, "nvmlDeviceGetMigMode", None), handle)
    enabled = getattr(nvml, "NVML_DEVICE_MIG_ENABLE", 1)
    try:
        current = mode[0]
    except (TypeError, IndexError, KeyError):
        return ()
    if current != enabled:
        return ()
    slots = _nvml_optional(getattr(nvml, "nvmlDeviceGetMaxMigDeviceCount", None), handle)
    if not isinstance(slots, int) or slots <= 0:
        return ()
    found = {}  # type: Dict[Tuple[int, int], MigInstance]
    for slot in range(min(slots, 64)):
        try:
            mig = nvml.nvmlDeviceGetMigDeviceHandleByIndex(handle, slot)
        except Exception:
            continue  # NVML_ERROR_NOT_FOUND: an empty slot
        try:
            uuid = _nvml_text(nvml.nvmlDeviceGetUUID(mig))
            gi = int(nvml.nvmlDeviceGetGpuInstanceId(mig))
            ci = int(nvml.nvmlDeviceGetComputeInstanceId(mig))
        except Exception:
            continue  # cannot be held as gi/ci: left out
        if not uuid.startswith("MIG-") or gi < 0 or ci < 0:
            continue
        found.setdefault((gi, ci), MigInstance(gi=gi, ci=ci, uuid=uuid))
    return tuple(found[key] for key in sorted(found))


def read_real_inventory(run_command=None, nvml=None, which=None, sysfs_root="/"):
    # type: (Optional[RunCommand], object, Optional[Which], str) -> Inventory
    """A real host's GPUs: NVML first, else ``nvidia-smi``. Never raises.

    ``nvml``: None uses ``pynvml`` when importable (``HAS_PYNVML``); False
    skips NVML; anything else is used as the module. When NVML is unusable
    (no library, no driver) ``nvidia-smi`` is tried. When neither works the
    inventory is empty, ``source="none"``, and ``error`` gives the reasons.
    """
    reasons = []
    if nvml is None:
        nvml = _pynvml if HAS_PYNVML else False
        if not HAS_PYNVML:
            reasons.append("NVML not used: pynvml (nvidia-ml-py) is not importable")
    if nvml is not False:
        inventory = read_nvml_inventory(nvml, sysfs_root=sysfs_root)
        if inventory.error is None:
            return inventory
        reasons.append(inventory.error)
    inventory = read_nvidia_smi_inventory(run_command=run_command, which=which, sysfs_root=sysfs_root)
    if inventory.error is None:
        return inventory
    reasons.append(inventory.error)
    return Inventory(gpus=[], source="none", error="no GPU inventory: " + "; ".join(reasons))


# --------------------------------------------------------------------------
# libvirt


_MEMORY_UNITS = {
    "b": 1, "bytes": 1,
    "kb": 1000, "k": 1024, "kib": 1024,
    "mb": 1000 ** 2, "m": 1024 ** 2, "mib": 1024 ** 2,
    "gb": 1000 ** 3, "g": 1024 ** 3, "gib": 1024 ** 3,
    "tb": 1000 ** 4, "t": 1024 ** 4, "tib": 1024 ** 4,
    "pb": 1000 ** 5, "p": 1024 ** 5, "pib": 1024 ** 5,
    "eb": 1000 ** 6, "e": 1024 ** 6, "eib": 1024 ** 6,
}


def parse_libvirt_memory(element):
    # type: (Optional[ET.Element]) -> Optional[int]
    """Bytes of a libvirt ``<memory unit='KiB'>N</memory>`` (KiB when no unit);
    None when absent or malformed."""
    if element is None or element.text is None:
        return None
    text = element.text.strip()
    unit = (element.get("unit") or "KiB").strip().lower()
    if not text.isdigit() or unit not in _MEMORY_UNITS:
        return None
    return int(text) * _MEMORY_UNITS[unit]


def parse_domain_xml(text, pci_to_gpu, state="running"):
    # type: (str, Dict[str, str], str) -> Domain
    """A ``Domain`` from ``virsh dumpxml`` output.

    ``pci_to_gpu`` maps normalised PCI addresses to GPU UUIDs; a PCI host
    device not in it (a NIC, a GPU the driver does not list) is not named in
    ``gpus``. Raises ``InventoryError`` on XML that is not a domain.
    """
    root = _parse_xml(text, "virsh dumpxml")
    if root.tag != "domain":
        raise InventoryError("virsh dumpxml: root element is <%s>, not <domain>" % root.tag)
    name = _xml_text(root, "name")
    if not name:
        raise InventoryError("virsh dumpxml: domain without a <name>")
    memory = parse_libvirt_memory(root.find("memory"))
    if memory is None:
        memory = parse_libvirt_memory(root.find("currentMemory")) or 0
    hugepages = root.find("memoryBacking/hugepages") is not None
    gpus = []
    for hostdev in root.findall("devices/hostdev"):
        if hostdev.get("type") != "pci" or hostdev.get("mode", "subsystem") != "subsystem":
            continue
        address = hostdev.find("source/address")
        if address is None:
            continue
        pci = pci_address_from_libvirt(
            address.get("domain"), address.get("bus"), address.get("slot"), address.get("function")
        )
        uuid = pci_to_gpu.get(pci) if pci else None
        if uuid and uuid not in gpus:
            gpus.append(uuid)
    return Domain(instance_id=name, state=state, memory_bytes=memory, hugepages=hugepages, gpus=tuple(gpus))


def _pci_index(inventory):
    # type: (Optional[Inventory]) -> Dict[str, str]
    index = {}
    for gpu in (inventory.gpus if inventory is not None else []):
        pci = normalize_pci_address(gpu.pci_bus_id)
        if pci:
            index[pci] = gpu.uuid
    return index


VIRSH = ["virsh", "--readonly", "--connect", "qemu:///system"]


def read_libvirt_domains(run_command=None, inventory=None, which=None, virsh=None):
    # type: (Optional[RunCommand], Optional[Inventory], Optional[Which], Optional[List[str]]) -> Tuple[List[Domain], Optional[str]]
    """Running and paused libvirt domains, as ``(domains, error)``. Never raises.

    Without ``virsh``: ``([], None)``. ``virsh`` (default: a read-only
    connection to ``qemu:///system``) lists the running and the paused
    domains; each is read with ``dumpxml``. PCI host devices are mapped to
    GPU UUIDs through the inventory's ``pci_bus_id``. A list that fails gives
    ``([], error)``; a domain that vanished between list and dumpxml is
    skipped; one whose XML cannot be read is skipped and named in ``error``.
    """
    run_command = run_command or default_run_command
    which = which or shutil.which
    base = list(virsh or VIRSH)
    try:
        if not which(base[0]):
            return [], None
        pci_to_gpu = _pci_index(inventory)
        names = []  # type: List[Tuple[str, str]]
        for state, flag in (("running", "--state-running"), ("paused", "--state-paused")):
            argv = base + ["list", "--name", flag]
            rc, out, err = _run(run_command, argv)
            if rc != 0:
                return [], _failure(argv, rc, out, err)
            for line in out.splitlines():
                line = line.strip()
                if line and line not in [name for name, _state in names]:
                    names.append((line, state))
        domains = []
        problems = []
        for name, state in names:
            argv = base + ["dumpxml", "--domain", name]
            rc, out, err = _run(run_command, argv)
            if rc != 0:
                if re.search(r"failed to get domain|domain not found", err + out, re.IGNORECASE):
                    continue  # stopped and undefined since the list
                problems.append(_failure(argv, rc, out, err))
                continue
            try:
                domain = parse_domain_xml(out, pci_to_gpu, state=state)
            except InventoryError as exc:
                problems.append("domain %r: %s" % (name, exc))
                continue
            domains.append(domain)
        return domains, ("; ".join(problems) if problems else None)
    except Exception as exc:
        return [], "libvirt domains could not be read: %s" % exc
