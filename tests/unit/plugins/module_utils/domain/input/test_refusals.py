# -*- coding: utf-8 -*-
# Copyright: contributors to bcd.devices
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""The failure reasons are one set of names (domain/input/refusals.py) and the event types one other
(domain/event_types.py): read from the source, a reason or an event type spelled out anywhere else
in the code, or a refusal raised with something other than a ``Reason``, fails here; and each reason
has its section in docs/troubleshooting.md, where a user who sees it looks."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

from ansible_collections.bcd.devices.plugins.module_utils.domain.plan import planner
from ansible_collections.bcd.devices.plugins.module_utils.domain.event_types import EVENT_TYPES
from ansible_collections.bcd.devices.plugins.module_utils.domain.input.hints import refusal_hint
from ansible_collections.bcd.devices.plugins.module_utils.domain.inventory_model import Inventory
from ansible_collections.bcd.devices.plugins.module_utils.domain.input.refusals import ORDER, REASONS, Reason, reason_shown

PLUGINS = Path(planner.__file__).resolve().parents[3]
DOCS = PLUGINS.parent / "docs"
HOMES = {"module_utils/domain/input/refusals.py", "module_utils/domain/event_types.py"}
REFUSALS = ("AtomRefused", "RenderRefused", "Refusal")  # the exceptions and records that carry a reason


def sources():
    return sorted(p for p in PLUGINS.rglob("*.py") if str(p.relative_to(PLUGINS)) not in HOMES)


@pytest.mark.parametrize("path", sources(), ids=lambda p: str(p.relative_to(PLUGINS)))
def test_no_reason_or_event_type_is_spelled_out_but_in_its_home(path):
    """A string constant equal to a reason or an event type (not a sentence that mentions one) is a
    copy of the name that can drift: the code names ``Reason.…`` or ``event_types.…`` instead."""
    names = set(REASONS) | set(EVENT_TYPES)
    found = [(node.lineno, node.value) for node in ast.walk(ast.parse(path.read_text()))
             if isinstance(node, ast.Constant) and isinstance(node.value, str) and node.value in names]
    assert found == []


@pytest.mark.parametrize("path", sources(), ids=lambda p: str(p.relative_to(PLUGINS)))
def test_every_refusal_names_a_reason_of_the_set(path):
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Call) and getattr(node.func, "id", None) in REFUSALS and node.args:
            reason = node.args[0] if getattr(node.func, "id", None) != "Refusal" else node.args[1]
            if isinstance(reason, ast.Attribute) and getattr(reason.value, "id", None) == "Reason":
                assert getattr(Reason, reason.attr) in REASONS
            else:  # a reason passed on from another refusal (exc.reason) is one of the set already
                assert isinstance(reason, (ast.Attribute, ast.Name)) and not isinstance(reason, ast.Constant), (
                    "%s:%d" % (path.name, node.lineno))


def test_the_reasons_are_the_spec_s_and_each_has_its_troubleshooting_section():
    assert sorted(REASONS) == sorted(["unsupported-binding", "node-unprivileged", "unsupported-device", "device-missing",
                                      "overlap", "resources-exhausted", "invalid-assignment"])
    page = (DOCS / "troubleshooting.md").read_text()
    headings = [line[4:].strip() for line in page.splitlines() if line.startswith("### ")]
    assert [reason for reason in REASONS if reason not in headings] == []
    order = page.split("Each new hold is checked in this order", 1)[1].split("###", 1)[0]
    assert [reason for reason in ORDER if "`%s`" % reason not in order] == []
    positions = [order.index("`%s`" % reason) for reason in ORDER]
    assert positions == sorted(positions), "docs/troubleshooting.md lists the checks in another order"


@pytest.mark.parametrize("reason, message, shown", [
    (Reason.RESOURCES_EXHAUSTED, "ResourcesExhausted: 4096 MiB of memory needed, 512 MiB left on this host", ""),
    (Reason.OVERLAP, "GPU-a is assigned to a1", " (overlap)"),
    (Reason.DEVICE_MISSING, "DeviceMissing is not a GPU this node has", " (device-missing)"),  # no colon: not named
    (Reason.INVALID_ASSIGNMENT, "limits.cpus: range 7-3 runs backwards", " (invalid-assignment)"),
])
def test_a_line_for_a_person_names_the_reason_once(reason, message, shown):
    """``refuse a1: ResourcesExhausted: …``, not ``refuse a1 (resources-exhausted): ResourcesExhausted: …``."""
    assert reason_shown(reason, message) == shown


@pytest.mark.parametrize("message, hint", [
    ("ResourcesExhausted: 8 hugepages of 1048576 KiB needed, 2 free", "; that is 8 × 1 GiB huge pages (hugepages_1gi), 2 free"),
    ("ResourcesExhausted: 600 hugepages of 2048 KiB needed, 512 free",
     "; that is 600 × 2 MiB huge pages (hugepages_2mi), 512 free"),
    ("ResourcesExhausted: 3 hugepages of 16384 KiB needed, 0 free", ""),  # a size no hold books
    ("ResourcesExhausted: 4096 MiB of memory needed, 512 MiB left on this host", ""),
])
def test_a_huge_page_refusal_says_the_page_size_as_a_hold_books_it(message, hint):
    """The spec's message stays word for word (the event carries it); the hint after it reads the size."""
    assert refusal_hint(Reason.RESOURCES_EXHAUSTED, message, Inventory()) == hint
