# -*- coding: utf-8 -*-
# Copyright: contributors to bcd.devices
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""Tests for the real-host inventory readers: nvidia-smi parsers on recorded
output, NVML through a fake module, and libvirt domains from recorded XML."""

from __future__ import annotations

import os

import pytest

from ansible_collections.bcd.devices.plugins.module_utils.domain.inventory_model import (
    Gpu,
    Inventory,
    MigInstance,
)
from ansible_collections.bcd.devices.plugins.module_utils.entry.converge import run_pass
from ansible_collections.bcd.devices.plugins.module_utils.node import inventory as inv
from ansible_collections.bcd.devices.plugins.module_utils.node.hosts import RealHost
from ansible_collections.bcd.devices.tests.unit.builders import hold

DATA = os.path.join(os.path.dirname(__file__), "..", "..", "..", "..", "data", "nvidia-smi")

H100_GPU = "GPU-b4895dbf-9350-2524-a89b-98161ddd9fe4"
H100_MIGS = [
    "MIG-7089d0f3-293f-58c9-8f8c-5ea666eedbde",
    "MIG-56c30729-347f-5dd6-8da0-c3cc59e969e0",
    "MIG-9d14fb21-4ae1-546f-a636-011582899c39",
    "MIG-0f709664-740c-52b0-ae79-3e4c9ede6d3b",
]
A100_LEGACY_GPU = "GPU-4200ccc0-2667-d4cb-9137-f932c716232a"
A100X8_GPU0 = "GPU-ddb16622-80d1-5e78-5bf7-a0ecfd723d0a"
A100X8_MIG = "MIG-fca28630-a1bd-5e73-9206-ccd17a013f5f"


def parse_dash_l(text):
    """``nvidia-smi -L`` on its own, as the inventory reads it when no other query answers."""
    return inv.join_mig_ids(inv.parse_nvidia_smi_list(text), {})


# Samples recorded with CRLF line ends. They are stored with LF (ansible-test's line-endings rule, and
# Galaxy's importer warns on an ignore file) and given their CRLF back here, as they were recorded.
RECORDED_CRLF = ("cloud-native-docs_h100-mig-mixed_nvidia-smi-L.txt",)


def fixture(name):
    with open(os.path.join(DATA, name), "r", newline="") as handle:
        text = handle.read()
    return text.replace("\n", "\r\n") if name in RECORDED_CRLF else text


H100_L = "cloud-native-docs_h100-mig-mixed_nvidia-smi-L.txt"
H100_QX = "synthetic_h100-mig-mixed_nvidia-smi-q-x.xml"
LEGACY_L = "cloud-native-docs_a100-legacy-mig-uuid_nvidia-smi-L.txt"
A100X8_L = "migprofiler_a100x8-one-mig_nvidia-smi-L.txt"
A100X8_LCI = "migprofiler_a100x8-one-mig_nvidia-smi-mig-lci.txt"


class FakeRunner:
    """Answers argv tuples from a table; records every call."""

    def __init__(self, answers):
        self.answers = answers
        self.calls = []

    def __call__(self, argv):
        self.calls.append(tuple(argv))
        answer = self.answers.get(tuple(argv))
        if answer is None:
            return 1, "", "unexpected command %s" % " ".join(argv)
        if isinstance(answer, Exception):
            raise answer
        return answer


def on_path(*names):
    return lambda name: "/usr/bin/" + name if name in names else None


# --------------------------------------------------------------------------
# nvidia-smi -L


def test_list_h100_crlf_modern_mig_devices_keep_device_index_and_no_ids():
    text = fixture(H100_L)
    assert "\r\n" in text
    (gpu,) = inv.parse_nvidia_smi_list(text)
    assert (gpu.index, gpu.name, gpu.uuid) == (0, "NVIDIA H100 80GB HBM3", H100_GPU)
    assert [(m.device, m.uuid, m.profile) for m in gpu.mig] == [
        (0, H100_MIGS[0], "3g.40gb"),
        (1, H100_MIGS[1], "2g.20gb"),
        (2, H100_MIGS[2], "1g.10gb"),
        (3, H100_MIGS[3], "1g.10gb"),
    ]
    assert all(m.gi is None and m.ci is None for m in gpu.mig)


def test_parse_L_alone_leaves_out_modern_mig_devices():
    (gpu,) = parse_dash_l(fixture(H100_L))
    assert isinstance(gpu, Gpu)
    assert gpu.uuid == H100_GPU and gpu.mig == ()


def test_parse_L_legacy_uuids_carry_gi_and_ci():
    (gpu,) = parse_dash_l(fixture(LEGACY_L))
    assert gpu.uuid == A100_LEGACY_GPU
    assert [(m.gi, m.ci) for m in gpu.mig] == [(gi, 0) for gi in range(7, 14)]
    assert gpu.mig_instance(10, 0).uuid == "MIG-%s/10/0" % A100_LEGACY_GPU
    assert gpu.mig_instance(1, 0) is None


def test_parse_L_eight_gpus_one_with_mig():
    listed = inv.parse_nvidia_smi_list(fixture(A100X8_L))
    assert [g.index for g in listed] == list(range(8))
    assert listed[0].uuid == A100X8_GPU0
    assert [(m.device, m.uuid, m.profile) for m in listed[0].mig] == [(0, A100X8_MIG, "4g.40gb")]
    assert all(g.mig == () for g in listed[1:])
    assert listed[7].uuid == "GPU-4a12fe94-db8e-3e7c-5a56-33ef4ad777e3"


def test_parse_L_ignores_noise_and_untrustworthy_lines():
    text = (
        "  MIG 1g.5gb Device 0: (UUID: MIG-00000000-0000-0000-0000-000000000000)\n"  # before any GPU
        "Warning: something\n"
        "GPU 0: A (UUID: GPU-aaaa)\n"
        "  MIG 1g.5gb Device 0: (UUID: MIG-GPU-bbbb/1/0)\n"  # legacy UUID naming another GPU
        "  MIG 1g.5gb Device 1: (UUID: MIG-GPU-aaaa/2/0)\n"
        "GPU 1: B (UUID: GPU-aaaa)\n"  # the same GPU twice
        "  MIG 1g.5gb Device 0: (UUID: MIG-GPU-aaaa/3/0)\n"
    )
    gpus = parse_dash_l(text)
    assert [(g.index, g.uuid) for g in gpus] == [(0, "GPU-aaaa")]
    assert [(m.gi, m.ci) for m in gpus[0].mig] == [(2, 0)]


@pytest.mark.parametrize("text", ["", "No devices were found\n", "garbage"])
def test_parse_L_without_gpus(text):
    assert parse_dash_l(text) == []


# --------------------------------------------------------------------------
# nvidia-smi -q -x


def test_query_xml_gives_minor_pci_and_mig_ids_by_index():
    (gpu,) = inv.parse_nvidia_smi_query_xml(fixture(H100_QX))
    assert gpu.uuid == H100_GPU
    assert gpu.minor == 3
    assert gpu.pci_bus_id == "0000:1b:00.0"
    # the <processes> section also has gpu_instance_id; it must not add a device
    assert gpu.mig_map() == {0: (2, 0), 1: (3, 0), 2: (9, 0), 3: (10, 0)}


def test_query_xml_skips_what_it_cannot_read():
    text = (
        '<?xml version="1.0" ?><nvidia_smi_log>'
        '<gpu id="00000000:3B:00.0"><uuid>GPU-x</uuid><minor_number>N/A</minor_number>'
        "<mig_devices><mig_device><index>0</index><gpu_instance_id>1</gpu_instance_id>"
        "<compute_instance_id>N/A</compute_instance_id></mig_device>"
        "<mig_device><index>1</index><gpu_instance_id>2</gpu_instance_id>"
        "<compute_instance_id>0</compute_instance_id></mig_device></mig_devices></gpu>"
        "<gpu><uuid>not-a-gpu</uuid></gpu>"
        "</nvidia_smi_log>"
    )
    (gpu,) = inv.parse_nvidia_smi_query_xml(text)
    assert gpu.minor is None
    assert gpu.pci_bus_id == "0000:3b:00.0"  # from the id attribute
    assert gpu.mig_map() == {1: (2, 0)}


@pytest.mark.parametrize(
    "text,message",
    [
        ("<nvidia_smi_log><gpu>", "not well-formed"),
        ("<domain/>", "unexpected root element"),
        ("", "not well-formed"),
    ],
)
def test_query_xml_rejects_what_is_not_its_output(text, message):
    with pytest.raises(inv.InventoryError, match=message):
        inv.parse_nvidia_smi_query_xml(text)


def test_join_by_query_places_every_modern_mig_device():
    listed = inv.parse_nvidia_smi_list(fixture(H100_L))
    queried = inv.parse_nvidia_smi_query_xml(fixture(H100_QX))
    (gpu,) = inv.join_mig_ids(listed, inv.mig_ids_from_query(listed, queried), queried)
    assert gpu.minor == 3 and gpu.pci_bus_id == "0000:1b:00.0"
    assert gpu.mig == (
        MigInstance(gi=2, ci=0, uuid=H100_MIGS[0]),
        MigInstance(gi=3, ci=0, uuid=H100_MIGS[1]),
        MigInstance(gi=9, ci=0, uuid=H100_MIGS[2]),
        MigInstance(gi=10, ci=0, uuid=H100_MIGS[3]),
    )


def test_join_by_query_trusts_nothing_when_mig_changed_between_commands():
    listed = inv.parse_nvidia_smi_list(fixture(H100_L))
    text = fixture(H100_QX).replace("<index>3</index>", "<index>4</index>")
    queried = inv.parse_nvidia_smi_query_xml(text)
    assert inv.mig_ids_from_query(listed, queried) == {}


# --------------------------------------------------------------------------
# nvidia-smi mig -lci


def test_lci_table_rows():
    assert inv.parse_nvidia_smi_mig_lci(fixture(A100X8_LCI)) == [
        inv.ComputeInstanceRow(gpu=0, gi=2, ci=0, profile="4g.40gb", profile_id=3)
    ]


def test_lci_without_instances():
    assert inv.parse_nvidia_smi_mig_lci("No compute instances found: Not Found\n") == []


def test_lci_join_places_the_recorded_session():
    listed = inv.parse_nvidia_smi_list(fixture(A100X8_L))
    rows = inv.parse_nvidia_smi_mig_lci(fixture(A100X8_LCI))
    gpus = inv.join_mig_ids(listed, inv.mig_ids_from_lci(listed, rows))
    assert gpus[0].mig == (MigInstance(gi=2, ci=0, uuid=A100X8_MIG),)
    assert len(gpus) == 8


LCI_H100 = """\
+--------------------------------------------------------------------+
| Compute instances:                                                 |
| GPU     GPU       Name             Profile   Instance   Placement  |
|       Instance                       ID        ID       Start:Size |
|         ID                                                         |
|====================================================================|
|   0      2       MIG 3g.40gb          2         0          0:3     |
+--------------------------------------------------------------------+
|   0      3       MIG 2g.20gb          1         0          0:2     |
+--------------------------------------------------------------------+
|   0      9       MIG 1g.10gb          0         0          0:1     |
+--------------------------------------------------------------------+
|   0     10       MIG 1g.10gb          0         0          0:1     |
+--------------------------------------------------------------------+
"""


def test_lci_join_leaves_out_devices_whose_profile_is_ambiguous():
    listed = inv.parse_nvidia_smi_list(fixture(H100_L))
    rows = inv.parse_nvidia_smi_mig_lci(LCI_H100)
    assert len(rows) == 4
    ids = inv.mig_ids_from_lci(listed, rows)
    assert ids == {H100_MIGS[0]: (2, 0), H100_MIGS[1]: (3, 0)}


def test_lci_join_trusts_nothing_when_counts_differ():
    listed = inv.parse_nvidia_smi_list(fixture(H100_L))
    rows = inv.parse_nvidia_smi_mig_lci(LCI_H100)[:3]
    assert inv.mig_ids_from_lci(listed, rows) == {}


# --------------------------------------------------------------------------
# PCI addresses


@pytest.mark.parametrize(
    "text,expected",
    [
        ("00000000:3B:00.0", "0000:3b:00.0"),
        ("0000:3b:00.0", "0000:3b:00.0"),
        ("3B:00.1", "0000:3b:00.1"),
        ("00010000:01:00.0", "10000:01:00.0"),
        (" 0000:3B:00.0\n", "0000:3b:00.0"),
        ("0000:3b:00.8", None),
        ("3b:00", None),
        ("", None),
        (None, None),
    ],
)
def test_normalize_pci_address(text, expected):
    assert inv.normalize_pci_address(text) == expected


@pytest.mark.parametrize(
    "parts,expected",
    [
        (("0x0000", "0x3b", "0x00", "0x0"), "0000:3b:00.0"),
        ((None, "0x3B", "0x1f", "0x7"), "0000:3b:1f.7"),
        (("0", "59", "0", "0"), "0000:3b:00.0"),
        (("0x0000", "0x3b", "0x20", "0x0"), None),
        (("0x0000", None, "0x00", "0x0"), None),
        (("0x0000", "zz", "0x00", "0x0"), None),
    ],
)
def test_pci_address_from_libvirt(parts, expected):
    assert inv.pci_address_from_libvirt(*parts) == expected


# --------------------------------------------------------------------------
# read_real_inventory through nvidia-smi


def smi_answers(extra=None):
    answers = {
        ("nvidia-smi", "-L"): (0, fixture(H100_L), ""),
        ("nvidia-smi", "-q", "-x"): (0, fixture(H100_QX), ""),
    }
    answers.update(extra or {})
    return answers


def test_real_inventory_from_nvidia_smi_joins_L_and_query(tmp_path):
    numa = tmp_path / "sys" / "bus" / "pci" / "devices" / "0000:1b:00.0"
    numa.mkdir(parents=True)
    (numa / "numa_node").write_text("1\n")
    runner = FakeRunner(smi_answers())
    result = inv.read_real_inventory(run_command=runner, nvml=False, which=on_path("nvidia-smi"),
                                     sysfs_root=str(tmp_path))
    assert result.source == "nvidia-smi" and result.error is None
    (gpu,) = result.gpus
    assert (gpu.uuid, gpu.index, gpu.minor, gpu.pci_bus_id, gpu.numa_node) == (
        H100_GPU, 0, 3, "0000:1b:00.0", 1)
    assert gpu.mig_instance(9, 0).uuid == H100_MIGS[2]
    assert ("nvidia-smi", "mig", "-lci") not in runner.calls  # nothing left to place


def test_real_inventory_falls_back_to_lci_when_query_fails():
    runner = FakeRunner({
        ("nvidia-smi", "-L"): (0, fixture(A100X8_L), ""),
        ("nvidia-smi", "-q", "-x"): (0, "<nvidia_smi_log><gpu>", ""),  # truncated
        ("nvidia-smi", "mig", "-lci"): (0, fixture(A100X8_LCI), ""),
    })
    result = inv.read_real_inventory(run_command=runner, nvml=False, which=on_path("nvidia-smi"))
    assert result.error is None and len(result.gpus) == 8
    assert result.gpu(A100X8_GPU0).mig == (MigInstance(gi=2, ci=0, uuid=A100X8_MIG),)
    assert result.gpus[0].minor is None  # unknown, not guessed


def test_real_inventory_leaves_out_mig_devices_no_source_can_place():
    runner = FakeRunner(smi_answers({
        ("nvidia-smi", "-q", "-x"): (6, "", "Unknown Error"),
        ("nvidia-smi", "mig", "-lci"): (6, "", "Insufficient Permissions"),
    }))
    result = inv.read_real_inventory(run_command=runner, nvml=False, which=on_path("nvidia-smi"))
    assert result.error is None
    assert [g.uuid for g in result.gpus] == [H100_GPU]
    assert result.gpus[0].mig == ()


def test_real_inventory_without_nvml_or_nvidia_smi_says_why():
    runner = FakeRunner({})
    result = inv.read_real_inventory(run_command=runner, nvml=False, which=on_path())
    assert result == Inventory(gpus=[], source="none", error=result.error)
    assert "nvidia-smi not found" in result.error
    assert runner.calls == []


def test_real_inventory_reports_a_driver_that_does_not_answer():
    message = ("NVIDIA-SMI has failed because it couldn't communicate with the NVIDIA driver. "
               "Make sure that the latest NVIDIA driver is installed and running.")
    runner = FakeRunner({("nvidia-smi", "-L"): (9, message + "\n", "")})
    result = inv.read_real_inventory(run_command=runner, nvml=False, which=on_path("nvidia-smi"))
    assert result.gpus == [] and result.source == "none"
    assert "couldn't communicate with the NVIDIA driver" in result.error
    assert "rc 9" in result.error


def test_real_inventory_no_devices_is_an_empty_inventory_not_an_error():
    runner = FakeRunner({("nvidia-smi", "-L"): (6, "No devices were found\n", "")})
    result = inv.read_real_inventory(run_command=runner, nvml=False, which=on_path("nvidia-smi"))
    assert (result.gpus, result.source, result.error) == ([], "nvidia-smi", None)


def test_real_inventory_unknown_output_is_an_error():
    runner = FakeRunner({("nvidia-smi", "-L"): (0, "Segmentation fault\n", "")})
    result = inv.read_real_inventory(run_command=runner, nvml=False, which=on_path("nvidia-smi"))
    assert result.error and "Segmentation fault" in result.error


def test_real_inventory_never_raises_from_the_runner():
    runner = FakeRunner({("nvidia-smi", "-L"): OSError("exec format error")})
    result = inv.read_real_inventory(run_command=runner, nvml=False, which=on_path("nvidia-smi"))
    assert result.gpus == [] and "exec format error" in result.error


def test_default_runner_reports_a_missing_program():
    rc, out, err = inv.default_run_command(["/nonexistent/bcd-no-such-tool"])
    assert rc == 127 and out == "" and "not found" in err


# --------------------------------------------------------------------------
# NVML through a fake pynvml


class NVMLError(Exception):
    pass


class FakeNvml:
    """The pynvml functions the reader uses, over plain data."""

    NVML_DEVICE_MIG_ENABLE = 1

    def __init__(self, gpus, init_error=None, numa=True):
        self.gpus = gpus
        self.init_error = init_error
        self.shutdown_calls = 0
        self.initialised = False
        if not numa:
            self.nvmlDeviceGetNumaNodeId = None

    def nvmlInit(self):
        if self.init_error:
            raise self.init_error
        self.initialised = True

    def nvmlShutdown(self):
        self.shutdown_calls += 1

    def nvmlDeviceGetCount(self):
        assert self.initialised
        return len(self.gpus)

    def nvmlDeviceGetHandleByIndex(self, i):
        if self.gpus[i].get("lost"):
            raise NVMLError("GPU is lost")
        return ("gpu", i)

    def _gpu(self, handle):
        return self.gpus[handle[1]]

    def nvmlDeviceGetUUID(self, handle):
        if handle[0] == "mig":
            mig = self.gpus[handle[1]]["mig"][handle[2]]
            if "uuid_error" in mig:
                raise NVMLError(mig["uuid_error"])
            return mig["uuid"].encode()  # old pynvml returns bytes
        return self._gpu(handle)["uuid"]

    def nvmlDeviceGetMinorNumber(self, handle):
        if "minor" not in self._gpu(handle):
            raise NVMLError("Not Supported")
        return self._gpu(handle)["minor"]

    def nvmlDeviceGetPciInfo(self, handle):
        class Info:
            busId = self._gpu(handle)["pci"].encode()
        return Info()

    def nvmlDeviceGetName(self, handle):
        return self._gpu(handle).get("name", "GPU")

    def nvmlDeviceGetNumaNodeId(self, handle):
        return self._gpu(handle).get("numa", -1)

    def nvmlDeviceGetMigMode(self, handle):
        if "mig" not in self._gpu(handle):
            raise NVMLError("Not Supported")
        return [self._gpu(handle).get("mig_mode", 1), 1]

    def nvmlDeviceGetMaxMigDeviceCount(self, handle):
        return 7

    def nvmlDeviceGetMigDeviceHandleByIndex(self, handle, slot):
        migs = self._gpu(handle)["mig"]
        if slot >= len(migs) or migs[slot] is None:
            raise NVMLError("Not Found")
        return ("mig", handle[1], slot)

    def nvmlDeviceGetGpuInstanceId(self, handle):
        mig = self.gpus[handle[1]]["mig"][handle[2]]
        if "gi" not in mig:
            raise NVMLError("Not Supported")
        return mig["gi"]

    def nvmlDeviceGetComputeInstanceId(self, handle):
        return self.gpus[handle[1]]["mig"][handle[2]]["ci"]


def two_gpus():
    return [
        {"uuid": "GPU-aaaa", "minor": 2, "pci": "00000000:3B:00.0", "name": "H100", "numa": 0,
         "mig": [
             {"uuid": "MIG-1111", "gi": 5, "ci": 0},
             None,  # an empty slot
             {"uuid": "MIG-2222", "gi": 1, "ci": 0},
             {"uuid": "MIG-3333", "ci": 0},  # GI unreadable: left out
             {"uuid_error": "Unknown", "gi": 6, "ci": 0},  # UUID unreadable: left out
         ]},
        {"uuid": "GPU-bbbb", "pci": "00000000:86:00.0"},
    ]


def test_nvml_inventory_reads_gpus_and_mig_ids(tmp_path):
    numa = tmp_path / "sys" / "bus" / "pci" / "devices" / "0000:86:00.0"
    numa.mkdir(parents=True)
    (numa / "numa_node").write_text("1\n")
    nvml = FakeNvml(two_gpus())
    result = inv.read_nvml_inventory(nvml, sysfs_root=str(tmp_path))
    assert result.source == "nvml" and result.error is None
    first, second = result.gpus
    assert (first.uuid, first.index, first.minor, first.pci_bus_id, first.numa_node, first.name) == (
        "GPU-aaaa", 0, 2, "0000:3b:00.0", 0, "H100")
    assert first.mig == (MigInstance(gi=1, ci=0, uuid="MIG-2222"), MigInstance(gi=5, ci=0, uuid="MIG-1111"))
    # no minor from NVML, NUMA from sysfs, no MIG support
    assert (second.minor, second.numa_node, second.mig) == (None, 1, ())
    assert nvml.shutdown_calls == 1


def test_nvml_inventory_ignores_mig_devices_when_mig_is_off():
    gpus = two_gpus()
    gpus[0]["mig_mode"] = 0
    result = inv.read_nvml_inventory(FakeNvml(gpus))
    assert result.gpus[0].mig == ()


def test_nvml_numa_without_the_getter():
    result = inv.read_nvml_inventory(FakeNvml(two_gpus(), numa=False), sysfs_root="/nonexistent")
    assert [g.numa_node for g in result.gpus] == [None, None]


def test_nvml_lost_gpu_fails_the_whole_read():
    gpus = two_gpus()
    gpus[1]["lost"] = True
    nvml = FakeNvml(gpus)
    result = inv.read_nvml_inventory(nvml)
    assert result.gpus == [] and "GPU is lost" in result.error
    assert nvml.shutdown_calls == 1


def test_real_inventory_prefers_nvml():
    runner = FakeRunner(smi_answers())
    result = inv.read_real_inventory(run_command=runner, nvml=FakeNvml(two_gpus()),
                                     which=on_path("nvidia-smi"))
    assert result.source == "nvml" and [g.uuid for g in result.gpus] == ["GPU-aaaa", "GPU-bbbb"]
    assert runner.calls == []


def test_real_inventory_falls_back_to_nvidia_smi_when_nvml_cannot_start():
    nvml = FakeNvml([], init_error=NVMLError("NVML Shared Library Not Found"))
    runner = FakeRunner(smi_answers())
    result = inv.read_real_inventory(run_command=runner, nvml=nvml, which=on_path("nvidia-smi"))
    assert result.source == "nvidia-smi" and result.gpus[0].uuid == H100_GPU


def test_real_inventory_gives_both_reasons_when_both_fail():
    nvml = FakeNvml([], init_error=NVMLError("Driver Not Loaded"))
    result = inv.read_real_inventory(run_command=FakeRunner({}), nvml=nvml, which=on_path())
    assert result.source == "none" and result.gpus == []
    assert "Driver Not Loaded" in result.error and "nvidia-smi not found" in result.error


def test_real_inventory_without_pynvml_says_so(monkeypatch):
    monkeypatch.setattr(inv, "HAS_PYNVML", False)
    result = inv.read_real_inventory(run_command=FakeRunner({}), which=on_path())
    assert "pynvml" in result.error


# --------------------------------------------------------------------------
# health from nvidia-smi -q -x, without NVML


H100_GPU_B = "GPU-0c3f6a7e-1d2b-4c5d-8e9f-a0b1c2d3e4f5"  # synthetic: a second GPU for the H100 samples
PAGES = "retired pages pending (reset the GPU)"
ROW_FAILED = "row remapping failed (the GPU has no spare rows left)"
ROW_PENDING = "row remapping pending (reset the GPU)"

# The elements as drivers print them, under <gpu>: <retired_pages> holds <pending_blacklist> (older drivers)
# and <pending_retirement> (newer; some print both); <remapped_rows> holds <remapped_row_pending> and
# <remapped_row_failure>, or is N/A itself where the GPU has no row remapper.
HEALTHY_ELEMENTS = (
    "<retired_pages><pending_blacklist>N/A</pending_blacklist><pending_retirement>No</pending_retirement>"
    "</retired_pages><remapped_rows><remapped_row_corr>0</remapped_row_corr><remapped_row_unc>0</remapped_row_unc>"
    "<remapped_row_pending>N/A</remapped_row_pending><remapped_row_failure>No</remapped_row_failure></remapped_rows>"
)


def health_elements(pending_retirement=None, pending_blacklist=None, row_pending=None, row_failure=None):
    """``<retired_pages>`` and ``<remapped_rows>`` with the elements given (None: left out)."""
    def element(name, value):
        return "" if value is None else "<%s>%s</%s>" % (name, value, name)
    return ("<retired_pages>%s%s</retired_pages><remapped_rows>%s%s</remapped_rows>" % (
        element("pending_blacklist", pending_blacklist), element("pending_retirement", pending_retirement),
        element("remapped_row_pending", row_pending), element("remapped_row_failure", row_failure)))


def two_gpu_smi(first, second=HEALTHY_ELEMENTS):
    """``nvidia-smi -L`` and ``-q -x`` of the H100 samples with a second GPU (no MIG) added, ``first`` and
    ``second`` inserted into the first and the second GPU's ``<gpu>``."""
    listing = fixture(H100_L) + "GPU 1: NVIDIA H100 80GB HBM3 (UUID: %s)\r\n" % H100_GPU_B
    query = fixture(H100_QX)
    assert query.count("\t</gpu>\n") == 1
    query = query.replace("\t</gpu>\n", "\t\t%s\n\t</gpu>\n\t<gpu id=\"00000000:3B:00.0\">\n\t\t<product_name>NVIDIA H100 80GB "
                          "HBM3</product_name>\n\t\t<uuid>%s</uuid>\n\t\t<minor_number>4</minor_number>\n\t\t%s\n"
                          "\t</gpu>\n" % (first, H100_GPU_B, second))
    return {("nvidia-smi", "-L"): (0, listing, ""), ("nvidia-smi", "-q", "-x"): (0, query, "")}


