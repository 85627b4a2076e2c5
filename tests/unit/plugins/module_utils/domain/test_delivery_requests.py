# -*- coding: utf-8 -*-
# Copyright: contributors to bcd.devices
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""What ``bcd-holds deliver`` posts and when (domain/delivery.py): the journal split into requests a gateway
takes, oldest first, and the backoff from a gateway that is down. The filter's part of the same module is
tests/unit/plugins/filter/test_delivery.py's."""

from __future__ import annotations

import json

import pytest

from ansible_collections.bcd.devices.plugins.module_utils.domain.delivery import (
    BACKOFF_MAX,
    DEFAULT_MAX_BYTES,
    DEFAULT_MAX_EVENTS,
    answer_problem,
    backoff_record,
    backoff_seconds,
    backs_off,
    deliveries,
)
from ansible_collections.bcd.devices.plugins.module_utils.state.events import MAX_JOURNAL_BYTES, MAX_UNACKED


def events(count, size=100):
    return [{"seq": seq, "type": "AllocationFailed", "body": {"node_id": "node-a", "message": "m" * size}}
            for seq in range(1, count + 1)]


def test_a_full_journal_goes_in_one_request_the_gateway_takes_by_default():
    # the gateway's defaults (max_events 10 000, max_body_bytes 16 MiB) take a node's whole journal
    assert DEFAULT_MAX_EVENTS >= MAX_UNACKED and DEFAULT_MAX_BYTES > MAX_JOURNAL_BYTES
    full = events(MAX_UNACKED, size=(MAX_JOURNAL_BYTES // MAX_UNACKED) - 120)
    bodies, too_large = deliveries(full, DEFAULT_MAX_EVENTS, DEFAULT_MAX_BYTES)
    assert too_large is None and len(bodies) == 1
    assert json.loads(bodies[0][1]) == {"events": full}


@pytest.mark.parametrize("max_events, max_bytes", [(1, 10 ** 6), (3, 10 ** 6), (100, 1024), (4, 700), (100, 10 ** 6)])
def test_requests_keep_the_order_and_every_bound(max_events, max_bytes):
    journal = events(10)
    bodies, too_large = deliveries(journal, max_events, max_bytes)
    assert too_large is None
    assert [event for chunk, _body in bodies for event in chunk] == journal    # each once, oldest first
    for chunk, body in bodies:
        assert 1 <= len(chunk) <= max_events and len(body) <= max_bytes
        assert json.loads(body) == {"events": chunk}
    # no request could have taken the next one's first event too
    for (chunk, body), (following, _next) in zip(bodies, bodies[1:]):
        assert len(chunk) == max_events or len(body) + 1 + len(json.dumps(following[0], separators=(",", ":"))) > max_bytes


def test_an_event_too_large_for_any_request_stops_the_requests_before_it():
    journal = events(4)
    journal[2]["body"]["message"] = "m" * 5000
    bodies, too_large = deliveries(journal, 100, 1024)
    assert too_large is journal[2]
    assert [event["seq"] for chunk, _body in bodies for event in chunk] == [1, 2]
    assert deliveries([journal[2]], 100, 1024) == ([], journal[2])


def test_a_lone_surrogate_in_a_body_is_escaped_not_a_crash():
    event = {"seq": 1, "type": "AllocationFailed", "body": {"message": "\ud800 \u00e9"}}
    [(chunk, body)] = deliveries([event], 10, 1024)[0]
    assert chunk == [event] and body.isascii() and json.loads(body) == {"events": [event]}


@pytest.mark.parametrize("status, backs", [(-1, True), (429, True), (500, True), (503, True), (599, True),
                                           (200, False), (307, False), (400, False), (401, False), (413, False)])
def test_only_an_unreachable_or_overloaded_gateway_is_backed_off_from(status, backs):
    assert backs_off(status) is backs


def test_the_wait_doubles_from_30_s_to_15_minutes_with_a_tenth_of_jitter():
    assert [backoff_seconds(n, 0.5) for n in range(1, 8)] == [30, 60, 120, 240, 480, 900, 900]
    assert backoff_seconds(1, 0.0) == pytest.approx(27) and backoff_seconds(1, 0.99999) == pytest.approx(33, abs=0.01)
    assert backoff_seconds(10 ** 9, 0.5) == BACKOFF_MAX  # no overflow, however long the gateway was down
    assert backoff_seconds(0, 0.5) == 30 and backoff_seconds(3, 7.0) == pytest.approx(120 * 1.1)


@pytest.mark.parametrize("data", [None, [], "x", {"failures": 0, "next_attempt": 1.0}, {"failures": True, "next_attempt": 1},
                                  {"failures": 1, "next_attempt": "soon"}, {"failures": 1, "next_attempt": False},
                                  {"failures": 1, "next_attempt": 1.0, "error": 5}])
def test_a_backoff_record_that_is_not_one_is_none(data):
    assert backoff_record(data) is None


def test_a_backoff_record_is_read_bounded():
    assert backoff_record({"failures": 3, "next_attempt": 12, "error": "e" * 5000}) == {
        "failures": 3, "next_attempt": 12.0, "error": "e" * 1000}
    assert backoff_record({"failures": 10 ** 30, "next_attempt": 1})["failures"] == 1 << 20


@pytest.mark.parametrize("answer, problem", [
    ({"accepted": []}, ""),
    ({"accepted": [1], "rejected": []}, ""),
    ({"accepted": "1"}, 'it answered 200 with a mapping without a list accepted, not {"accepted": [seq, ...]}'),
    ([1, 2], 'it answered 200 with no JSON mapping, not {"accepted": [seq, ...]}'),
    (None, 'it answered 200 with no JSON mapping, not {"accepted": [seq, ...]}'),
])
def test_a_200_answer_that_is_not_accepted_seqs_is_named(answer, problem):
    assert answer_problem(200, answer) == problem
    assert answer_problem(503, answer) == ""
