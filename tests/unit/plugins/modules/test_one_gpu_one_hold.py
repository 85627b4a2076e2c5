# -*- coding: utf-8 -*-
# Copyright: contributors to bcd.devices
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""One GPU, one hold (issue 23): through the module ``bcd.devices.holds`` on a fakehw node, what the
planner's claims guarantee — a bind never runs before the release it needs, a refused hold books
nothing, a rebind is admitted like any bind — and the spec's last deviations, fixed."""

from __future__ import annotations

import errno
import json
import os

from ansible_collections.bcd.devices.plugins.module_utils.node.writers import DirectWriter
from ansible_collections.bcd.devices.plugins.module_utils.state.events import Journal

from ansible_collections.bcd.devices.tests.unit.conftest import GPU_A, GPU_B, GPU_C
from ansible_collections.bcd.devices.tests.unit.plugins.module_utils.domain.plan.test_admission import write_memory
from ansible_collections.bcd.devices.tests.unit.plugins.modules.test_holds import hold, run, warnings
from ansible_collections.bcd.devices.tests.unit.plugins.modules.test_runtimes_and_upgrades import driver, set_vendor_version

GIB = 1 << 30


def journaled(node):
    """``(type, allocation_id)`` of every event in the journal, in order (a condition's: None, or its stuck release)."""
    return [(e["type"], e["body"].get("allocation_id")) for e in Journal(node.state()).unacked()]


def specs_naming(node, device_id):
    """The hold specs in /etc/cdi that name ``device_id``."""
    names = []
    for name in sorted(os.listdir(node.path("/etc/cdi"))):
        if name.startswith("bcd-") and name.endswith(".json"):
            spec = json.loads(node.read("/etc/cdi/" + name))
            if any(d["annotations"]["bcd.dev/device-id"] == device_id for d in spec["devices"]):
                names.append(name)
    return names


def fail_removing(monkeypatch, allocation_id):
    """The node cannot remove ``allocation_id``'s spec (an immutable file, a read-only /etc/cdi)."""
    real = DirectWriter.remove_node_file

    def remove(self, kind, target, path=None):
        if kind == "cdi" and target == allocation_id:
            raise OSError(errno.EROFS, "Read-only file system")
        return real(self, kind, target, path=path)

    monkeypatch.setattr(DirectWriter, "remove_node_file", remove)
    return real


# --- C1: two live holds of one GPU ---------------------------------------------------------------------------


def test_a_bind_waits_for_the_release_that_frees_its_gpu(capsys, node, monkeypatch):
    run(capsys, node, generation=1, devices=[hold("alloc_old", GPU_B)])
    real = fail_removing(monkeypatch, "alloc_old")
    moved = run(capsys, node, generation=2, devices=[hold("alloc_new", GPU_B)])
    # the release failed (retryable): the bind that needs it is not applied, so GPU 1 stays in one spec
    assert moved["section"]["state"] == "PROGRESSING"
    assert "alloc_new: waits for the release of alloc_old, which failed" in moved["section"]["message"]
    assert specs_naming(node, GPU_B) == ["bcd-alloc_old.json"]
    assert not node.exists("/run/bcd/allocations/alloc_new.env")
    assert ("AllocationBound", "alloc_new") not in journaled(node)
    # the release was recorded before its files went: the next pass finishes it, then binds
    checked = run(capsys, node, check=True, generation=2, devices=[hold("alloc_new", GPU_B)])
    assert [(p["action"], p["allocation_id"]) for p in checked["plan"]] == [
        ("finish-release", "alloc_old"), ("bind", "alloc_new")]
    monkeypatch.setattr(DirectWriter, "remove_node_file", real)
    done = run(capsys, node, generation=2, devices=[hold("alloc_new", GPU_B)])
    assert done["section"]["state"] == "CONVERGED"
    assert specs_naming(node, GPU_B) == ["bcd-alloc_new.json"]
    # the journal never reports a bind on GPU 1 before the release that freed it
    assert journaled(node) == [("AllocationBound", "alloc_old"), ("AllocationReleased", "alloc_old"),
                               ("AllocationBound", "alloc_new")]
    assert run(capsys, node, generation=2, devices=[hold("alloc_new", GPU_B)])["changed"] is False


