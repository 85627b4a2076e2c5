# -*- coding: utf-8 -*-
# Copyright: contributors to bcd.devices
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""The root helper's token buckets on their own, without root (``entry/helper/limits.py``): a peer's
requests, a class of operations at a time, and its log lines. What they do to a flood and to a pass
through a helper is ``test_quotas.py``'s and ``test_bounds.py``'s."""

from __future__ import annotations

import pytest

from ansible_collections.bcd.devices.plugins.module_utils.domain.input.assignment import MAX_ASSIGNMENTS
from ansible_collections.bcd.devices.plugins.module_utils.entry.helper.limits import (
    LOOK_OPS,
    RATE_BURST,
    RATE_CLASSES,
    RATE_PER_SECOND,
    RATED_OPS,
    RELEASE_BURST,
    RELEASE_OPS,
    LogLimit,
    RateLimit,
    RateLimits,
)
from ansible_collections.bcd.devices.plugins.module_utils.entry.helper.reading import MAX_HOLD_FILES
from ansible_collections.bcd.devices.plugins.module_utils.entry.helper.request import OPS


class Clock(object):
    def __init__(self):
        self.now = 100.0

    def __call__(self):
        return self.now


def test_the_bucket_gives_a_burst_then_its_rate_and_a_refusal_costs_nothing():
    clock = Clock()
    limit = RateLimit(rate=4, burst=5, clock=clock)
    assert [limit.take(1000) for _round in range(5)] == [None] * 5
    assert limit.take(1000) == 0.25
    assert limit.take(1000) == 0.25  # asking again while refused does not dig deeper
    assert limit.take(1001) is None  # per peer
    assert all(limit.take(0) is None for _round in range(50))  # root is never limited
    clock.now += 0.125
    assert limit.take(1000) == 0.125
    clock.now += 0.125
    assert limit.take(1000) is None and limit.take(1000) == 0.25
    clock.now += 60
    assert [limit.take(1000) for _round in range(6)] == [None] * 5 + [0.25]  # never more than the burst


def test_a_bucket_limits_its_own_operations_and_every_operation_has_one():
    limit = RateLimit(rate=1, burst=1, clock=Clock())
    limit.check(7, {"op": "hold.write"})
    for op in RATED_OPS:
        with pytest.raises(Exception, match="^rate limited: uid 7 "):
            limit.check(7, {"op": op})
    for request in ({"op": "hold.remove"}, {"op": "slice.stop"}, {"op": "kube.look"}, {"op": "nothing"}, [], None):
        limit.check(7, request)
    # the helper's limits: each op of the protocol in exactly one class, each class spent on its own
    assert sorted(op for ops, _burst, _rate in RATE_CLASSES for op in ops) == sorted(OPS)
    limits = RateLimits(classes=[(ops, 1, 1) for ops, _burst, _rate in RATE_CLASSES], clock=Clock())
    for ops in (RATED_OPS, RELEASE_OPS, LOOK_OPS):
        limits.check(7, {"op": ops[0]})
        with pytest.raises(Exception, match="^rate limited: uid 7 asked for more than 1 of %s at once" % ", ".join(ops)):
            limits.check(7, {"op": ops[-1]})
    for request in ({"op": "nothing"}, {"op": None}, [], None):  # refused before the node is touched, unlimited
        limits.check(7, request)
    limits.check(0, {"op": "kube.look"})  # root is never limited


def test_the_bursts_fit_a_pass_that_sets_aside_writes_and_slices_or_releases_the_most_holds():
    assert RATE_BURST >= 4 * MAX_ASSIGNMENTS and MAX_HOLD_FILES == MAX_ASSIGNMENTS
    assert RELEASE_BURST >= 3 * MAX_ASSIGNMENTS  # a spec, an env file and a slice each
    assert 1 <= RATE_PER_SECOND <= 100


def test_log_lines_are_limited_per_peer_and_the_helpers_own_are_not():
    now = [0.0]
    lines = []
    limit = LogLimit(lines.append, burst=2, rate=1, window=60, clock=lambda: now[0])
    for _count in range(5):
        limit("uid 7: hold.write cdi a1", 7)
        limit("uid 8: hold.write cdi b1", 8)
    limit("accept failed (Too many open files); pausing until descriptors free up")
    assert lines == ["uid 7: hold.write cdi a1", "uid 8: hold.write cdi b1"] * 2 + [
        "accept failed (Too many open files); pausing until descriptors free up"]
    now[0] += 61
    limit.flush()
    assert lines[-2:] == ["uid 7: 3 similar lines dropped in the last 61 s",
                          "uid 8: 3 similar lines dropped in the last 61 s"]
    limit.flush()
    assert len(lines) == 7  # said once
