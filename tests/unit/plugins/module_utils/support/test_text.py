# -*- coding: utf-8 -*-
# Copyright: contributors to bcd.devices
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""support/text.py's ``quoted``: how a message of the node quotes a value it was sent, whatever it holds, so that the
message fits the events' grammar (domain/event_grammar.py: printable, no curly bracket) and reads as one quote."""

from __future__ import annotations

import re

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from ansible_collections.bcd.devices.plugins.module_utils.domain.event_grammar import message_error
from ansible_collections.bcd.devices.plugins.module_utils.support.text import QUOTED_MAX, printable, quoted

# what an escape of quoted looks like: \xNN, \uNNNN, \UNNNNNNNN, or ascii()'s \t \n \r
ESCAPE_RE = re.compile(r"\\(x[0-9a-f]{2}|u[0-9a-f]{4}|U[0-9a-f]{8}|[tnr])")


@pytest.mark.parametrize("value, quote, shown", [
    ("alloc-01/../x", "'", "'alloc-01/../x'"),
    ("BINDING_HOLD", "", "BINDING_HOLD"),
    ("{{ lookup('pipe', 'id') }}", "'", "'\\x7b\\x7b lookup(\\x27pipe\\x27, \\x27id\\x27) \\x7d\\x7d'"),
    ("{{ x }}", "", "\\x7b\\x7b x \\x7d\\x7d"),
    ('say "hi"', '"', '"say \\x22hi\\x22"'),
    ("say 'hi'", '"', "\"say 'hi'\""),
    ("back\\slash", "'", "'back\\x5cslash'"),
    ("a\x1b[2K\rb\n\t", "'", "'a\\x1b[2K\\rb\\n\\t'"),
    ("\x7f\x85\u00a0\u202e\u2028\ufeff\U000e0001\ud800", "'", "'\\x7f\\x85\\xa0\\u202e\\u2028\\ufeff\\U000e0001\\ud800'"),
    ("caf\u00e9 \u65e5\u672c", "'", "'caf\\xe9 \\u65e5\\u672c'"),
    ("", "'", "''"),
    (None, "'", "None"),
    (7, "'", "7"),
    (True, "'", "True"),
    (1.5, "'", "1.5"),
    (1 << 100, "'", "an integer of 101 bits"),
    (["{{ x }}"], "'", "a list"),
    ({"{{": "}}"}, "'", "a mapping"),
])
def test_quoted_shows_a_value_as_printable_ascii_without_a_curly_bracket(value, quote, shown):
    assert quoted(value, quote=quote) == shown


def test_a_long_value_is_cut_never_inside_an_escape():
    assert quoted("x" * 300) == "'%s...'" % ("x" * (QUOTED_MAX - 3))
    assert quoted("x" * QUOTED_MAX) == "'%s'" % ("x" * QUOTED_MAX)
    assert quoted("\n" * 300, limit=10) == "'\\n\\n\\n...'"  # 3 escapes of 2 characters fit in 7, a 4th does not
    assert quoted("{" * 300, limit=10) == "'\\x7b...'"
    assert quoted("\U000e0001" * 3, limit=13) == "'\\U000e0001...'"
    assert quoted("\U000e0001" * 3, limit=12) == "'...'"  # not even one fits: cut to nothing


@settings(max_examples=500, deadline=None)
@given(value=st.one_of(st.text(), st.text(alphabet=st.characters(max_codepoint=0x7f)),
                       st.text(alphabet="{}\\'\"\n\r\x00x", max_size=200)),
       quote=st.sampled_from(["'", '"', ""]), limit=st.integers(min_value=4, max_value=200))
def test_whatever_the_value_the_quote_is_bounded_printable_ascii_and_reads_back(value, quote, limit):
    shown = quoted(value, quote=quote, limit=limit)
    assert shown.isascii() and shown.isprintable() and not set(shown) & set("{}"), shown
    assert message_error("refused: %s" % shown) is None
    assert shown.startswith(quote) and shown.endswith(quote) and len(shown) <= limit + 2 * len(quote)
    inner = shown[len(quote):len(shown) - len(quote)]
    assert quote == "" or quote not in inner  # the value cannot end the quote early
    # every backslash starts an escape, and what is not cut reads back as the value
    assert "\\" not in ESCAPE_RE.sub("", inner)
    read_back = ESCAPE_RE.sub(lambda match: match.group(0).encode("ascii").decode("unicode_escape"), inner)
    if read_back != value:  # cut: what is shown is the value's start, then "..."
        assert inner.endswith("...") and value.startswith(read_back[:-3]) and len(read_back) - 3 < len(value)


@given(value=st.text(alphabet=st.characters(min_codepoint=0x20, max_codepoint=0x7e, blacklist_characters="{}\\'"),
                     max_size=QUOTED_MAX))
def test_plain_text_is_quoted_as_it_is_and_printable_leaves_the_quote_alone(value):
    assert quoted(value) == "'%s'" % value
    assert printable(quoted(value + "\x1b{")) == quoted(value + "\x1b{")


def test_the_work_is_bounded_by_the_limit():
    import time  # pylint: disable=import-outside-toplevel
    huge = "\u202e" * (1 << 24)
    started = time.process_time()
    for _round in range(1000):
        quoted(huge)
    assert time.process_time() - started < 1.0
