# -*- coding: utf-8 -*-
# Copyright: contributors to bcd.devices
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""make canary (hack/canary.sh) is what docs/compatibility.md says: a target of its own that make test
and CI never run, and a script that refuses arguments before it makes or installs anything."""

from __future__ import annotations

import re
import subprocess
from pathlib import Path

REPO = Path(__file__).resolve().parents[3]
MAKEFILE = (REPO / "Makefile").read_text(encoding="utf-8")


def test_the_target_runs_the_script_and_is_no_part_of_make_test_or_ci():
    recipe = re.search(r"^canary:[^\n]*\n((?:\t[^\n]*\n)+)", MAKEFILE, re.M)
    assert recipe and "hack/canary.sh" in recipe.group(1), "the Makefile has no canary target running hack/canary.sh"
    assert re.search(r'^\t@echo "make canary ', MAKEFILE, re.M), "make help does not list make canary"
    assert re.search(r"^\.PHONY:.* canary\b", MAKEFILE, re.M)
    test = re.search(r"^test:(.*)$", MAKEFILE, re.M).group(1).split()
    assert "canary" not in test, test
    assert "canary" not in (REPO / ".ci" / "run").read_text(encoding="utf-8")


def test_the_page_documents_it():
    page = (REPO / "docs" / "compatibility.md").read_text(encoding="utf-8")
    section = page.split("\n## The next release\n", 1)
    assert len(section) == 2, "docs/compatibility.md has no section 'The next release'"
    text = section[1].split("\n## ", 1)[0]
    for words in ("make canary", "hack/canary.sh", ".build/venvs/canary", "--pre", "not part of `make test`"):
        assert words in text, "'The next release' does not say %r" % words


def test_the_script_refuses_arguments_and_makes_nothing(tmp_path):
    done = subprocess.run(["bash", str(REPO / "hack" / "canary.sh"), "2.23"], cwd=str(tmp_path),
                          env={"BUILD": str(tmp_path / "build"), "PATH": "/usr/bin:/bin"},
                          capture_output=True, text=True, timeout=60, check=False)
    assert done.returncode == 2, done.stdout + done.stderr
    assert "usage: bash hack/canary.sh" in done.stderr and "2.23" in done.stderr
    assert done.stdout == ""
    assert not (tmp_path / "build").exists()
