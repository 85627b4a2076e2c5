# -*- coding: utf-8 -*-
# Copyright: contributors to bcd.devices
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""Indented JSON, byte for byte what ``json.dumps(value, indent=2, ...)`` writes, several times faster.

Every file a pass writes for people to read (the CDI specs, the slice records, the ledger, the stored
nodespec) is indented JSON. ``json`` uses its C encoder only without ``indent``; with it, every value
goes through the pure-Python generator encoder, which made JSON encoding the largest cost of binding a
large devices section. ``dumps`` here walks the value once, appending to one list, and leaves the
escaping of each string to ``json``'s own (C) string encoder, so the text is the same as ``json``'s.

Only JSON's own types are walked (dict with ``str`` keys, list, tuple, str, int, float, bool, None);
for anything else (a non-string key, another type, nesting past ``MAX_DEPTH``) the whole value is
handed to ``json.dumps`` itself, so the result never differs and errors are ``json``'s.
"""

from __future__ import annotations

import json
import math
from json import encoder as _encoder
from typing import Any, Callable, List

MAX_DEPTH = 64  # deeper values go to json.dumps (our files nest at most 6 levels)
INDENT = "  "


class _NotPlain(Exception):
    """The value holds something only ``json.dumps`` knows how to write (or fails on)."""


def _float(value: float) -> str:
    if math.isnan(value):  # json's allow_nan=True spellings
        return "NaN"
    if value == float("inf"):
        return "Infinity"
    if value == -float("inf"):
        return "-Infinity"
    return float.__repr__(value)


def dumps(value: Any, sort_keys: bool = False, ensure_ascii: bool = True) -> str:
    """``json.dumps(value, indent=2, sort_keys=sort_keys, ensure_ascii=ensure_ascii)``."""
    quote = _encoder.encode_basestring_ascii if ensure_ascii else _encoder.encode_basestring  # type: Callable[[str], str]
    out = []  # type: List[str]
    append = out.append

    def walk(item: Any, depth: int) -> None:
        kind = type(item)
        if kind is str:
            append(quote(item))
        elif kind is dict or kind is list or kind is tuple:
            if not item:
                append("{}" if kind is dict else "[]")
                return
            if depth >= MAX_DEPTH:
                raise _NotPlain()
            if kind is dict:
                opener, closer, pairs = "{", "}", sorted(item.items()) if sort_keys else item.items()
            else:
                opener, closer, pairs = "[", "]", ((None, child) for child in item)
            inner = "\n" + INDENT * (depth + 1)
            separator = opener + inner
            for key, child in pairs:
                append(separator)
                if kind is dict:
                    if not isinstance(key, str):
                        raise _NotPlain()
                    append(quote(key))
                    append(": ")
                walk(child, depth + 1)
                separator = "," + inner
            append("\n" + INDENT * depth + closer)
        elif item is None:
            append("null")
        elif item is True:
            append("true")
        elif item is False:
            append("false")
        elif kind is int:
            append(int.__repr__(item))
        elif kind is float:
            append(_float(item))
        else:
            raise _NotPlain()

    try:
        walk(value, 0)
    except _NotPlain:
        return json.dumps(value, indent=2, sort_keys=sort_keys, ensure_ascii=ensure_ascii)
    return "".join(out)
