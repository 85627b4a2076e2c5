# -*- coding: utf-8 -*-
# Copyright: contributors to bcd.devices
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""make demo as a new user sees it: it passes, it is short enough to read, the plan and the per-GPU
table come before any file content, and --diff brings the full files back on request.

The demo runs under the ansible-core release of the Python running the tests (DEMO_CORE): 2.19 in
.venv's pass of make units, 2.22 in its own venv's pass, so the demo is run under the newest too."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

import ansible

from ansible_collections.bcd.devices.tests.unit.docs.quoted import assert_quoted, blocks_marked

REPO = Path(__file__).resolve().parents[3]
VENV_BIN = Path(sys.executable).parent
CORE = ".".join(ansible.__version__.split(".")[:2])

pytestmark = pytest.mark.skipif(not (VENV_BIN / "ansible-playbook").exists(), reason="make demo runs from a venv with ansible-core")


def demo(tmp_path, *args):
    env = dict(os.environ, PATH="%s:%s" % (VENV_BIN, os.environ.get("PATH", "")), TMPDIR=str(tmp_path), DEMO_CORE=CORE,
               ANSIBLE_NOCOLOR="1", ANSIBLE_COLLECTIONS_PATH=str(REPO / ".build"),
               ANSIBLE_HOME=str(tmp_path / "ansible-home"), ANSIBLE_REMOTE_TMP=str(tmp_path / "remote-tmp"),
               ANSIBLE_LOCAL_TEMP=str(tmp_path / "local-tmp"))
    done = subprocess.run(["bash", "hack/demo.sh"] + list(args), cwd=str(REPO), env=env, capture_output=True,
                          text=True, timeout=300, check=False)
    assert done.returncode == 0, done.stdout + done.stderr
    return done.stdout


def test_the_demo_reads_as_a_story_with_a_table_before_and_after_generation_2(tmp_path):
    out = demo(tmp_path)
    lines = out.splitlines()
    assert len(lines) < 150
    # its first line says which ansible-core and Python ran (make demo DEMO_CORE=2.22 runs another)
    assert lines[0].startswith("== ansible-core %s on Python %s (" % (ansible.__version__, sys.version.split()[0])), lines[0]
    assert not any(line.startswith(("+++ ", "--- before")) for line in lines)  # no file content without --diff
    assert '"generation 1: 3 bound, 1 refused (the section reads FAILED: something was refused, the rest is in place)",' \
        in out
    assert "the same plan as check mode showed in step 1: yes" in out
    assert "3 signatures good, one per bind (1 refusal not signed" in out
    tables = [i for i, line in enumerate(lines) if '"GPU  UUID ' in line]
    assert len(tables) == 2  # before and after generation 2
    before, after = ([line.strip().strip('",') for line in lines[i:i + 5]] for i in tables)
    assert before[1].split()[:3] == ["0", "GPU-5f1c2a90…000001", "alloc_train"]
    assert after[1].split()[:3] == ["0", "GPU-5f1c2a90…000001", "alloc_eval"]
    assert before[2].endswith("gi1/ci0 alloc_notebook, gi2/ci0 free") and after[2].endswith("gi1/ci0 free, gi2/ci0 free")
    assert "make demo DEMO_ARGS=--diff" in out
    # docs/fakehw.md quotes it: the quote is what the demo prints, its mktemp directory aside
    [(page, _language, quoted)] = blocks_marked("demo")
    node_dir = re.search(r"/tmp/bcd-demo\.[A-Za-z0-9]+/node-a", quoted).group(0)
    actual_dir = re.search(r"A fakehw node in (\S+/node-a):", out).group(1)
    assert_quoted(quoted.replace(node_dir, actual_dir), out, page)


def test_the_demo_with_diff_shows_the_plan_first_then_every_file(tmp_path):
    out = demo(tmp_path, "--diff")
    first_task = out.split("TASK [1. The plan for generation 1", 1)[1].split("TASK [", 1)[0]
    assert first_task.index("plan:") < first_task.index("+++ after: /etc/cdi/bcd-alloc_train.json")
    assert "+++ after: /run/bcd/allocations/alloc_infer.env" in first_task