def smi_health(answers):
    result = inv.read_real_inventory(run_command=FakeRunner(answers), nvml=False, which=on_path("nvidia-smi"))
    assert result.source == "nvidia-smi" and result.error is None
    return dict((gpu.uuid, gpu.health) for gpu in result.gpus)


class FakeNvmlHealth(FakeNvml):
    """NVML's two health getters besides: ``pending`` (NVML_FEATURE_ENABLED or not) and ``rows``
    (corrRows, uncRows, isPending, failureOccurred) of each GPU."""

    NVML_FEATURE_ENABLED = 1

    def nvmlDeviceGetRetiredPagesPendingStatus(self, handle):
        return self._gpu(handle)["pending"]

    def nvmlDeviceGetRemappedRows(self, handle):
        return self._gpu(handle)["rows"]


# (the elements of the faulted GPU, what NVML says of the same GPU, its problems)
FAULTS = [
    pytest.param(health_elements(pending_retirement="Yes", row_failure="Yes", row_pending="Yes"),
                 (1, (0, 4, 1, 1)), (PAGES, ROW_FAILED), id="pending-retirement-and-row-failure"),
    pytest.param(health_elements(pending_blacklist="Yes", row_pending="Yes", row_failure="No"),
                 (1, (1, 0, 1, 0)), (PAGES, ROW_PENDING), id="older-driver-pending-blacklist-and-row-pending"),
    pytest.param(health_elements(pending_blacklist="N/A", pending_retirement="No", row_pending="Yes",
                                 row_failure="No"),
                 (0, (1, 0, 1, 0)), (ROW_PENDING,), id="row-pending"),
    pytest.param(health_elements(pending_retirement="No", row_pending="No", row_failure="Yes"),
                 (0, (0, 64, 0, 1)), (ROW_FAILED,), id="row-failure"),
    pytest.param(health_elements(pending_retirement="Yes") + "<remapped_rows>N/A</remapped_rows>",
                 (1, None), (PAGES,), id="pending-retirement-without-row-remapper"),
]