def test_a_bind_on_a_part_waits_for_the_release_of_the_whole_gpu(capsys, node, monkeypatch):
    run(capsys, node, generation=1, devices=[hold("whole", GPU_B)])
    fail_removing(monkeypatch, "whole")
    moved = run(capsys, node, generation=2, devices=[hold("part", GPU_B + "/s1")])
    assert moved["section"]["state"] == "PROGRESSING"
    assert not node.exists("/etc/cdi/bcd-part.json")
    assert ("AllocationBound", "part") not in journaled(node)


def test_a_bind_on_other_gpus_does_not_wait_for_a_failed_release(capsys, node, monkeypatch):
    run(capsys, node, generation=1, devices=[hold("alloc_old", GPU_B)])
    fail_removing(monkeypatch, "alloc_old")
    result = run(capsys, node, generation=2, devices=[hold("other", GPU_A)])
    assert result["section"]["state"] == "PROGRESSING"
    assert node.exists("/etc/cdi/bcd-other.json")
    assert ("AllocationBound", "other") in journaled(node)


# --- C2: a refused hold books nothing ------------------------------------------------------------------------


def test_a_hold_refused_while_rendering_books_no_memory(capsys, node):
    # 16 GiB, no huge pages: 15 360 MiB for holds. a1 is admitted (10 GiB), then refused while rendering
    # (its GPU's device node is gone); a2 gets the 10 GiB a1 never took.
    write_memory(node, 16 * GIB)
    node.set_hardware(driver=driver(drop=["/dev/nvidia1"]))
    result = run(capsys, node, generation=1, devices=[hold("a1", GPU_B, limits={"memory_bytes": 10 * GIB}),
                                                      hold("a2", GPU_A, limits={"memory_bytes": 10 * GIB})])
    assert [(f["allocation_id"], f["reason"]) for f in result["failures"]] == [("a1", "device-missing")]
    assert node.exists("/etc/cdi/bcd-a2.json")
    assert ("AllocationBound", "a2") in journaled(node)
    assert "ResourcesExhausted" not in json.dumps(result)  # nowhere: no refusal, warning, event or msg says it


# --- C3: a rebound hold is admitted like any bind ----------------------------------------------------------------


def test_a_hold_moved_to_another_gpu_is_admitted_again(capsys, make_node):
    # 16 GiB: a1 books 4 GiB on GPU 1; then a VM of 12 GiB starts (12.625 GiB committed with its overhead)
    # and a1 moves to GPU 0: released and bound anew, it is admitted against what is left (2.375 GiB)
    node = make_node(vendor="mig")
    write_memory(node, 16 * GIB)
    run(capsys, node, generation=1, devices=[hold("a1", GPU_B, limits={"memory_bytes": 4 * GIB})])
    node.set_hardware(domains=[{"instance_id": "inst_1", "state": "running", "memory_bytes": 12 * GIB,
                                "gpus": []}])
    moved = run(capsys, node, generation=2, devices=[hold("a1", GPU_A, limits={"memory_bytes": 4 * GIB})])
    assert [(f["allocation_id"], f["reason"], f["message"]) for f in moved["failures"]] == [
        ("a1", "resources-exhausted", "ResourcesExhausted: 4096 MiB of memory needed, 2432 MiB left on this host")]
    assert not [w for w in warnings(moved) if "host memory unreadable" in w]
    assert not node.exists("/etc/cdi/bcd-a1.json")


# --- C4: a Kubernetes slot release waits only for pods on that slot ----------------------------------------------


def test_a_kubernetes_slot_release_does_not_wait_for_a_pod_on_another_slot(capsys, node):
    slot1, slot2 = GPU_B + "/s1", GPU_B + "/s2"
    run(capsys, node, generation=1, devices=[hold("k1", slot1, binding="BINDING_KUBERNETES"),
                                             hold("k2", slot2, binding="BINDING_KUBERNETES")])
    node.set_hardware(kubelet={"reachable": True, "pods": [
        {"namespace": "ml", "name": "train-0", "container": "main", "device_ids": [slot2]}]})
    result = run(capsys, node, generation=2, devices=[hold("a1", slot1)])
    # k1's slot is free: released and reported at once, and a plain hold takes it; k2 waits for its pod
    assert [p["allocation_id"] for p in result["pending_releases"]] == ["k2"]
    assert result["pending_releases"][0]["held_by"] == ["ml/train-0 (main)"]
    assert result["failures"] == []
    assert ("AllocationReleased", "k1") in journaled(node) and ("AllocationReleased", "k2") not in journaled(node)
    assert node.exists("/etc/cdi/bcd-a1.json")


