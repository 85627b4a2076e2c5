# -*- coding: utf-8 -*-
# Copyright: contributors to bcd.devices
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""A real node's MIG side: the nvidia-smi mig parsers on recorded output (tests/data/nvidia-smi-mig), read_mig
and apply_mig against a fake runner that records every argv and answers with recorded output."""

from __future__ import annotations

import os
from typing import Dict, List, Tuple

import pytest

from ansible_collections.bcd.devices.plugins.module_utils.domain.inventory_model import Gpu, Inventory
from ansible_collections.bcd.devices.plugins.module_utils.domain.mig.model import (
    ComputeInstance,
    GpuInstance,
    GpuProcess,
    MigOp,
    Placement,
)
from ansible_collections.bcd.devices.plugins.module_utils.node import mig_smi as smi
from ansible_collections.bcd.devices.plugins.module_utils.node.commands import MAX_OUTPUT_CHARS
from ansible_collections.bcd.devices.plugins.module_utils.node.mig_catalog import CATALOG
from ansible_collections.bcd.devices.plugins.module_utils.node.nvidia_smi import read_nvidia_smi_inventory

DATA = os.path.join(os.path.dirname(__file__), "..", "..", "..", "..", "data", "nvidia-smi-mig")
H100 = "GPU-7cd6d4d6-9fa8-13be-3c42-09a1b2280a02"  # the recorded H100 PCIe (docs-platform_h100-pcie_*)
H100_MIGS = {(2, 0): "MIG-da06d78f-7534-56a0-a062-62fef012be91", (7, 0): "MIG-8aa1fc52-9818-58ec-bc64-8f0cae121bb4",
             (8, 0): "MIG-42fa9c93-1430-5ccc-b623-c02fb93b7f5a", (9, 0): "MIG-6d96b431-44ba-5360-80b0-9359561c927d"}
OTHER = "GPU-00000000-1111-2222-3333-444444444444"


def recorded(name: str) -> str:
    with open(os.path.join(DATA, name), encoding="utf-8") as handle:
        return handle.read()


def h100(name: str) -> str:
    return recorded("docs-platform_h100-pcie_" + name)


def query_xml(mode: str = "Enabled", pending: str = "Enabled", migs: bool = True, extra_gpu: str = "") -> str:
    """``nvidia-smi -q -x`` for the recorded H100 PCIe, SYNTHETIC: cut down to what the readers use, with the
    recorded -L's MIG devices 0-3 on GI 2, 7, 8, 9 (as the recorded -cgi and -lgi made them), one process on GI 7."""
    devices = "".join(
        "<mig_device><index>%d</index><gpu_instance_id>%d</gpu_instance_id><compute_instance_id>0"
        "</compute_instance_id></mig_device>" % (i, gi) for i, gi in enumerate((2, 7, 8, 9))) if migs else ""
    return (
        '<?xml version="1.0" ?><nvidia_smi_log><gpu id="00000000:01:00.0">'
        "<product_name>NVIDIA H100 PCIe</product_name>"
        "<mig_mode><current_mig>%s</current_mig><pending_mig>%s</pending_mig></mig_mode>"
        "<mig_devices>%s</mig_devices><uuid>%s</uuid><minor_number>0</minor_number>"
        "<processes><process_info><gpu_instance_id>7</gpu_instance_id><compute_instance_id>0</compute_instance_id>"
        "<pid>4242</pid><type>C</type><process_name>python3</process_name></process_info>"
        "<process_info><gpu_instance_id>N/A</gpu_instance_id><compute_instance_id>N/A</compute_instance_id>"
        "<pid>77</pid><process_name>Xorg</process_name></process_info></processes>"
        "</gpu>%s</nvidia_smi_log>" % (mode, pending, devices, H100, extra_gpu))


