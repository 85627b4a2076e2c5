# -*- coding: utf-8 -*-
# Copyright: contributors to bcd.devices
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""support/records.py: a record behaves as the dataclass it replaces (built, compared, hashed, shown, frozen,
replaced, turned into a dict), and every data class of module_utils is a record, so a module run compiles
no dataclass at import."""

from __future__ import annotations

import ast
import dataclasses
import importlib
import subprocess
import sys
from pathlib import Path
from typing import ClassVar, Dict, List, Tuple

import pytest
from hypothesis import given
from hypothesis import strategies as st

from ansible_collections.bcd.devices.plugins.module_utils.support import records, speed
from ansible_collections.bcd.devices.plugins.module_utils.support.records import field, record

REPO = Path(__file__).resolve().parents[5]
MODULE_UTILS = REPO / "plugins" / "module_utils"


def as_record(frozen, eq):
    @record(frozen=frozen, eq=eq)
    class Point:
        """A point."""

        kind: ClassVar[str] = "point"
        x: int
        y: int = 0
        tags: Tuple[str, ...] = ()
        extra: List[int] = field(default_factory=list)  # each record its own
        marks: Dict[str, int] = field(default_factory=dict)

    return Point


def as_dataclass(frozen, eq):
    @dataclasses.dataclass(frozen=frozen, eq=eq)
    class Point:
        """A point."""

        kind: ClassVar[str] = "point"
        x: int
        y: int = 0
        tags: Tuple[str, ...] = ()
        extra: List[int] = dataclasses.field(default_factory=list)
        marks: Dict[str, int] = dataclasses.field(default_factory=dict)

    return Point


def pair(frozen, eq):
    """The same class as a record and as a dataclass."""
    return as_record(frozen, eq), as_dataclass(frozen, eq)


def shown(value):
    return repr(value)[repr(value).index("Point("):]


values = st.integers(-5, 5)
points = st.tuples(values, values, st.lists(st.sampled_from("ab"), max_size=2).map(tuple),
                   st.lists(values, max_size=2))


@pytest.mark.parametrize("frozen, eq", [(False, True), (True, True), (True, False)])
@given(first=points, second=points)
def test_a_record_compares_hashes_and_shows_as_its_dataclass(frozen, eq, first, second):
    ours, theirs = pair(frozen, eq)
    a, b = ours(*first), ours(*second)
    da, db = theirs(*first), theirs(*second)
    assert (a == b) == (da == db)
    assert (a == ours(*first)) == (da == theirs(*first))
    assert shown(a) == shown(da)
    assert (ours.__hash__ is None) == (theirs.__hash__ is None)
    if frozen and eq:  # its list field makes both unhashable
        with pytest.raises(TypeError):
            hash(a)
        with pytest.raises(TypeError):
            hash(da)
    assert records.asdict(a) == dataclasses.asdict(da)
    assert [item.name for item in records.fields(a)] == [item.name for item in dataclasses.fields(da)]
    assert records.asdict(records.replace(a, y=7)) == dataclasses.asdict(dataclasses.replace(da, y=7))
    assert ours.kind == "point" and "kind" not in [item.name for item in records.fields(ours)]


def test_defaults_factories_and_positional_arguments_are_as_dataclasses_makes_them():
    ours, theirs = pair(False, True)
    assert ours(1) == ours(1, 0, (), [], {})
    first, second = ours(1), ours(1)
    assert first.extra == [] and first.extra is not second.extra and first.marks is not second.marks
    assert ours(x=2, y=3).y == theirs(x=2, y=3).y == 3
    with pytest.raises(TypeError):
        ours()
    with pytest.raises(TypeError):
        ours(1, 2, (), [], {}, "one too many")
    with pytest.raises(TypeError):
        ours(1, z=2)


def test_a_mutable_default_is_refused_as_dataclasses_refuses_it():
    """A list, dict or set default would be one object shared by every record: both refuse it, with the
    same message, so a record is never written in a way a dataclass could not be."""
    for default in ([], {}, set()):
        messages = []
        for decorate in (record, dataclasses.dataclass):
            with pytest.raises(ValueError) as raised:
                decorate(type("Shared", (), {"__annotations__": {"items": List[int]}, "items": default}))
            messages.append(str(raised.value).replace("use default_factory", "").strip())
        assert messages[0] == messages[1]


def test_a_frozen_record_refuses_assignment_and_deletion():
    point = pair(True, True)[0](1)
    with pytest.raises(records.FrozenInstanceError):
        point.x = 2
    with pytest.raises(records.FrozenInstanceError):
        del point.x
    assert point.x == 1

    @record(frozen=True)
    class Key:
        number: int
        name: str = ""

    assert Key(1, "x") == Key(1, "x") and hash(Key(1, "x")) == hash(Key(1, "x")) == hash((1, "x"))
    assert {Key(1): "one"}[Key(1)] == "one" and Key(1) != Key(2)


def test_a_subclass_record_has_its_base_fields_first_and_eq_false_keeps_identity():
    @record(frozen=True, eq=False)
    class Base:
        name: str
        note: str = ""

    @record(frozen=True, eq=False)
    class Child(Base):
        size: int = 0

    child = Child("a", "b", 3)
    assert [item.name for item in records.fields(child)] == ["name", "note", "size"]
    assert child != Child("a", "b", 3)
    assert hash(child) == object.__hash__(child)
    assert repr(child).endswith(".Child(name='a', note='b', size=3)")


def test_a_field_a_subclass_declares_again_keeps_its_place_as_in_a_dataclass():
    made = []
    for decorate in (record, dataclasses.dataclass):
        @decorate
        class Base:
            first: int = 1
            second: int = 2

        @decorate
        class Child(Base):
            first: int = 10
            third: int = 3

        made.append(Child)
    ours, theirs = made
    assert [item.name for item in records.fields(ours)] == [item.name for item in dataclasses.fields(theirs)] \
        == ["first", "second", "third"]
    assert records.asdict(ours(second=5)) == dataclasses.asdict(theirs(second=5)) == {"first": 10, "second": 5, "third": 3}


def test_a_method_the_class_defines_is_kept_and_bad_declarations_are_refused():
    @record
    class Shown:
        value: int

        def __repr__(self):
            return "shown %d" % self.value

    assert repr(Shown(1)) == "shown 1"
    with pytest.raises(ValueError):
        field(default=1, default_factory=int)
    with pytest.raises(TypeError):
        @record
        class Ordered:  # pylint: disable=unused-variable
            first: int = 0
            second: int


def test_every_data_class_of_module_utils_is_a_record():
    """A module run imports module_utils afresh on every task; a dataclass there compiles five or six methods
    at import (docs/performance.md, "Records")."""
    found = []
    for path in sorted(MODULE_UTILS.rglob("*.py")):
        tree = ast.parse(path.read_text(encoding="utf-8"))
        for node in ast.walk(tree):
            if isinstance(node, ast.ImportFrom) and node.module == "dataclasses":
                found.extend("%s imports %s from dataclasses" % (path.relative_to(REPO), alias.name)
                             for alias in node.names if alias.name == "dataclass")
            if isinstance(node, ast.Attribute) and node.attr == "dataclass" \
                    and isinstance(node.value, ast.Name) and node.value.id == "dataclasses":
                found.append("%s uses dataclasses.dataclass" % path.relative_to(REPO))
    assert not found


def test_importing_the_converger_builds_no_dataclass():
    code = ("import sys, dataclasses; sys.path.insert(0, %r)\n"
            "made = []\n"
            "real = dataclasses._process_class\n"
            "dataclasses._process_class = lambda cls, *a, **k: made.append(cls.__module__) or real(cls, *a, **k)\n"
            "from ansible_collections.bcd.devices.plugins.module_utils.entry.modules import holds, holds_info\n"
            "print([name for name in made if name.startswith('ansible_collections.bcd')])\n" % str(REPO / ".build"))
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert done.stdout.strip() == "[]"


def test_a_record_compiles_its_init_when_the_first_of_its_class_is_made_and_behaves_the_same_after():
    """The first record of a class compiles the class's own ``__init__`` and puts it in place; that one makes every
    record after it, the first included, so a record is made the same way on its 1st and its 32nd construction. A
    subclass compiles its own; a refused call compiles it too."""
    @record(frozen=True)
    class Base:
        name: str

    @record(frozen=True)
    class Child(Base):
        size: int = 1

    def compiled(cls):
        return cls.__init__.__module__ is None and cls.__init__.__qualname__ == cls.__qualname__ + ".__init__"

    assert not compiled(Child) and not compiled(Base)
    made = [Child("a")]
    assert compiled(Child) and not compiled(Base)
    init = Child.__init__
    made += [Child("b", size=2) for _copy in range(40)]
    assert Child.__init__ is init
    assert [(child.name, child.size) for child in made[:2]] == [("a", 1), ("b", 2)] and made[1] == made[-1]
    with pytest.raises(TypeError, match=r"__init__\(\) missing 1 required positional argument: 'name'"):
        Base()
    assert compiled(Base) and Base("e").name == "e"


# Classes of up to 5 fields, each without a default, with one, or with a factory (none without one after one
# with it), frozen or not; and calls of them: some positional arguments (one too many at most), keywords for
# some fields, maybe one given twice, maybe one no field has.
LAYOUTS = st.lists(st.sampled_from(["required", "default", "factory"]), max_size=5).map(
    lambda kinds: sorted(kinds, key=lambda kind: kind != "required"))
CALLS = st.tuples(st.integers(0, 6), st.lists(st.integers(0, 5), max_size=6), st.booleans(), st.booleans())


def declared(kinds, frozen, decorate, make_field):
    namespace = {"__annotations__": dict(("f%d" % index, object) for index in range(len(kinds)))}
    for index, kind in enumerate(kinds):
        if kind == "default":
            namespace["f%d" % index] = ("default", index)
        elif kind == "factory":
            namespace["f%d" % index] = make_field(default_factory=list)
    return decorate(frozen=frozen)(type("Layout", (), namespace))


def outcome(cls, args, kwargs):
    """``("made", fields)`` for the fields a call makes, or ``("refused", whether the message names __init__)``
    for the ``TypeError`` it raises."""
    try:
        made = cls(*args, **kwargs)
    except TypeError as exc:
        return "refused", "__init__()" in str(exc)
    return "made", tuple(getattr(made, "f%d" % index) for index in range(len(cls.__annotations__)))


@given(kinds=LAYOUTS, frozen=st.booleans(), call=CALLS)
def test_the_init_takes_and_refuses_every_call_as_the_dataclass_on_the_first_record_and_after(kinds, frozen, call):
    """A call gives a record the fields the dataclass's ``__init__`` would (a factory's value made for each record),
    or is refused with a ``TypeError`` that names ``__init__`` where the dataclass's is: the same on the first call,
    which compiles the ``__init__``, and on the calls after it."""
    positional, keywords, twice, unknown = call
    names = ["f%d" % index for index in range(len(kinds))]
    args = tuple(("arg", index) for index in range(min(positional, len(names) + 1)))
    kwargs = dict((names[index], ("kw", index)) for index in keywords if index < len(names) and index >= len(args))
    if twice and args and names:
        kwargs[names[0]] = "twice"
    if unknown:
        kwargs["nowhere"] = "unknown"
    theirs = declared(kinds, frozen, dataclasses.dataclass, dataclasses.field)
    ours = declared(kinds, frozen, record, field)
    expected = outcome(theirs, args, kwargs)
    assert outcome(ours, args, kwargs) == expected  # the first: compiles the __init__
    assert outcome(ours, args, kwargs) == expected  # and the compiled one
    made = [name for name, kind in zip(names[len(args):], kinds[len(args):]) if kind == "factory" and name not in kwargs]
    if made and expected[0] == "made":
        first, second = ours(*args, **kwargs), ours(*args, **kwargs)
        assert all(getattr(first, name) == [] and getattr(first, name) is not getattr(second, name) for name in made)


# -- every record of module_utils, rebuilt as the dataclass it must be -------------------------------------
PACKAGE = "ansible_collections.bcd.devices.plugins.module_utils"
FIELDS_MARKER = records._FIELDS  # pylint: disable=protected-access
FROZEN_SETATTR = records._frozen_setattr  # pylint: disable=protected-access


def module_names():
    """Every module of module_utils, by its import name (read from the tree: a module that fails to import
    fails its own test below, not the collection of this file)."""
    names = []
    for path in sorted(MODULE_UTILS.rglob("*.py")):
        parts = path.relative_to(MODULE_UTILS).with_suffix("").parts
        names.append(".".join((PACKAGE,) + (parts[:-1] if parts[-1] == "__init__" else parts)))
    return names


def record_classes(name):
    """The ``@record`` classes of module ``name``, imported: those that carry records' fields marker in their own
    ``__dict__``."""
    module = importlib.import_module(name)
    return sorted((value for value in vars(module).values()
                   if isinstance(value, type) and value.__module__ == module.__name__
                   and FIELDS_MARKER in value.__dict__),
                  key=lambda cls: cls.__qualname__)


MODULES = module_names()


def _generated(value):
    """Whether ``value`` is one of the methods ``record`` put on a class (its own functions, the ``__init__`` it
    compiled, or the stand-in that compiles it), not one the class body defined."""
    function = getattr(value, "__func__", value)
    return getattr(function, "__module__", "") in (records.__name__, speed.__name__, None)


def options_of(cls):
    """``(frozen, eq)`` as the class was declared: ``record`` sets ``__setattr__`` on a frozen record and ``__eq__``
    on every record with ``eq=True``."""
    frozen = cls.__dict__.get("__setattr__") is FROZEN_SETATTR
    return frozen, "__eq__" in cls.__dict__


_REBUILT = {}  # type: Dict[type, type]


def as_dataclass_of(cls):
    """``cls`` declared again with ``dataclasses.dataclass`` (its bases that are records too, first): the same
    name, module, annotations, defaults (``dataclasses.field(default_factory=...)`` for a factory), methods and
    options, and none of what ``record`` added."""
    if cls in _REBUILT:
        return _REBUILT[cls]
    bases = tuple(as_dataclass_of(base) if records.is_record(base) else base for base in cls.__bases__)
    annotations = dict(cls.__dict__.get("__annotations__", {}))
    by_name = dict((item.name, item) for item in records.fields(cls))
    namespace = {"__annotations__": annotations, "__qualname__": cls.__qualname__}
    for name, value in cls.__dict__.items():
        if name in ("__dict__", "__weakref__", "__annotations__", FIELDS_MARKER) \
                or name in annotations or _generated(value) \
                or (name == "__hash__" and value is None):
            continue
        namespace[name] = value
    for name in annotations:
        item = by_name.get(name)
        if item is None:  # a ClassVar: its value is the class's own
            if name in cls.__dict__:
                namespace[name] = cls.__dict__[name]
        elif item.default_factory is not records.MISSING:
            # the class body dataclasses reads (the rebuilt class is made just below): pylint cannot see
            # that a namespace becomes a dataclass
            namespace[name] = dataclasses.field(default_factory=item.default_factory)  # pylint: disable=invalid-field-call
        elif item.default is not records.MISSING:
            namespace[name] = item.default
    frozen, eq = options_of(cls)
    rebuilt = dataclasses.dataclass(frozen=frozen, eq=eq)(type(cls.__name__, bases, namespace))
    _REBUILT[cls] = rebuilt
    return rebuilt


def test_the_walk_finds_the_records_of_every_layer():
    found = dict((name, record_classes(name)) for name in MODULES)
    layers = set(name[len(PACKAGE) + 1:].split(".")[0] for name, classes in found.items() if classes)
    assert {"domain", "node", "state", "entry"} <= layers and sum(len(classes) for classes in found.values()) >= 60


@pytest.mark.parametrize("name", MODULES, ids=lambda name: name[len(PACKAGE) + 1:])
def test_every_record_of_module_utils_is_the_dataclass_it_would_be(name):
    """``record`` is a strict subset of ``dataclasses.dataclass``: each record class of module_utils, declared again
    as a dataclass, is accepted, has the same fields in the same order with the same defaults, and (made with
    ``None`` for each field without a default) shows, compares, hashes and freezes the same."""
    for cls in record_classes(name):
        same_as_its_dataclass(cls)


def hashed(value):
    """``hash(value)``, or ``TypeError`` when a field is unhashable (a frozen record holding a dict, as a frozen
    dataclass holding one)."""
    try:
        return hash(value)
    except TypeError:
        return TypeError


def made_both_ways(cls, args):
    """A record of ``cls`` made with ``args`` by a stand-in that compiles its ``__init__`` (as the first record of a
    class is made), and one made by the class's ``__init__`` as it is now (a test before this one may have
    compiled it)."""
    frozen = options_of(cls)[0]
    first = object.__new__(cls)
    records._init(cls, records.fields(cls), frozen)(first, *args)  # pylint: disable=protected-access
    return [first, cls(*args)]


def same_as_its_dataclass(cls):
    rebuilt = as_dataclass_of(cls)
    ours, theirs = records.fields(cls), dataclasses.fields(rebuilt)
    assert [item.name for item in ours] == [item.name for item in theirs], cls
    for mine, its in zip(ours, theirs):
        assert (mine.default is records.MISSING) == (its.default is dataclasses.MISSING), (cls, mine.name)
        assert (mine.default_factory is records.MISSING) == (its.default_factory is dataclasses.MISSING), (cls, mine.name)
        if mine.default is not records.MISSING:
            assert mine.default is its.default, (cls, mine.name)
        if mine.default_factory is not records.MISSING:
            assert mine.default_factory is its.default_factory, (cls, mine.name)
    assert (cls.__hash__ is None) == (rebuilt.__hash__ is None), cls
    required = [None] * sum(1 for item in ours if item.default is records.MISSING
                            and item.default_factory is records.MISSING)
    try:
        first, second = cls(*required), cls(*required)
    except Exception as exc:  # pylint: disable=broad-exception-caught  # an __init__ of its own: it must refuse alike
        with pytest.raises(type(exc)):
            rebuilt(*required)
        return
    made, again = rebuilt(*required), rebuilt(*required)
    assert repr(first) == repr(made), cls
    if _generated(cls.__dict__.get("__init__")):
        assert [repr(value) for value in made_both_ways(cls, required)] == [repr(made)] * 2, cls
    assert (first == second) == (made == again) and (first != second) == (made != again), cls
    if cls.__hash__ is not None:
        assert hashed(first) == hashed(made) or not options_of(cls)[1], cls
        assert (hashed(first) == hashed(second)) == (hashed(made) == hashed(again)), cls
    if options_of(cls)[0] and ours:
        for value in (first, made):
            with pytest.raises(AttributeError):
                setattr(value, ours[0].name, None)