@pytest.mark.parametrize("elements, nvml_says, expected", FAULTS)
def test_nvidia_smi_reads_the_faults_nvml_gives_with_nvmls_texts(elements, nvml_says, expected):
    """The same facts as NVML, the same problems: whichever reader saw the fault, the node says it alike."""
    assert smi_health(two_gpu_smi(elements)) == {H100_GPU: expected, H100_GPU_B: ()}
    pending, rows = nvml_says
    nvml = FakeNvmlHealth([{"uuid": H100_GPU, "pci": "00000000:1B:00.0", "pending": pending, "rows": rows},
                           {"uuid": H100_GPU_B, "pci": "00000000:3B:00.0", "pending": 0, "rows": (0, 0, 0, 0)}])
    found = {gpu.uuid: gpu.health for gpu in inv.read_nvml_inventory(nvml).gpus}
    assert found == {H100_GPU: expected, H100_GPU_B: ()}


@pytest.mark.parametrize("value", ["N/A", "No", "", "yes", "YES", "Unknown Error", "Not Supported", "1", "Yes, twice"])
def test_anything_but_yes_is_not_known_to_be_a_fault(value):
    elements = health_elements(pending_retirement=value, pending_blacklist=value, row_pending=value,
                               row_failure=value)
    assert smi_health(two_gpu_smi(elements, second=elements)) == {H100_GPU: (), H100_GPU_B: ()}