# -lci for the recorded H100 layout, SYNTHETIC (no -lci of that session was published), in -lci's recorded shape
LCI = """+--------------------------------------------------------------------+
| Compute instances:                                                 |
| GPU     GPU       Name             Profile   Instance   Placement  |
|       Instance                       ID        ID       Start:Size |
|         ID                                                         |
|====================================================================|
|   0      2       MIG 3g.40gb          2         0          0:3     |
+--------------------------------------------------------------------+
|   0      7       MIG 1g.10gb          0         0          0:1     |
+--------------------------------------------------------------------+
|   0      8       MIG 1g.10gb          0         0          0:1     |
+--------------------------------------------------------------------+
|   0      9       MIG 1g.10gb          0         0          0:1     |
+--------------------------------------------------------------------+
"""

# nvidia-smi's refusals, in the words NVIDIA's MIG user guide and public sessions show (no citable recording)
NO_ROOM = ("Unable to create a GPU instance on GPU  0 using profile 9: Insufficient Resources\n"
           "Failed to create GPU instances: Insufficient Resources\n")
IN_USE = ("Unable to destroy GPU instance ID  7 from GPU  0: In use by another client\n"
          "Failed to destroy GPU instances: In use by another client\n")


class Runner:
    """Answers argv from a table (``(rc, out, err)``; a missing argv is rc 2) and records every call."""

    def __init__(self, table: Dict[Tuple[str, ...], Tuple[int, str, str]]) -> None:
        self.table = table
        self.calls: List[List[str]] = []

    def __call__(self, argv):
        self.calls.append(list(argv))
        return self.table.get(tuple(argv), (2, "", "unexpected command %s" % " ".join(argv)))


def ok(out: str) -> Tuple[int, str, str]:
    return 0, out, ""


def enabled_table(**over: Tuple[int, str, str]) -> Dict[Tuple[str, ...], Tuple[int, str, str]]:
    table = {
        ("nvidia-smi", "-L"): ok(h100("nvidia-smi-L.txt")),
        ("nvidia-smi", "-q", "-x"): ok(query_xml()),
        ("nvidia-smi", "mig", "-lgip"): ok(h100("mig-lgip.txt")),
        ("nvidia-smi", "mig", "-lgipp"): ok(h100("mig-lgipp.txt")),
        ("nvidia-smi", "mig", "-lgi"): ok(h100("mig-lgi.txt")),
        ("nvidia-smi", "mig", "-lci"): ok(LCI),
        ("nvidia-smi", "mig", "-i", "0", "-lgip"): ok(h100("mig-lgip.txt")),
        ("nvidia-smi", "mig", "-i", "0", "-lgi"): ok(h100("mig-lgi.txt")),
    }
    table.update({tuple(key.split()): value for key, value in over.items()})
    return table


def inventory_of(table) -> Inventory:
    inventory = read_nvidia_smi_inventory(Runner(table), which=lambda _name: "/usr/bin/nvidia-smi",
                                          sysfs_root="/nonexistent")
    assert inventory.error is None
    return inventory


# --------------------------------------------------------------------------
# Parsers, one recorded file each


@pytest.mark.parametrize("name,expected", [
    ("mps-test_a100-sxm4-40gb_mig-lgip.txt",
     [("1g.5gb", 19, 7, 7, 4864), ("1g.5gb+me", 20, 1, 1, 4864), ("1g.10gb", 15, 4, 4, 9851),
      ("2g.10gb", 14, 3, 3, 9851), ("3g.20gb", 9, 2, 2, 19968), ("4g.20gb", 5, 1, 1, 19968),
      ("7g.40gb", 0, 1, 1, 40192)]),
    ("migprofiler_a100-sxm4-80gb_mig-i0-lgip.txt",
     [("1g.10gb", 19, 4, 7, 9728), ("1g.10gb+me", 20, 1, 1, 9728), ("2g.20gb", 14, 2, 3, 19968),
      ("3g.40gb", 9, 1, 2, 40448), ("4g.40gb", 5, 0, 1, 40448), ("7g.80gb", 0, 0, 1, 81152)]),
    ("docs-platform_h100-pcie_mig-lgip.txt",
     [("1g.10gb", 19, 7, 7, 9851), ("1g.10gb+me", 20, 1, 1, 9851), ("1g.20gb", 15, 4, 4, 19968),
      ("2g.20gb", 14, 3, 3, 19968), ("3g.40gb", 9, 2, 2, 40192), ("4g.40gb", 5, 1, 1, 40192),
      ("7g.80gb", 0, 1, 1, 80896)]),
])
def test_parse_lgip(name, expected):
    rows = smi.parse_lgip(recorded(name))
    assert [(r.profile, r.id, r.free, r.total, r.memory_mib) for r in rows] == expected
    assert {r.gpu for r in rows} == {0}


