# -*- coding: utf-8 -*-
# Copyright: contributors to bcd.devices
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""Text that leaves for a terminal or a person: data, never terminal control.

Much of what bcd shows was written by someone else: the state directory (the unprivileged
account owns it), the annotations of the specs in ``/etc/cdi``, pod names from the kubelet,
a fakehw file, the module's input. An ``ESC [2K`` and a carriage return in an allocation id
would redraw a line of ``bcd-holds status`` in root's terminal (a busy GPU shown free); a
right-to-left override or a line separator reorders or splits what a person reads.

``printable`` is applied where text leaves: the renderers of ``status``, ``busy`` and
``doctor`` escape each cell or message, ``bcd-holds`` escapes every line it writes (``out``
and ``log``: the last word, whatever a renderer missed), and the modules escape their
``msg``, ``warnings`` and diffs. Data (JSON, the modules' return values) is not escaped: it
goes out as the strings it holds, JSON-encoded (``json.dumps`` escapes every control and
non-ASCII character unless asked not to).

Escaped is every character Python does not call printable (``str.isprintable``): the C0 and
C1 controls, DEL, format characters (bidi embeddings, overrides and isolates U+202A-U+202E and
U+2066-U+2069, zero-width U+200B-U+200F, U+FEFF, the soft hyphen), the line and paragraph
separators U+2028/U+2029, surrogates (undecodable bytes of a file name), private-use and
unassigned code points, and every space but U+0020. Each is written as Python writes it in an
``ascii()`` literal (``\\x1b``, ``\\r``, ``\\u202e``, ``\\U000e0001``): printable ASCII, so
escaping twice changes nothing. A backslash already in the text stays as it is (the form is
for reading, not for turning back into the original).

``quoted`` is stricter, for a value of someone else's that a message of the node quotes: a refusal of an
assignment, journaled as an event a gateway checks (``domain/event_grammar.py``: no curly bracket, no control
character) and a playbook renders as a template. It keeps printable ASCII only, and escapes the curly
brackets, the backslash and the quote it is quoted with besides (``\\x7b``, ``\\x5c``, ``\\x27``), so
whatever the value holds, what it writes holds no template delimiter, no control character and nothing that
reads as the end of the quote; and it cuts a long value short.
"""

from __future__ import annotations

from typing import List, Optional

ELLIPSIS = "..."
QUOTED_MAX = 80  # characters of a quoted value a message shows, escapes included

# What ``quoted`` keeps as it is: printable ASCII but the curly brackets (a template's delimiters) and the
# backslash (the escapes' own character); the quote is taken out per call.
_PLAIN = frozenset(chr(code) for code in range(0x20, 0x7f)) - frozenset("{}\\")


def _escaped(ch: str) -> str:
    return ch if ch.isprintable() else ascii(ch)[1:-1]


def printable(value: object, limit: Optional[int] = None) -> str:
    """``value`` (a string, or anything ``str`` turns into one) on one line, every character that is not
    printable escaped (``\\x1b``, ``\\n``, ``\\u202e``). With ``limit``, at most that many characters (at
    least 4): longer text is cut, never inside an escape, and ends in ``...``."""
    text = value if isinstance(value, str) else str(value)
    if text.isprintable():
        if limit is None or len(text) <= limit:
            return text
        return text[:max(0, limit - len(ELLIPSIS))] + ELLIPSIS
    return _cut([_escaped(ch) for ch in text], limit)


def _cut(pieces: List[str], limit: Optional[int]) -> str:
    """``pieces`` (a character each, or its escape) joined, at most ``limit`` characters: longer, cut between
    two pieces and ended with ``...``."""
    shown = "".join(pieces)
    if limit is None or len(shown) <= limit:
        return shown
    room, used, kept = max(0, limit - len(ELLIPSIS)), 0, []
    for piece in pieces:
        if used + len(piece) > room:
            break
        kept.append(piece)
        used += len(piece)
    return "".join(kept) + ELLIPSIS


def _code(ch: str) -> str:
    """A character ``quoted`` does not keep: as ``ascii()`` writes it (``\\x1b``, ``\\n``, ``\\u202e``,
    ``\\U000e0001``, as ``printable`` does), or as ``\\xNN`` when that is printable ASCII itself (a curly
    bracket, the backslash, the quote)."""
    code = ord(ch)
    if 0x20 <= code < 0x7f:
        return "\\x%02x" % code
    return ascii(ch)[1:-1]


def quoted(value: object, quote: str = "'", limit: int = QUOTED_MAX) -> str:
    """``value`` as a message of the node quotes it, whatever it holds: a string between ``quote`` (``""`` for
    none: a word such as a binding), every character but printable ASCII escaped as ``printable`` escapes it
    (``\\x1b``, ``\\n``, ``\\u202e``, ``\\U0001f600``), and so are ``{``, ``}``, the backslash and ``quote``
    (``\\x7b``, ``\\x7d``, ``\\x5c``, ``\\x27``). At most ``limit``
    characters between the quotes (at least 4): longer is cut, never inside an escape, and ends in ``...``.
    A number, a boolean or None as Python writes it (``5``, ``True``, ``None``); anything else by its type
    (``a list``, ``a mapping``), never its content. The result holds printable ASCII only, and no curly
    bracket; the work is bounded by ``limit``, however long the value."""
    if not isinstance(value, str):
        return _scalar(value)
    plain = _PLAIN - frozenset(quote)
    limit = max(limit, len(ELLIPSIS) + 1)
    head = value[:limit + 1]  # every piece is one character at least: no more can be shown
    pieces = [ch if ch in plain else _code(ch) for ch in head]
    return quote + _cut(pieces, limit) + quote


def _scalar(value: object) -> str:
    """How ``quoted`` writes a value that is not a string."""
    if value is None or isinstance(value, bool) or isinstance(value, float):
        return repr(value)
    if isinstance(value, int):
        if value.bit_length() > 64:  # the input's numbers are int64: a longer one by its size, not its digits
            return "an integer of %d bits" % value.bit_length()
        return repr(value)
    for kind, name in ((list, "a list"), (tuple, "a list"), (dict, "a mapping")):
        if isinstance(value, kind):
            return name
    return quoted(type(value).__name__, quote="")


def printable_lines(text: object) -> str:
    """``text`` of several lines, each escaped with ``printable``: the newlines between them kept, every
    other character that is not printable (a carriage return among them) escaped."""
    shown = text if isinstance(text, str) else str(text)
    if shown.isprintable():
        return shown
    return "\n".join(printable(line) for line in shown.split("\n"))
