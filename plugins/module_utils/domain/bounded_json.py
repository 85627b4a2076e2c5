# -*- coding: utf-8 -*-
# Copyright: contributors to bcd.devices
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""Bounded JSON: how root parses what another account could have written.

``loads(content, where)`` is ``json.loads`` with the bounds the standard parser lacks:

* nesting at most ``MAX_DEPTH`` levels, measured before parsing and without recursion
  (Python's parser recurses once a level and ends in ``RecursionError``);
* integers of at most ``MAX_INT_DIGITS`` digits (Python turns a 10 000-digit integer into an
  ``int`` in quadratic time, or refuses it past ``sys.set_int_max_str_digits``, by version);
* other numbers of at most ``MAX_FLOAT_CHARS`` characters.

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

# A JSON string, escapes included (unrolled: linear, no backtracking); what is left is structure.
_STRING = re.compile(rb'"[^"\\]*(?:\\.[^"\\]*)*"', re.S)
_NOT_BRACKET = bytes(b for b in range(256) if b not in b"[]{}")
_EMPTY_PAIR = re.compile(rb"\[\]|\{\}")


class _OverBound(Exception):
    """Raised by the parser's hooks; ``loads`` turns it into a ``StateFileError``."""


def nests_deeper(content, limit=MAX_DEPTH):
    # type: (bytes, int) -> bool
    """Whether the JSON text ``content`` nests deeper than ``limit`` levels (strings ignored).

    The brackets alone are kept, then each round removes every empty pair: the rounds it takes
    to empty them are the nesting depth. Work is linear per round, ``limit`` rounds at most. Brackets
    that never pair up (torn or hand-broken text) count as deep only when there are more than ``limit``
    of them; otherwise the parser says what is wrong."""
    skeleton = _STRING.sub(b"", content).translate(None, _NOT_BRACKET)
    for _round in range(limit):
        if not skeleton:
            return False
        shorter = _EMPTY_PAIR.sub(b"", skeleton)
        if len(shorter) == len(skeleton):
            return len(skeleton) > limit
        skeleton = shorter
    return bool(skeleton)


def _int(text):
    if len(text) - text.startswith("-") > MAX_INT_DIGITS:
        raise _OverBound("holds an integer of %d digits; at most %d are read" % (len(text.lstrip("-")), MAX_INT_DIGITS))
    return int(text)


def _float(text):
    if len(text) > MAX_FLOAT_CHARS:
        raise _OverBound("holds a number of %d characters; at most %d are read" % (len(text), MAX_FLOAT_CHARS))
    return float(text)


def _constant(name):
    raise ValueError("%s is not a JSON number" % name)


def loads(content, where, max_depth=MAX_DEPTH):
    """The JSON value of ``content`` (bytes, UTF-8); ``StateFileError`` past a bound, ``ValueError``
    when it is not JSON."""
    if isinstance(content, str):
        content = content.encode("utf-8")
    if nests_deeper(content, max_depth):
        raise StateFileError(where, "nests deeper than %d levels; refused" % max_depth)
    text = content.decode("utf-8")
    try:
        return json.loads(text, parse_int=_int, parse_float=_float, parse_constant=_constant)
    except _OverBound as exc:
        raise StateFileError(where, "%s; refused" % exc)
    except RecursionError:  # not reached past nests_deeper; kept so that no input ends in a traceback
        raise StateFileError(where, "nests too deeply; refused")