def test_parse_lgipp():
    placements = smi.parse_lgipp(h100("mig-lgipp.txt"))
    assert list(placements) == [0]
    assert placements[0] == {
        19: tuple(Placement(s, 1) for s in range(7)), 20: tuple(Placement(s, 1) for s in range(7)),
        15: (Placement(0, 2), Placement(2, 2), Placement(4, 2), Placement(6, 2)),
        14: (Placement(0, 2), Placement(2, 2), Placement(4, 2)),
        9: (Placement(0, 4), Placement(4, 4)), 5: (Placement(0, 4),), 0: (Placement(0, 8),)}


@pytest.mark.parametrize("name,expected", [
    ("mps-test_a100-sxm4-40gb_mig-lgi.txt", [("3g.20gb", 9, 1, 4, 4), ("3g.20gb", 9, 2, 0, 4)]),
    ("docs-platform_h100-pcie_mig-lgi.txt", [("1g.10gb", 19, 7, 0, 1), ("1g.10gb", 19, 8, 1, 1),
                                             ("1g.10gb", 19, 9, 2, 1), ("3g.40gb", 9, 2, 4, 4)]),
])
def test_parse_lgi(name, expected):
    rows = smi.parse_lgi(recorded(name))
    assert [(r.profile, r.profile_id, r.gi, r.placement.start, r.placement.size) for r in rows] == expected


def test_lgi_and_lci_tables_are_not_mistaken_for_each_other():
    assert smi.parse_lgi(LCI) == []
    assert smi.parse_lgi(h100("mig-lgip.txt")) == [] and smi.parse_lgip(h100("mig-lgi.txt")) == []


@pytest.mark.parametrize("text", [
    "", "garbage\n\x00\xff", "No MIG-enabled devices found.", "|  -1  MIG 1g.5gb  19  7/7  4.75  No 14 0 0 |",
    "|   0  MIG 1g.5gb  -19  7/7  4.75  No 14 0 0 |", "|   0  MIG 1g.5gb  19  9/7  4.75  No 14 0 0 |",
    "|   0  MIG ../../etc  19  7/7  4.75  No 14 0 0 |", "|   0  MIG 1g.5gb  1234567  7/7  4.75  No |",
    "GPU -1 Profile ID 19 Placements: {0,1}:1", "GPU 0 Profile ID 19 Placements: {-1}:1",
    "GPU 0 Profile ID 19 Placements: {}:1", "GPU 0 Profile ID 19 Placements: {0}:0",
    "|   0  MIG 3g.20gb  9  1  -4:4 |", "|   0  MIG 3g.20gb  9  1  4:0 |",
    "|" * (MAX_OUTPUT_CHARS + 10), ("|   0  MIG 1g.5gb  19  7/7  4.75  No 14 0 0 |\n" * 3),
])
def test_hostile_output_never_raises_and_gives_nothing_odd(text):
    rows = smi.parse_lgip(text)
    assert len(rows) <= 1 and all(r.profile == "1g.5gb" and r.id == 19 for r in rows)
    assert all(p.start >= 0 and p.size > 0 for g in smi.parse_lgipp(text).values() for ps in g.values() for p in ps)
    assert smi.parse_lgi(text) == []