def test_a_whole_gpu_kubernetes_release_waits_for_a_pod_on_one_of_its_slots(capsys, node):
    run(capsys, node, generation=1, devices=[hold("k1", GPU_B, binding="BINDING_KUBERNETES")])
    node.set_hardware(kubelet={"reachable": True, "pods": [
        {"namespace": "ml", "name": "train-0", "container": "main", "device_ids": [GPU_B + "/s2"]}]})
    result = run(capsys, node, generation=2, devices=[])
    assert [p["allocation_id"] for p in result["pending_releases"]] == ["k1"]
    assert ("AllocationReleased", "k1") not in journaled(node)


# --- C5: a live hold re-sent with an unsupported binding is refused ---------------------------------------------


def test_a_live_hold_resent_with_an_unsupported_binding_is_refused_and_kept(capsys, node):
    run(capsys, node, generation=1, devices=[hold("a1", GPU_B)])
    spec = node.read("/etc/cdi/bcd-a1.json")
    result = run(capsys, node, generation=2, devices=[hold("a1", GPU_B, binding="BINDING_INSTANCE")])
    assert [(f["allocation_id"], f["reason"], f["message"]) for f in result["failures"]] == [
        ("a1", "unsupported-binding", "binding BINDING_INSTANCE is not supported")]
    assert result["section"]["state"] == "FAILED"
    # the node never drops a hold on its own: it stays as it was, nothing is released, and the control plane is
    # told so (HoldChangeRefused), never that the allocation failed (issue 46, item 5)
    assert ("AllocationFailed", "a1") not in journaled(node)
    assert ("HoldChangeRefused", "a1") in journaled(node)
    assert node.read("/etc/cdi/bcd-a1.json") == spec
    assert ("AllocationReleased", "a1") not in journaled(node)
    again = run(capsys, node, generation=2, devices=[hold("a1", GPU_B, binding="BINDING_INSTANCE")])
    assert again["changed"] is False


# --- C6: a vendor spec of an unknown later cdiVersion says so --------------------------------------------------


def test_a_vendor_spec_of_an_unknown_later_version_raises_a_condition_naming_it(capsys, node):
    set_vendor_version(node, "1.9.0")
    result = run(capsys, node, generation=1, devices=[hold("a1", GPU_B)])
    assert result["section"]["state"] == "PROGRESSING"
    (condition,) = [c for c in result["conditions"] if c["type"] == "VendorSpecUnsupported"]
    assert condition["reason"] == "UnknownCdiVersion"
    assert "/var/run/cdi/nvidia.yaml has cdiVersion 1.9.0" in condition["message"]
    set_vendor_version(node, "0.8.0")
    fixed = run(capsys, node, generation=1, devices=[hold("a1", GPU_B)])
    assert fixed["section"]["state"] == "CONVERGED"
    assert not [c for c in fixed["conditions"] if c["type"] == "VendorSpecUnsupported"]


# --- C7: a spec deleted by hand leaves nothing behind -----------------------------------------------------------


def test_a_spec_deleted_by_hand_is_released_with_its_env_file_once_unwanted(capsys, node):
    run(capsys, node, generation=1, devices=[hold("a1", GPU_B)])
    os.unlink(node.path("/etc/cdi/bcd-a1.json"))
    result = run(capsys, node, generation=2, devices=[])
    assert [(p["action"], p["allocation_id"]) for p in result["plan"]] == [("release", "a1")]
    assert not node.exists("/run/bcd/allocations/a1.env")
    assert journaled(node)[-1] == ("AllocationReleased", "a1")
    assert run(capsys, node, generation=2, devices=[])["changed"] is False


