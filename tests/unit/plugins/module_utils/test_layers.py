# -*- coding: utf-8 -*-
# Copyright: contributors to bcd.devices
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""module_utils is four layers whose imports only run downward (docs/architecture.md):
entry -> state -> node -> domain, on a floor of plumbing every layer may import (support).
Inside the domain, the rooms stand in an order too: the input as it arrives (input) on the ground,
the hold's CDI spec (cdi) above it, the MIG layout planner (mig) above that, the planner (plan) on top,
and the values every room shares (the domain's loose modules) below the MIG room; nothing reaches a room
above its own, not even through a shared value. Inside the planner's room the phases are siblings: only the planner calls
them, and none imports another. Read from the source, so a new import that breaks the layering,
or a cycle, fails here."""

from __future__ import annotations

import ast
import functools
from pathlib import Path

import pytest

from ansible_collections.bcd.devices.plugins.module_utils.domain.plan import planner

MODULE_UTILS = Path(planner.__file__).resolve().parents[2]
PREFIX = "ansible_collections.bcd.devices.plugins.module_utils."
LAYERS = ("support", "domain", "node", "state", "entry")  # lowest first
ROOMS = ("domain.cdi", "domain.input", "domain.mig", "domain.plan", "domain.plan.actions", "entry.doctor", "entry.helper",
         "entry.modules")
# The domain's rooms, lowest first. A room's module reaches (imports, or imports through the values the rooms
# share, the domain's loose modules) its own room and those below it, never one above; a shared value reaches
# no room above the CDI spec's. The MIG layout's room (mig) stands above the CDI spec's, which it reaches through
# who claims a GPU (domain/busy.py, a shared value), and below the planner's, which does not import it.
DOMAIN_ROOMS = ("domain.input", "domain.cdi", "domain.mig", "domain.plan")
SHARED_VALUES_BELOW = "domain.mig"
# The modules of domain/plan/: the planner, which calls the phases in order (planner._plan_once); the phases,
# each a function of the pass that returns what it decided; and what they share (the values they hand each
# other, what they read alike of the pass, the rules they apply, the steps, the apply loop). Only the planner
# imports a phase.
PLANNER = "domain.plan.planner"
PHASES = ("release", "release_kubernetes", "keep", "bind", "conditions", "condition_events")
SHARED = ("decisions", "claims", "reading", "observed", "reports", "conflicts", "admission", "diffs", "seams",
          "actions", "apply")


@functools.lru_cache(maxsize=None)
def modules():
    found = {}
    for path in sorted(MODULE_UTILS.rglob("*.py")):
        name = ".".join(path.relative_to(MODULE_UTILS).with_suffix("").parts)
        found[name[:-len(".__init__")] if name.endswith(".__init__") else name] = path
    return found


@functools.lru_cache(maxsize=None)
def imports_of(path):
    """Every module_utils module the file imports, anywhere in it (lazy imports count too)."""
    names = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.ImportFrom) and node.module and node.module.startswith(PREFIX):
            module = node.module[len(PREFIX):]
            names.add(module)
            for alias in node.names:  # from ...module_utils.node import kubelet
                if "%s.%s" % (module, alias.name) in modules():
                    names.add("%s.%s" % (module, alias.name))
        elif isinstance(node, ast.Import):
            names.update(a.name[len(PREFIX):] for a in node.names if a.name.startswith(PREFIX))
    return frozenset(names)


def test_every_module_lives_in_a_layer_and_each_layer_is_described():
    """Each layer's __init__.py stays empty (ansible-test's empty-init); the layers' README says
    what belongs in each, a paragraph apiece."""
    found = modules()
    assert sorted(name for name in found if "." not in name) == sorted(LAYERS)
    packages = sorted(name for name, path in found.items() if path.name == "__init__.py")
    assert packages == sorted(LAYERS + ROOMS), packages
    readme = (MODULE_UTILS / "README.md").read_text()
    for layer in LAYERS:
        assert found[layer].read_text() == "", layer
        section = readme.split("## `%s/`:" % layer, 1)[1].split("\n## ", 1)[0]
        assert len(section.split()) > 30, layer


@pytest.mark.parametrize("name", sorted(n for n in modules() if "." in n))
def test_imports_run_downward(name):
    layer = LAYERS.index(name.split(".")[0])
    for imported in imports_of(modules()[name]):
        assert LAYERS.index(imported.split(".")[0]) <= layer, "%s imports %s" % (name, imported)


def test_no_import_cycles():
    graph = dict((name, imports_of(path) - {name}) for name, path in modules().items())
    done, active = set(), []

    def visit(name):
        if name in active:
            pytest.fail("import cycle: %s" % " -> ".join(active[active.index(name):] + [name]))
        if name in done:
            return
        active.append(name)
        for imported in sorted(graph.get(name, ())):
            visit(imported)
        active.pop()
        done.add(name)

    for name in sorted(graph):
        visit(name)


def test_the_domain_does_no_io():
    """The planner and its helpers are functions of their arguments: no file, process or socket calls."""
    for name, path in modules().items():
        if not name.startswith(("domain.", "support.")):
            continue
        tree = ast.parse(path.read_text())
        imported = set(alias.name for node in ast.walk(tree) if isinstance(node, ast.Import) for alias in node.names)
        assert not imported & {"os", "subprocess", "socket", "shutil", "fcntl"}, name
        calls = [node.func.id for node in ast.walk(tree)
                 if isinstance(node, ast.Call) and isinstance(node.func, ast.Name)]
        assert "open" not in calls, name


def domain_room(name):
    """The index in ``DOMAIN_ROOMS`` of the room a domain module is in (None: a shared value)."""
    for index, room in enumerate(DOMAIN_ROOMS):
        if name == room or name.startswith(room + "."):
            return index
    return None


def reached(name):
    """``{domain module: the one it was imported from}`` for every domain module ``name`` reaches."""
    found, todo = {}, [name]
    while todo:
        current = todo.pop()
        for imported in sorted(imports_of(modules()[current])):
            if imported.startswith("domain.") and imported in modules() and imported not in found:
                found[imported] = current
                todo.append(imported)
    return found


@pytest.mark.parametrize("name", sorted(n for n in modules() if n.startswith("domain.")))
def test_the_domain_s_rooms_reach_only_their_own_and_those_below(name):
    """``domain/input/`` reaches no other room, ``domain/cdi/`` neither the MIG layout nor the planner, a shared
    value neither of those; the planner's room reaches them all. Through a shared value too: input that imported a value which imports
    the CDI spec would stand above it."""
    own = domain_room(name)
    highest = own if own is not None else DOMAIN_ROOMS.index(SHARED_VALUES_BELOW) - 1
    for module, importer in sorted(reached(name).items()):
        room = domain_room(module)
        assert room is None or room <= highest, "%s reaches %s (imported by %s), a room above its own" % (
            name, module, importer)


def plan_module(name):
    """``bind`` for ``domain.plan.bind``, ``actions`` for anything under ``domain/plan/actions/``; None outside."""
    if not name.startswith("domain.plan."):
        return None
    return name[len("domain.plan."):].split(".")[0]


def test_every_module_of_the_planner_s_room_is_the_planner_a_phase_or_shared():
    found = set(plan_module(name) for name in modules()) - {None}
    assert sorted(found) == sorted(PHASES + SHARED + ("planner",)), \
        "name the new module of domain/plan/ a phase or shared: %s" % sorted(found ^ set(PHASES + SHARED + ("planner",)))


@pytest.mark.parametrize("name", sorted(n for n in modules() if plan_module(n) not in (None, "planner")))
def test_no_module_of_the_planner_s_room_but_the_planner_imports_a_phase(name):
    """The phases are siblings under ``planner._plan_once``, which hands each what the phases before it
    decided: a phase imports the shared modules (``decisions``, ``claims``, ``reading``, ``reports``,
    ``actions`` ...), never another phase; and a shared module imports no phase."""
    phases = [imported for imported in imports_of(modules()[name]) if plan_module(imported) in PHASES]
    assert [imported for imported in phases if imported != name] == [], \
        "%s imports the phase %s; what phases share goes in reading.py or beside the observation" % (name, phases)
