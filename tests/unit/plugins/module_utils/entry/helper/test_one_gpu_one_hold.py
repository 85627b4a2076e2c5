# -*- coding: utf-8 -*-
# Copyright: contributors to bcd.devices
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""Issue 33, item 1, through the helper as the tests serve it: root refuses a ``hold.write`` whose atoms another
allocation's spec, env file, pending release or a running VM has, with the planner's ``overlap`` messages
(``domain/plan/conflicts.py``); an allocation's own hold written again is accepted."""

from __future__ import annotations

import json
import os
from pathlib import Path

from ansible_collections.bcd.devices.plugins.module_utils.entry.helper import reading
from ansible_collections.bcd.devices.tests.unit.builders import device, request
from ansible_collections.bcd.devices.tests.unit.conftest import GPU_A, GPU_B


def write(helper, allocation_id, device_id, kind="cdi", device_class="gpu"):
    hold = request(allocation_id, devices=[device(device_id, device_class)])
    return helper.request({"op": "hold.write", "kind": kind, "hold": hold})


def spec(helper, allocation_id):
    return helper.node("/etc/cdi/bcd-%s.json" % allocation_id)


def test_two_holds_on_one_gpu_are_refused_whole_vs_part_and_part_vs_whole(helper):
    assert write(helper, "a1", GPU_B) == {"ok": True}  # a1 = GPU 1 whole
    assert write(helper, "a2", GPU_B + "/s0", device_class="gpu.slot") == {
        "ok": False, "retryable": True, "error": "overlap: %s is assigned to a1" % GPU_B}
    assert write(helper, "a3", GPU_B + "/s1", kind="allocation-env", device_class="gpu.slot") == {
        "ok": False, "retryable": True, "error": "overlap: %s is assigned to a1" % GPU_B}
    assert not os.path.exists(spec(helper, "a2")) and not os.path.exists(helper.node("/run/bcd/allocations/a3.env"))
    # a1's own hold written again (a rebind, a rerender) is no conflict with itself
    assert write(helper, "a1", GPU_B) == {"ok": True}
    assert write(helper, "a1", GPU_B, kind="allocation-env") == {"ok": True}
    # part vs whole: slots of GPU_A, then GPU_A whole
    assert write(helper, "b1", GPU_A + "/s0", device_class="gpu.slot") == {"ok": True}
    assert write(helper, "b2", GPU_A + "/s1", device_class="gpu.slot") == {"ok": True}  # another slot: shared
    assert write(helper, "b3", GPU_A + "/s0", device_class="gpu.slot") == {
        "ok": False, "retryable": True, "error": "overlap: %s/s0 is assigned to b1" % GPU_A}
    assert write(helper, "b4", GPU_A) == {
        "ok": False, "retryable": True, "error": "overlap: %s has %s/s0 assigned to b1" % (GPU_A, GPU_A)}
    # a1 released (its files removed, as a pass does before the bind that takes its GPU): the GPU is free
    for kind in ("cdi", "allocation-env"):
        assert helper.request({"op": "hold.remove", "kind": kind, "allocation_id": "a1"}) == {"ok": True}
    assert write(helper, "a2", GPU_B + "/s0", device_class="gpu.slot") == {"ok": True}


def test_an_env_file_without_its_spec_and_a_spec_in_var_run_cdi_claim_too(helper):
    assert write(helper, "a1", GPU_B, kind="allocation-env") == {"ok": True}  # a bind that wrote only its env file
    assert write(helper, "a2", GPU_B) == {"ok": False, "retryable": True,
                                          "error": "overlap: %s has %s (env file) assigned to a1" % (GPU_B, GPU_B)}
    # the env file does not say which part: another allocation's slot binds (each bind writes its env file first)
    assert write(helper, "a4", GPU_B + "/s3", kind="allocation-env", device_class="gpu.slot") == {"ok": True}
    assert write(helper, "a4", GPU_B + "/s3", device_class="gpu.slot") == {"ok": True}
    os.makedirs(helper.node("/var/run/cdi"))
    os.rename(helper.node("/run/bcd/allocations/a1.env"), helper.node("/var/run/cdi/ignored.env"))
    assert write(helper, "c1", GPU_A) == {"ok": True}
    os.rename(spec(helper, "c1"), helper.node("/var/run/cdi/bcd-c1.json"))
    assert write(helper, "c2", GPU_A) == {"ok": False, "retryable": True,
                                          "error": "overlap: %s is assigned to c1" % GPU_A}