# --------------------------------------------------------------------------
# read_mig


def test_read_mig_on_the_recorded_h100_layout():
    table = enabled_table()
    runner = Runner(table)
    node = smi.read_mig(runner, inventory_of(table))
    assert node.error is None and node.source == "nvidia-smi"
    (gpu,) = node.gpus
    assert (gpu.uuid, gpu.index, gpu.product, gpu.mode, gpu.pending) == (H100, 0, "NVIDIA H100 PCIe", True, True)
    assert gpu.capability == CATALOG["NVIDIA H100 PCIe"]  # its own -lgip and -lgipp, equal to the catalog's
    assert gpu.instances == tuple(
        GpuInstance(gi=gi, profile=profile, placement=placement,
                    compute=(ComputeInstance(gi=gi, ci=0, profile=profile, uuid=H100_MIGS[(gi, 0)]),))
        for gi, profile, placement in ((2, "3g.40gb", Placement(4, 4)), (7, "1g.10gb", Placement(0, 1)),
                                       (8, "1g.10gb", Placement(1, 1)), (9, "1g.10gb", Placement(2, 1))))
    assert node.processes == [GpuProcess(gpu=H100, pid=4242, name="python3", gi=7, ci=0),
                              GpuProcess(gpu=H100, pid=77, name="Xorg", gi=None, ci=None)]
    assert runner.calls == [["nvidia-smi", "-q", "-x"], ["nvidia-smi", "mig", "-lgip"],
                            ["nvidia-smi", "mig", "-lgipp"], ["nvidia-smi", "mig", "-lgi"], ["nvidia-smi", "mig", "-lci"]]


def test_read_mig_mig_off_takes_the_catalog_and_lists_no_instances():
    table = enabled_table(**{"nvidia-smi -q -x": ok(query_xml("Disabled", "Enabled", migs=False))})
    runner = Runner(table)
    inventory = Inventory(gpus=[Gpu(uuid=H100, index=0, name="NVIDIA H100 PCIe")], source="nvidia-smi")
    node = smi.read_mig(runner, inventory)
    (gpu,) = node.gpus
    assert (gpu.mode, gpu.pending, gpu.instances) == (False, True, ())
    assert gpu.capability is CATALOG["NVIDIA H100 PCIe"]
    assert runner.calls == [["nvidia-smi", "-q", "-x"]]  # no GPU in MIG mode: no nvidia-smi mig at all


def test_read_mig_gpu_without_mig_and_unknown_products():
    table = enabled_table(**{"nvidia-smi -q -x": ok(query_xml("N/A", "N/A", migs=False))})
    inventory = Inventory(gpus=[Gpu(uuid=H100, index=0, name="NVIDIA H100 PCIe"),
                                Gpu(uuid=OTHER, index=1, name="NVIDIA A10")], source="nvidia-smi")
    node = smi.read_mig(Runner(table), inventory)
    assert [(g.uuid, g.mode, g.pending, g.capability) for g in node.gpus] == [
        (H100, None, None, None), (OTHER, None, None, None)]


@pytest.mark.parametrize("broken", ["nvidia-smi -q -x", "nvidia-smi mig -lgip", "nvidia-smi mig -lgi"])
def test_read_mig_failure_is_the_tool_s_words(broken):
    table = enabled_table(**{broken: (9, "", "Insufficient Permissions\n")})
    node = smi.read_mig(Runner(table), inventory_of(enabled_table()))
    assert node.gpus == [] and node.source == "nvidia-smi"
    assert node.error == "`%s` failed (rc 9): Insufficient Permissions" % broken


def test_read_mig_none_found_is_not_a_failure():
    table = enabled_table(**{"nvidia-smi mig -lgi": (6, "No GPU instances found: Not Found\n", ""),
                             "nvidia-smi mig -lci": (6, "No compute instances found: Not Found\n", "")})
    node = smi.read_mig(Runner(table), inventory_of(enabled_table()))
    assert node.error is None and node.gpus[0].instances == ()


