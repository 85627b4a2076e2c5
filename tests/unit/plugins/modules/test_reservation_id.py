# -*- coding: utf-8 -*-
# Copyright: contributors to bcd.devices
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""``reservation_id`` is optional in an assignment (docs/user-guide.md, "Assignment fields"): a hold without one
carries no ``bcd.dev/reservation-id`` annotation, where render revision 2 wrote an empty one (issue 32). A hold
bound then is written again once, saying why; a hold with a reservation id renders the same bytes and is left
alone, though every render key changed with the revision."""

from __future__ import annotations

import json
from collections import OrderedDict

from ansible_collections.bcd.devices.plugins.module_utils.domain.cdi import hold_spec as cdi
from ansible_collections.bcd.devices.tests.unit.builders import hold
from ansible_collections.bcd.devices.tests.unit.conftest import GPU_A, GPU_B
from ansible_collections.bcd.devices.tests.unit.plugins.modules.test_holds import run
from ansible_collections.bcd.devices.tests.unit.plugins.modules.test_holds_info import info

ANNOTATION = "bcd.dev/reservation-id"


def without_reservation(allocation_id, device):
    assignment = hold(allocation_id, device)
    assignment.pop("reservation_id", None)
    return assignment


def spec(node, allocation_id):
    return json.loads(node.read("/etc/cdi/bcd-%s.json" % allocation_id), object_pairs_hook=OrderedDict)


def test_a_hold_without_a_reservation_id_has_no_empty_annotation(capsys, node):
    result = run(capsys, node, generation=1, devices=[hold("a1", GPU_A, reservation_id="rsv_1"),
                                                      without_reservation("a2", GPU_B)])
    assert result["failures"] == [] and result["changed"] is True
    assert spec(node, "a1")["annotations"][ANNOTATION] == "rsv_1"
    assert list(spec(node, "a2")["annotations"]) == ["bcd.dev/allocation-id", "bcd.dev/generation"]
    # read back, the hold says it has none, as before
    held = dict((entry["allocation_id"], entry["reservation_id"]) for entry in info(capsys, node)["holds"])
    assert held == {"a1": "rsv_1", "a2": ""}
    # the env file still has its BCD_RESERVATION_ID line, empty (the spec page lists the line for every hold)
    assert b"BCD_RESERVATION_ID=\n" in node.read("/run/bcd/allocations/a2.env")


def test_a_hold_bound_with_an_empty_annotation_is_written_again_once(capsys, node, monkeypatch):
    devices = [hold("a1", GPU_A, reservation_id="rsv_1"), without_reservation("a2", GPU_B)]
    run(capsys, node, generation=1, devices=devices)
    a1_before = node.read("/etc/cdi/bcd-a1.json")
    # a2 as revision 2 wrote it: an empty annotation between the allocation id and the generation
    old = spec(node, "a2")
    old["annotations"] = OrderedDict([("bcd.dev/allocation-id", "a2"), (ANNOTATION, ""),
                                      ("bcd.dev/generation", old["annotations"]["bcd.dev/generation"])])
    node.write("/etc/cdi/bcd-a2.json", cdi.spec_bytes(old))
    # the next revision makes every recorded render key stale, as an upgrade from revision 2 does
    monkeypatch.setattr(cdi, "RENDER_REVISION", cdi.RENDER_REVISION + 1)
    result = run(capsys, node, generation=1, devices=devices)
    assert [(step["action"], step["allocation_id"]) for step in result["plan"]] == [("rerender", "a2")]
    assert result["plan"][0]["text"] == ("re-render /etc/cdi/bcd-a2.json (it has no reservation id, and no empty "
                                         "bcd.dev/reservation-id annotation is written any more)")
    assert ANNOTATION not in spec(node, "a2")["annotations"]
    assert node.read("/etc/cdi/bcd-a1.json") == a1_before  # same bytes: not written again
    again = run(capsys, node, generation=1, devices=devices)
    assert again["changed"] is False and again["plan"] == []