def test_a_yes_with_the_whitespace_of_pretty_printed_xml_is_a_fault():
    elements = "<retired_pages>\n\t\t\t<pending_retirement>\n\t\t\t\tYes\n\t\t\t</pending_retirement>\n\t\t</retired_pages>"
    assert smi_health(two_gpu_smi(elements)) == {H100_GPU: (PAGES,), H100_GPU_B: ()}


def test_an_xml_without_the_health_elements_leaves_every_gpu_healthy():
    assert smi_health(two_gpu_smi("", second="")) == {H100_GPU: (), H100_GPU_B: ()}
    assert smi_health(smi_answers()) == {H100_GPU: ()}  # the recorded-shape sample as it is
    (queried,) = inv.parse_nvidia_smi_query_xml(fixture(H100_QX))
    assert queried.health == ()


def test_without_a_readable_query_the_health_is_not_known():
    answers = two_gpu_smi(health_elements(pending_retirement="Yes"))
    listing = answers[("nvidia-smi", "-L")]
    for query in [(6, "", "Unknown Error"), (0, "<nvidia_smi_log><gpu>", "")]:  # failed; truncated
        assert smi_health({("nvidia-smi", "-L"): listing, ("nvidia-smi", "-q", "-x"): query,
                           ("nvidia-smi", "mig", "-lci"): (6, "", "")}) == {H100_GPU: (), H100_GPU_B: ()}


