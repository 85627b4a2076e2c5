# -*- coding: utf-8 -*-
# Copyright: contributors to bcd.devices
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""hack/shellcheck.sh (make lint) fails, saying how to install shellcheck, when it is missing: it never
skips it. .ci/run installs it."""

from __future__ import annotations

import os
import shutil
import subprocess
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[3]


@pytest.mark.skipif(shutil.which("bash") is None or shutil.which("git") is None, reason="needs bash and git")
def test_without_shellcheck_lint_fails_and_says_how_to_install_it(tmp_path):
    bin_dir = tmp_path / "bin"  # a PATH with what the script needs, and no shellcheck
    bin_dir.mkdir()
    for tool in ("bash", "dirname", "cat", "git", "sed"):
        found = shutil.which(tool)
        if found:
            os.symlink(found, str(bin_dir / tool))
    done = subprocess.run([str(bin_dir / "bash"), str(REPO / "hack" / "shellcheck.sh")], cwd=str(REPO),
                          env=dict(os.environ, PATH=str(bin_dir)), capture_output=True, text=True, check=False)
    assert done.returncode == 1
    assert "lint: shellcheck is not installed, and make lint needs it" in done.stderr
    assert "apt-get install shellcheck" in done.stderr


def test_ci_run_installs_shellcheck_as_root_when_it_is_missing():
    text = (REPO / ".ci" / "run").read_text(encoding="utf-8")
    setup = text.split("exec make test", 1)[0]  # before make test starts
    assert "command -v shellcheck" in setup and "EUID == 0" in setup
    assert "shellcheck" in setup.split("apt-get install", 1)[1].splitlines()[0]
    lint = (REPO / "Makefile").read_text(encoding="utf-8").split("\nlint:", 1)[1].split("\n\n")[0]
    assert "bash hack/shellcheck.sh" in lint
