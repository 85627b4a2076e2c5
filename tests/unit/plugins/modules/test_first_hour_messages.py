# -*- coding: utf-8 -*-
# Copyright: contributors to bcd.devices
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""A user's first hour (issue 26, items 5 and 6), through the modules: the usual mistakes in ids and
bindings keep the spec's refusal and get a warning saying what to write; ``gpu_busy`` says in ``msg``
which GPUs are busy and who claims them; every warning names the node it comes from."""

from __future__ import annotations

import sys

import pytest

from ansible_collections.bcd.devices.plugins.modules import events as events_module
from ansible_collections.bcd.devices.plugins.modules import gpu_busy, holds_info
from ansible_collections.bcd.devices.tests.unit.conftest import GPU_A, GPU_B, GPU_C
from ansible_collections.bcd.devices.tests.unit.plugins.modules.test_holds import hold, refusals_shown, run, warnings
from ansible_collections.bcd.devices.tests.unit.plugins.modules.test_holds_info import call

TAKES = "this node takes binding: BINDING_HOLD or BINDING_KUBERNETES"
GPUS = "this node has GPU 0 %s, GPU 1 %s, GPU 2 %s" % (GPU_A, GPU_B, GPU_C)


def one(allocation_id, device_id, device_class=None, **fields):
    data = hold(allocation_id, **fields)
    device = {"id": device_id}
    if device_class is not None:
        device["device_class"] = device_class
    data["devices"] = [device]
    return data


def refusal(capsys, node, entry):
    """``(failure, warning)`` of one refused assignment: the bare ``(reason, message)`` the events carry, and
    the task's warning for a person."""
    result = run(capsys, node, generation=1, devices=[entry])
    [failure] = result["failures"]
    [event] = [e for e in result["events"] if e["type"] == "AllocationFailed"]
    assert event["body"]["message"] == failure["message"]  # the hint is never journaled
    texts = refusals_shown(result)
    assert len(texts) == 1, texts
    return (failure["reason"], failure["message"]), texts[0]


# -- ids ----------------------------------------------------------------------------------------------

@pytest.mark.parametrize("device_id, hint", [
    # a MIG instance or slot id with no device_class: read as a GPU, not present; the hint names the class
    (GPU_A + "/gi1/ci0", "%s/gi1/ci0 looks like a MIG instance id: add device_class: gpu.mig" % GPU_A),
    (GPU_B + "/s1", "%s/s1 looks like a slot id: add device_class: gpu.slot" % GPU_B),
    (GPU_A + "/GI01/CI0", "%s/GI01/CI0 looks like a MIG instance id: write id: %s/gi1/ci0 with device_class: gpu.mig"
     % (GPU_A, GPU_A)),
    # a GPU by its index, leading zeros too: the UUID to write
    ("0", "write id: %s for GPU 0 (a hold names a GPU by its UUID)" % GPU_A),
    ("02", "write id: %s for GPU 2 (a hold names a GPU by its UUID)" % GPU_C),
    # a UUID in lower case: the node's spelling
    (GPU_B.lower(), "write id: %s (the UUID as the node spells it)" % GPU_B),
    # nothing fits: what the node has
    ("nvidia0", GPUS),
    ("7", GPUS),
])
def test_an_id_the_node_does_not_list_says_what_to_write(capsys, node, device_id, hint):
    failure, text = refusal(capsys, node, one("a1", device_id))
    assert failure == ("device-missing", "%s not present" % device_id)
    assert text == "a1 refused (device-missing): %s not present; %s" % (device_id, hint)


@pytest.mark.parametrize("device_id, device_class, kind, hint", [
    (GPU_A + "/gi01/ci0", "gpu.mig", "a MIG instance id (<gpu>/gi<n>/ci<n>)",
     "write %s/gi1/ci0 (no leading zeros, lower case)" % GPU_A),
    (GPU_A + "/GI1/CI0", "gpu.mig", "a MIG instance id (<gpu>/gi<n>/ci<n>)",
     "write %s/gi1/ci0 (no leading zeros, lower case)" % GPU_A),
    (GPU_A.lower() + "/gi1/ci00", "gpu.mig", "a MIG instance id (<gpu>/gi<n>/ci<n>)",
     "write %s/gi1/ci0 (no leading zeros, lower case)" % GPU_A),
    (GPU_B + "/s01", "gpu.slot", "a slot id (<gpu>/s<n>)", "write %s/s1 (no leading zeros, lower case)" % GPU_B),
    (GPU_B + "/S1", "gpu.slot", "a slot id (<gpu>/s<n>)", "write %s/s1 (no leading zeros, lower case)" % GPU_B),
    # the other class's id
    (GPU_B + "/s1", "gpu.mig", "a MIG instance id (<gpu>/gi<n>/ci<n>)",
     "%s/s1 looks like a slot id: write id: %s/s1 with device_class: gpu.slot" % (GPU_B, GPU_B)),
    (GPU_A + "/gi1/ci0", "gpu.slot", "a slot id (<gpu>/s<n>)",
     "%s/gi1/ci0 looks like a MIG instance id: write id: %s/gi1/ci0 with device_class: gpu.mig" % (GPU_A, GPU_A)),
    (GPU_C, "gpu.mig", "a MIG instance id (<gpu>/gi<n>/ci<n>)", "%s looks like a whole GPU: write device_class: gpu" % GPU_C),
])
def test_a_malformed_mig_or_slot_id_gets_its_canonical_form(capsys, node, device_id, device_class, kind, hint):
    failure, text = refusal(capsys, node, one("a1", device_id, device_class))
    message = '"%s" is not %s' % (device_id, kind)
    assert failure == ("unsupported-device", message)
    assert text == "a1 refused (unsupported-device): %s; %s" % (message, hint)


