# -*- coding: utf-8 -*-
# Copyright: contributors to bcd.devices
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""module_utils is four layers whose imports only run downward (docs/architecture.md):
entry -> state -> node -> domain, on a floor of plumbing every layer may import (support).
Inside the domain, the rooms (cdi, plan, input) sit beside its loose modules. Read from the
source, so a new import that breaks the layering, or a cycle, fails here."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

from ansible_collections.bcd.devices.plugins.module_utils.domain.plan import planner

MODULE_UTILS = Path(planner.__file__).resolve().parents[2]
PREFIX = "ansible_collections.bcd.devices.plugins.module_utils."
LAYERS = ("support", "domain", "node", "state", "entry")  # lowest first
ROOMS = ("domain.cdi", "domain.input", "domain.plan", "domain.plan.actions", "entry.doctor", "entry.helper", "entry.modules")


def modules():
    found = {}
    for path in sorted(MODULE_UTILS.rglob("*.py")):
        name = ".".join(path.relative_to(MODULE_UTILS).with_suffix("").parts)
        found[name[:-len(".__init__")] if name.endswith(".__init__") else name] = path
    return found


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
    return names


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