def test_a_real_host_without_nvml_refuses_a_hold_on_the_gpu_nvidia_smi_says_faulted(tmp_path, monkeypatch):
    """A real node (RealHost) without pynvml, ``nvidia-smi`` on PATH answering through the runner: the pass
    refuses the new hold on the faulted GPU with ``device-missing`` and binds the one on the healthy GPU."""
    tools = tmp_path / "bin"
    tools.mkdir()
    (tools / "nvidia-smi").write_text("#!/bin/sh\nexit 1\n")
    (tools / "nvidia-smi").chmod(0o755)
    monkeypatch.setenv("PATH", str(tools))
    monkeypatch.setattr(inv, "HAS_PYNVML", False)
    root = tmp_path / "root"
    root.mkdir()
    runner = FakeRunner(two_gpu_smi(health_elements(pending_retirement="Yes", row_failure="Yes", row_pending="No")))
    host = RealHost(str(root), runner=runner)
    assert host.inventory().source == "nvidia-smi"
    result = run_pass(host, 1, [hold("a1", H100_GPU), hold("a2", H100_GPU_B)], state_dir="/var/lib/bcd",
                      lock_timeout=5).to_dict()
    what = "%s is unhealthy: %s; %s" % (H100_GPU, PAGES, ROW_FAILED)
    assert [(f["allocation_id"], f["reason"], f["message"]) for f in result["failures"]] == [
        ("a1", "device-missing", what)]
    assert [h["allocation_id"] for h in result["holds"]] == ["a2"]
    assert [(c["type"], c["message"]) for c in result["conditions"]] == [
        ("GPUUnhealthy", what + "; new holds on them are refused (device-missing), kept ones stay")]
    assert ("nvidia-smi", "-q", "-x") in runner.calls