def test_several_missing_devices_each_get_their_hint_and_the_node_lists_its_gpus_once(capsys, node):
    entry = hold("a1")
    entry["devices"] = [{"id": "0"}, {"id": "nvidia1"}, {"id": GPU_A + "/gi1/ci0"}]
    failure, text = refusal(capsys, node, entry)
    message = "0 not present; nvidia1 not present; %s/gi1/ci0 not present" % GPU_A
    assert failure == ("device-missing", message)
    assert text == ("a1 refused (device-missing): %s; write id: %s for GPU 0 (a hold names a GPU by its UUID); "
                    "%s/gi1/ci0 looks like a MIG instance id: add device_class: gpu.mig; %s"
                    % (message, GPU_A, GPU_A, GPUS))


def test_a_device_class_in_another_case_gets_the_class_meant(capsys, node):
    failure, text = refusal(capsys, node, one("a1", GPU_A + "/gi1/ci0", "MIG"))
    assert failure == ("unsupported-device", "device class MIG cannot be held")
    assert text == ("a1 refused (unsupported-device): device class MIG cannot be held; did you mean gpu.mig? "
                    "a device_class is one of gpu, gpu.mig, gpu.slot (empty reads as gpu)")


# -- bindings -----------------------------------------------------------------------------------------

@pytest.mark.parametrize("binding, hint", [
    ("HOLD", "did you mean BINDING_HOLD? " + TAKES),
    ("binding_hold", "did you mean BINDING_HOLD? " + TAKES),
    ("kubernetes", "did you mean BINDING_KUBERNETES? " + TAKES),
    ("BINDING_INSTANCE", TAKES),
])
def test_an_unsupported_binding_keeps_the_spec_message_and_names_the_bindings_the_node_takes(
        capsys, node, binding, hint):
    failure, text = refusal(capsys, node, hold("a1", GPU_A, binding=binding))
    assert failure == ("unsupported-binding", "binding %s is not supported" % binding)
    assert text == "a1 refused (unsupported-binding): binding %s is not supported; %s" % (binding, hint)


@pytest.mark.parametrize("binding", [None, ""])
def test_a_missing_binding_says_it_is_missing(capsys, node, binding):
    entry = hold("a1", GPU_A)
    if binding is None:
        del entry["binding"]
    else:
        entry["binding"] = binding
    failure, text = refusal(capsys, node, entry)
    assert failure == ("unsupported-binding", "binding is missing")
    assert text == "a1 refused (unsupported-binding): binding is missing; " + TAKES
    assert "BINDING_UNSPECIFIED" not in text


# -- gpu_busy: a message for the until loop -----------------------------------------------------------

def busy(capsys, node, *gpus):
    return call(capsys, gpu_busy.main, {"root": node.root, "fakehw": node.fakehw, "gpus": list(gpus)})


def test_gpu_busy_says_which_gpus_are_busy_and_who_claims_them(capsys, node):
    run(capsys, node, generation=1, devices=[
        one("a1", GPU_A + "/gi1/ci0", "gpu.mig"), hold("a2", GPU_B + "/s0"), hold("a3", GPU_B + "/s1")])
    result = busy(capsys, node, GPU_A, GPU_B, GPU_C)
    assert not result.get("failed")
    assert result["msg"] == ("%s is busy: MIG instance gi1/ci0 held by a1; %s is busy: slot s0 held by a2; "
                             "slot s1 held by a3" % (GPU_A, GPU_B))
    # the documented return values are all still there
    assert [(g["uuid"], g["busy"]) for g in result["gpus"]] == [(GPU_A, True), (GPU_B, True), (GPU_C, False)]


def test_gpu_busy_says_the_gpus_are_free(capsys, node):
    assert busy(capsys, node, GPU_C)["msg"] == "%s is free" % GPU_C
    assert busy(capsys, node, GPU_A, GPU_C)["msg"] == "%s, %s are free" % (GPU_A, GPU_C)


# -- warnings name the node ---------------------------------------------------------------------------

def test_every_warning_of_every_module_names_the_node(capsys, make_node):
    node = make_node(vendor="mig", node_id="gpu-node-7")
    result = run(capsys, node, generation=1, devices=[hold("a1", GPU_A, limits={"memory_bytes": 1 << 30}),
                                                      hold("a2", "nvidia9")], on_refusal="report")
    assert warnings(result, node="gpu-node-7") == [
        "host memory unreadable; binding without host-side admission",
        "a2 refused (device-missing): nvidia9 not present; " + GPUS]
    node.write("/var/lib/bcd/releasing.json", "{not json")
    for main in (holds_info.main, events_module.main):
        if "ansible.utils.display" in sys.modules:  # loaded by another test: it would show the same text once only
            getattr(sys.modules["ansible.utils.display"].Display(), "_warns", set()).clear()
        shown = call(capsys, main, {"root": node.root, "fakehw": node.fakehw})
        texts = warnings(shown, node="gpu-node-7")
        assert any("releasing.json" in text for text in texts), texts
