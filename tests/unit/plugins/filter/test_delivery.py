# -*- coding: utf-8 -*-
# Copyright: contributors to bcd.devices
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""Tests for the bcd.devices.delivery filter: what the role acknowledges after posting events to a
gateway (roles/bcd_holds/tasks/deliver.yml), from the uri task's registered result."""

from __future__ import annotations

import pytest

from ansible_collections.bcd.devices.plugins.filter import delivery as filter_plugin

URL = "http://127.0.0.1:8080/events"
delivery = filter_plugin.FilterModule().filters()["delivery"]


def events(*seqs):
    return [{"seq": seq, "type": "AllocationBound", "body": {"allocation_id": "alloc_%d" % seq}} for seq in seqs]


def answered(accepted=None, status=200, **answer):
    if accepted is not None:
        answer["accepted"] = accepted
    return {"status": status, "json": answer, "msg": "OK (unknown bytes)", "changed": False}


def test_filter_is_registered_under_its_name():
    assert set(filter_plugin.FilterModule().filters()) == {"delivery"}


def test_everything_accepted_is_acknowledged_through_the_last():
    got = delivery(events(4, 5), answered([4, 5]), URL)
    assert got == {"posted": [4, 5], "accepted": [4, 5], "rejected": [], "ack_through": 5, "error": "",
                   "left": [], "message": ""}


@pytest.mark.parametrize("accepted, through, left", [
    ([4], 4, [5, 6]),          # a prefix
    ([4, 6], 4, [5, 6]),       # a gap: 6 waits for 5
    ([5, 6], None, [4, 5, 6]),  # the first not accepted: nothing
    ([6, 4, 5], 6, []),        # in any order
    ([4, 4, 99], 4, [5, 6]),   # repeats and a seq never posted change nothing
])
def test_only_the_contiguous_accepted_prefix_is_acknowledged(accepted, through, left):
    got = delivery(events(4, 5, 6), answered(accepted), URL)
    assert (got["ack_through"], got["left"]) == (through, left)


def test_events_are_posted_oldest_first_whatever_their_order_in_the_list():
    assert delivery(events(6, 4, 5), answered([4, 5]), URL)["posted"] == [4, 5, 6]


def test_rejected_events_are_named_in_the_message():
    answer = answered([1], rejected=[{"seq": 2, "reason": "unknown node key"}])
    got = delivery(events(1, 2, 3), answer, URL)
    assert got["rejected"] == [{"seq": 2, "reason": "unknown node key"}]
    assert got["message"] == ('the gateway accepted 1 of 3 events, rejected: {"seq": 2, "reason": "unknown node key"}; '
                              "2 events stay in the journal for the next run")


@pytest.mark.parametrize("accepted", [[True, False], ["1", 1.0], "12", {"1": 1}, None])
def test_an_accepted_list_of_anything_but_integers_acknowledges_nothing(accepted):
    answer = {"status": 200, "json": {"accepted": accepted}} if accepted is not None else {"status": 200, "json": {}}
    got = delivery(events(1, 2), answer, URL)
    assert (got["accepted"], got["ack_through"], got["left"], got["error"]) == ([], None, [1, 2], "")
    assert got["message"] == "the gateway accepted 0 of 2 events; 2 events stay in the journal for the next run"


@pytest.mark.parametrize("body", [None, [1, 2], "accepted", 12])
def test_an_answer_that_is_not_a_mapping_acknowledges_nothing(body):
    got = delivery(events(1, 2), {"status": 200, "json": body}, URL)
    assert (got["accepted"], got["rejected"], got["ack_through"]) == ([], [], None)


def test_a_gateway_answering_anything_but_200_acknowledges_nothing_and_says_so():
    post = {"status": 503, "msg": "Status code was 503 and not [200]: HTTP Error 503: Service Unavailable",
            "json": {"accepted": [1, 2]}}  # what a non-200 answer says is not believed
    got = delivery(events(1, 2), post, URL)
    assert got["ack_through"] is None and got["accepted"] == []
    assert got["error"] == ("the gateway %s answered 503: Status code was 503 and not [200]: "
                            "HTTP Error 503: Service Unavailable" % URL)
    assert got["message"] == got["error"] + "; 2 events stay in the journal for the next run"


def test_a_gateway_that_cannot_be_reached_acknowledges_nothing_and_says_so():
    post = {"status": -1, "msg": "Status code was -1 and not [200]: Request failed: <urlopen error [Errno 111] "
                                 "Connection refused>"}
    got = delivery(events(3), post, URL)
    assert got["error"] == "the gateway %s could not be reached: %s" % (URL, post["msg"])
    assert (got["ack_through"], got["left"]) == (None, [3])


def test_a_result_without_a_status_is_a_gateway_not_reached():
    got = delivery(events(3), {"failed": True}, URL)
    assert got["error"] == "the gateway %s could not be reached: no answer" % URL


def test_a_skipped_post_posted_nothing_and_acknowledges_nothing():
    """Nothing to post, or check mode (uri does not run in check mode)."""
    skipped = {"changed": False, "skipped": True, "skip_reason": "Conditional result was False"}
    for listed in ([], events(1, 2)):
        assert delivery(listed, skipped, URL) == {"posted": [], "accepted": [], "rejected": [], "ack_through": None,
                                                  "error": "", "left": [], "message": ""}
