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
* ``nvidia-smi``: ``-L`` joined with ``-q -x``, else with ``mig -lci``
  for the MIG devices it pins down unambiguously (``nvidia_smi`` says how).

Each source has its own file, named for it: ``nvml`` (NVML), ``nvidia_smi``
(its three listings and how they are joined), ``kernel_log`` (XIDs from
``/dev/kmsg``), ``libvirt_domains`` (``virsh``), ``sysfs_pci`` (a PCI
device's NUMA node) and ``commands`` (running a tool and reading its
output). This module composes them into what a real host reads and keeps
their names importable from here. Each takes its side effects as parameters
(``run_command``, ``which``, the NVML module, ``sysfs_root``), so it is
testable without a GPU. The standard library only; no Ansible.
"""

from __future__ import annotations

from typing import Optional

from ansible_collections.bcd.devices.plugins.module_utils.domain.inventory_model import (  # re-exported: the tests reach them through this module
    Domain,
    Gpu,
    Inventory,
    MigInstance,
    format_pci_address,
    normalize_pci_address,
)
from ansible_collections.bcd.devices.plugins.module_utils.node.commands import (
    COMMAND_TIMEOUT_S,
    MAX_OUTPUT_CHARS,
    InventoryError,
    RunCommand,
    Which,
    default_run_command,
)
from ansible_collections.bcd.devices.plugins.module_utils.node.kernel_log import (
    boot_time,
    read_kernel_xids,
    with_kernel_health,
)
from ansible_collections.bcd.devices.plugins.module_utils.node.libvirt_domains import (
    VIRSH,
    parse_domain_xml,
    parse_libvirt_memory,
    pci_address_from_libvirt,
    read_libvirt_domains,
)
from ansible_collections.bcd.devices.plugins.module_utils.node.nvidia_smi import (
    ComputeInstanceRow,
    ListedGpu,
    ListedMig,
    QueriedGpu,
    join_mig_ids,
    mig_ids_from_lci,
    mig_ids_from_query,
    parse_nvidia_smi_list,
    parse_nvidia_smi_mig_lci,
    parse_nvidia_smi_query_xml,
    read_nvidia_smi_inventory,
)
from ansible_collections.bcd.devices.plugins.module_utils.node.nvml import (
    read_nvml_inventory,
)
from ansible_collections.bcd.devices.plugins.module_utils.node.sysfs_pci import (
    read_numa_node,
)

try:
    import pynvml as _pynvml  # the nvidia-ml-py package

    HAS_PYNVML = True
except Exception:  # ImportError, or a broken install: nvidia-smi is asked instead
    _pynvml = None
    HAS_PYNVML = False

__all__ = [
    "COMMAND_TIMEOUT_S",
    "ComputeInstanceRow",
    "Domain",
    "Gpu",
    "HAS_PYNVML",
    "Inventory",
    "InventoryError",
    "ListedGpu",
    "ListedMig",
    "MAX_OUTPUT_CHARS",
    "MigInstance",
    "QueriedGpu",
    "RunCommand",
    "VIRSH",
    "Which",
    "boot_time",
    "default_run_command",
    "format_pci_address",
    "join_mig_ids",
    "mig_ids_from_lci",
    "mig_ids_from_query",
    "normalize_pci_address",
    "parse_domain_xml",
    "parse_libvirt_memory",
    "parse_nvidia_smi_list",
    "parse_nvidia_smi_mig_lci",
    "parse_nvidia_smi_query_xml",
    "pci_address_from_libvirt",
    "read_kernel_xids",
    "read_libvirt_domains",
    "read_numa_node",
    "read_nvidia_smi_inventory",
    "read_nvml_inventory",
    "read_real_inventory",
    "with_kernel_health",
]


def read_real_inventory(run_command: Optional[RunCommand] = None, nvml: object = None, which: Optional[Which] = None,
                        sysfs_root: str = "/") -> Inventory:
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
