# -*- coding: utf-8 -*-
# Copyright: contributors to bcd.devices
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""The map held to the territory: docs/architecture.md and plugins/module_utils/README.md say what
the tree has, the way test_docs_match_code.py holds the table of step kinds.

Each layer's box in the architecture picture and each layer's paragraph of the README names every
module of that layer and none that is not there; the list of the planner's phases is the calls of
``_plan_once`` in order; the state section names every file of the state directory's one table;
"Hosts and writers" names every public method of ``Host``; "The life of one assignment" names, on
each row, functions its files define, and says in words how many steps over how many files it has.
Read from the source and the pages, so a page that drifts from the code fails here."""

from __future__ import annotations

import ast
import re
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[3]
MODULE_UTILS = REPO / "plugins" / "module_utils"
ARCHITECTURE = REPO / "docs" / "architecture.md"
README = MODULE_UTILS / "README.md"
LAYERS = ("support", "domain", "node", "state", "entry")
# What a box may name besides modules: the entry points' functions and values it points at.
OTHER_WORDS = ("run_pass", "pure", "no", "the", "root", "helper", "and", "as", "shipped", "from", "library")
# The modules of domain/plan/ that hold no phase of the planner.
NOT_PHASES = ("__init__", "planner", "actions", "apply", "decisions", "seams", "reading", "conflicts", "admission",
              "reports", "condition_events", "diffs", "handoffs", "values")
NUMBERS = {"one": 1, "two": 2, "three": 3, "four": 4, "five": 5, "six": 6, "seven": 7, "eight": 8, "nine": 9,
           "ten": 10, "eleven": 11, "twelve": 12, "thirteen": 13, "fourteen": 14, "fifteen": 15,
           "sixteen": 16, "seventeen": 17, "eighteen": 18, "nineteen": 19, "twenty": 20}


def modules_of(layer):
    """``{dotted name under the layer: path}``: ``planner`` is ``plan.planner`` in domain/."""
    found = {}
    for path in sorted((MODULE_UTILS / layer).rglob("*.py")):
        if path.name == "__init__.py":
            continue
        found[".".join(path.relative_to(MODULE_UTILS / layer).with_suffix("").parts)] = path
    return found


def rooms_of(layer):
    return sorted(path.parent.name for path in (MODULE_UTILS / layer).glob("*/__init__.py"))


def section(text, start, stop_pattern=r"\n## "):
    """The text after the line that starts with ``start`` up to the next heading."""
    assert start in text, "no %r on the page" % start
    return re.split(stop_pattern, text.split(start, 1)[1], maxsplit=1)[0]


def picture():
    text = ARCHITECTURE.read_text()
    return section(text, "## The layers", r"\n```\n")


def box(layer):
    """The words inside the picture's box of ``layer``: from its top border to its bottom border."""
    lines = picture().splitlines()
    top = next(i for i, line in enumerate(lines) if "┌─ %s/" % layer in line)
    column = lines[top].index("┌─ %s/" % layer)
    words = []
    for line in lines[top + 1:]:
        inside = line[column:]
        if inside.startswith("└"):
            break
        end = inside.find("│", 1)
        words.append(inside[1:end] if end > 0 else inside[1:])
    return " ".join(words)


def named(text):
    """Lower-case identifiers as a page writes module names: ``planner``, ``plan/``, ``cdi/hold_spec``."""
    return set(re.findall(r"(?<![\w.(])([a-z][a-z0-9_]*(?:/[a-z][a-z0-9_]*)*)/?(?![\w(])", text))


@pytest.mark.parametrize("layer", LAYERS)
def test_the_picture_names_each_module_of_each_layer_in_its_box(layer):
    words = named(box(layer))
    for name in modules_of(layer):
        parts = name.split(".")
        assert parts[-1] in words or "/".join(parts) in words, \
            "docs/architecture.md's %s/ box does not name %s" % (layer, name)
    for room in rooms_of(layer):
        assert room in words or room + "/" in box(layer), "the %s/ box does not name its room %s/" % (layer, room)


@pytest.mark.parametrize("layer", LAYERS)
def test_the_picture_names_no_module_a_layer_does_not_have(layer):
    known = set(rooms_of(layer))
    for name in modules_of(layer):
        known.update(name.split("."))
        known.add(name.replace(".", "/"))
    # words of a box that are not modules: a function or value it points at, or prose
    others = set(OTHER_WORDS)
    unknown = sorted(named(box(layer)) - known - others)
    assert not unknown, "docs/architecture.md's %s/ box names what %s/ does not have: %s" % (layer, layer, unknown)


@pytest.mark.parametrize("layer", LAYERS)
def test_the_readme_names_each_module_of_each_layer_in_its_paragraph(layer):
    text = section(README.read_text(), "## `%s/`:" % layer)
    ticked = set()
    for word in re.findall(r"`([a-z][A-Za-z0-9_./]*)`", text):  # `store.NodeState` names store
        ticked.update((word, word.split(".")[0]))
    for name in modules_of(layer):
        parts = name.split(".")
        assert parts[-1] in ticked or "/".join(parts) in ticked, \
            "module_utils/README.md's %s/ paragraph does not name %s" % (layer, name)
    for room in rooms_of(layer):
        assert room + "/" in ticked or room in ticked, "module_utils/README.md's %s/ does not name %s/" % (layer, room)


