# -*- coding: utf-8 -*-
# Copyright: contributors to bcd.devices
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""Fail on absolute paths of a developer's checkout in what users read and what CI runs.

    python hack/check_docs.py [--root DIR]     (make lint runs it)

Reads docs/ (every file), README.md, roles/*/README.md, the plugins' documentation (every file
in plugins/modules, plugins/filter and plugins/doc_fragments) and every file of molecule/*/. A
line fails when it names this checkout's own absolute path (computed at run time, so a clone
anywhere is caught) or a place checkouts usually live: /work/..., /home/<user>/...,
/Users/<user>/..., /root/<dir>/... (not /root/.<dir>), /tmp/ci (the CI clone). Write a path
relative to the checkout (.venv/bin/python), "{{ ansible_playbook_python }}" for the
controller's Python, or the system Python instead. Exit 0 when nothing is found, 1 otherwise (one line per finding).
"""

from __future__ import annotations

import argparse
import os
import re
import sys

HERE = os.path.dirname(os.path.abspath(__file__))

# Where checkouts (and their .venv) usually are: a path that starts at one of these is some
# machine's own, never one a reader has. Each must start a path (after a space, a quote, "=",
# "(", "[", ":" or the line's start), so "<checkout>/work/x" or "s3://home/x" do not count.
COMMON = [
    r"/work/\S",
    r"/home/[^/\s]+/",
    r"/Users/[^/\s]+/",
    r"/root/(?!\.)[^/\s]+/",  # root's checkouts, not its dot-directories (/root/.ansible)
    r"/tmp/ci(?:/|\b)",
]
START = r"(?:^|(?<=[\s\"'`=(\[:,]))"


def files_to_check(root):
    """The files checked, relative to root, sorted."""
    found = []
    for top in ("docs", "molecule"):
        for dirpath, dirnames, filenames in os.walk(os.path.join(root, top)):
            dirnames[:] = sorted(d for d in dirnames if d != "__pycache__")
            found.extend(os.path.join(dirpath, name) for name in filenames if not name.endswith(".pyc"))
    found.append(os.path.join(root, "README.md"))
    roles = os.path.join(root, "roles")
    if os.path.isdir(roles):
        found.extend(os.path.join(roles, role, "README.md") for role in os.listdir(roles))
    for sub in ("modules", "filter", "doc_fragments"):
        folder = os.path.join(root, "plugins", sub)
        if os.path.isdir(folder):
            found.extend(os.path.join(folder, name) for name in os.listdir(folder) if name.endswith(".py"))
    return sorted(os.path.relpath(path, root) for path in found if os.path.isfile(path))


def patterns(root):
    """(regex, why) pairs: this checkout's absolute path first, then the common places."""
    checkout = os.path.realpath(root).rstrip("/")
    found = []
    for path in sorted({checkout, os.path.abspath(root).rstrip("/")}):
        if path.count("/") >= 2:  # never "/" or "/tmp" alone: every example node path would match
            found.append((re.compile(START + re.escape(path) + r"(?![\w.-])"), "this checkout's absolute path"))
    for pattern in COMMON:
        found.append((re.compile(START + pattern), "a path on a developer's or CI machine"))
    return found


def check(root):
    """Every finding, as 'file:line: path: why'."""
    problems = []
    checks = patterns(root)
    for rel in files_to_check(root):
        try:
            with open(os.path.join(root, rel), encoding="utf-8") as handle:
                lines = handle.read().splitlines()
        except UnicodeDecodeError:
            continue  # not text
        for number, line in enumerate(lines, 1):
            for regex, why in checks:
                match = regex.search(line)
                if match:
                    text = line[match.start():].split()[0].strip("\"'`),]")
                    problems.append("%s:%d: %s: %s; use a path relative to the checkout "
                                    "(.venv/bin/python), \"{{ ansible_playbook_python }}\" or the system "
                                    "Python" % (rel, number, text, why))
                    break
    return problems


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--root", default=os.path.dirname(HERE), help="the checkout (default: this script's)")
    args = parser.parse_args(argv)
    problems = check(args.root)
    for problem in problems:
        print(problem, file=sys.stderr)
    if problems:
        print("check_docs: %d absolute checkout path(s) in the docs, plugins' documentation or molecule/"
              % len(problems), file=sys.stderr)
        return 1
    print("check_docs: %d files, no absolute checkout path" % len(files_to_check(args.root)))
    return 0


if __name__ == "__main__":
    sys.exit(main())
