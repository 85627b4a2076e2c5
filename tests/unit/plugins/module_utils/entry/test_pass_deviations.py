# -*- coding: utf-8 -*-
# Copyright: contributors to bcd.devices
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""The four ways a pass strayed from the spec page (issue 33, "The pass, against the spec page"), each
reproduced through ``entry.converge.run_pass`` (the module's pass) on a fakehw node and asserted by what
a user sees: the files on the node, ``changed``, refusals and events.

1. A hold bound again into its own running slice (moved to other GPUs, or bound again after a release)
   is admitted once: the slice's limits are replaced by the new hold's, not counted twice.
2. An env file whose bind did not finish does not outlive it: the failed bind removes it, and a pass
   that finds an env file with no live spec (a pass died in between) removes it, its GPUs claimed until
   then.
3. A fixed input at a generation left ``PROGRESSING`` never gets a refusal made for the input it
   replaces: an allocation refused at that generation and sent with another assignment fails the pass
   before anything is written, as after a finished generation.
4. ``changed`` is true whenever the pass changed the node, also when an action failed half-way.
"""

from __future__ import annotations

import errno
import json
import os

import pytest

from ansible_collections.bcd.devices.plugins.module_utils.domain.slices import TransientSliceError
from ansible_collections.bcd.devices.plugins.module_utils.entry.converge import PassError, run_pass
from ansible_collections.bcd.devices.plugins.module_utils.node.helper_client import HelperClient
from ansible_collections.bcd.devices.plugins.module_utils.node.hosts import FakeHwHost
from ansible_collections.bcd.devices.plugins.module_utils.node.slices import RecordSlices
from ansible_collections.bcd.devices.plugins.module_utils.node.writers import DirectWriter, HelperWriter
from ansible_collections.bcd.devices.plugins.module_utils.state.events import Journal
from ansible_collections.bcd.devices.tests.unit.builders import hold
from ansible_collections.bcd.devices.tests.unit.conftest import GPU_A, GPU_B, GPU_C
from ansible_collections.bcd.devices.tests.unit.plugins.module_utils.domain.test_admission import write_memory
from ansible_collections.bcd.devices.tests.unit.plugins.module_utils.entry.test_helper_kube import (  # noqa: F401  # pylint: disable=unused-import
    helper_for,
)

GIB = 1 << 30
MIB = 1 << 20
SLICE = "bcd-alloc-a1.slice"


def events(node, event_type=None, allocation_id=None):
    return [(e["type"], e["body"]["allocation_id"], e["body"].get("generation"), e["body"].get("device_ids"))
            for e in Journal(node.state()).unacked()
            if (event_type is None or e["type"] == event_type)
            and (allocation_id is None or e["body"]["allocation_id"] == allocation_id)]


def steps(result):
    return [(a.kind, a.allocation_id) for a in result.plan.actions]


def failures(result):
    return dict((f.allocation_id, (f.reason, f.message)) for f in result.plan.failures)


def slice_record(node, name=SLICE):
    content = node.read("/run/bcd/slices/%s.json" % name)
    return None if content is None else json.loads(content)


def run_workload(node, name=SLICE, **use):
    """A workload in the slice, as the host shows it: populated, using ``use`` (memory_current, hugetlb_current)."""
    data = slice_record(node, name)
    data["populated"] = True
    data.update(use)
    node.write("/run/bcd/slices/%s.json" % name, json.dumps(data))


def env_names(node):
    """The GPUs each env file on the node names in NVIDIA_VISIBLE_DEVICES."""
    found = {}
    directory = node.path("/run/bcd/allocations")
    for name in sorted(os.listdir(directory)) if os.path.isdir(directory) else []:
        for line in node.read("/run/bcd/allocations/" + name).decode().splitlines():
            if line.startswith("NVIDIA_VISIBLE_DEVICES="):
                found[name] = line.split("=", 1)[1]
    return found


def spec_devices(node, allocation_id):
    content = node.read("/etc/cdi/bcd-%s.json" % allocation_id)
    return None if content is None else sorted(d["name"] for d in json.loads(content)["devices"])


# --- 4. changed is true whenever the pass changed the node ----------------------------------------------------------


def test_a_release_whose_env_file_cannot_be_removed_says_changed(node, monkeypatch):
    node.run(1, [hold("a1", GPU_A)])
    real = DirectWriter.remove_node_file

    def stuck(self, kind, allocation_id):
        if kind == "allocation-env":
            raise OSError(errno.EBUSY, "Device or resource busy")
        return real(self, kind, allocation_id)

    monkeypatch.setattr(DirectWriter, "remove_node_file", stuck)
    checked = node.run(2, [], check_mode=True)
    result = node.run(2, [])
    assert checked.changed is True
    assert not node.exists("/etc/cdi/bcd-a1.json")  # the spec went...
    assert node.exists("/run/bcd/allocations/a1.env")  # ...the env file could not
    assert result.section["state"] == "PROGRESSING"
    assert result.changed is True  # was: false, though the hold is gone
    assert result.plan.holds == []
    monkeypatch.undo()
    finished = node.run(2, [])
    assert steps(finished) == [("finish-release", "a1")] and finished.changed is True
    assert not node.exists("/run/bcd/allocations/a1.env")
    assert events(node, "AllocationReleased") == [("AllocationReleased", "a1", 2, [GPU_A])]


def test_a_release_whose_slice_cannot_be_stopped_says_changed(node, monkeypatch):
    node.run(1, [hold("a1", GPU_A, limits={"cpus": "0-1"})])

    def refuse(self, name):
        raise TransientSliceError("systemctl stop %s failed (1): Access denied" % name)

    monkeypatch.setattr(RecordSlices, "remove", refuse)
    result = node.run(2, [])
    assert result.section["state"] == "PROGRESSING"
    assert not node.exists("/etc/cdi/bcd-a1.json")
    assert events(node, "AllocationReleased") == [("AllocationReleased", "a1", 2, [GPU_A])]  # signed and journaled
    assert result.changed is True  # was: false
    assert [e["type"] for e in result.events if e["body"]["generation"] == 2] == ["AllocationReleased"]


def test_a_pass_whose_every_action_fails_before_touching_the_node_says_unchanged(node, monkeypatch):
    # the other side of it: changed is what was done, not what was planned
    failing = OSError(errno.EROFS, "Read-only file system")

    def nothing(self, kind, allocation_id, content, hold=None):
        raise failing

    monkeypatch.setattr(DirectWriter, "write_node_file", nothing)
    result = node.run(1, [hold("a1", GPU_A)])
    assert result.section["state"] == "PROGRESSING"
    assert result.changed is False
    assert env_names(node) == {} and not node.exists("/etc/cdi/bcd-a1.json")
