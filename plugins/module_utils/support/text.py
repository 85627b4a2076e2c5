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
"""

from __future__ import annotations

from typing import Any, Optional

ELLIPSIS = "..."


def _escaped(ch):
    # type: (str) -> str
    return ch if ch.isprintable() else ascii(ch)[1:-1]


def printable(value, limit=None):
    # type: (Any, Optional[int]) -> str
    """``value`` (a string, or anything ``str`` turns into one) on one line, every character that is not
    printable escaped (``\\x1b``, ``\\n``, ``\\u202e``). With ``limit``, at most that many characters (at
    least 4): longer text is cut, never inside an escape, and ends in ``...``."""
    text = value if isinstance(value, str) else str(value)
    if text.isprintable():
        if limit is None or len(text) <= limit:
            return text
        return text[:max(0, limit - len(ELLIPSIS))] + ELLIPSIS
    pieces = [_escaped(ch) for ch in text]
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


def printable_lines(text):
    # type: (Any) -> str
    """``text`` of several lines, each escaped with ``printable``: the newlines between them kept, every
    other character that is not printable (a carriage return among them) escaped."""
    text = text if isinstance(text, str) else str(text)
    if text.isprintable():
        return text
    return "\n".join(printable(line) for line in text.split("\n"))