def test_a_spec_deleted_by_hand_is_bound_again_while_wanted(capsys, node):
    run(capsys, node, generation=1, devices=[hold("a1", GPU_B)])
    os.unlink(node.path("/etc/cdi/bcd-a1.json"))
    result = run(capsys, node, generation=1, devices=[hold("a1", GPU_B)])
    assert [(p["action"], p["allocation_id"]) for p in result["plan"]] == [("bind", "a1")]
    assert node.exists("/etc/cdi/bcd-a1.json") and node.exists("/run/bcd/allocations/a1.env")


# --- C8: a Kubernetes hold wanted again keeps what its new hold takes, and frees what no pod holds ---------------


def pod_on(node, device_id):
    node.set_hardware(kubelet={"reachable": True, "pods": [
        {"namespace": "ml", "name": "train-0", "container": "main", "device_ids": [device_id]}]})


def test_a_kubernetes_hold_rebound_onto_its_own_gpu_keeps_it_while_a_pod_holds_another(capsys, node):
    run(capsys, node, generation=1, devices=[hold("k2", GPU_A, GPU_C, binding="BINDING_KUBERNETES")])
    pod_on(node, GPU_C)
    # a0 comes first in the spec, but GPU_A is still k2's: its new hold takes it back
    devices = [hold("a0", GPU_A), hold("k2", GPU_A)]
    result = run(capsys, node, generation=2, devices=devices)
    assert [(f["allocation_id"], f["reason"], f["message"]) for f in result["failures"]] == [
        ("a0", "overlap", "%s is assigned to k2" % GPU_A)]
    assert specs_naming(node, GPU_A) == ["bcd-k2.json"]
    assert journaled(node)[-2:] == [("AllocationBound", "k2"), ("AllocationFailed", "a0")]
    assert [(p["allocation_id"], p["device_ids"], p["taken_back"]) for p in result["pending_releases"]] == [
        ("k2", [GPU_C], True)]
    # it planned k2's new hold in one go: the next pass has nothing left to take back
    assert run(capsys, node, generation=2, devices=devices)["changed"] is False


def test_a_kubernetes_hold_moved_off_a_gpu_no_pod_holds_frees_it_in_the_same_pass(capsys, node):
    run(capsys, node, generation=1, devices=[hold("k2", GPU_A, GPU_C, binding="BINDING_KUBERNETES")])
    pod_on(node, GPU_C)
    devices = [hold("a0", GPU_A), hold("k2", GPU_B)]
    result = run(capsys, node, generation=2, devices=devices)
    # only GPU_C, which the pod holds, stays k2's; GPU_A goes to a0 once k2's new AllocationBound says it left it
    assert result["failures"] == []
    assert specs_naming(node, GPU_A) == ["bcd-a0.json"]
    assert journaled(node)[-2:] == [("AllocationBound", "k2"), ("AllocationBound", "a0")]
    assert [(p["allocation_id"], p["device_ids"], p["taken_back"]) for p in result["pending_releases"]] == [
        ("k2", [GPU_C], True)]
    assert run(capsys, node, generation=2, devices=devices)["changed"] is False


def test_a_hold_whose_spec_a_dead_pass_withdrew_keeps_its_gpu_until_it_is_bound_again(capsys, node):
    run(capsys, node, generation=1, devices=[hold("k2", GPU_A, GPU_C, binding="BINDING_KUBERNETES")])
    # a pass withdrew it unreported to bind it anew and died before the bind: its last report still stands
    os.unlink(node.path("/etc/cdi/bcd-k2.json"))
    os.unlink(node.path("/run/bcd/allocations/k2.env"))
    result = run(capsys, node, generation=2, devices=[hold("a0", GPU_A), hold("a1", GPU_C + "/s1"),
                                                      hold("k2", GPU_A, GPU_B)])
    assert [(f["allocation_id"], f["reason"], f["message"]) for f in result["failures"]] == [
        ("a0", "overlap", "%s is assigned to k2" % GPU_A)]
    # GPU_C is free once k2's new AllocationBound no longer names it: a1 is bound after it, never before
    assert journaled(node)[-3:] == [("AllocationBound", "k2"), ("AllocationBound", "a1"), ("AllocationFailed", "a0")]
    assert ("AllocationReleased", "k2") not in journaled(node)


