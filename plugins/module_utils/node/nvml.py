# -*- coding: utf-8 -*-
# Copyright: contributors to bcd.devices
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""The GPUs as NVML (``pynvml``, from the ``nvidia-ml-py`` package) reports them, with their health.

MIG ids come straight from ``nvmlDeviceGetGpuInstanceId`` and ``nvmlDeviceGetComputeInstanceId``
on each MIG device handle, so NVML is the most reliable source. The module is a parameter (the
real ``pynvml`` or a test's fake); whether it is importable is decided in ``inventory``.
"""

from __future__ import annotations

from typing import Any, Callable, Dict, List, Optional, Tuple

from ansible_collections.bcd.devices.plugins.module_utils.domain.health import problems
from ansible_collections.bcd.devices.plugins.module_utils.domain.inventory_model import Gpu, Inventory, MigInstance, normalize_pci_address
from ansible_collections.bcd.devices.plugins.module_utils.node.commands import first_line
from ansible_collections.bcd.devices.plugins.module_utils.node.sysfs_pci import read_numa_node


def _nvml_text(value: object) -> str:
    if isinstance(value, bytes):
        return value.decode("utf-8", "replace")
    return str(value)


def _nvml_optional(func: Optional[Callable[..., Any]], *args: object) -> Any:
    """Call an optional NVML getter; None when missing or unsupported (else whatever the getter gives)."""
    if func is None:
        return None
    try:
        return func(*args)
    except Exception:
        return None


def _nvml_error_text(exc: BaseException) -> str:
    return "%s: %s" % (type(exc).__name__, first_line(str(exc)) or "no message")


def read_nvml_inventory(nvml: Any, sysfs_root: str = "/") -> Inventory:
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
        gpus: List[Gpu] = []
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
                    mig=_nvml_mig(nvml, handle),
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


def _nvml_health(nvml: Any, handle: object) -> Tuple[str, ...]:
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


def _nvml_mig(nvml: Any, handle: object) -> Tuple[MigInstance, ...]:
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
    found: Dict[Tuple[int, int], MigInstance] = {}
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
