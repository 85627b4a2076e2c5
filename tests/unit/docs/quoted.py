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
    """Each line of ``quoted`` is a line of ``actual``, in order; ``…`` as the module docstring says."""
    lines = [line.rstrip() for line in actual.splitlines()]
    at, gap = 0, False
    for wanted in quoted.rstrip("\n").splitlines():
        if wanted.strip() == "…":
            gap = True
            continue
        pattern = _line_re(wanted)
        if gap:
            while at < len(lines) and not pattern.match(lines[at]):
                at += 1
        assert at < len(lines) and pattern.match(lines[at]), "%s: the quoted line\n  %s\nis not what ran next:\n%s" % (
            where, wanted, "\n".join(lines[at:at + 5]) or "(the output ended)")
        at, gap = at + 1, False
