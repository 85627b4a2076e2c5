# -*- coding: utf-8 -*-
# Copyright: contributors to bcd.devices
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""The seams between the layers are checked, not only declared: on a copy of the collection, renaming any
method of a protocol in ``domain/plan/seams.py`` (the protocol's side), or the same method of a class the node
or the state hands over as one (``DirectWriter``, ``HelperWriter``, ``NodeState``, ``KubeView``: the
implementer's side), or handing a writer a file kind it does not know, makes the project's own mypy (the one
``make lint`` runs, with ``pyproject.toml``'s settings) fail.

The protocols and their implementers are found in the tree, not listed here: a protocol added to ``seams.py``,
or a method added to one, is tried too. An implementer is a class outside ``domain/plan`` that defines every
method (not property) of the protocol.
"""

from __future__ import annotations

import ast
import os
import pathlib
import re
import shutil
import subprocess
import sys

import pytest

pytest.importorskip("mypy")

ROOT = pathlib.Path(__file__).resolve().parents[4]
UTILS = ROOT / "plugins" / "module_utils"
SEAMS = UTILS / "domain" / "plan" / "seams.py"
SKIP_DIRS = {"__pycache__"}


def _protocols():
    """``{protocol: (methods, properties)}`` of every ``Protocol`` class in seams.py."""
    found = {}
    for node in ast.parse(SEAMS.read_text()).body:
        if isinstance(node, ast.ClassDef) and any(getattr(base, "id", None) == "Protocol" for base in node.bases):
            methods, properties = [], []
            for item in node.body:
                if isinstance(item, ast.FunctionDef) and not item.name.startswith("_"):
                    is_property = any(getattr(d, "id", None) == "property" for d in item.decorator_list)
                    (properties if is_property else methods).append(item.name)
            found[node.name] = (methods, properties)
    return found


def _classes():
    """``(path relative to the collection, class node)`` of every class of module_utils outside domain/plan."""
    for path in sorted(UTILS.rglob("*.py")):
        relative = path.relative_to(ROOT)
        if "domain/plan" in relative.as_posix() or SKIP_DIRS.intersection(relative.parts) or "_pb2" in path.name:
            continue
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.ClassDef):
                yield relative.as_posix(), node


def _mutations():
    """``(id, file, line, name)``: rename ``def name(`` at ``line`` of ``file``."""
    protocols = _protocols()
    cases = []
    seams = SEAMS.relative_to(ROOT).as_posix()
    tree = ast.parse(SEAMS.read_text())
    for node in tree.body:
        if isinstance(node, ast.ClassDef) and node.name in protocols:
            for item in node.body:
                if isinstance(item, ast.FunctionDef) and not item.name.startswith("_"):
                    cases.append(("protocol %s.%s" % (node.name, item.name), seams, item.lineno, item.name))
    for protocol, (methods, _properties) in protocols.items():
        if not methods:
            continue
        for relative, node in _classes():
            defined = {item.name: item.lineno for item in node.body if isinstance(item, ast.FunctionDef)}
            if all(name in defined for name in methods):
                for name in methods:
                    cases.append(("%s %s.%s" % (protocol, node.name, name), relative, defined[name], name))
    return cases


MUTATIONS = _mutations()


def _mypy(tree):
    """The project's mypy on ``tree`` (laid out as ansible_collections/bcd/devices), as make lint runs it."""
    env = dict(os.environ, MYPY_FORCE_COLOR="0")
    result = subprocess.run(
        [sys.executable, "-m", "mypy", "--config-file", str(tree / "ansible_collections/bcd/devices/pyproject.toml"),
         "--cache-dir", str(tree / "mypy-cache"), "--no-error-summary"],
        cwd=str(tree), env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, universal_newlines=True,
        check=False)
    return result.returncode, result.stdout


@pytest.fixture(scope="module")
def copy(tmp_path_factory):
    """A copy of plugins/ and pyproject.toml that mypy has checked once (its cache warm, so each mutation
    checks only what changed); the copy must be clean, or no failure below would mean anything."""
    tree = tmp_path_factory.mktemp("seams")
    collection = tree / "ansible_collections" / "bcd" / "devices"
    collection.mkdir(parents=True)
    shutil.copytree(str(ROOT / "plugins"), str(collection / "plugins"),
                    ignore=shutil.ignore_patterns("__pycache__", "*.pyc"))
    shutil.copy(str(ROOT / "pyproject.toml"), str(collection / "pyproject.toml"))
    rc, out = _mypy(tree)
    assert rc == 0, "the tree itself fails mypy (make lint says so too):\n" + out
    return tree


def _mutated(copy, relative, change):
    """Apply ``change`` (text -> text) to ``relative`` in the copy, run mypy, put the file back."""
    path = copy / "ansible_collections" / "bcd" / "devices" / relative
    original = path.read_text()
    changed = change(original)
    assert changed != original, "the mutation changed nothing in %s" % relative
    path.write_text(changed)
    try:
        return _mypy(copy)
    finally:
        path.write_text(original)


def test_the_seams_are_found():
    """The search above finds what the layers hand over: the writers, the node's state, the pods' view."""
    ids = {case[0] for case in MUTATIONS}
    assert {"Writer DirectWriter.write_node_file", "Writer HelperWriter.write_node_file",
            "StateSink NodeState.clear_releases_marker", "protocol Writer.stop_slice"} <= ids
    assert len(MUTATIONS) >= 30


@pytest.mark.parametrize("case", MUTATIONS, ids=[case[0] for case in MUTATIONS])
def test_renaming_a_protocol_method_fails_the_type_check(copy, case):
    _id, relative, line, name = case

    def rename(text):
        lines = text.splitlines(True)
        assert "def %s(" % name in lines[line - 1], (relative, line, lines[line - 1])
        lines[line - 1] = lines[line - 1].replace("def %s(" % name, "def %s_renamed(" % name, 1)
        return "".join(lines)

    rc, out = _mutated(copy, relative, rename)
    assert rc == 1 and ": error:" in out, "mypy did not notice %s renamed in %s:\n%s" % (name, relative, out)


def test_a_file_kind_the_writer_does_not_know_fails_the_type_check(copy):
    """The kinds of node file are a ``Literal``: a step that names another is a type error, not a file the
    root helper refuses at run time."""
    relative = "plugins/module_utils/domain/plan/bind.py"
    rc, out = _mutated(copy, relative, lambda text: re.sub(r'FileChange\("cdi"', 'FileChange("spec"', text, count=1))
    assert rc == 1 and "Literal['cdi', 'allocation-env']" in out, out
