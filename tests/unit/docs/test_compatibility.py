# -*- coding: utf-8 -*-
# Copyright: contributors to bcd.devices
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""docs/compatibility.md's table of ansible-core releases is the one place that says what is
supported, and everything else agrees with it.

* meta/runtime.yml's requires_ansible is a floor alone, the table's oldest release: it admits
  every release of the table and every patch release of each, nothing older, and every newer
  release too. It never gets an upper bound again: the one it had (<2.22.0) refused the collection
  to 2.21's and then 2.22's users until a release of the collection caught up, and Red Hat's
  certification rules do not ask for one;
* the Makefile's CORES are the table's releases, oldest first; each release other than .venv's
  has its pinned venv file (requirements/tools/ansible-core-<release>.txt, a final release or a
  release candidate) made with the Python the table names, and no other release has one; .venv's
  pyproject pin is the oldest release;
* the execution environment's definition asks for the table's releases (an image picks a tested one);
* no page quotes another requires_ansible than meta/runtime.yml's;
* the README, docs/user-guide.md and galaxy.yml name the range and link to the page, and no page
  still names an end-of-life release as supported;
* under the release running the tests, the table's controller and target Pythons are that
  release's own (ansible-test's lists);
* a tool pinned in pyproject.toml has the same version in every tool venv file that pins it.
"""

from __future__ import annotations

import re
from pathlib import Path

import pytest
import yaml
from packaging.specifiers import SpecifierSet
from packaging.version import Version

import ansible

REPO = Path(__file__).resolve().parents[3]
PAGE = REPO / "docs" / "compatibility.md"
RUNNING = ".".join(ansible.__version__.split(".")[:2])


def table():
    """{release: {"controller": (lo, hi), "targets": (lo, hi), "tested": "3.x"}} from the page's table."""
    rows = {}
    for line in PAGE.read_text(encoding="utf-8").splitlines():
        cells = [cell.strip() for cell in line.strip().strip("|").split("|")]
        if len(cells) >= 5 and re.fullmatch(r"2\.\d+", cells[0]):
            spans = [re.fullmatch(r"(3\.\d+) to (3\.\d+)", cells[i]) for i in (2, 3)]
            tested = re.match(r"Python (3\.\d+) ", cells[4])
            assert all(spans) and tested, line
            rows[cells[0]] = {"controller": spans[0].groups(), "targets": spans[1].groups(), "tested": tested.group(1)}
    assert rows, "no table of releases in %s" % PAGE
    return rows


def minor(text):
    return tuple(int(part) for part in text.split("."))


RELEASES = sorted(table(), key=minor)
OLDEST, NEWEST = RELEASES[0], RELEASES[-1]


def requires_ansible():
    return SpecifierSet(yaml.safe_load((REPO / "meta" / "runtime.yml").read_text())["requires_ansible"])


def admits(spec, version):
    """What ansible-core itself answers: it drops a pre-release's suffix before it asks the
    specifier (plugins/loader.py, _does_collection_support_ansible_version)."""
    return spec.contains(Version(version).base_version)


def test_requires_ansible_is_the_oldest_release_as_a_floor_and_no_ceiling():
    spec = requires_ansible()
    assert [(s.operator, s.version) for s in spec] == [(">=", "%s.0" % OLDEST)], (
        "requires_ansible is %r: it must be '>=%s.0' alone, the table's oldest release as a floor and no upper "
        "bound (a ceiling refuses the collection to every newer ansible-core until a release of it catches up)"
        % (str(spec), OLDEST))
    major, oldest = minor(OLDEST)
    newest = minor(NEWEST)[1]
    for release in RELEASES:
        for patch in ("0", "0rc1", "1", "99"):
            assert admits(spec, "%s.%s" % (release, patch)), "%s does not admit %s.%s" % (spec, release, patch)
    assert not admits(spec, "%d.%d.99" % (major, oldest - 1)), "%s admits a release older than %s" % (spec, OLDEST)
    for newer in ("%d.%d.0" % (major, newest + 1), "%d.%d.0b1" % (major, newest + 1), "%d.%d.0" % (major, newest + 5),
                  "%d.0.0" % (major + 1)):
        assert admits(spec, newer), "%s refuses %s, a release newer than %s" % (spec, newer, NEWEST)
    assert [minor(r) for r in RELEASES] == [(major, n) for n in range(oldest, newest + 1)], "a release is missing from the table"


def test_the_pages_quote_requires_ansible_as_it_is():
    want = yaml.safe_load((REPO / "meta" / "runtime.yml").read_text())["requires_ansible"]
    pages = [REPO / "README.md", REPO / "galaxy.yml", REPO / "Makefile"] + sorted((REPO / "docs").glob("*.md"))
    found = []
    for page in pages:
        for quoted in re.findall(r"requires_ansible: *[\"']?([^\"'`\s]+)", page.read_text(encoding="utf-8")):
            if quoted != want:
                found.append("%s: requires_ansible %s" % (page.relative_to(REPO), quoted))
    assert not found, "meta/runtime.yml says %s; %s" % (want, found)