# --------------------------------------------------------------------------
# libvirt


VIRSH = ("virsh", "--readonly", "--connect", "qemu:///system")

DOMAIN_XML = """<domain type='kvm' id='3'>
  <name>{name}</name>
  <uuid>6b1c5c1e-1111-4a43-9a9e-2c4f1d2b7a10</uuid>
  <memory unit='{unit}'>{memory}</memory>
  <currentMemory unit='KiB'>1024</currentMemory>
  {backing}
  <vcpu placement='static'>8</vcpu>
  <devices>
    <hostdev mode='subsystem' type='pci' managed='yes'>
      <driver name='vfio'/>
      <source>
        <address domain='0x0000' bus='0x3b' slot='0x00' function='0x0'/>
      </source>
      <alias name='hostdev0'/>
      <address type='pci' domain='0x0000' bus='0x06' slot='0x00' function='0x0'/>
    </hostdev>
    <hostdev mode='subsystem' type='pci' managed='yes'>
      <source>
        <address domain='0x0000' bus='0x3b' slot='0x00' function='0x1'/>
      </source>
    </hostdev>
    <hostdev mode='subsystem' type='usb'>
      <source><vendor id='0x1234'/><product id='0xbeef'/></source>
    </hostdev>
    <interface type='bridge'>
      <address type='pci' domain='0x0000' bus='0x86' slot='0x00' function='0x0'/>
    </interface>
  </devices>
</domain>
"""


