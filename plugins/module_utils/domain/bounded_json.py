# -*- coding: utf-8 -*-
# Copyright: contributors to bcd.devices
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""Bounded JSON: how root parses what another account could have written.

``loads(content, where)`` is ``json.loads`` with the bounds the standard parser lacks:

* nesting at most ``MAX_DEPTH`` levels, measured before parsing and without recursion
  (Python's parser recurses once a level and ends in ``RecursionError``);
* integers of at most ``MAX_INT_DIGITS`` digits (Python turns a 10 000-digit integer into an
  ``int`` in quadratic time, or refuses it past ``sys.set_int_max_str_digits``, by version);
* other numbers of at most ``MAX_FLOAT_CHARS`` characters, within a float's range;
* at most ``MAX_ITEMS`` arrays, objects and values in all (counted as their brackets and
  commas), so that what a file may cost in parsing time and memory is bounded by more than
  its size (32 MiB of ``[[],[],...]`` would be 450 MB of lists). ``check_items`` applies the
  same bound to text parsed piecewise (the journal, a line at a time).

Past a bound it raises ``StateFileError`` naming ``where``: such content was not written by
bcd.devices, so it is refused, never half-read. Content that is merely not JSON (a syntax
error, bad UTF-8, ``NaN`` or ``Infinity``) raises ``ValueError`` as ``json.loads`` does, so
each caller keeps its own answer to a damaged file. Every state file bcd.devices writes nests
at most 8 levels and holds integers of at most 19 digits (int64).
"""

from __future__ import annotations

import json
import re

from ansible_collections.bcd.devices.plugins.module_utils.domain.errors import StateFileError

MAX_DEPTH = 64
MAX_INT_DIGITS = 40
MAX_FLOAT_CHARS = 64
_INF = float("inf")
MAX_ITEMS = 1 << 19  # 524 288: under 100 MB of Python objects (make fuzz measured 130 MB at 1 << 20); a state file holds far fewer

# A JSON string, escapes included (unrolled: linear, no backtracking); what is left is structure.
_STRING = re.compile(rb'"[^"\\]*(?:\\.[^"\\]*)*"', re.S)
_ONE_KIND = bytes.maketrans(b"{}", b"[]")  # depth does not care which bracket
_NOT_STRUCTURE = bytes(b for b in range(256) if b not in b"[]{},")


class _OverBound(Exception):
    """Raised by the parser's hooks; ``loads`` turns it into a ``StateFileError``."""


def _skeleton(content):
    # type: (bytes) -> bytes
    """The structure of the JSON text ``content``: its brackets (all as ``[]``) and commas, strings left out."""
    return _STRING.sub(b"", content).translate(_ONE_KIND, _NOT_STRUCTURE)


def _deeper(brackets, limit):
    # type: (bytes, int) -> bool
    """Each round removes every empty pair: the rounds it takes to empty balanced brackets are their
    depth. ``limit`` rounds at most, each a C-speed ``replace``. Brackets that never pair up (torn or
    broken text: closers, then openers) count as deep only when more than ``limit`` stay open;
    otherwise the parser says what is wrong, never recursing past twice ``limit``."""
    for _round in range(limit):
        if b"[]" not in brackets:
            return brackets.count(b"[") > limit
        brackets = brackets.replace(b"[]", b"")
    return b"[]" in brackets or brackets.count(b"[") > limit


def _items(skeleton):
    return len(skeleton) - skeleton.count(b"]")


def check_items(content, where):
    # type: (bytes, str) -> None
    """``StateFileError`` when the JSON text ``content`` (one document or many) holds more than
    ``MAX_ITEMS`` arrays, objects and values."""
    items = _items(_skeleton(content))
    if items > MAX_ITEMS:
        raise StateFileError(where, "holds %d arrays, objects and values; at most %d are read; refused"
                             % (items, MAX_ITEMS))


def nests_deeper(content, limit=MAX_DEPTH):
    # type: (bytes, int) -> bool
    """Whether the JSON text ``content`` nests deeper than ``limit`` levels (strings ignored)."""
    return _deeper(_skeleton(content).replace(b",", b""), limit)


def _int(text):
    if len(text) - text.startswith("-") > MAX_INT_DIGITS:
        raise _OverBound("holds an integer of %d digits; at most %d are read" % (len(text.lstrip("-")), MAX_INT_DIGITS))
    return int(text)


def _float(text):
    if len(text) > MAX_FLOAT_CHARS:
        raise _OverBound("holds a number of %d characters; at most %d are read" % (len(text), MAX_FLOAT_CHARS))
    value = float(text)
    if value in (_INF, -_INF):
        raise _OverBound("holds %s, a number out of a float's range" % text)
    return value


def _constant(name):
    raise ValueError("%s is not a JSON number" % name)


def loads(content, where, max_depth=MAX_DEPTH):
    """The JSON value of ``content`` (bytes, UTF-8); ``StateFileError`` past a bound, ``ValueError``
    when it is not JSON."""
    if isinstance(content, str):
        content = content.encode("utf-8")
    skeleton = _skeleton(content)
    items = _items(skeleton)
    if items > MAX_ITEMS:
        raise StateFileError(where, "holds %d arrays, objects and values; at most %d are read; refused"
                             % (items, MAX_ITEMS))
    if _deeper(skeleton.replace(b",", b""), max_depth):
        raise StateFileError(where, "nests deeper than %d levels; refused" % max_depth)
    text = content.decode("utf-8")
    try:
        return json.loads(text, parse_int=_int, parse_float=_float, parse_constant=_constant)
    except _OverBound as exc:
        raise StateFileError(where, "%s; refused" % exc)
    except RecursionError:  # not reached past nests_deeper; kept so that no input ends in a traceback
        raise StateFileError(where, "nests too deeply; refused")
