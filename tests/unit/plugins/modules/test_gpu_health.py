# -*- coding: utf-8 -*-
# Copyright: contributors to bcd.devices
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""Health gating (issue 14, item 3): an unhealthy GPU takes no new hold; kept holds stay and are named.
Through ``bcd.devices.holds``, ``holds_info``, ``bcd-holds status`` and ``metrics``, on fakehw nodes, and
the real host's readers (NVML through a fake module, the kernel log from a file)."""

from __future__ import annotations

import copy
import time

from prometheus_client.parser import text_string_to_metric_families

from ansible_collections.bcd.devices.plugins.module_utils.domain.health import XID_CLASSES, gpu_health, xids_from_log
from ansible_collections.bcd.devices.plugins.module_utils.node import inventory as real
from ansible_collections.bcd.devices.tests.unit.builders import hold
from ansible_collections.bcd.devices.tests.unit.conftest import DEFAULT_GPUS, GPU_A, GPU_B, GPU_C
from ansible_collections.bcd.devices.tests.unit.plugins.module_utils.entry.test_cli import cli
from ansible_collections.bcd.devices.tests.unit.plugins.modules.test_holds import run
from ansible_collections.bcd.devices.tests.unit.plugins.modules.test_busy_and_maintenance import service
from ansible_collections.bcd.devices.tests.unit.plugins.modules.test_holds_info import info

# Kernel log lines as the driver prints them (the Xid 79 one from NVIDIA/open-gpu-kernel-modules#1151,
# the Xid 63 one from stas00/ml-engineering's NVIDIA debugging notes; bus ids changed).
KERNEL_LOG = """\
6,1201,5000000,-;NVRM: GPU at PCI:0000:3b:00: GPU-5f1c2a90-0000-4000-8000-000000000002
6,1202,5000100,-;NVRM: Xid (PCI:0000:3b:00): 79, GPU has fallen off the bus.
6,1203,5000200,-;NVRM: GPU 0000:3b:00.0: GPU has fallen off the bus.
4,1204,6000000,-;NVRM: Xid (PCI:0000:5E:00): 63, pid=1896, Row Remapper: New row marked for remapping, reset gpu to activate.
4,1205,6000100,-;NVRM: Xid (PCI:0000:5e:00): 94, pid=1896, Contained: SM (0x1). RST: No, D-RST: No
4,1206,6000200,-;NVRM: Xid (PCI:0000:5e:00): 94, pid=1897, Contained: SM (0x1). RST: No, D-RST: No
"""


def sick(gpus, index, **health):
    gpus = copy.deepcopy(gpus)
    gpus[index]["health"] = health
    return gpus


def fails(result):
    return [(f["allocation_id"], f["reason"], f["message"]) for f in result["failures"]]


def test_a_new_hold_on_an_unhealthy_gpu_or_a_part_of_it_is_refused_as_missing(capsys, node):
    run(capsys, node, generation=1, devices=[hold("kept", GPU_B + "/s0")])
    node.set_hardware(gpus=sick(DEFAULT_GPUS, 1, row_remap_failure=True, xids=[48, 13]))
    result = run(capsys, node, generation=2, devices=[hold("kept", GPU_B + "/s0"), hold("a1", GPU_B + "/s1"),
                                                      hold("a2", GPU_C)])
    what = ("row remapping failed (the GPU has no spare rows left); Xid 48: double-bit ECC error (reset the GPU)")
    assert fails(result) == [("a1", "device-missing", "%s is unhealthy: %s" % (GPU_B, what))]
    assert node.exists("/etc/cdi/bcd-kept.json") and node.exists("/etc/cdi/bcd-a2.json")
    condition = [c for c in result["conditions"] if c["type"] == "GPUUnhealthy"]
    assert condition and condition[0]["message"] == (
        "%s is unhealthy: %s (kept holds: kept); new holds on them are refused (device-missing), kept ones stay"
        % (GPU_B, what))
    shown = dict((g["uuid"], g["health"]) for g in info(capsys, node)["gpus"])
    assert shown[GPU_A] == [] and shown[GPU_B] == what.split("; ")
    code, out, _err = cli(capsys, node, "status")
    assert "unhealthy" in [line for line in out.splitlines() if line.startswith("1 ")][0]
    families = dict((f.name, f) for f in text_string_to_metric_families(cli(capsys, node, "metrics")[1]))
    assert [s.value for s in families["bcd_gpus"].samples if s.labels == {"state": "unhealthy"}] == [1]


def test_a_gpu_that_is_healthy_again_takes_holds_again(capsys, node):
    node.set_hardware(gpus=sick(DEFAULT_GPUS, 2, retired_pages_pending=True))
    first = run(capsys, node, generation=1, devices=[hold("a1", GPU_C)])
    assert fails(first) == [("a1", "device-missing", "%s is unhealthy: retired pages pending (reset the GPU)" % GPU_C)]
    node.set_hardware(gpus=DEFAULT_GPUS)  # reset: the page is retired, nothing pending
    again = run(capsys, node, generation=2, devices=[hold("a1", GPU_C)])
    assert fails(again) == [] and again["conditions"] == []


def test_the_fakehw_health_entry_is_checked_like_network_input(capsys, node):
    node.set_hardware(gpus=sick(DEFAULT_GPUS, 0, xids=["79"]))
    result = run(capsys, node, generation=1, devices=[hold("a1", GPU_A)])
    assert result.get("failed") is True and "gpus[0].health.xids[0]" in result["msg"]
    node.set_hardware(gpus=sick(DEFAULT_GPUS, 0, ecc=True))
    result = run(capsys, node, generation=1, devices=[hold("a1", GPU_A)])
    assert result.get("failed") is True and "gpus[0].health: unknown field 'ecc'" in result["msg"]