@pytest.mark.parametrize("out", ["not xml", "<other/>", "x" * (MAX_OUTPUT_CHARS + 1)])
def test_read_mig_unreadable_query_is_an_error(out):
    node = smi.read_mig(Runner(enabled_table(**{"nvidia-smi -q -x": ok(out)})), inventory_of(enabled_table()))
    assert node.gpus == [] and node.error


def test_read_mig_inventory_error_and_no_gpus():
    assert smi.read_mig(Runner({}), Inventory(error="nvidia-smi not found on PATH")).error == "nvidia-smi not found on PATH"
    runner = Runner({})
    assert smi.read_mig(runner, Inventory(source="nvidia-smi")).gpus == [] and runner.calls == []


# --------------------------------------------------------------------------
# Command lines


def test_command_lines():
    assert smi.mode_argv(H100, True) == ["nvidia-smi", "-i", H100, "-mig", "1"]
    assert smi.mode_argv(H100, False) == ["nvidia-smi", "-i", H100, "-mig", "0"]
    assert smi.create_gi_argv(3, 9, 4) == ["nvidia-smi", "mig", "-i", "3", "-cgi", "9:4"]
    assert smi.create_ci_argv(3, 2, 0) == ["nvidia-smi", "mig", "-i", "3", "-gi", "2", "-cci", "0"]
    assert smi.destroy_ci_argv(3, 2, 1) == ["nvidia-smi", "mig", "-i", "3", "-gi", "2", "-ci", "1", "-dci"]
    assert smi.destroy_ci_argv(3, 2) == ["nvidia-smi", "mig", "-i", "3", "-gi", "2", "-dci"]
    assert smi.destroy_gi_argv(3, 2) == ["nvidia-smi", "mig", "-i", "3", "-gi", "2", "-dgi"]


# --------------------------------------------------------------------------
# apply_mig

CGI_LINES = h100("mig-cgi-C.txt").splitlines(True)  # GI 2 (3g.40gb), its CI 0, then GI 7, 8, 9 and their CIs


def test_mode_runs_the_documented_line_and_accepts_a_pending_answer():
    pending = recorded("mps-test_a100-sxm4-40gb_mig-enable-pending.txt")
    for out in (h100("mig-enable.txt"), pending):
        runner = Runner({("nvidia-smi", "-i", H100, "-mig", "1"): ok(out)})
        done = smi.apply_mig(runner, inventory_of(enabled_table()), MigOp(kind="mode", gpu=H100, enabled=True))
        assert done.error is None and runner.calls == [["nvidia-smi", "-i", H100, "-mig", "1"]]
    runner = Runner({("nvidia-smi", "-i", H100, "-mig", "0"): (1, "", "Unable to disable MIG Mode: In use\n")})
    done = smi.apply_mig(runner, inventory_of(enabled_table()), MigOp(kind="mode", gpu=H100, enabled=False))
    assert done.error == "`nvidia-smi -i %s -mig 0` failed (rc 1): Unable to disable MIG Mode: In use" % H100


def test_a_gpu_the_inventory_does_not_list_is_refused_by_name():
    runner = Runner(enabled_table())
    done = smi.apply_mig(runner, inventory_of(enabled_table()), MigOp(kind="destroy", gpu=OTHER, gi=7))
    assert done.error == "GPU %s is not one of the node's GPUs" % OTHER and runner.calls == []