def test_a_gpu_a_running_vm_has_and_a_pending_release_are_refused(helper):
    hardware = json.loads(Path(helper.fakehw).read_text())
    hardware["domains"] = [{"instance_id": "vm-1", "gpus": [GPU_A]}]
    Path(helper.fakehw).write_text(json.dumps(hardware))
    assert write(helper, "a1", GPU_A) == {"ok": False, "retryable": True,
                                          "error": "overlap: %s is passed through to instance vm-1" % GPU_A}
    state = Path(helper.node("/var/lib/bcd"))
    state.mkdir(parents=True)
    state.joinpath("releasing.json").write_text(json.dumps({"releases": {"k1": {
        "device_ids": [GPU_B], "generation": 2, "since": "2026-12-05T00:00:00Z"}}}))
    assert write(helper, "a2", GPU_B) == {"ok": False, "retryable": True,
                                          "error": "overlap: %s is assigned to k1" % GPU_B}
    assert write(helper, "k1", GPU_B) == {"ok": True}  # its own release taken back: no conflict


def test_root_reads_each_hold_file_once_a_change_and_sees_every_change(helper, monkeypatch):
    """hold.write checks every hold on disk; what an earlier request read is kept while the file is unchanged
    (entry/helper/reading.py, HoldFileCache), so 24 writes read 24 specs, not 300. A spec changed in place, renamed
    away or replaced is read again."""
    read = []
    real = reading.read_spec
    monkeypatch.setattr(reading, "read_spec", lambda path: read.append(path) or real(path))
    for number in range(24):
        assert write(helper, "s%d" % number, "%s/s%d" % (GPU_A, number), device_class="gpu.slot") == {"ok": True}
    assert len(read) == 23 and len(set(read)) == 23  # each earlier spec once
    # root edits s0's spec in place to name GPU_B whole (same inode, new content): it is read again
    path = spec(helper, "s0")
    text = open(path).read().replace("%s/s0" % GPU_A, GPU_B).replace('"name": "%s_s0"' % GPU_A, '"name": "%s"' % GPU_B)
    with open(path, "r+") as handle:
        handle.write(text)
        handle.truncate()
    assert write(helper, "t1", GPU_B) == {"ok": False, "retryable": True, "error": "overlap: %s is assigned to s0" % GPU_B}
    os.rename(path, path + ".moved")  # gone from the listing: no longer a claim
    assert write(helper, "t1", GPU_B) == {"ok": True}


def test_an_env_file_naming_gpus_its_spec_lacks_claims_them(helper):
    """The account has root write a1's env file for GPU_B while a1's spec is GPU_A's: the env file hands GPU_B to
    a1's workload, so root writes no other allocation's hold of GPU_B (found by test_model_helper.py)."""
    assert write(helper, "a1", GPU_A) == {"ok": True}
    assert write(helper, "a1", GPU_B, kind="allocation-env") == {"ok": True}  # its own file: no conflict
    refused = {"ok": False, "retryable": True, "error": "overlap: %s has %s (env file) assigned to a1" % (GPU_B, GPU_B)}
    assert write(helper, "a2", GPU_B) == refused
    assert write(helper, "a2", GPU_B, kind="allocation-env") == refused
    assert not os.path.exists(spec(helper, "a2")) and not os.path.exists(helper.node("/run/bcd/allocations/a2.env"))
    # a slot of GPU_B is no conflict (the env file does not say which part), nor is a1's own spec's GPU
    assert write(helper, "a3", GPU_B + "/s1", device_class="gpu.slot") == {"ok": True}
    # a1's env file written again for its spec's GPU: GPU_B is free
    assert write(helper, "a1", GPU_A, kind="allocation-env") == {"ok": True}
    assert write(helper, "a2", GPU_B) == {"ok": False, "retryable": True,
                                          "error": "overlap: %s has %s/s1 assigned to a3" % (GPU_B, GPU_B)}
    assert helper.request({"op": "hold.remove", "kind": "cdi", "allocation_id": "a3"}) == {"ok": True}
    assert write(helper, "a2", GPU_B) == {"ok": True}
