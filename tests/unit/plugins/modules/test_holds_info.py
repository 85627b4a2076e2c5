# -*- coding: utf-8 -*-
# Copyright: contributors to bcd.devices
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""The bcd.devices.holds_info module: what a node holds, per GPU, and its public
key, read back from the node without writing anything."""

from __future__ import annotations

import json
import os

import pytest
from ansible_collections.bcd.devices.tests.unit.module_args import patch_module_args

from ansible_collections.bcd.devices.plugins.module_utils.entry.status import status_table
from ansible_collections.bcd.devices.plugins.module_utils.state.events import verify_report
from ansible_collections.bcd.devices.plugins.modules import holds, holds_info

from ansible_collections.bcd.devices.tests.unit.builders import hold, mig, slot
from ansible_collections.bcd.devices.tests.unit.conftest import GPU_A, GPU_B, GPU_C, MIG_A1, MIG_A2


def call(capsys, main, args):
    with patch_module_args(args):
        with pytest.raises(SystemExit):
            main()
    out, err = capsys.readouterr()
    assert "Traceback" not in out + err
    result = json.loads(out)
    result["_stderr"] = err
    return result


def warnings(result, node="node-a"):
    """The warning texts of a result, each without the name of the node it must start with: structured in
    the result, or on stderr once controller code is loaded in the same process (another test file)."""
    texts = [w["event"]["msg"] if isinstance(w, dict) else w for w in result.get("warnings", [])]
    texts.extend(line.split("]: ", 1)[1] for line in result["_stderr"].splitlines() if line.startswith("[WARNING]: "))
    for text in texts:
        assert text.startswith(node + ": "), text
    return [text[len(node) + 2:] for text in texts]


def info(capsys, node, **args):
    args.setdefault("root", node.root)
    args.setdefault("fakehw", node.fakehw)
    return call(capsys, holds_info.main, args)


def converge(capsys, node, generation, devices):
    return call(capsys, holds.main, {"root": node.root, "fakehw": node.fakehw, "generation": generation,
                                     "devices": devices})


def by_uuid(result):
    return dict((gpu["uuid"], gpu) for gpu in result["gpus"])


def test_a_node_without_holds(capsys, node):
    result = info(capsys, node)
    assert result["changed"] is False
    assert result["holds"] == []
    assert [(g["index"], g["uuid"], g["held_by"], g["present"]) for g in result["gpus"]] == [
        (0, GPU_A, None, True), (1, GPU_B, None, True), (2, GPU_C, None, True)]
    assert [(m["id"], m["uuid"], m["held_by"]) for m in result["gpus"][0]["mig"]] == [
        (GPU_A + "/gi1/ci0", MIG_A1, None), (GPU_A + "/gi2/ci0", MIG_A2, None)]
    assert result["inventory_source"] == "fakehw"
    assert result["node_public_key"] is None  # no event signed yet
    assert "cdi" in result["capabilities"]


def test_who_holds_each_gpu_its_mig_instances_and_slots(capsys, node):
    bound = converge(capsys, node, 7, [
        hold("a1", GPU_B), mig("a2", GPU_A + "/gi2/ci0"),
        slot("a3", GPU_C + "/s1"), slot("a4", GPU_C + "/s2")])
    assert bound["section"]["state"] == "CONVERGED"
    result = info(capsys, node)
    assert [h["allocation_id"] for h in result["holds"]] == ["a1", "a2", "a3", "a4"]
    assert result["holds"][1] == {
        "allocation_id": "a2", "reservation_id": "rsv_a2", "generation": 7, "binding": "BINDING_HOLD",
        "device_ids": [GPU_A + "/gi2/ci0"], "cdi_devices": ["bcd.dev/gpu=%s_gi2_ci0" % GPU_A],
        "cdi_spec_path": "/etc/cdi/bcd-a2.json", "env_file": "/run/bcd/allocations/a2.env", "missing_devices": [],
        "stale_edits": [], "locality": None}
    gpus = by_uuid(result)
    assert gpus[GPU_A]["held_by"] is None
    assert [(m["id"], m["held_by"]) for m in gpus[GPU_A]["mig"]] == [(GPU_A + "/gi1/ci0", None),
                                                                     (GPU_A + "/gi2/ci0", "a2")]
    assert gpus[GPU_B]["held_by"] == "a1"
    assert [(s["id"], s["held_by"]) for s in gpus[GPU_C]["slots"]] == [(GPU_C + "/s1", "a3"), (GPU_C + "/s2", "a4")]


def test_the_public_key_checks_the_events_of_the_node(capsys, node):
    bound = converge(capsys, node, 1, [hold("a1", GPU_A)])
    key = info(capsys, node)["node_public_key"]
    assert isinstance(key, str) and len(key) == 44
    assert verify_report(bound["events"][0], key)
    released = converge(capsys, node, 2, [])
    assert [e["type"] for e in released["events"]] == ["AllocationBound", "AllocationReleased"]
    assert all(verify_report(e, key) for e in released["events"])
    assert info(capsys, node)["node_public_key"] == key  # the node keeps its identity


def test_reading_writes_nothing(capsys, node):
    converge(capsys, node, 1, [hold("a1", GPU_A)])
    before = node.listing()
    info(capsys, node)
    info(capsys, node, _ansible_check_mode=True)
    assert node.listing() == before


def test_reading_a_fresh_node_creates_no_state(capsys, node):
    before = node.listing()
    info(capsys, node)
    assert node.listing() == before
    assert not node.exists(node.state_dir)


def test_a_held_gpu_the_inventory_no_longer_lists(capsys, node):
    converge(capsys, node, 1, [hold("a1", GPU_C), mig("a2", GPU_A + "/gi1/ci0")])
    # GPU_C fell off the bus; GPU_A's MIG layout was changed under the hold
    node.set_hardware(gpus=[{"uuid": GPU_A, "index": 0, "minor": 0, "mig": [{"gi": 2, "ci": 0, "uuid": MIG_A2}]}])
    gpus = by_uuid(info(capsys, node))
    assert gpus[GPU_C]["present"] is False
    assert gpus[GPU_C]["held_by"] == "a1"
    assert gpus[GPU_A]["missing_parts"] == [{"id": GPU_A + "/gi1/ci0", "held_by": "a2"}]


def test_a_gpu_a_vm_has(capsys, make_node):
    node = make_node(domains=[{"instance_id": "inst_1", "state": "running", "gpus": [GPU_B]}])
    gpus = by_uuid(info(capsys, node))
    assert gpus[GPU_B]["passed_through_to"] == "inst_1"
    assert gpus[GPU_A]["passed_through_to"] is None


def test_a_damaged_hold_is_listed_with_a_warning(capsys, node):
    node.write("/etc/cdi/bcd-a9.json", "{ not json")
    result = info(capsys, node)
    assert [h["allocation_id"] for h in result["holds"]] == ["a9"]
    assert any("/etc/cdi/bcd-a9.json" in m for m in warnings(result))


def test_an_unprivileged_node_claims_no_capability_that_needs_root(capsys, node, monkeypatch):
    monkeypatch.setattr(os, "geteuid", lambda: 1000)
    result = info(capsys, node)
    assert not {"cdi", "devices.limits", "binding.kubernetes"} & set(result["capabilities"])


@pytest.mark.parametrize("content, words", [
    ("gpus: [", "fakehw"),
    ('{"gpus": [{"uuid": "GPU-1", "index": 0}, {"uuid": "GPU-1", "index": 1}]}', "duplicate"),
])
def test_a_bad_fakehw_file_fails_with_a_clear_message(capsys, node, content, words):
    with open(node.fakehw, "w") as handle:
        handle.write(content)
    result = info(capsys, node)
    assert result["failed"] is True
    assert words in result["msg"]


def test_the_table_is_what_bcd_holds_status_prints_one_line_per_element(capsys, node):
    converge(capsys, node, 1, [hold("alloc_train", GPU_B), mig("alloc_nb", GPU_A + "/gi1/ci0")])
    result = info(capsys, node)
    table = result["table"]
    assert table[0].split() == ["GPU", "UUID", "HELD", "BY", "RESET", "SERVICE", "MIG", "INSTANCES", "AND", "SLOTS"]
    rows = dict((line.split()[0], line.split()) for line in table[1:4])
    assert rows["0"][1] == "GPU-5f1c2a90…000001" and rows["0"][2] == "-"
    assert " ".join(rows["0"][5:]) == "gi1/ci0 alloc_nb, gi2/ci0 free"  # the free part is shown as free
    assert rows["1"][1:3] == ["GPU-5f1c2a90…000002", "alloc_train"]
    assert rows["2"][2] == "-"
    assert all(len(line) <= 100 for line in table)
    status = dict((key, value) for key, value in result.items() if not key.startswith("_") and key != "table")
    assert table == status_table(status).splitlines()
