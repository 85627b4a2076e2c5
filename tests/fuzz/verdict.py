# -*- coding: utf-8 -*-
# Copyright: contributors to bcd.devices
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""What counts as a clean answer to a hostile input, and how a failure is named.

``ALLOWED`` is the one allowlist: an input may end in one of these exceptions, because every entry
point root runs reports them on one line (``bcd-holds``' ``main``: exit 2; the modules' ``main``:
a failed task; the helper's ``_answer``: an ``{"ok": false}`` reply). Any other exception is a
traceback, whatever the entry point would have done with it. The documented refusal *results* (an
exit code, a refusal reply, a ``FAILED`` section, a hold read back with ``problem`` set) are checked
by each target against what its entry point documents.

A failure is one of ``KINDS``; failures are the same failure when their ``key`` is: the kind, the
exception's type and the innermost frame of the collection's own code (``plugins/...:line function``).
"""

from __future__ import annotations

import os
import traceback

from ansible_collections.bcd.devices.plugins.module_utils.support.errors import BcdError

ALLOWED = (
    (BcdError, "the project's errors (support/errors.py and every subclass: StateFileError, PassError, "
               "InvalidAssignment, FakeHwError, the helper's Refused, ...): str() is the message for a user"),
    (OSError, "a system call that failed on a named path (the exception carries the file name); only with a "
              "file name, which is what makes the one line a user gets say what failed"),
)

KINDS = {
    "traceback": "an exception outside the allowlist escaped the entry point",
    "exit": "a command ended with an exit code it does not document",
    "reply": "the helper answered with something other than one JSON line {ok, error}, or not at all",
    "escape": "a character that is not data (a control, format or separator character) reached the terminal",
    "roundtrip": "root refused a file a pass had just written (the next timer pass would fail)",
    "bound": "root kept or did more than the helper's bounds allow (atoms, bytes, files, requests, readings of the "
             "node, log lines), or refused past them without saying its numbers",
    "hang": "no result within the deadline (the worker was stopped; its stack is in the detail)",
    "cost-time": "more CPU time than the bound, twice in a row",
    "cost-memory": "a peak resident memory this far above the worker's before the input",
    "crash": "the worker died (a signal, or the interpreter aborted)",
    "harness": "the fuzzer itself failed (a bug of tests/fuzz, not of the collection)",
}

_MARK = os.sep + "ansible_collections" + os.sep + "bcd" + os.sep + "devices" + os.sep


def clean(exc):
    """Whether ``exc`` is an allowed end of an input (see ``ALLOWED``)."""
    if isinstance(exc, BcdError):
        return True
    if isinstance(exc, OSError):
        return exc.filename is not None
    return False


def _short(filename):
    """A file of the collection as ``plugins/...``, ``tests/...``; other files by their last two parts."""
    if _MARK in filename:
        return filename.rsplit(_MARK, 1)[1]
    if filename.startswith(str(_repo())):
        return os.path.relpath(filename, str(_repo()))
    return "/".join(filename.split(os.sep)[-2:])


def _repo():
    return os.path.dirname(os.path.dirname(os.path.dirname(os.path.realpath(__file__))))


def frames_of(tb):
    """``[(short file, line, function)]`` of a traceback, outermost first."""
    return [(_short(frame.filename), frame.lineno, frame.name) for frame in traceback.extract_tb(tb)]


def innermost(frames):
    """The innermost frame in the collection's plugins, else in the collection, else the innermost."""
    for prefix in ("plugins/", ""):
        for filename, line, name in reversed(frames):
            if filename.startswith(prefix) and (prefix or filename.startswith(("plugins/", "tests/"))):
                return "%s:%d %s" % (filename, line, name)
    if frames:
        filename, line, name = frames[-1]
        return "%s:%d %s" % (filename, line, name)
    return "?"


def is_harness(frames):
    """A traceback whose collection frames are all the fuzzer's own: a bug of the harness."""
    ours = [f for f in frames if f[0].startswith(("plugins/", "tests/"))]
    return bool(ours) and all(f[0].startswith("tests/fuzz/") for f in ours)


def one_line(text, width=240):
    text = " ".join(repr(text)[1:-1].split()) if not text.isprintable() else " ".join(text.split())
    return text if len(text) <= width else text[:width - 3] + "..."


def traceback_failure(exc, context=""):
    """The failure record of an exception outside the allowlist."""
    frames = frames_of(exc.__traceback__)
    kind = "harness" if is_harness(frames) else "traceback"
    where = innermost(frames)
    name = type(exc).__name__
    return {
        "kind": kind,
        "key": "%s %s at %s" % (kind, name, where),
        "summary": one_line("%s: %s%s" % (name, exc, " (%s)" % context if context else "")),
        "detail": "".join(traceback.format_exception(type(exc), exc, exc.__traceback__)),
    }


def problem(kind, key, summary, detail=""):
    """A failure that is not an exception (an exit code, a reply, an escape, a cost)."""
    return {"kind": kind, "key": "%s %s" % (kind, key), "summary": one_line(summary), "detail": detail}


def control_characters(text):
    """The characters of ``text`` that are not data on a terminal: every one ``str.isprintable`` refuses (C0
    and C1 controls, DEL, bidi and zero-width format characters, U+2028/9, lone surrogates), the line
    breaks between lines excepted (issue 22, item 6; ``support/text.printable`` escapes them)."""
    return sorted(char for char in set(text) if not char.isprintable() and char not in "\n ")
