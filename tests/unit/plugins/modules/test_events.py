# -*- coding: utf-8 -*-
# Copyright: contributors to bcd.devices
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""Tests for the bcd.devices.events module: listing and acknowledging the journal."""

from __future__ import annotations

import json
import os

import pytest
from ansible_collections.bcd.devices.tests.unit.module_args import patch_module_args

from ansible_collections.bcd.devices.plugins.module_utils.state.events import Journal, NodeKey, verify_report
from ansible_collections.bcd.devices.plugins.modules import events as events_module

BOUND = {"node_id": "node-a", "boot_id": "b", "allocation_id": "alloc_1", "generation": 3,
         "device_ids": ["GPU-1"], "cdi_devices": ["bcd.dev/gpu=GPU-1"],
         "cdi_spec_path": "/etc/cdi/bcd-alloc_1.json", "env_file": "/run/bcd/allocations/alloc_1.env"}
FAILED = {"node_id": "node-a", "allocation_id": "alloc_2", "generation": 3, "reason": "overlap",
          "message": "GPU-1 is assigned to alloc_1"}
RELEASED = {"node_id": "node-a", "boot_id": "b", "allocation_id": "alloc_1", "generation": 4,
            "device_ids": ["GPU-1"]}


def run(capsys, **args):
    with patch_module_args(args):
        with pytest.raises(SystemExit):
            events_module.main()
    captured = capsys.readouterr()
    result = json.loads(captured.out)
    # Module warnings travel in the result; once Ansible's controller side is imported
    # in the same process (another test did it), they are shown on stderr instead.
    result["_shown_warnings"] = json.dumps(result.get("warnings", [])) + captured.err
    return result


def snapshot(path):
    found = {}
    for dirpath, dirnames, filenames in os.walk(path):
        for name in dirnames + filenames:
            p = os.path.join(dirpath, name)
            st = os.stat(p)
            content = open(p, "rb").read() if os.path.isfile(p) else None
            found[p] = (st.st_mode, st.st_mtime_ns, content)
    return found


@pytest.fixture
def host(tmp_path):
    """A test host (a directory) whose node journaled three events."""
    root = tmp_path / "node-a"
    state = str(root / "var" / "lib" / "bcd")
    key = NodeKey.load_or_create(os.path.join(state, "node.key"))
    journal = Journal(state)
    journal.append("AllocationBound", BOUND, key)
    journal.append("AllocationFailed", FAILED)
    journal.append("AllocationReleased", RELEASED, key)
    return {"root": str(root), "state": state, "key": key}


def test_lists_unacknowledged_events_without_change(capsys, host):
    result = run(capsys, root=host["root"])
    assert result["changed"] is False
    assert result["acknowledged"] == 0
    assert [e["seq"] for e in result["events"]] == [1, 2, 3]
    assert [e["type"] for e in result["events"]] == ["AllocationBound", "AllocationFailed", "AllocationReleased"]
    # what the module returns still verifies on the controller
    assert verify_report(result["events"][0], host["key"].public_key_b64())
    assert verify_report(result["events"][2], host["key"].public_key_b64())


def test_listing_writes_nothing(capsys, host):
    before = snapshot(host["root"])
    run(capsys, root=host["root"])
    assert snapshot(host["root"]) == before  # not even a lock file


def test_acknowledges_and_is_idempotent(capsys, host):
    result = run(capsys, root=host["root"], ack_through=2)
    assert result["changed"] is True
    assert result["acknowledged"] == 2
    assert [e["seq"] for e in result["events"]] == [3]
    again = run(capsys, root=host["root"], ack_through=2)
    assert again["changed"] is False
    assert again["acknowledged"] == 0
    assert [e["seq"] for e in again["events"]] == [3]
    assert [e["seq"] for e in Journal(host["state"]).unacked()] == [3]


def test_check_mode_reports_the_acknowledgement_and_writes_nothing(capsys, host):
    before = snapshot(host["root"])
    result = run(capsys, root=host["root"], ack_through=2, _ansible_check_mode=True)
    assert result["changed"] is True
    assert result["acknowledged"] == 2
    assert [e["seq"] for e in result["events"]] == [3]
    assert snapshot(host["root"]) == before
    assert [e["seq"] for e in Journal(host["state"]).unacked()] == [1, 2, 3]


def test_check_mode_on_a_node_without_state_creates_nothing(capsys, tmp_path):
    result = run(capsys, root=str(tmp_path), ack_through=5, _ansible_check_mode=True)
    assert result["changed"] is False
    assert result["events"] == []
    assert os.listdir(tmp_path) == []


def test_ack_on_a_node_without_state_creates_nothing(capsys, tmp_path):
    result = run(capsys, root=str(tmp_path), ack_through=5)
    assert result["changed"] is False
    assert result["acknowledged"] == 0
    assert os.listdir(tmp_path) == []


def test_custom_state_dir_under_root(capsys, tmp_path):
    state = tmp_path / "srv" / "bcd"
    Journal(str(state)).append("AllocationFailed", FAILED)
    result = run(capsys, root=str(tmp_path), state_dir="/srv/bcd")
    assert [e["seq"] for e in result["events"]] == [1]


def test_torn_journal_is_a_warning_not_a_failure(capsys, host):
    with open(os.path.join(host["state"], "events.jsonl"), "ab") as f:
        f.write(b'{"seq": 4, "ty')
    result = run(capsys, root=host["root"])
    assert not result.get("failed")
    assert [e["seq"] for e in result["events"]] == [1, 2, 3]
    assert "incomplete line" in result["_shown_warnings"]


@pytest.mark.parametrize("args,message", [
    ({"ack_through": -1}, "must not be negative"),
    ({"state_dir": "../../../etc"}, "outside root"),
])
def test_bad_options_fail_cleanly(capsys, host, args, message):
    result = run(capsys, root=host["root"], **args)
    assert result["failed"] is True
    assert message in result["msg"]
    assert "Traceback" not in json.dumps(result)


def test_corrupt_seq_file_fails_with_its_name(capsys, host):
    with open(os.path.join(host["state"], "events.seq"), "w") as f:
        f.write("not a number")
    result = run(capsys, root=host["root"], ack_through=1)
    assert result["failed"] is True
    assert "events.seq" in result["msg"]
    assert [e["seq"] for e in Journal(host["state"]).unacked()] == [1, 2, 3]


def test_state_dir_that_is_a_file_fails(capsys, tmp_path):
    (tmp_path / "var").write_text("x")
    result = run(capsys, root=str(tmp_path), state_dir="/var")
    assert result["failed"] is True
    assert "not a directory" in result["msg"]


def test_takes_the_same_node_options_as_the_other_modules(capsys, node):
    """root, fakehw and state_dir name the node as for bcd.devices.holds; events reads only the state
    directory, so it opens no hardware file (nor ships the node's readers: docs/performance.md)."""
    node.run(1, [{"allocation_id": "a1", "devices": [{"id": "GPU-nope"}]}])
    listed = run(capsys, root=node.root, fakehw=node.fakehw, state_dir="/var/lib/bcd")
    assert [e["type"] for e in listed["events"]] == ["AllocationFailed"]
    broken = os.path.join(node.base, "broken.yml")
    with open(broken, "w") as handle:
        handle.write("gpus: 7\n")
    again = run(capsys, root=node.root, fakehw=broken)
    assert "failed" not in again and [e["type"] for e in again["events"]] == ["AllocationFailed"]
