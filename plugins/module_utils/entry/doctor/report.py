# -*- coding: utf-8 -*-
# Copyright: contributors to bcd.devices
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""What one check of ``bcd-holds doctor`` says, and how it is printed.

A check is ``{"name", "level": OK|WARN|ERROR, "message"}`` (``--json`` prints them as they are), its
message ending in what to do when the level is not OK; most remedies of the role's install say
``RERUN``.
"""

from __future__ import annotations

from typing import Final, List, Literal, Sequence, TypedDict

from ansible_collections.bcd.devices.plugins.module_utils.support.text import printable

OK: Final = "OK"
WARN: Final = "WARN"
ERROR: Final = "ERROR"
Level = Literal["OK", "WARN", "ERROR"]
RERUN = "rerun the role bcd.devices.bcd_holds"


class Check(TypedDict):
    """One check's finding."""

    name: str
    level: Level
    message: str


def check(name: str, level: Level, message: str) -> Check:
    return {"name": name, "level": level, "message": message}


def worse(one: Level, other: Level) -> Level:
    order = (OK, WARN, ERROR)
    return one if order.index(one) >= order.index(other) else other


def doctor_lines(checks: Sequence[Check]) -> List[str]:
    """What ``bcd-holds doctor`` prints: one line per check, its level, name and message. A message quotes
    what the node has (spec files and their annotations, runtimes' versions, state files, hold ids):
    escaped (``support/text.py``), one line each, never terminal control."""
    return ["%-7s %-14s %s" % (printable(found["level"]), printable(found["name"]), printable(found["message"]))
            for found in checks]
