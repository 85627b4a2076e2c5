# -*- coding: utf-8 -*-
# Copyright: contributors to bcd.devices
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""Quoted blocks of docs/ that a test runs, and how their output is compared.

A fenced block is run when the line before it is ``<!-- doc-test: NAME -->`` (invisible on a
rendered page); ``NAME`` says which test runs it (``blocks_marked``). A quoted output matches
what ran when each of its lines, in order, is a line of what ran: ``…`` alone on a line stands
for any lines (a trimmed part), ``…`` within a line for any text, and scratch paths
(``/tmp/bcd-nodes/...``, the demo's ``/tmp/bcd-demo.XXXXXX``) for the test's own.
"""

from __future__ import annotations

import re
from pathlib import Path

REPO = Path(__file__).resolve().parents[3]
MARK_RE = re.compile(r"^<!-- doc-test: ([a-z0-9-]+) -->\n```([a-z]*)\n(.*?)^```$", re.M | re.S)


def blocks_marked(name, pages=None):
    """``[(page, language, text)]`` of the blocks marked ``doc-test: name``, in page order."""
    found = []
    for page in pages or sorted((REPO / "docs").glob("*.md")):
        for match in MARK_RE.finditer(page.read_text(encoding="utf-8")):
            if match.group(1) == name:
                found.append((page.name, match.group(2), match.group(3)))
    return found


def all_marks():
    """Every ``doc-test`` name used in docs/."""
    names = set()
    for page in sorted((REPO / "docs").glob("*.md")):
        names.update(re.findall(r"^<!-- doc-test: ([a-z0-9-]+) -->$", page.read_text(encoding="utf-8"), re.M))
    return names


def _line_re(quoted):
    parts = [re.escape(part) for part in quoted.rstrip().split("…")]
    return re.compile("^" + ".*?".join(parts) + r"\s*$")


def assert_quoted(quoted, actual, where):
    """Each line of ``quoted`` is a line of ``actual``, in order; ``…`` as the module docstring says.

    A ``…`` line may stand for any number of lines, so every place the quote can go on after it is
    tried, not only the first line that matches."""
    lines = [line.rstrip() for line in actual.splitlines()]
    wanted = quoted.rstrip("\n").splitlines()
    patterns = [None if line.strip() == "…" else _line_re(line) for line in wanted]
    seen = set()
    furthest = [-1, 0]  # the quoted line that failed furthest in, and where

    def fits(i, at):
        """Whether ``wanted[i:]`` fits ``lines`` from ``at`` on."""
        if i == len(wanted):
            return True
        if (i, at) in seen:
            return False
        seen.add((i, at))
        if patterns[i] is None:
            return any(fits(i + 1, next_at) for next_at in range(at, len(lines) + 1))
        if at < len(lines) and patterns[i].match(lines[at]):
            return fits(i + 1, at + 1)
        if i > furthest[0]:
            furthest[:] = [i, at]
        return False

    i, at = furthest if not fits(0, 0) else (None, None)
    assert i is None, "%s: the quoted line\n  %s\nis not what ran next:\n%s" % (
        where, wanted[i], "\n".join(lines[at:at + 5]) or "(the output ended)")
