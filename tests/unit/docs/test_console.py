# -*- coding: utf-8 -*-
# Copyright: contributors to bcd.devices
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""The commands and outputs docs/ quotes, run on a fakehw node: the next drift fails make units.

A block is run when it is marked (``tests/unit/docs/quoted.py``): ``node-md`` blocks are
``$ bcd-holds ...`` sessions of docs/node.md, run in this process on a fakehw node in the state
the page describes (made below, as the page says it was), each with ``--root``/``--fakehw``
before the command as the page says they were given; ``fakehw-help`` runs hack/fakehw_node.py;
``synopsis`` is docs/node.md's synopsis, compared with the parser of ``bcd-holds``; ``demo`` is
docs/fakehw.md's quote of ``make demo``, checked by tests/unit/hack/test_demo.py, which runs it; the
sessions of user-guide.md, events.md, kubernetes.md and slices-and-admission.md (``guide-*``,
``events-*``, ``kube-*``, ``slices-*``) are run by tests/unit/docs/test_playbook_pages.py.
"""

from __future__ import annotations

import importlib.util
import os
import re
import shlex
import subprocess
import sys

import pytest

from ansible_collections.bcd.devices.plugins.module_utils.entry.busy import set_maintenance
from ansible_collections.bcd.devices.plugins.module_utils.entry.cli import build_parser, main
from ansible_collections.bcd.devices.plugins.module_utils.entry.converge import run_pass
from ansible_collections.bcd.devices.plugins.module_utils.node.hosts import FakeHwHost
from ansible_collections.bcd.devices.tests.unit.docs.quoted import REPO, all_marks, assert_quoted, blocks_marked
from ansible_collections.bcd.devices.tests.unit.docs.test_playbook_pages import MARKS as PLAYBOOK_PAGE_MARKS

_spec = importlib.util.spec_from_file_location("fakehw_node", REPO / "hack" / "fakehw_node.py")
fakehw_node = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(fakehw_node)

RUN_HERE = {"node-md", "fakehw-help", "synopsis"}
RUN_ELSEWHERE = {"demo": "tests/unit/hack/test_demo.py runs make demo's script and compares",
                 "slurm-task-prolog": "tests/e2e/test_slurm.py runs it as Slurm's TaskProlog (make e2e)"}
RUN_ELSEWHERE.update((name, "tests/unit/docs/test_playbook_pages.py runs %s's %s" % page_and_what)
                     for name, page_and_what in PLAYBOOK_PAGE_MARKS.items())
GPU = "GPU-5f1c2a90-0001-4000-8000-%012x"


def test_every_mark_has_a_test():
    assert all_marks() == RUN_HERE | set(RUN_ELSEWHERE)
    for name in RUN_HERE | set(RUN_ELSEWHERE):
        assert blocks_marked(name), name


def sessions(text):
    """``[(argv, quoted output)]`` of a console block: each ``$ command  # comment`` and the lines after it."""
    runs = []
    for line in text.splitlines():
        if line.startswith("$ "):
            runs.append([shlex.split(line[2:].split("#", 1)[0]), []])
        else:
            runs[-1][1].append(line)
    return [(argv, "\n".join(lines)) for argv, lines in runs]


@pytest.fixture
def node_md(tmp_path):
    """docs/node.md's node at generation 42: GPU 2 in maintenance for a firmware update, so of the role's
    example alloc_train is on GPU 0, alloc_notebook on GPU 1's gi1/ci0, and alloc_infer (GPU 2) refused."""
    root = tmp_path / "bcd-nodes" / "node-a"
    assert fakehw_node.main(["--root", str(root), "--gpus", "3"]) == 0
    host = FakeHwHost(str(root), str(root / "fakehw.yml"))
    set_maintenance(host, [GPU % 3], True, "firmware update", lock_timeout=10)
    result = run_pass(host, 42, [
        {"allocation_id": "alloc_train", "reservation_id": "rsv_01", "binding": "BINDING_HOLD",
         "devices": [{"id": GPU % 1}]},
        {"allocation_id": "alloc_notebook", "reservation_id": "rsv_02", "binding": "BINDING_HOLD",
         "devices": [{"id": GPU % 2 + "/gi1/ci0", "device_class": "gpu.mig"}]},
        {"allocation_id": "alloc_infer", "reservation_id": "rsv_03", "binding": "BINDING_HOLD",
         "devices": [{"id": GPU % 3}]}], lock_timeout=10)
    assert [(f.allocation_id, f.reason, f.message) for f in result.plan.failures] == [
        ("alloc_infer", "overlap", "%s is in maintenance (firmware update)" % (GPU % 3))]
    return root


@pytest.mark.parametrize("index", range(len(blocks_marked("node-md"))))
def test_node_md_sessions_print_what_the_page_quotes(capsys, node_md, index):
    page, _language, text = blocks_marked("node-md")[index]
    capsys.readouterr()  # what making the node printed
    for argv, quoted in sessions(text):
        assert argv[0] == "bcd-holds", argv
        # the page's command lines leave out --root and --fakehw: given before the command, as the page says
        code = main(["--root", str(node_md), "--fakehw", str(node_md / "fakehw.yml")] + argv[1:])
        out, err = capsys.readouterr()
        assert_quoted(quoted, err + out + "[exit %d]\n" % code, "%s: $ %s" % (page, " ".join(argv)))


def test_fakehw_md_quotes_the_help_of_fakehw_node():
    [(page, _language, text)] = blocks_marked("fakehw-help")
    [(argv, quoted)] = sessions(text)
    assert argv[0] == ".venv/bin/python" and argv[1:] == ["hack/fakehw_node.py", "--help"]
    done = subprocess.run([sys.executable] + argv[1:], cwd=str(REPO), env=dict(os.environ, COLUMNS="80"),
                          capture_output=True, text=True, timeout=60, check=False)
    assert_quoted(quoted, done.stdout + "[exit %d]\n" % done.returncode, page)


def _options(parser):
    return set(opt for action in parser._actions for opt in action.option_strings if opt.startswith("--")) - {"--help"}


def test_node_md_synopsis_is_the_parser():
    [(page, _language, text)] = blocks_marked("synopsis")
    parser = build_parser()
    commands = [action for action in parser._actions if action.choices and action.dest == "command"][0].choices
    lines = text.strip().splitlines()
    assert set(re.findall(r"--[a-z-]+", lines[0])) == _options(parser), page
    common = _options(parser)
    shown = {}
    for line in lines[1:]:
        name = line.split()[1]
        shown[name] = set(re.findall(r"--[a-z-]+", line))
    assert sorted(shown) == sorted(commands), page
    for name, sub in commands.items():
        assert shown[name] == _options(sub) - common, (page, name)