def test_a_moved_kubernetes_hold_refused_when_rendered_keeps_that_reason_not_its_own_booking(capsys, node):
    # its new hold is refused (a runtime's cdiVersion ceiling), so its old one is released like any other; its
    # new hold is not checked again against that release's booking, which a pod still holds
    write_memory(node, 32 * GIB, hugetlb=4 * GIB, pages={"1GB": (4, 0)}, nodes={0: {"1GB": 2}, 1: {"1GB": 2}})
    limits = {"mems": "0", "hugepages_1gi": 2}
    run(capsys, node, generation=1, devices=[hold("k1", GPU_A, binding="BINDING_KUBERNETES", limits=limits)])
    pod_on(node, GPU_A)
    bookworm = [{"name": "podman", "version": "4.3.1"}]
    devices = [hold("k1", GPU_B, binding="BINDING_KUBERNETES", limits=limits)]
    result = run(capsys, node, generation=2, devices=devices, cdi_runtimes=bookworm)
    assert [(f["allocation_id"], f["reason"]) for f in result["failures"]] == [("k1", "invalid-assignment")]
    assert "podman 4.3.1 on this node loads at most 0.5.0" in result["failures"][0]["message"]
    assert [(p["allocation_id"], p["device_ids"], p["taken_back"]) for p in result["pending_releases"]] == [
        ("k1", [GPU_A], False)]
    assert run(capsys, node, generation=2, devices=devices, cdi_runtimes=bookworm)["changed"] is False


def test_a_kubernetes_hold_moved_to_a_slot_of_its_gpu_keeps_that_slot_from_a_hold_before_it(capsys, node):
    # the new hold takes part of what the old one had whole: that part stays the allocation's in the pass
    run(capsys, node, generation=1, devices=[hold("k1", GPU_A, GPU_B, binding="BINDING_KUBERNETES")])
    pod_on(node, GPU_A)
    devices = [hold("a3", GPU_B), hold("k1", GPU_B + "/s1", binding="BINDING_KUBERNETES")]
    result = run(capsys, node, generation=2, devices=devices)
    assert [(f["allocation_id"], f["reason"], f["message"]) for f in result["failures"]] == [
        ("a3", "overlap", "%s has %s/s1 assigned to k1" % (GPU_B, GPU_B))]
    assert specs_naming(node, GPU_B + "/s1") == ["bcd-k1.json"]
    assert [(p["allocation_id"], p["device_ids"], p["taken_back"]) for p in result["pending_releases"]] == [
        ("k1", [GPU_A], True)]
    assert run(capsys, node, generation=2, devices=devices)["changed"] is False


def test_a_taken_back_release_narrows_to_the_devices_pods_still_hold(capsys, node):
    run(capsys, node, generation=1, devices=[hold("k1", GPU_A, GPU_C, binding="BINDING_KUBERNETES")])
    node.set_hardware(kubelet={"reachable": True, "pods": [
        {"namespace": "ml", "name": "train-%d" % n, "container": "main", "device_ids": [gpu]}
        for n, gpu in enumerate((GPU_A, GPU_C))]})
    devices = [hold("k1", GPU_B, binding="BINDING_KUBERNETES")]
    moved = run(capsys, node, generation=2, devices=devices)
    assert [(p["allocation_id"], p["device_ids"]) for p in moved["pending_releases"]] == [("k1", [GPU_A, GPU_C])]
    pod_on(node, GPU_A)  # the pod on GPU_C ended
    result = run(capsys, node, generation=2, devices=devices)
    assert [(p["action"], p["text"], p["device_ids"]) for p in result["plan"]] == [
        ("take-back-release", "take back the pending Kubernetes release of k1: never reported; keep %s claimed "
         "until free (held by ml/train-0 (main))" % GPU_A, [GPU_A])]
    assert [(p["allocation_id"], p["device_ids"], p["taken_back"]) for p in result["pending_releases"]] == [
        ("k1", [GPU_A], True)]
    assert run(capsys, node, generation=3, devices=[hold("a2", GPU_C)] + devices)["failures"] == []
