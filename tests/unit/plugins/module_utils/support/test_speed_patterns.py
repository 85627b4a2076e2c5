# -*- coding: utf-8 -*-
# Copyright: contributors to bcd.devices
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""support/speed.py's lazy_pattern: a lazy pattern answers as ``re.compile`` of the same source does, compiles nothing
until first used, then hands out the compiled pattern's own methods; and module_utils compiles no pattern at
import."""

from __future__ import annotations

import ast
import re
from pathlib import Path

from hypothesis import given
from hypothesis import strategies as st

from ansible_collections.bcd.devices.plugins.module_utils.support.speed import lazy_pattern

REPO = Path(__file__).resolve().parents[5]
SOURCE = r"^(?P<uuid>GPU-[0-9a-f-]{4,})/s([0-9]{1,6})$"


@given(st.text(alphabet="GPU-0123456789abcdef/s\n", max_size=30))
def test_a_lazy_pattern_answers_as_the_compiled_one(text):
    lazy, compiled = lazy_pattern(SOURCE, re.M), re.compile(SOURCE, re.M)
    for name in ("match", "fullmatch", "search"):
        ours, theirs = getattr(lazy, name)(text), getattr(compiled, name)(text)
        assert (ours and ours.groups()) == (theirs and theirs.groups())
    assert lazy.findall(text) == compiled.findall(text)
    assert [m.span() for m in lazy.finditer(text)] == [m.span() for m in compiled.finditer(text)]
    assert lazy.sub("x", text) == compiled.sub("x", text) and lazy.subn("x", text) == compiled.subn("x", text)
    assert lazy.split(text) == compiled.split(text)


def test_nothing_is_compiled_before_first_use_and_then_the_methods_are_re_s_own():
    lazy = lazy_pattern(r"^a+$")
    assert lazy.pattern == r"^a+$" and not hasattr(lazy.match, "__self__")
    assert lazy.match("aaa") and lazy.fullmatch("b") is None
    assert lazy.match.__self__ is re.compile(r"^a+$") and lazy.search.__self__ is re.compile(r"^a+$")
    assert lazy_pattern(r"(?P<n>x)(y)").groups == 2 and lazy_pattern(r"(?P<n>x)").groupindex == {"n": 1}
    untouched = lazy_pattern(r"^b$")
    assert not hasattr(untouched, "__iter__") and not hasattr(untouched.match, "__self__")


def test_module_utils_compiles_no_pattern_at_import():
    """Every pattern of module_utils is lazy (docs/performance.md): a no-op compiles the few it uses."""
    found = []
    for path in sorted((REPO / "plugins" / "module_utils").rglob("*.py")):
        if path.relative_to(REPO).as_posix() == "plugins/module_utils/support/speed.py":
            continue
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) and node.func.attr == "compile" \
                    and isinstance(node.func.value, ast.Name) and node.func.value.id == "re":
                found.append("%s:%d" % (path.relative_to(REPO), node.lineno))
    assert not found
