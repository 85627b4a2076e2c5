# -*- coding: utf-8 -*-
# Copyright: contributors to bcd.devices
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""A user's first hour (issue 26, items 1 to 4), through the module: a playbook without a generation is
numbered by the node, so a fixed input is judged afresh; a generation given with another input than the
node applied at it fails before anything is written; a pass that did not reach the asked state fails
the task (``on_refusal: report`` keeps the old way); an integer cpulist means those CPUs; a diff shows
each changed file once, as a unified diff of that file."""

from __future__ import annotations

import json
import os

from ansible_collections.bcd.devices.plugins.module_utils.state.store import NodeState
from ansible_collections.bcd.devices.tests.unit.conftest import GPU_A, GPU_B
from ansible_collections.bcd.devices.tests.unit.plugins.modules.test_holds import hold, run, warnings

CONFLICT = ("generation %d was already applied with a different %s; raise generation, or leave it out to let the "
            "node number its inputs")


def stored(node):
    with open(os.path.join(node.state(), "nodespec.json")) as handle:
        return json.load(handle)


# -- 1. generations a person can use ----------------------------------------------------------------

def test_without_a_generation_the_node_numbers_its_inputs(capsys, node):
    first = run(capsys, node, devices=[hold("a1", GPU_A)])
    assert first["section"]["generation"] == 1 and first["section"]["state"] == "CONVERGED"
    assert stored(node)["generation"] == 1
    same = run(capsys, node, devices=[hold("a1", GPU_A)])
    assert same["section"]["generation"] == 1
    assert same["changed"] is False and same["plan"] == []
    edited = run(capsys, node, devices=[hold("a1", GPU_A), hold("a2", GPU_B)])
    assert edited["section"]["generation"] == 2
    assert [p["action"] for p in edited["plan"]] == ["bind"]
    instances = run(capsys, node, devices=[hold("a1", GPU_A), hold("a2", GPU_B)],
                    instances=[{"instance_id": "vm1", "gpus": []}])
    assert instances["section"]["generation"] == 3


def test_a_fixed_typo_is_judged_afresh_without_a_generation(capsys, node):
    typo = hold("a1", GPU_A)
    typo["devics"] = typo.pop("devices")
    refused = run(capsys, node, on_refusal="report", devices=[typo])
    assert [(f["generation"], f["reason"]) for f in refused["failures"]] == [(1, "invalid-assignment")]
    fixed = run(capsys, node, devices=[hold("a1", GPU_A)])
    assert not fixed.get("failed")
    assert fixed["section"] == {"state": "CONVERGED", "generation": 2, "observed_generation": 2, "message": ""}
    assert node.exists("/etc/cdi/bcd-a1.json")


def test_a_given_generation_keeps_working_as_a_control_plane_numbers_it(capsys, node):
    run(capsys, node, generation=7, devices=[hold("a1", GPU_A)])
    again = run(capsys, node, generation=7, devices=[hold("a1", GPU_A)])
    assert again["changed"] is False and again["section"]["generation"] == 7
    # left out after a control plane's 7: the same input is 7, another one 8
    assert run(capsys, node, devices=[hold("a1", GPU_A)])["section"]["generation"] == 7
    assert run(capsys, node, devices=[])["section"]["generation"] == 8


def test_a_given_generation_applied_with_another_input_fails_before_writing(capsys, node):
    run(capsys, node, generation=3, devices=[hold("a1", GPU_A)])
    before = node.listing()
    result = run(capsys, node, generation=3, devices=[hold("a1", GPU_B)])
    assert result["failed"] is True
    assert result["msg"] == CONFLICT % (3, "devices section")
    assert node.listing() == before
    checked = run(capsys, node, check=True, generation=3, devices=[hold("a1", GPU_B)])
    assert checked["msg"] == CONFLICT % (3, "devices section")
    only_instances = run(capsys, node, generation=3, devices=[hold("a1", GPU_A)],
                         instances=[{"instance_id": "vm1", "gpus": [GPU_B]}])
    assert only_instances["msg"] == CONFLICT % (3, "instances section")
    both = run(capsys, node, generation=3, devices=[], instances=[{"instance_id": "vm1", "gpus": [GPU_B]}])
    assert both["msg"] == CONFLICT % (3, "devices and instances sections")
    assert node.listing() == before
    raised = run(capsys, node, generation=4, devices=[hold("a1", GPU_B)])
    assert not raised.get("failed") and raised["section"]["generation"] == 4
    assert NodeState(node.state()).load(write=False).ledger.observed_generation == 4
