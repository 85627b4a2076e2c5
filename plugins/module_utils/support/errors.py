# -*- coding: utf-8 -*-
# Copyright: contributors to bcd.devices
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""The errors bcd.devices shows a user, and how a message names a hostile value's type.

Every error the modules, ``bcd-holds`` and the helper report derives from
``BcdError``: its ``str()`` is the message, written for an operator, never a
traceback. ``RetryableError`` marks what failed now and may work next pass (a
full disk, a helper that refused or could not be reached): the pass reports
``PROGRESSING`` and the timers retry.
"""

from __future__ import annotations


class BcdError(Exception):
    """An error with a message fit to show a user (``str(error)``)."""


class RetryableError(BcdError):
    """A write or a call that failed now; the hold stays unreported and the next pass tries again."""


class StateFileError(BcdError):
    """A file in the state directory that root will not use (``node/state_files.py``): not a regular
    file, not owned as expected, over its size cap, or content past the bounds of ``support/bounded_json``.
    ``where`` names the file (a node path), ``problem`` what is wrong; ``str()`` is both, on one line."""

    def __init__(self, where: str, problem: str) -> None:
        super().__init__("%s: %s" % (where, problem))
        self.where = where
        self.problem = problem


def type_name(value: object) -> str:
    """How a message names the type of a value from YAML or JSON input: ``null``, ``a list``, ..."""
    if value is None:
        return "null"
    for kind, name in ((bool, "a boolean"), (int, "an integer"), (float, "a number"), (str, "a string"),
                       (list, "a list"), (dict, "a mapping")):
        if isinstance(value, kind):
            return name
    return "a %s" % type(value).__name__
