# -*- coding: utf-8 -*-
# Copyright: contributors to bcd.devices
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""The docs say what the tree does: what `make test` runs (make help, the Makefile's own comment,
.ci/run, README), which Molecule scenarios there are (docs/fakehw.md), and that every page of
docs/ is in its index, and that every step kind the planner returns is documented."""

from __future__ import annotations

import ast
import itertools
import re
from pathlib import Path

import pytest
import yaml

REPO = Path(__file__).resolve().parents[3]

# How each make target is named in prose. A description of `make test` must name every
# prerequisite (in the Makefile's order) and no other of these targets.
WORDS = {
    "venv": r"\.?venv\b",
    "lint": r"\blint\b",
    "units": r"\bunit(s| tests)\b",
    "sanity": r"\bsanity\b",
    "molecule": r"\bmolecule\b",
    "e2e": r"\be2e\b",
    "demo": r"\bdemo\b",
    "bench": r"\bbench\b",
}


def read(rel):
    return (REPO / rel).read_text(encoding="utf-8")


def make_test_prerequisites():
    found = re.findall(r"^test:([^\n]*)$", read("Makefile"), re.M)
    assert len(found) == 1
    prerequisites = found[0].split("|")[0].split()
    assert prerequisites and all(name in WORDS for name in prerequisites), prerequisites
    return prerequisites


def make_help_line():
    lines = re.findall(r'^\t@echo "make test +(.*)"$', read("Makefile"), re.M)
    assert len(lines) == 1, "make help has no (or more than one) line for make test"
    return lines[0]


def makefile_comment():
    head = read("Makefile").split("\n\n", 1)[0]
    found = re.search(r"^#   make test (.*?)(?=^#   make |\Z)", head, re.M | re.S)
    assert found, "the Makefile's opening comment does not describe make test"
    return " ".join(line.lstrip("# ").strip() for line in found.group(1).splitlines())


def ci_run_comment():
    comment = []
    for line in read(".ci/run").splitlines()[1:]:
        if not line.startswith("#"):
            break
        comment.append(line.lstrip("# "))
    text = " ".join(comment)
    found = re.search(r"`make test`(.*?)(?:\.\s|$)", text)
    assert found, ".ci/run's comment does not say what make test runs"
    return found.group(1)


def readme_quick_start():
    lines = [line for line in read("README.md").splitlines() if re.match(r"make test\s+#", line)]
    assert len(lines) == 1, "README's quick start has no (or more than one) make test line"
    return lines[0].split("#", 1)[1]


@pytest.mark.parametrize("where, describe, venv_optional", [
    ("make help", make_help_line, False),
    ("the Makefile's opening comment", makefile_comment, False),
    (".ci/run", ci_run_comment, False),
    ("README's quick start", readme_quick_start, True),  # the reader has just made .venv
])
def test_every_description_of_make_test_names_its_prerequisites_in_order(where, describe, venv_optional):
    prerequisites = make_test_prerequisites()
    text = describe()
    positions = []
    for name in prerequisites:
        found = re.search(WORDS[name], text, re.I)
        if found is None and name == "venv" and venv_optional:
            continue
        assert found, "%s does not say make test runs %s (test: %s): %r" % (where, name, " ".join(prerequisites), text)
        positions.append(found.start())
    assert positions == sorted(positions), "%s names make test's steps out of order: %r" % (where, text)
    for name, word in WORDS.items():
        if name not in prerequisites:
            assert not re.search(word, text, re.I), "%s says make test runs %s, which it does not: %r" % (where, name, text)


def scenarios():
    return sorted(path.parent.name for path in (REPO / "molecule").glob("*/molecule.yml"))


def test_docs_fakehw_lists_every_molecule_scenario_and_no_other():
    section = read("docs/fakehw.md").split("\n## Molecule\n", 1)[1].split("\n## ", 1)[0]
    table = section.split("| Scenario |", 1)[1].split("\n\n", 1)[0]
    listed = re.findall(r"^\| `([\w-]+)` \| .+ \| (.+) \|$", table, re.M)
    names = [name for name, what in listed]
    assert sorted(names) == scenarios(), "docs/fakehw.md's Molecule table: %s; molecule/: %s" % (names, scenarios())
    assert all(len(what.strip()) > 20 for name, what in listed), "each scenario needs a line on what it proves"
    # molecule/ holds one folder that is not a scenario; the page says so.
    others = sorted(path.name for path in (REPO / "molecule").iterdir() if path.is_dir() and path.name not in scenarios())
    for name in others:
        assert "`molecule/%s/` is not a scenario" % name in section


def test_every_docs_page_is_in_the_docs_index():
    index = read("docs/README.md")
    pages = sorted(path.name for path in (REPO / "docs").glob("*.md") if path.name != "README.md")
    missing = [page for page in pages if "](%s)" % page not in index and "](%s#" % page not in index]
    assert missing == []


def test_the_readme_links_the_docs_index_and_node_md():
    documentation = read("README.md").split("\n## Documentation\n", 1)[1].split("\n## ", 1)[0]
    assert "](docs/README.md)" in documentation
    assert "](docs/node.md)" in documentation


def action_kinds():
    """Every step kind the planner can return: the class constant ``kind`` each action class of
    domain/plan/actions/ sets, read from the source (``kind = "bind"`` or ``kind: ClassVar[str] = "bind"``;
    a dataclass field ``kind: str`` is a file's kind, not a step's)."""
    kinds = set()
    sources = sorted((REPO / "plugins/module_utils/domain/plan/actions").glob("*.py"))
    assert len(sources) > 1, "no step modules in domain/plan/actions/"
    for node in (node for path in sources for node in ast.walk(ast.parse(path.read_text(encoding="utf-8")))):
        if not isinstance(node, ast.ClassDef):
            continue
        for item in node.body:
            if isinstance(item, ast.Assign) and len(item.targets) == 1:
                target = item.targets[0]
            elif isinstance(item, ast.AnnAssign) and "ClassVar" in ast.dump(item.annotation):
                target = item.target
            else:
                continue
            if (isinstance(target, ast.Name) and target.id == "kind" and isinstance(item.value, ast.Constant)
                    and isinstance(item.value.value, str) and item.value.value):
                kinds.add(item.value.value)
    return kinds


def holds_return_kinds():
    tree = ast.parse(read("plugins/modules/holds.py"))
    text = next(node.value.value for node in tree.body
                if isinstance(node, ast.Assign) and getattr(node.targets[0], "id", None) == "RETURN")
    description = yaml.safe_load(text)["plan"]["contains"]["action"]["description"]
    return set(re.findall(r"V\(([a-z-]+)\)", description))


def table_after(page, header):
    """The rows of the Markdown table under ``header`` (its first line) on ``page``."""
    lines = read(page).split(header + "\n", 1)[1].splitlines()
    return list(itertools.takewhile(lambda line: line.startswith("|"), lines))[1:]


def test_the_planner_has_the_step_kinds_this_test_reads():
    assert {"bind", "rebind", "release", "take-back-release", "clear-marker"} <= action_kinds()


@pytest.mark.parametrize("where, documented", [
    ("the holds module's RETURN (plan.action)", holds_return_kinds),
    ("docs/architecture.md's table of actions",
     lambda: set(re.findall(r"\(`([a-z-]+)`", " ".join(row.split("|")[1] for row in table_after(
         "docs/architecture.md", "| class (`action`) | apply does |"))))),
    ("docs/user-guide.md's table of actions",
     lambda: set(re.findall(r"^\| `([a-z-]+)`", "\n".join(table_after(
         "docs/user-guide.md", "| `action` | Text (real examples) | What it does |")), re.M))),
])
def test_every_step_kind_is_documented_and_no_other(where, documented):
    kinds, named = action_kinds(), documented()
    assert sorted(kinds - named) == [], "%s does not name these step kinds" % where
    assert sorted(named - kinds) == [], "%s names step kinds the planner does not have" % where