def domain_xml(name, memory="8388608", unit="KiB", backing=""):
    return DOMAIN_XML.format(name=name, memory=memory, unit=unit, backing=backing)


def gpu_inventory():
    return Inventory(
        gpus=[
            Gpu(uuid="GPU-aaaa", index=0, pci_bus_id="00000000:3B:00.0"),
            Gpu(uuid="GPU-bbbb", index=1, pci_bus_id="0000:86:00.0"),
        ],
        source="nvidia-smi",
    )


def libvirt_runner(**dumps):
    answers = {
        VIRSH + ("list", "--name", "--state-running"): (0, "inst_1\n-odd name\n\n", ""),
        VIRSH + ("list", "--name", "--state-paused"): (0, "inst_2\n", ""),
    }
    for name, answer in dumps.items():
        answers[VIRSH + ("dumpxml", "--domain", name.replace("_dash_", "-").replace("_sp_", " "))] = answer
    return FakeRunner(answers)


def test_libvirt_domains_map_hostdevs_to_gpus_by_pci_address():
    runner = libvirt_runner(
        inst_1=(0, domain_xml("inst_1", backing="<memoryBacking><hugepages/></memoryBacking>"), ""),
        _dash_odd_sp_name=(0, domain_xml("-odd name", memory="2", unit="GiB"), ""),
        inst_2=(0, domain_xml("inst_2", memory="1073741824", unit="b"), ""),
    )
    domains, error = inv.read_libvirt_domains(runner, gpu_inventory(), which=on_path("virsh"))
    assert error is None
    by_id = {d.instance_id: d for d in domains}
    assert set(by_id) == {"inst_1", "-odd name", "inst_2"}
    one = by_id["inst_1"]
    assert (one.state, one.memory_bytes, one.hugepages, one.gpus) == (
        "running", 8388608 * 1024, True, ("GPU-aaaa",))
    assert by_id["-odd name"].memory_bytes == 2 * 1024 ** 3
    assert by_id["-odd name"].hugepages is False
    assert (by_id["inst_2"].state, by_id["inst_2"].memory_bytes) == ("paused", 1073741824)
    # a name that looks like an option is passed as the value of --domain
    assert VIRSH + ("dumpxml", "--domain", "-odd name") in runner.calls


