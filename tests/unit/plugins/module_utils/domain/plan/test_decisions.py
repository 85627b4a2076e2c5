# -*- coding: utf-8 -*-
# Copyright: contributors to bcd.devices
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""``Decided`` adds up as the phases' order says: sequences in order, sets united, flags or-ed; joining a
loop's parts at once is the same as adding them one by one (the planner joins; issue 22 measured ``+=``
in its loops copying what was decided so far at every hold)."""

from __future__ import annotations

from ansible_collections.bcd.devices.plugins.module_utils.support.records import fields
from functools import reduce

from hypothesis import given, settings
from hypothesis import strategies as st

from ansible_collections.bcd.devices.plugins.module_utils.domain.plan.decisions import Decided

WORDS = st.text("abc", max_size=2)


def _decided():
    drawn = {}
    for item in fields(Decided):
        default = getattr(Decided(), item.name)
        if isinstance(default, bool):
            drawn[item.name] = st.booleans()
        elif isinstance(default, tuple):
            drawn[item.name] = st.lists(WORDS, max_size=3).map(tuple)
        else:
            drawn[item.name] = st.frozensets(WORDS, max_size=3)
    return st.builds(Decided, **drawn)


def _fieldwise(left, right):
    merged = {}
    for item in fields(Decided):
        mine, theirs = getattr(left, item.name), getattr(right, item.name)
        merged[item.name] = (mine or theirs) if isinstance(mine, bool) else (
            mine + theirs if isinstance(mine, tuple) else mine | theirs)
    return Decided(**merged)


@settings(max_examples=300, deadline=None, derandomize=True)
@given(st.lists(_decided(), max_size=6))
def test_join_is_the_parts_added_in_order(parts):
    expected = reduce(_fieldwise, parts, Decided())
    assert Decided.join(parts) == expected
    assert reduce(lambda a, b: a + b, parts, Decided()) == expected


def test_join_of_nothing_and_of_one_part():
    one = Decided(warnings=("w",), marker_cleared=True)
    assert Decided.join([]) == Decided()
    assert Decided.join([Decided(), one, Decided()]) is one


def test_a_thousand_holds_join_in_order():
    parts = [Decided(actions=(i,), holds=({"n": i},), sliced=frozenset(["s%d" % (i % 7)])) for i in range(1000)]
    joined = Decided.join(parts)
    assert joined.actions == tuple(range(1000))
    assert [h["n"] for h in joined.holds] == list(range(1000))
    assert joined.sliced == frozenset("s%d" % i for i in range(7))