def test_the_makefile_venvs_and_pins_follow_the_table():
    cores = re.search(r"^CORES \?= (.+)$", (REPO / "Makefile").read_text(), re.M).group(1).split()
    assert cores == RELEASES, "Makefile CORES %s, the table %s" % (cores, RELEASES)
    pyproject = (REPO / "pyproject.toml").read_text()
    pinned = re.search(r'"ansible-core==(\d+\.\d+)\.\d+"', pyproject).group(1)
    assert pinned == OLDEST, ".venv (pyproject.toml) has ansible-core %s, the oldest release is %s" % (pinned, OLDEST)
    assert table()[OLDEST]["tested"] == "3.11"  # .venv's Python (Makefile, make venv)
    files = {path.stem[len("ansible-core-"):]: path for path in (REPO / "requirements" / "tools").glob("ansible-core-*.txt")}
    assert sorted(files, key=minor) == RELEASES[1:], "requirements/tools has venvs for %s" % sorted(files)
    for release, path in files.items():
        text = path.read_text()
        assert re.search(r"^ansible-core==%s\.\d+(?:rc\d+)?$" % re.escape(release), text, re.M), path
        python = re.search(r"^# python: (3\.\d+)$", text, re.M)
        assert python and python.group(1) == table()[release]["tested"], "%s: # python: line" % path
    core_venv = (REPO / "hack" / "core_venv.sh").read_text()
    assert re.search(r"^  %s\)$" % re.escape(OLDEST), core_venv, re.M)
    assert re.search(r"^  %s\) bin=" % re.escape(" | ".join(RELEASES[1:])), core_venv, re.M), "hack/core_venv.sh's cases"
    for ignore in (REPO / "tests" / "sanity").glob("ignore-*.txt"):
        assert ignore.stem[len("ignore-"):] in RELEASES, "%s is for a release not supported" % ignore


def test_the_execution_environment_asks_for_the_same_releases():
    ee = yaml.safe_load((REPO / "tests" / "ee" / "execution-environment.yml").read_text())
    major, newest = minor(NEWEST)
    want = "ansible-core>=%s,<%d.%d" % (OLDEST, major, newest + 1)
    assert ee["dependencies"]["ansible_core"]["package_pip"] == want


@pytest.mark.parametrize("rel", ["README.md", "docs/user-guide.md", "docs/README.md"])
def test_the_pages_link_to_the_table(rel):
    text = (REPO / rel).read_text(encoding="utf-8")
    assert "compatibility.md" in text, "%s does not link to docs/compatibility.md" % rel


def test_galaxy_yml_and_the_readme_name_the_range():
    span = "%s to %s" % (OLDEST, NEWEST)
    galaxy = yaml.safe_load((REPO / "galaxy.yml").read_text())
    assert "ansible-core %s" % span in " ".join(galaxy["description"].split()), galaxy["description"]
    assert "ansible-core %s" % span in " ".join((REPO / "README.md").read_text().split())


def test_no_page_names_an_end_of_life_release_as_supported():
    major, oldest = minor(OLDEST)
    old = r"ansible-core (?:%s)\b" % "|".join(r"%d\.%d" % (major, n) for n in range(oldest - 4, oldest))
    pages = [REPO / "README.md", REPO / "galaxy.yml"] + sorted((REPO / "docs").glob("*.md"))
    found = []
    for page in pages:
        for number, line in enumerate(page.read_text(encoding="utf-8").splitlines(), 1):
            if re.search(old, line) and page != PAGE:
                found.append("%s:%d: %s" % (page.relative_to(REPO), number, line.strip()))
    assert not found, "\n".join(found)


@pytest.mark.skipif(RUNNING not in RELEASES, reason="ansible-core %s is not in the table" % RUNNING)
def test_the_running_release_supports_the_pythons_the_table_says():
    from ansible_test._internal import constants

    row = table()[RUNNING]
    controller = constants.CONTROLLER_PYTHON_VERSIONS
    assert (controller[0], controller[-1]) == row["controller"], controller
    targets = constants.SUPPORTED_PYTHON_VERSIONS
    assert (targets[0], targets[-1]) == row["targets"], targets
    assert row["tested"] in controller


def pins(text):
    found = {}
    for line in text.splitlines():
        match = re.match(r'^\s*"?([A-Za-z0-9_.-]+)==([^"\s#;]+)', line)
        if match:
            found[match.group(1).lower().replace("_", "-")] = match.group(2)
    return found


def test_a_tool_pinned_in_pyproject_has_that_version_everywhere():
    pyproject = (REPO / "pyproject.toml").read_text()
    extra = re.search(r"^test = \[(.*?)^\]", pyproject, re.M | re.S).group(1)
    direct = pins(extra)
    assert {"ansible-lint", "molecule", "ansible-runner", "pytest"} <= set(direct), sorted(direct)
    problems = []
    for path in sorted((REPO / "requirements" / "tools").glob("*.txt")):
        for name, version in pins(path.read_text()).items():
            if name == "ansible-core" and path.stem.startswith("ansible-core-"):
                continue  # another release's venv
            if name in direct and version != direct[name]:
                problems.append("%s: %s==%s, pyproject.toml %s" % (path.relative_to(REPO), name, version, direct[name]))
    assert not problems, "\n".join(problems)