def test_create_reads_ids_and_uuids_from_what_nvidia_smi_printed():
    table = enabled_table(**{"nvidia-smi mig -i 0 -cgi 9:4": ok(CGI_LINES[0]),
                             "nvidia-smi mig -i 0 -gi 2 -cci 2": ok(CGI_LINES[1])})
    runner = Runner(table)
    op = MigOp(kind="create", gpu=H100, profile="3g.40gb", placement=4)
    done = smi.apply_mig(runner, inventory_of(enabled_table()), op)
    assert done.error is None
    assert done.made == GpuInstance(gi=2, profile="3g.40gb", placement=Placement(4, 4), compute=(
        ComputeInstance(gi=2, ci=0, profile="3g.40gb", uuid=H100_MIGS[(2, 0)]),))
    assert runner.calls[:4] == [["nvidia-smi", "mig", "-i", "0", "-lgip"], ["nvidia-smi", "mig", "-i", "0", "-cgi", "9:4"],
                                ["nvidia-smi", "mig", "-i", "0", "-gi", "2", "-cci", "2"],
                                ["nvidia-smi", "mig", "-i", "0", "-lgi"]]
    assert ["nvidia-smi", "-L"] in runner.calls and ["nvidia-smi", "-q", "-x"] in runner.calls


def test_create_compute_profiles_in_an_existing_gpu_instance():
    made = ("Successfully created compute instance ID  %d on GPU  0 GPU instance ID  2 using profile "
            "MIG %s (ID  %d)\n")
    table = enabled_table(**{"nvidia-smi mig -i 0 -gi 2 -cci 0": ok(made % (0, "1c.3g.40gb", 0)),
                             "nvidia-smi mig -i 0 -gi 2 -cci 1": ok(made % (1, "2c.3g.40gb", 1))})
    runner = Runner(table)
    op = MigOp(kind="create", gpu=H100, gi=2, compute=("1c.3g.40gb", "2c.3g.40gb"))
    done = smi.apply_mig(runner, inventory_of(enabled_table()), op)
    assert done.error is None and done.made.gi == 2 and done.made.placement == Placement(4, 4)
    assert [(c.ci, c.profile) for c in done.made.compute] == [(0, "1c.3g.40gb"), (1, "2c.3g.40gb")]
    assert not any("-cgi" in call for call in runner.calls)


def test_a_failed_compute_step_destroys_the_gpu_instance_it_made():
    refused = "Failed to create compute instances: Insufficient Resources\n"
    table = enabled_table(**{"nvidia-smi mig -i 0 -cgi 9:4": ok(CGI_LINES[0]),
                             "nvidia-smi mig -i 0 -gi 2 -cci 2": (2, "", refused),
                             "nvidia-smi mig -i 0 -gi 2 -dgi": ok("Successfully destroyed GPU instance ID  2 from GPU  0\n")})
    runner = Runner(table)
    done = smi.apply_mig(runner, inventory_of(enabled_table()),
                         MigOp(kind="create", gpu=H100, profile="3g.40gb", placement=4))
    assert done.made is None
    assert done.error == ("`nvidia-smi mig -i 0 -gi 2 -cci 2` failed (rc 2): Failed to create compute instances: "
                          "Insufficient Resources; the GPU instance 2 it made was destroyed again")
    assert runner.calls[-1] == ["nvidia-smi", "mig", "-i", "0", "-gi", "2", "-dgi"]


def test_a_failed_gpu_instance_step_is_the_tool_s_words_and_nothing_else_runs():
    runner = Runner(enabled_table(**{"nvidia-smi mig -i 0 -cgi 9:4": (2, NO_ROOM, "")}))
    done = smi.apply_mig(runner, inventory_of(enabled_table()),
                         MigOp(kind="create", gpu=H100, profile="3g.40gb", placement=4))
    assert done.error == ("`nvidia-smi mig -i 0 -cgi 9:4` failed (rc 2): Unable to create a GPU instance on GPU  0 "
                          "using profile 9: Insufficient Resources")
    assert runner.calls[-1] == ["nvidia-smi", "mig", "-i", "0", "-cgi", "9:4"]


