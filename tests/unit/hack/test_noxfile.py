# -*- coding: utf-8 -*-
# Copyright: contributors to bcd.devices
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""noxfile.py holds what make units and make sanity run: a session per supported release for each, the units
passes the Makefile's loop used to make (the whole suite under the oldest and the newest release, the install
test under every release in the first pass, the tests that drive Ansible under each release between), and the
Makefile calls them."""

from __future__ import annotations

import importlib.util
import re
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[3]
MAKEFILE = (REPO / "Makefile").read_text(encoding="utf-8")
CORES = re.search(r"^CORES \?= (.+)$", MAKEFILE, re.M).group(1).split()
DRIVE = ["tests/unit/install", "tests/unit/plugins/action"]


@pytest.fixture(scope="module")
def noxfile():
    pytest.importorskip("nox")  # .venv has nox and antsibull-nox (pyproject.toml); the other releases' venvs do not
    pytest.importorskip("antsibull_nox")
    import nox.registry

    with pytest.MonkeyPatch.context() as patch:
        patch.chdir(REPO)  # antsibull-nox reads antsibull-nox.toml from the working directory, as nox runs it
        spec = importlib.util.spec_from_file_location("bcd_noxfile", REPO / "noxfile.py")
        module = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(module)
    module.SESSIONS = dict(nox.registry.get())
    return module


def test_a_sanity_and_a_units_session_for_every_release_the_makefile_names(noxfile):
    assert list(noxfile.RELEASES) == CORES
    for core in CORES:
        assert "sanity-%s" % core in noxfile.SESSIONS and "units-%s" % core in noxfile.SESSIONS, core
        assert noxfile.SESSIONS["sanity-%s" % core].allow_parallel, "make sanity runs the releases side by side"
    assert {"units", "sanity-next", "extra-checks"} <= set(noxfile.SESSIONS)
    assert noxfile.RELEASES[CORES[0]][0] == "3.11"  # .venv's Python


def test_the_makefile_runs_the_sessions():
    def recipe(target):
        return re.search(r"^%s:[^\n]*\n((?:\t[^\n]*\n)+)" % target, MAKEFILE, re.M).group(1)

    assert "$(NOX) --parallel $(SANITY_JOBS) -s $(addprefix sanity-,$(SANITY_CORES))" in recipe("sanity")
    assert "$(NOX) -s units" in recipe("units")
    assert "$(NOX) -s extra-checks" in recipe("lint")


def test_units_the_oldest_and_the_newest_whole_the_releases_between_drive_ansible(noxfile):
    assert noxfile.units_plan(CORES, [], {}) == [
        (CORES[0], ["-n", "2"], {"BCD_UNITS_ANSIBLE_ONLY": "", "BCD_INSTALL_CORES": "%s %s" % (CORES[0], CORES[-1])}),
        (CORES[-1], ["-n", "2"], {"BCD_UNITS_ANSIBLE_ONLY": "1", "BCD_INSTALL_CORES": ""}),
    ] + [(core, ["-n", "2"] + DRIVE, {"BCD_INSTALL_CORES": ""}) for core in CORES[1:-1]]


def test_units_arguments_replace_two_workers_and_leave_out_the_releases_between(noxfile):
    plan = noxfile.units_plan(CORES, ["-q", "tests/unit/x.py"], {})
    assert plan == [
        (CORES[0], ["-q", "tests/unit/x.py"], {"BCD_UNITS_ANSIBLE_ONLY": "", "BCD_INSTALL_CORES": " ".join(CORES)}),
        (CORES[-1], ["-q", "tests/unit/x.py"], {"BCD_UNITS_ANSIBLE_ONLY": "", "BCD_INSTALL_CORES": ""}),
    ]


def test_units_one_release_and_the_overrides(noxfile):
    assert noxfile.units_plan([CORES[-1]], [], {}) == [
        (CORES[-1], ["-n", "2"], {"BCD_UNITS_ANSIBLE_ONLY": "", "BCD_INSTALL_CORES": CORES[-1]})]
    plan = noxfile.units_plan(CORES, [], {"UNITS_CORES": CORES[0], "DRIVE_CORES": CORES[-1], "DRIVE_TESTS": "tests/unit/y"})
    assert plan == [(CORES[0], ["-n", "2"], {"BCD_UNITS_ANSIBLE_ONLY": "", "BCD_INSTALL_CORES": " ".join(CORES[:-1])}),
                    (CORES[-1], ["-n", "2", "tests/unit/y"], {"BCD_INSTALL_CORES": ""})]


@pytest.mark.parametrize("args, runs", [([], True), (["--test", "pep8"], False), (["--test", "shellcheck"], True),
                                        (["--skip-test", "pylint"], True)])
def test_sanity_needs_shellcheck_when_its_test_runs(noxfile, args, runs):
    assert noxfile.runs_shellcheck(args) is runs