def planner_phases():
    """The phases ``_plan_once`` calls, in the order it calls them: the functions of the plan's phase
    modules (every module of domain/plan/ but the planner's top, its values and its actions)."""
    plan_dir = MODULE_UTILS / "domain" / "plan"
    tree = ast.parse((plan_dir / "planner.py").read_text())
    once = next(node for node in ast.walk(tree) if isinstance(node, ast.FunctionDef) and node.name == "_plan_once")
    defined = set()
    for path in plan_dir.glob("*.py"):
        if path.stem in NOT_PHASES:
            continue
        defined.update(node.name for node in ast.walk(ast.parse(path.read_text()))
                       if isinstance(node, ast.FunctionDef))
    calls = []
    for node in ast.walk(once):
        if isinstance(node, ast.Call):
            name = node.func.attr if isinstance(node.func, ast.Attribute) else getattr(node.func, "id", None)
            if name in defined and (node.lineno, node.col_offset, name) not in calls:
                calls.append((node.lineno, node.col_offset, name))
    ordered = []
    for _line, _column, name in sorted(calls):
        if name not in ordered:
            ordered.append(name)
    return ordered


def documented_phases():
    text = section(ARCHITECTURE.read_text(), "The planner's phases", r"\n\n(?!\d|   )")
    items = re.findall(r"^\d+\. (.*?)(?=^\d+\. |\Z)", text, re.M | re.S)
    names = []
    for item in items:
        names.extend(re.findall(r"`(?:[a-z_]+\.)?(_?[a-z_]+)`", item.split(":", 1)[0]))
    return names, len(items)


def test_the_phase_list_is_the_planners_calls_in_order():
    phases = planner_phases()
    names, items = documented_phases()
    assert items >= 6, "docs/architecture.md lists %d phases" % items
    assert [name for name in names if name in phases] == phases, \
        "docs/architecture.md's phases %s; _plan_once calls %s" % (names, phases)


def test_the_state_section_names_every_state_file():
    from ansible_collections.bcd.devices.plugins.module_utils.node import state_files
    text = section(ARCHITECTURE.read_text(), "## The state")
    for name in state_files.FILE_CAPS:
        assert "`%s`" % name in text, "docs/architecture.md's state section does not name %s" % name


def test_hosts_and_writers_names_every_public_method_of_host():
    from ansible_collections.bcd.devices.plugins.module_utils.node.hosts import Host
    text = section(ARCHITECTURE.read_text(), "## Hosts and writers")
    methods = sorted(name for name, value in vars(Host).items()
                     if not name.startswith("_") and callable(value))
    missing = [name for name in methods if "`%s`" % name not in text]
    assert not missing, "docs/architecture.md's Hosts and writers does not name Host.%s" % ", Host.".join(missing)
    said = re.search(r"the interface the converger sees: (.*?)\.\n", text, re.S).group(1)
    extra = sorted(set(re.findall(r"`([a-z_]+)`", said)) - set(methods) - {"writer", "slices", "root"})
    assert not extra, "docs/architecture.md names Host methods that do not exist: %s" % extra


def life_rows():
    text = section(ARCHITECTURE.read_text(), "## The life of one assignment")
    rows = [line for line in text.splitlines() if re.match(r"\| \d+ \|", line)]
    return text, [[cell.strip() for cell in row.strip("|").split("|")] for row in rows]


def defined_in(path):
    tree = ast.parse(path.read_text())
    return set(node.name for node in ast.walk(tree) if isinstance(node, (ast.FunctionDef, ast.ClassDef)))


def resolve(rel):
    for base in (REPO, MODULE_UTILS, REPO / "plugins"):
        if (base / rel).is_file():
            return base / rel
    raise AssertionError("the life of one assignment names %s, which is not a file" % rel)


def test_each_step_of_one_assignment_names_functions_its_files_define():
    _text, rows = life_rows()
    assert rows, "no steps"
    for number, function, files in rows:
        paths = [resolve(rel) for rel in re.findall(r"`([^`]+\.py)`", files)]
        assert paths, "step %s names no file" % number
        called = [re.split(r"[.(]", word)[-1] if "." in word else word
                  for word in re.findall(r"`([A-Za-z_][A-Za-z0-9_.]*)(?:\(\))?`", function)]
        functions = [word.split(".")[-1] for word in called if word and not word.isupper()]
        for path in paths:  # each file is on the road for something the row names, not only the row as a whole
            assert set(functions) & defined_in(path), \
                "step %s names %s, none defined in %s" % (number, functions, path.relative_to(REPO))


def test_the_life_of_one_assignment_says_its_count_of_steps_and_files():
    text, rows = life_rows()
    said = re.search(r"\b([A-Za-z]+|\d+) steps over ([A-Za-z]+|\d+) files\b", text)
    assert said, "the life of one assignment does not say how many steps over how many files"
    steps, files = (NUMBERS.get(word.lower()) or int(word) for word in said.groups())
    distinct = set()
    for _number, _function, cells in rows:
        distinct.update(re.findall(r"`([^`]+\.py)`", cells))
    assert steps == len(rows), "it says %d steps and lists %d" % (steps, len(rows))
    assert files == len(distinct), "it says %d files and names %d" % (files, len(distinct))