@pytest.mark.parametrize("op,why", [
    (MigOp(kind="create", gpu=H100, profile="5g.50gb", placement=0), "not a profile GPU"),
    (MigOp(kind="create", gpu=H100, profile="../x", placement=0), "not a GPU instance profile name"),
    (MigOp(kind="create", gpu=H100, profile="3g.40gb", placement=-1), "not a start slice"),
    (MigOp(kind="create", gpu=H100, profile="3g.40gb", placement=True), "not a start slice"),
    (MigOp(kind="create", gpu=H100, profile="3g.40gb", placement=0, compute=("5c.3g.40gb",)), "not a compute"),
    (MigOp(kind="create", gpu=H100, gi=99, compute=("1c.3g.40gb",)), "no GPU instance 99"),
    (MigOp(kind="create", gpu=H100, gi=-2), "not an id"),
    (MigOp(kind="destroy", gpu=H100, gi=-1), "not ids"),
    (MigOp(kind="destroy", gpu=H100, gi=2, ci=10 ** 9), "not ids"),
    (MigOp(kind="mode", gpu=H100, enabled=None), "true or false"),
    (MigOp(kind="reset", gpu=H100), "unknown MIG op"),
])
def test_bad_ops_are_refused_before_any_change(op, why):
    runner = Runner(enabled_table())
    done = smi.apply_mig(runner, inventory_of(enabled_table()), op)
    assert why in (done.error or "")
    assert not any(set(call) & {"-cgi", "-cci", "-dci", "-dgi", "-mig"} for call in runner.calls)


def test_destroy_compute_instance_and_gpu_instance():
    dci, dgi = h100("mig-dci.txt").splitlines(True), h100("mig-dgi.txt").splitlines(True)
    table = enabled_table(**{"nvidia-smi mig -i 0 -gi 7 -ci 0 -dci": ok(dci[0]),
                             "nvidia-smi mig -i 0 -gi 7 -dci": ok(dci[0]), "nvidia-smi mig -i 0 -gi 7 -dgi": ok(dgi[0])})
    runner = Runner(table)
    inventory = inventory_of(enabled_table())
    assert smi.apply_mig(runner, inventory, MigOp(kind="destroy", gpu=H100, gi=7, ci=0)).error is None
    assert smi.apply_mig(runner, inventory, MigOp(kind="destroy", gpu=H100, gi=7)).error is None
    assert runner.calls == [["nvidia-smi", "mig", "-i", "0", "-gi", "7", "-ci", "0", "-dci"],
                            ["nvidia-smi", "mig", "-i", "0", "-gi", "7", "-dci"],
                            ["nvidia-smi", "mig", "-i", "0", "-gi", "7", "-dgi"]]


def test_destroy_gpu_instance_in_use_is_the_tool_s_words():
    table = enabled_table(**{"nvidia-smi mig -i 0 -gi 7 -dci": (6, "", "No compute instances found: Not Found\n"),
                             "nvidia-smi mig -i 0 -gi 7 -dgi": (19, IN_USE, "")})
    done = smi.apply_mig(Runner(table), inventory_of(enabled_table()), MigOp(kind="destroy", gpu=H100, gi=7))
    assert done.error == ("`nvidia-smi mig -i 0 -gi 7 -dgi` failed (rc 19): Unable to destroy GPU instance ID  7 "
                          "from GPU  0: In use by another client")


def test_a_runner_that_raises_or_answers_garbage_never_raises():
    def boom(argv):
        raise OSError("no such file")

    done = smi.apply_mig(boom, inventory_of(enabled_table()), MigOp(kind="mode", gpu=H100, enabled=True))
    assert "cannot run" in done.error
    assert smi.read_mig(boom, inventory_of(enabled_table())).error
    table = enabled_table(**{"nvidia-smi mig -i 0 -cgi 9:4": ok("\x00garbage " * 1000)})
    done = smi.apply_mig(Runner(table), inventory_of(enabled_table()),
                         MigOp(kind="create", gpu=H100, profile="3g.40gb", placement=4))
    assert done.error.startswith("`nvidia-smi mig -i 0 -cgi 9:4` did not say what it made")
