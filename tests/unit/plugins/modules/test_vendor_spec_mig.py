# -*- coding: utf-8 -*-
# Copyright: contributors to bcd.devices
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""NVIDIA's spec after a MIG layout change (issue 48), through the modules on fakehw nodes.

``bcd.devices.mig_layout`` (or the boot run that makes the instances again) gives MIG devices fresh
``MIG-`` UUIDs; NVIDIA's spec still names the old ones, and ``nvidia-cdi-refresh`` does not follow MIG
changes (NVIDIA/nvidia-container-toolkit#1828). The pass says so in ``VendorSpecStale``; a new hold on a
MIG device the spec does not name is refused (``device-missing``) rather than bound without its device
nodes, and a kept one stays as it is until the spec is regenerated.

The default node's spec (the "mig" fixture) names GPU_A's two MIG devices, MIG_A1 (gi1/ci0) and MIG_A2
(gi2/ci0); a fakehw node's ``driver`` entry makes the pass check the spec against the node.
"""

from __future__ import annotations

import json

from ansible_collections.bcd.devices.tests.unit.builders import hold, mig
from ansible_collections.bcd.devices.tests.unit.conftest import DEFAULT_GPUS, GPU_A, GPU_B, GPU_C, MIG_A1, MIG_A2
from ansible_collections.bcd.devices.tests.unit.plugins.modules.test_holds import run, warnings
from ansible_collections.bcd.devices.tests.unit.plugins.modules.test_holds_info import info
from ansible_collections.bcd.devices.tests.unit.plugins.modules.test_runtimes_and_upgrades import VENDOR, driver, fails, spec_of

MIG_NEW = "MIG-0b1e7c3a-4d5f-5a6b-8c7d-9e0f1a2b3c4d"  # gi2/ci0 made again: a fresh UUID
TAIL = ("; new holds get only its true edits, and one on a MIG device it does not name is refused (regenerate it: "
        "nvidia-ctk cdi generate, or restart nvidia-cdi-refresh)")


def remade(gpus=None, **instance):
    """The default node with GPU_A's gi2/ci0 made again (``MIG_NEW``), or ``instance`` in its place."""
    gpus = json.loads(json.dumps(DEFAULT_GPUS if gpus is None else gpus))
    gpus[0]["mig"][1] = dict({"gi": 2, "ci": 0, "uuid": MIG_NEW}, **instance)
    return gpus


def regenerate(node, old=MIG_A2, new=MIG_NEW):
    """nvidia-ctk cdi generate after the change: the spec names the new MIG device where the old one was."""
    node.write(VENDOR, node.read(VENDOR).replace(old.encode(), new.encode()))


def conditions(result, kind="VendorSpecStale"):
    return [c["message"] for c in result["conditions"] if c["type"] == kind]


def events(result):
    return [p["event"] for p in result["plan"] if p["action"] == "report-condition"]


def caps_of(spec, index=0):
    return [n["path"] for n in spec["devices"][index]["containerEdits"].get("deviceNodes", [])]


def test_a_remade_mig_device_raises_vendor_spec_stale_refuses_a_new_hold_on_it_and_clears_once_regenerated(capsys, node):
    node.set_hardware(gpus=remade(), driver=driver())
    result = run(capsys, node, generation=1, devices=[mig("a1", GPU_A + "/gi1/ci0"), mig("a2", GPU_A + "/gi2/ci0")])
    assert conditions(result) == [
        "%s does not match the node: it names %s but the node has no such MIG device; %s gi2/ci0 (%s) is not in it%s"
        % (VENDOR, MIG_A2, GPU_A, MIG_NEW, TAIL)]
    assert events(result) == ["VendorSpecStale"]
    assert fails(result) == [(
        "a2", "device-missing",
        "the vendor spec %s does not name %s (%s gi2/ci0): the MIG layout changed since it was generated, and the "
        "device would carry none of its device nodes; regenerate the spec (nvidia-ctk cdi generate)"
        % (VENDOR, MIG_NEW, GPU_A))]
    assert not node.exists("/etc/cdi/bcd-a2.json") and not node.exists("/run/bcd/allocations/a2.env")
    # the instance the spec names is bound with NVIDIA's edits for it
    assert caps_of(spec_of(node, "a1")) == ["/dev/nvidia3", "/dev/nvidia-caps/nvidia-cap426",
                                            "/dev/nvidia-caps/nvidia-cap427"]
    assert [c["message"] for c in info(capsys, node)["conditions"] if c["type"] == "VendorSpecStale"] == \
        conditions(result)
    # the spec is regenerated: the condition clears, and the hold is bound at its next generation
    regenerate(node)
    fresh = run(capsys, node, generation=2, devices=[mig("a1", GPU_A + "/gi1/ci0"), mig("a2", GPU_A + "/gi2/ci0")])
    assert fails(fresh) == [] and fresh["conditions"] == []
    assert events(fresh) == ["VendorSpecStaleCleared"]
    assert caps_of(spec_of(node, "a2")) == ["/dev/nvidia3", "/dev/nvidia-caps/nvidia-cap435",
                                            "/dev/nvidia-caps/nvidia-cap436"]
    assert "NVIDIA_VISIBLE_DEVICES=%s" % MIG_NEW in spec_of(node, "a2")["containerEdits"]["env"]


def test_a_kept_hold_on_a_remade_mig_device_keeps_its_files_until_the_spec_is_regenerated(capsys, node):
    node.set_hardware(driver=driver())
    run(capsys, node, generation=1, devices=[mig("a1", GPU_A + "/gi2/ci0")])
    spec, env = node.read("/etc/cdi/bcd-a1.json"), node.read("/run/bcd/allocations/a1.env")
    node.set_hardware(gpus=remade())  # the boot run made gi2/ci0 again
    result = run(capsys, node, generation=1, devices=[mig("a1", GPU_A + "/gi2/ci0")])
    assert fails(result) == [] and [p["action"] for p in result["plan"]] == ["report-condition"]
    assert node.read("/etc/cdi/bcd-a1.json") == spec and node.read("/run/bcd/allocations/a1.env") == env
    assert "a1 is kept as it is: the vendor spec %s does not name %s (%s gi2/ci0): the MIG layout changed since it " \
           "was generated, and the device would carry none of its device nodes; regenerate the spec (nvidia-ctk cdi " \
           "generate)" % (VENDOR, MIG_NEW, GPU_A) in warnings(result)
    assert conditions(result) == [
        "%s does not match the node: it names %s but the node has no such MIG device; %s gi2/ci0 (%s) is not in it%s"
        % (VENDOR, MIG_A2, GPU_A, MIG_NEW, TAIL)]
    # regenerated: its spec and env file are rendered again, with the new device's edits
    regenerate(node)
    fresh = run(capsys, node, generation=1, devices=[mig("a1", GPU_A + "/gi2/ci0")])
    assert [p["action"] for p in fresh["plan"]] == ["rerender", "write-env", "report-condition"]
    assert events(fresh) == ["VendorSpecStaleCleared"] and fresh["conditions"] == []
    assert caps_of(spec_of(node, "a1")) == ["/dev/nvidia3", "/dev/nvidia-caps/nvidia-cap435",
                                            "/dev/nvidia-caps/nvidia-cap436"]
    assert ("NVIDIA_VISIBLE_DEVICES=%s\n" % MIG_NEW).encode() in node.read("/run/bcd/allocations/a1.env")


def test_mig_devices_the_node_no_longer_has_are_stale_without_refusing_anything(capsys, node):
    gpus = json.loads(json.dumps(DEFAULT_GPUS))
    gpus[0]["mig"] = []  # MIG mode off on GPU_A: its whole GPU can be held
    node.set_hardware(gpus=gpus, driver=driver())
    result = run(capsys, node, generation=1, devices=[hold("a1", GPU_A), hold("a2", GPU_B)])
    assert fails(result) == []
    assert conditions(result) == [
        "%s does not match the node: it names %s but the node has no such MIG device; it names %s but the node has "
        "no such MIG device; new holds get only its true edits (regenerate it: nvidia-ctk cdi generate, or restart "
        "nvidia-cdi-refresh)" % (VENDOR, MIG_A1, MIG_A2)]


def test_a_mig_device_on_a_gpu_the_spec_does_not_name_is_stale_too(capsys, node):
    gpus = json.loads(json.dumps(DEFAULT_GPUS))
    gpus[2]["mig"] = [{"gi": 1, "ci": 0, "uuid": MIG_NEW}]  # GPU_C was not in MIG mode when the spec was made
    node.set_hardware(gpus=gpus, driver=driver())
    result = run(capsys, node, generation=1, devices=[mig("a1", GPU_C + "/gi1/ci0")])
    assert [(r[0], r[1]) for r in fails(result)] == [("a1", "device-missing")]
    assert conditions(result) == ["%s does not match the node: %s gi1/ci0 (%s) is not in it%s"
                                  % (VENDOR, GPU_C, MIG_NEW, TAIL)]


def test_many_differences_are_counted_past_the_first_eight(capsys, node):
    gpus = json.loads(json.dumps(DEFAULT_GPUS))
    gpus[2]["mig"] = [{"gi": gi, "ci": 0, "uuid": "MIG-0b1e7c3a-4d5f-5a6b-8c7d-9e0f1a2b3c%02d" % gi} for gi in range(1, 11)]
    node.set_hardware(gpus=gpus, driver=driver())
    result = run(capsys, node, generation=1, devices=[hold("a1", GPU_B)])
    message = conditions(result)[0]
    assert message.count("is not in it") == 8
    assert "%s gi8/ci0 (MIG-0b1e7c3a-4d5f-5a6b-8c7d-9e0f1a2b3c08) is not in it (and 2 more);" % GPU_C in message


def test_without_a_driver_entry_a_fakehw_node_checks_nothing(capsys, node):
    node.set_hardware(gpus=remade())
    result = run(capsys, node, generation=1, devices=[mig("a1", GPU_A + "/gi2/ci0")])
    assert fails(result) == [] and result["conditions"] == []
    assert "a1: the vendor spec %s does not name %s; the device carries no vendor edits" % (VENDOR, MIG_NEW) \
        in warnings(result)


def test_a_wsl_spec_is_not_compared_with_the_mig_devices(capsys, make_node):
    node = make_node(vendor="wsl")
    node.set_hardware(gpus=remade(), driver={"version": "580.65.06", "files": [], "device_nodes": {"/dev/dxg": "10:63"}})
    result = run(capsys, node, generation=1, devices=[mig("a1", GPU_A + "/gi2/ci0")])
    assert fails(result) == []
    assert not [c for c in result["conditions"] if "MIG" in c["message"]]