# -- the real host's readers -----------------------------------------------------------------------

def test_xids_of_the_reset_and_reboot_classes_are_read_from_the_kernel_log_by_bus():
    # 63 is no fault: not counted; kmsg records carry their time since boot
    assert xids_from_log(KERNEL_LOG, boot_time=1000.0) == {
        "0000:3b:00": [(79, 1005.0001)], "0000:5e:00": [(94, 1006.0001), (94, 1006.0002)]}
    assert xids_from_log("[ 12.5] NVRM: Xid (PCI:0000:3b:00): 48, x") == {"0000:3b:00": [(48, None)]}  # dmesg
    assert set(XID_CLASSES) >= {48, 79, 94, 95}
    assert xids_from_log("NVRM: Xid (PCI:0000:3b:00): 99999, x") == {}


def test_the_kernel_log_is_read_from_kmsg_under_root_and_mapped_to_gpus_by_pci_address(tmp_path):
    (tmp_path / "dev").mkdir()
    (tmp_path / "dev" / "kmsg").write_text(KERNEL_LOG)
    (tmp_path / "proc").mkdir()
    (tmp_path / "proc" / "uptime").write_text("3600.00 7000.00\n")  # booted an hour ago
    xids = real.read_kernel_xids(str(tmp_path))
    inventory = real.Inventory(gpus=[real.Gpu(uuid=GPU_A, index=0, pci_bus_id="0000:3b:00.0"),
                                     real.Gpu(uuid=GPU_B, index=1, pci_bus_id="0000:5e:00.0"),
                                     real.Gpu(uuid=GPU_C, index=2, pci_bus_id="0000:86:00.0")], source="nvml")
    checked = real.with_kernel_health(inventory, xids)
    assert [gpu_health(gpu) for gpu in checked.gpus] == [
        ("Xid 79: GPU has fallen off the bus (reboot the node)",),
        ("Xid 94: contained ECC error (reset the GPU)",), ()]
    # GPU_B left maintenance (reset and checked) after its Xid was logged: it no longer counts
    logged = checked.gpus[1].xids[0][1]
    assert abs(logged - (time.time() - 3600 + 6)) < 60
    assert gpu_health(checked.gpus[1], {GPU_B: logged + 1}) == ()
    assert gpu_health(checked.gpus[0], {GPU_B: logged + 1}) != ()
    assert real.read_kernel_xids(str(tmp_path / "nowhere")) == {}


def test_taking_a_gpu_out_of_maintenance_after_its_reset_lets_it_take_holds_again(capsys, node):
    node.set_hardware(gpus=sick(DEFAULT_GPUS, 2, xids=[95]))
    refused = run(capsys, node, generation=1, devices=[hold("a1", GPU_C)])
    what = "Xid 95: uncontained ECC error (reset the GPU)"
    assert fails(refused) == [("a1", "device-missing", "%s is unhealthy: %s" % (GPU_C, what))]
    service(capsys, node, gpus=[GPU_C], reason="reset after Xid 95")
    service(capsys, node, gpus=[GPU_C], state="absent")  # reset and checked: back in service
    assert info(capsys, node)["gpus"][2]["health"] == []
    again = run(capsys, node, generation=2, devices=[hold("a1", GPU_C)])
    assert fails(again) == [] and [c["type"] for c in again["conditions"]] == []
    # the driver's own state is not cleared by the operator: a pending retirement still counts
    node.set_hardware(gpus=sick(DEFAULT_GPUS, 2, xids=[95], retired_pages_pending=True))
    still = run(capsys, node, generation=3, devices=[hold("a1", GPU_C), hold("a2", GPU_C + "/s0")])
    assert [f[:2] for f in fails(still)] == [("a2", "device-missing")]


class FakeNvml(object):
    NVML_FEATURE_ENABLED = 1

    def __init__(self, pending, rows):
        self.pending, self.rows = pending, rows

    def nvmlInit(self):
        pass

    def nvmlShutdown(self):
        pass

    def nvmlDeviceGetCount(self):
        return len(self.pending)

    def nvmlDeviceGetHandleByIndex(self, i):
        return i

    def nvmlDeviceGetUUID(self, handle):
        return [GPU_A, GPU_B, GPU_C][handle]

    def nvmlDeviceGetRetiredPagesPendingStatus(self, handle):
        return self.pending[handle]

    def nvmlDeviceGetRemappedRows(self, handle):
        if self.rows[handle] is None:
            raise RuntimeError("Not Supported")
        return self.rows[handle]


def test_nvml_reports_pending_retired_pages_and_row_remapping():
    nvml = FakeNvml(pending=[0, 1, 0], rows=[(0, 0, 0, 0), (0, 0, 0, 0), (0, 2, 1, 1)])
    inventory = real.read_nvml_inventory(nvml)
    assert inventory.error is None
    assert [gpu.health for gpu in inventory.gpus] == [
        (), ("retired pages pending (reset the GPU)",), ("row remapping failed (the GPU has no spare rows left)",)]
    unsupported = real.read_nvml_inventory(FakeNvml(pending=[0], rows=[None]))
    assert unsupported.error is None and unsupported.gpus[0].health == ()
    pending = real.read_nvml_inventory(FakeNvml(pending=[0], rows=[(0, 1, 1, 0)]))
    assert pending.gpus[0].health == ("row remapping pending (reset the GPU)",)
