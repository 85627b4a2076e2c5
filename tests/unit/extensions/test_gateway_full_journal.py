# -*- coding: utf-8 -*-
# Copyright: contributors to bcd.devices
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""A full journal (its bound, 10 000 events, state/events.py) of sealed binds with several devices each is read by
the node and taken by the gateway in one delivery: seals added some 6 quote characters an event, and the bounded
parser's quote bound (support/bounded_json.py) once refused such a journal, on the node and at the gateway."""

from __future__ import annotations

import json

from ansible_collections.bcd.devices.plugins.module_utils.state import events as _events
from ansible_collections.bcd.devices.plugins.module_utils.support import bounded_json
from ansible_collections.bcd.devices.tests.unit.extensions.test_gateway_source import Node  # noqa: F401  pylint: disable=unused-import
from ansible_collections.bcd.devices.tests.unit.extensions.test_gateway_source import fixture_start  # noqa: F401  pylint: disable=unused-import

DEVICES = 4


def bind_body(node_id, number):
    gpus = ["GPU-5f1c2a90-%04x-4000-8000-%012x" % (number % 65536, k) for k in range(DEVICES)]
    allocation = "alloc_%d" % number
    return {"node_id": node_id, "boot_id": "6f0c1e9e-1c7a-4a43-9a9e-000000000001", "allocation_id": allocation,
            "generation": 1, "device_ids": gpus, "cdi_devices": ["bcd.dev/gpu=" + gpu for gpu in gpus],
            "cdi_spec_path": "/etc/cdi/bcd-%s.json" % allocation, "env_file": "/run/bcd/allocations/%s.env" % allocation}


def test_a_full_journal_of_sealed_binds_is_read_and_taken_in_one_delivery(tmp_path, start):
    node = Node(tmp_path / "node-a", "node-a")
    node.journal.append_many([("AllocationBound", bind_body("node-a", n), node.key) for n in range(_events.MAX_UNACKED)],
                             seal_with=node.key)
    with open(node.journal.path, "rb") as handle:
        content = handle.read()
    assert content.count(b'"') > 1 << 19  # past the quote bound the parser had before seals
    assert len(content) <= _events.MAX_JOURNAL_BYTES
    events = node.unacked()
    assert len(events) == _events.MAX_UNACKED
    body = json.dumps({"events": events}).encode()
    assert bounded_json.loads(body, "the delivery")["events"][-1] == events[-1]
    source = start(node_keys={"node-a": node.public_key})
    status, answer = source.deliver(events)
    assert status == 200 and answer["rejected"] == [], answer["rejected"][:3]
    assert answer["accepted"] == list(range(1, _events.MAX_UNACKED + 1))
    assert len(source.queued()) == _events.MAX_UNACKED