def test_libvirt_without_virsh():
    runner = FakeRunner({})
    assert inv.read_libvirt_domains(runner, gpu_inventory(), which=on_path()) == ([], None)
    assert runner.calls == []


def test_libvirt_list_failure_is_reported():
    runner = FakeRunner({
        VIRSH + ("list", "--name", "--state-running"): (
            1, "", "error: failed to connect to the hypervisor\nerror: Failed to connect socket"),
    })
    domains, error = inv.read_libvirt_domains(runner, gpu_inventory(), which=on_path("virsh"))
    assert domains == [] and "failed to connect to the hypervisor" in error


def test_libvirt_hostile_or_vanished_domains():
    runner = libvirt_runner(
        inst_1=(0, "<domain><name>inst_1</name><memory>12", ""),  # truncated XML
        _dash_odd_sp_name=(1, "", "error: failed to get domain '-odd name'"),  # gone since the list
        inst_2=(0, domain_xml("inst_2"), ""),
    )
    domains, error = inv.read_libvirt_domains(runner, gpu_inventory(), which=on_path("virsh"))
    assert [d.instance_id for d in domains] == ["inst_2"]
    assert "inst_1" in error and "not well-formed" in error
    assert "odd name" not in error


def test_libvirt_entity_expansion_is_not_a_traceback():
    bomb = ('<?xml version="1.0"?><!DOCTYPE d [<!ENTITY a SYSTEM "file:///etc/passwd">]>'
            "<domain><name>&a;</name></domain>")
    runner = libvirt_runner(inst_1=(0, bomb, ""), _dash_odd_sp_name=(0, domain_xml("-odd name"), ""),
                            inst_2=(0, domain_xml("inst_2"), ""))
    domains, error = inv.read_libvirt_domains(runner, gpu_inventory(), which=on_path("virsh"))
    assert [d.instance_id for d in domains] == ["-odd name", "inst_2"]
    assert "inst_1" in error
    assert "root:" not in error


def test_parse_domain_xml_needs_a_domain():
    with pytest.raises(inv.InventoryError, match="not <domain>"):
        inv.parse_domain_xml("<network/>", {})
    with pytest.raises(inv.InventoryError, match="without a <name>"):
        inv.parse_domain_xml("<domain/>", {})


@pytest.mark.parametrize(
    "xml,expected",
    [
        ("<memory unit='KiB'>4</memory>", 4096),
        ("<memory>4</memory>", 4096),
        ("<memory unit='MB'>1</memory>", 1000000),
        ("<memory unit='M'>1</memory>", 1048576),
        ("<memory unit='parsecs'>1</memory>", None),
        ("<memory unit='KiB'>-4</memory>", None),
        ("<memory/>", None),
    ],
)
def test_libvirt_memory_units(xml, expected):
    import xml.etree.ElementTree as ET

    assert inv.parse_libvirt_memory(ET.fromstring(xml)) == expected
