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
  same bound to text parsed piecewise (the journal, a line at a time);
* at most ``MAX_QUOTES`` double quotes, so that finding the strings costs a bounded walk.

Past a bound it raises ``StateFileError`` naming ``where``: such content was not written by
bcd.devices, so it is refused, never half-read. Content that is merely not JSON (a syntax
error, bad UTF-8, ``NaN`` or ``Infinity``) raises ``ValueError`` as ``json.loads`` does, so
each caller keeps its own answer to a damaged file. Every state file bcd.devices writes nests
at most 8 levels and holds integers of at most 19 digits (int64).
"""

from __future__ import annotations

import json
from typing import Any, NoReturn, Optional, Union

from ansible_collections.bcd.devices.plugins.module_utils.support.errors import StateFileError

MAX_DEPTH = 64
MAX_INT_DIGITS = 40
MAX_FLOAT_CHARS = 64
_INF = float("inf")
MAX_ITEMS = 1 << 19  # 524 288: under 100 MB of Python objects (make fuzz measured 130 MB at 1 << 20); a state file holds far fewer

# 2 097 152 quote characters: 1 048 576 strings. Every string is a key (whose value is an item) or an item, so the
# items' bound caps the strings at about twice it anyway; this bound keeps the walk that finds them short. A full
# event journal (10 000 sealed events, events.py) holds some 560 000 quotes with two devices a bind, more with more.
MAX_QUOTES = 1 << 21
_QUOTE, _BACKSLASH, _ESCAPED_QUOTE = b'"', b"\\", b'\\"'
_ONE_KIND = bytes.maketrans(b"{}", b"[]")  # depth does not care which bracket
_NOT_STRUCTURE = bytes(b for b in range(256) if b not in b"[]{},")


class _OverBound(Exception):
    """Raised by the parser's hooks and the skeleton; ``loads`` turns it into a ``StateFileError``."""


def _structure(text: bytes) -> bytes:
    return text.translate(_ONE_KIND, _NOT_STRUCTURE)


def _skeleton(content: bytes) -> bytes:
    """The structure of the JSON text ``content``: its brackets (all as ``[]``) and commas, strings left out.

    One walk from quote to quote, each step a C-speed ``find``: linear in the size and in the number of
    quotes, which is bounded first (``MAX_QUOTES``). A regular expression for strings is neither: it
    retries from every quote of an unterminated string (quadratic), and ``re.sub`` holds some 170 bytes a
    match (a megabyte of ``"",`` cost 170 MB). An unterminated string runs to the end, as a parser sees it.
    Text with no escaped quote (what bcd.devices writes, nearly always) takes a shorter way: every quote
    opens or closes a string, so one ``split`` finds them all."""
    quotes = content.count(_QUOTE)
    if quotes > MAX_QUOTES:
        raise _OverBound("holds %d quote characters; at most %d are read" % (quotes, MAX_QUOTES))
    if _ESCAPED_QUOTE not in content:  # every quote opens or closes a string: what lies between pairs is text
        return _structure(b"".join(content.split(_QUOTE)[::2]))  # (an odd last quote's string runs to the end)
    parts = []
    start = 0  # where the text outside strings begins
    while True:
        opening = content.find(_QUOTE, start)
        if opening < 0:
            parts.append(_structure(content[start:]))
            break
        parts.append(_structure(content[start:opening]))
        previous, closing = opening, -1
        while True:  # the next quote not escaped: an odd run of backslashes right before it escapes it
            candidate = content.find(_QUOTE, previous + 1)
            if candidate < 0:
                break
            between = content[previous + 1:candidate]
            if (len(between) - len(between.rstrip(_BACKSLASH))) % 2 == 0:
                closing = candidate
                break
            previous = candidate
        if closing < 0:
            break
        start = closing + 1
    return b"".join(parts)


def _deeper(brackets: bytes, limit: int) -> bool:
    """Each round removes every empty pair: the rounds it takes to empty balanced brackets are their
    depth. ``limit`` rounds at most, each a C-speed ``replace``. Brackets that never pair up (torn or
    broken text: closers, then openers) count as deep only when more than ``limit`` stay open;
    otherwise the parser says what is wrong, never recursing past twice ``limit``."""
    for _round in range(limit):
        if b"[]" not in brackets:
            return brackets.count(b"[") > limit
        brackets = brackets.replace(b"[]", b"")
    return b"[]" in brackets or brackets.count(b"[") > limit


def _items(skeleton: bytes) -> int:
    return len(skeleton) - skeleton.count(b"]")


def _checked_skeleton(content: bytes, where: str) -> bytes:
    try:
        skeleton = _skeleton(content)
    except _OverBound as exc:
        raise StateFileError(where, "%s; refused" % exc)
    items = _items(skeleton)
    if items > MAX_ITEMS:
        raise StateFileError(where, "holds %d arrays, objects and values; at most %d are read; refused"
                             % (items, MAX_ITEMS))
    return skeleton


def check_items(content: bytes, where: str) -> None:
    """``StateFileError`` when the JSON text ``content`` (one document or many) holds more than
    ``MAX_ITEMS`` arrays, objects and values, or more than ``MAX_QUOTES`` quote characters."""
    _checked_skeleton(content, where)


def structure_problem(content: bytes, limit: int = MAX_DEPTH) -> Optional[str]:
    """What makes the JSON or YAML text ``content`` too costly to hand a parser (nesting deeper than
    ``limit`` levels, more than ``MAX_QUOTES`` double quotes), or None. Strings are ignored."""
    try:
        skeleton = _skeleton(content)
    except _OverBound as exc:
        return str(exc)
    if _deeper(skeleton.replace(b",", b""), limit):
        return "nested deeper than %d levels" % limit
    return None


def _int(text: str) -> int:
    if len(text) - text.startswith("-") > MAX_INT_DIGITS:
        raise _OverBound("holds an integer of %d digits; at most %d are read" % (len(text.lstrip("-")), MAX_INT_DIGITS))
    return int(text)


def _float(text: str) -> float:
    if len(text) > MAX_FLOAT_CHARS:
        raise _OverBound("holds a number of %d characters; at most %d are read" % (len(text), MAX_FLOAT_CHARS))
    value = float(text)
    if value in (_INF, -_INF):
        raise _OverBound("holds %s, a number out of a float's range" % text)
    return value


def _constant(name: str) -> NoReturn:
    raise ValueError("%s is not a JSON number" % name)


def loads(content: Union[bytes, str], where: str, max_depth: int = MAX_DEPTH) -> Any:
    """The JSON value of ``content`` (bytes, UTF-8); ``StateFileError`` past a bound, ``ValueError``
    when it is not JSON."""
    if isinstance(content, str):
        content = content.encode("utf-8")
    skeleton = _checked_skeleton(content, where)
    if _deeper(skeleton.replace(b",", b""), max_depth):
        raise StateFileError(where, "nests deeper than %d levels; refused" % max_depth)
    text = content.decode("utf-8")
    try:
        return json.loads(text, parse_int=_int, parse_float=_float, parse_constant=_constant)
    except _OverBound as exc:
        raise StateFileError(where, "%s; refused" % exc)
    except RecursionError:  # not reached past the depth check; kept so that no input ends in a traceback
        raise StateFileError(where, "nests too deeply; refused")
