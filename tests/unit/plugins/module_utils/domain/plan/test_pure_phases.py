# -*- coding: utf-8 -*-
# Copyright: contributors to bcd.devices
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""The planner's phases are pure (issue 23): read from the source, no function of the planner, its
Kubernetes steps, the claims or the decisions assigns an attribute or an item of, or mutates (append,
extend, update, pop, setdefault, ...), anything it did not create itself: each phase returns what it
decided and ``plan_pass`` builds the plan from the returned values, so no phase can write into a
shared pass behind another's back."""

from __future__ import annotations

import ast
import textwrap
from pathlib import Path
from typing import List, Set, Tuple

import pytest

from ansible_collections.bcd.devices.plugins.module_utils.domain.plan import planner

DOMAIN = Path(planner.__file__).resolve().parent
PURE = ("planner.py", "release.py", "release_kubernetes.py", "conditions.py", "keep.py", "bind.py", "claims.py",
        "reading.py", "conflicts.py", "decisions.py", "observed.py")
MUTATORS = {"append", "extend", "update", "pop", "popitem", "setdefault", "add", "insert", "remove", "discard",
            "clear", "sort", "reverse", "__setitem__", "__delitem__", "__setattr__", "__delattr__"}
FRESH = (ast.List, ast.Dict, ast.Set, ast.ListComp, ast.DictComp, ast.SetComp, ast.GeneratorExp, ast.Constant,
         ast.BinOp, ast.JoinedStr, ast.Compare, ast.BoolOp, ast.UnaryOp)


def _root(node):
    """The name an attribute, item or call chain starts from (``a`` of ``a.b[c].d()``), or None."""
    while isinstance(node, (ast.Attribute, ast.Subscript, ast.Call, ast.Starred)):
        node = node.func if isinstance(node, ast.Call) else node.value
    return node.id if isinstance(node, ast.Name) else None


def _fresh(value):
    """Whether an expression makes a new object: a display, a literal, an operation, a function's result
    (``dict(x)``, ``Outcome(...)``), never a name, an attribute or a method's result (``x.get(k)``)."""
    if isinstance(value, ast.Tuple):
        return True
    if isinstance(value, ast.IfExp):
        return _fresh(value.body) and _fresh(value.orelse)
    if isinstance(value, ast.Call):
        return isinstance(value.func, ast.Name)
    return isinstance(value, FRESH)


def _bindings(function):
    """(name, fresh) for each plain assignment to a name in ``function`` (not in functions it defines)."""
    found = []  # type: List[Tuple[str, bool]]
    for node in _own_nodes(function):
        pairs = []
        if isinstance(node, ast.Assign):
            pairs = [(target, node.value) for target in node.targets]
        elif isinstance(node, ast.AnnAssign) and node.value is not None:
            pairs = [(node.target, node.value)]
        while pairs:
            target, value = pairs.pop()
            if isinstance(target, ast.Name):
                found.append((target.id, _fresh(value)))
            elif isinstance(target, ast.Tuple):
                if isinstance(value, ast.Tuple) and len(value.elts) == len(target.elts):
                    pairs.extend(zip(target.elts, value.elts))
                else:
                    found.extend((name.id, False) for name in ast.walk(target) if isinstance(name, ast.Name))
    return found


def _own_nodes(function):
    """The nodes of ``function``'s body, not those of the functions and classes defined in it."""
    stack = [node for node in function.body if not isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef))]
    while stack:
        node = stack.pop()
        yield node
        stack.extend(child for child in ast.iter_child_nodes(node)
                     if not isinstance(child, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef, ast.Lambda)))


def writes_into_what_it_did_not_create(source):
    """``(function, line, what)`` for each write a function makes into an object it did not create (a
    function defined in another may write into what the outer one made), in the source's order."""
    found = []  # type: List[Tuple[str, int, str]]
    tree = ast.parse(source)
    functions = [node for node in ast.walk(tree) if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef))]
    nested = set(id(inner) for function in functions for inner in ast.walk(function)
                 if inner is not function and isinstance(inner, (ast.FunctionDef, ast.AsyncFunctionDef)))
    outer = [(function, set()) for function in functions if id(function) not in nested]  # type: List[Tuple[ast.AST, Set[str]]]
    while outer:
        function, inherited = outer.pop()
        bindings = _bindings(function)
        parameters = set(arg.arg for arg in ast.walk(function.args) if isinstance(arg, ast.arg))
        own = (inherited | set(name for name, fresh in bindings if fresh)) - \
            set(name for name, fresh in bindings if not fresh) - parameters
        for node in _own_nodes(function):
            found.extend(_writes(function.name, node, own))
            outer.extend((child, own) for child in ast.iter_child_nodes(node)
                         if isinstance(child, (ast.FunctionDef, ast.AsyncFunctionDef)))
        outer.extend((child, own) for child in function.body if isinstance(child, (ast.FunctionDef, ast.AsyncFunctionDef)))
    return sorted(found, key=lambda write: write[1])


def _writes(name, node, own):
    targets = []  # type: List[ast.expr]
    if isinstance(node, (ast.Assign, ast.Delete)):
        targets = list(node.targets)
    elif isinstance(node, (ast.AugAssign, ast.AnnAssign)):
        targets = [node.target]
    for target in targets:
        if isinstance(target, (ast.Attribute, ast.Subscript)) and _root(target) not in own:
            yield name, node.lineno, "%s of %s" % (type(target).__name__, _root(target))
        elif isinstance(node, ast.AugAssign) and isinstance(target, ast.Name) and target.id not in own:
            # ``x += y`` changes a list in place: only a value made here may be added to so
            yield name, node.lineno, "%s += (not made here)" % target.id
    if isinstance(node, (ast.Global, ast.Nonlocal)):
        yield name, node.lineno, "global/nonlocal %s" % ", ".join(node.names)
    if isinstance(node, ast.Call):
        func = node.func
        if isinstance(func, ast.Attribute) and func.attr in MUTATORS and _root(func.value) not in own:
            yield name, node.lineno, "%s.%s()" % (_root(func.value), func.attr)
        elif isinstance(func, ast.Name) and func.id in ("setattr", "delattr"):
            yield name, node.lineno, "%s()" % func.id


@pytest.mark.parametrize("name", PURE)
def test_no_phase_writes_into_what_it_did_not_create(name):
    assert writes_into_what_it_did_not_create((DOMAIN / name).read_text()) == []


def test_the_check_finds_a_phase_writing_into_a_shared_pass():
    """The phases as they were before issue 23 (a ``PassState`` every phase wrote into): each write is found,
    through an alias too; what a function makes itself it may fill."""
    source = textwrap.dedent('''
        def _finish_releases(state):
            plan, actions = state.plan, []
            actions.append(1)
            plan.warnings.extend(["x"])
            state.failures.append(("a", "b", "c"))
            state.live.pop("a", None)
            state.pending["a"] = 1
            state.marker = False
            needs = state.needs()
            needs += ["b"]
            found = {}
            found.setdefault("a", []).append(1)
            return actions
    ''')
    assert [(line, what) for _name, line, what in writes_into_what_it_did_not_create(source)] == [
        (5, "plan.extend()"), (6, "state.append()"), (7, "state.pop()"), (8, "Subscript of state"),
        (9, "Attribute of state"), (11, "needs += (not made here)")]
