# -*- coding: utf-8 -*-
# Copyright: contributors to bcd.devices
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""The phases' values (``Released``, ``Outcome``) add up as the phases' order says: sequences in order, sets
united, mappings updated (a later value replaces an earlier one, a tuple adds up), flags or-ed; joining a
loop's parts at once is the same as adding them one by one (the planner joins; issue 22 measured ``+=`` in
its loops copying what was decided so far at every hold)."""

from __future__ import annotations

from functools import reduce

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from ansible_collections.bcd.devices.plugins.module_utils.domain.plan.decisions import Outcome, Released
from ansible_collections.bcd.devices.plugins.module_utils.support.records import fields

WORDS = st.text("abc", max_size=2)
# a mapping's values: a tuple adds up (Released.retained), anything else replaces (Released.freeing, Outcome.renders)
VALUES = st.one_of(st.lists(WORDS, max_size=2).map(tuple), st.integers(0, 3))


def _drawn(kind):
    drawn = {}
    for item in fields(kind):
        default = getattr(kind(), item.name)
        if isinstance(default, bool):
            drawn[item.name] = st.booleans()
        elif isinstance(default, tuple):
            drawn[item.name] = st.lists(WORDS, max_size=3).map(tuple)
        elif isinstance(default, frozenset):
            drawn[item.name] = st.frozensets(WORDS, max_size=3)
        else:
            drawn[item.name] = st.dictionaries(WORDS, VALUES, max_size=3)
    return st.builds(kind, **drawn)


def _fieldwise(left, right):
    merged = {}
    for item in fields(type(left)):
        mine, theirs = getattr(left, item.name), getattr(right, item.name)
        if isinstance(mine, bool):
            merged[item.name] = mine or theirs
        elif isinstance(mine, (tuple, frozenset)):
            merged[item.name] = mine + theirs if isinstance(mine, tuple) else mine | theirs
        else:
            both = dict(mine)
            for key, value in theirs.items():
                both[key] = both[key] + value if isinstance(value, tuple) and isinstance(both.get(key), tuple) else value
            merged[item.name] = both
    return type(left)(**merged)


@pytest.mark.parametrize("kind", [Released, Outcome])
def test_join_is_the_parts_added_in_order(kind):
    @settings(max_examples=300, deadline=None, derandomize=True)
    @given(st.lists(_drawn(kind), max_size=6))
    def check(parts):
        expected = reduce(_fieldwise, parts, kind())
        assert kind.join(parts) == expected
        assert reduce(lambda a, b: a + b, parts, kind()) == expected

    check()


def test_join_of_nothing_and_of_one_part():
    one = Released(warnings=("w",), marker_cleared=True)
    assert Released.join([]) == Released()
    assert Released.join([Released(), one, Released()]) is one


def test_a_thousand_holds_join_in_order():
    parts = [Outcome(actions=(i,), holds=({"n": i},), renders={"a%d" % (i % 5): i}, sliced=frozenset(["s%d" % (i % 7)]))
             for i in range(1000)]
    joined = Outcome.join(parts)
    assert joined.actions == tuple(range(1000))
    assert [h["n"] for h in joined.holds] == list(range(1000))
    assert joined.renders == dict(("a%d" % i, 995 + i) for i in range(5))
    assert joined.sliced == frozenset("s%d" % i for i in range(7))


def test_the_old_atoms_a_hold_keeps_add_up_and_a_later_release_replaces_an_earlier():
    first = Released(retained={"k1": ("a",)}, freeing={"k1": 1})
    second = Released(retained={"k2": ("c",), "k1": ("b",)}, freeing={"k1": 2})
    joined = first + second
    assert joined.retained == {"k1": ("a", "b"), "k2": ("c",)} and list(joined.retained) == ["k1", "k2"]
    assert joined.freeing == {"k1": 2}
