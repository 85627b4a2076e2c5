# -*- coding: utf-8 -*-
# Copyright: contributors to bcd.devices
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""Records: the plain data classes the converger is made of, built cheaply at import.

``dataclasses.dataclass`` compiles five or six generated methods per class with ``exec`` when a
module is imported (``__init__``, ``__repr__``, ``__eq__``, ``__hash__``, a frozen class's
``__setattr__`` and ``__delattr__``), and every module run imports the converger afresh on the node:
for its record classes that cost more than the pass itself (docs/performance.md, "Speed tricks,
measured (issue 47)").

``record`` is a strict subset of ``dataclasses.dataclass``: every record must behave identically
when the decorator is swapped for ``dataclasses.dataclass`` (with ``field`` for
``dataclasses.field``), and ``tests/unit/plugins/module_utils/support/test_records.py`` makes each
record class of module_utils a dataclass and compares them. It compiles one method, the ``__init__``,
when the first record of the class is made (``support/speed.py``'s ``on_first_call``: a module run
makes records of a third of the classes it declares); its source is built with the class, so a field
order ``__init__`` cannot take is refused there. Comparison, hashing, ``repr`` and freezing are shared
functions over the class's fields, read with one C-level ``operator.attrgetter``. What it keeps of
dataclasses, and nothing more:

- fields are the class's annotations in order, a base record's first; ``ClassVar`` ones are not
  fields; a field without a default comes before those with one;
- a default is a value; a list, dict or set default is refused (``ValueError``, as dataclasses
  refuses it): ``field(default_factory=list)`` makes one for each record;
- ``eq=True``: equal when of the same class with equal fields; a mutable record is unhashable, a
  frozen one hashes its fields; ``eq=False`` keeps identity;
- ``frozen=True``: setting or deleting an attribute raises ``FrozenInstanceError``;
- a method the class body defines itself is kept.

``replace``, ``fields`` and ``asdict`` are the dataclasses functions of the same names, for records.
(Type checkers read ``record`` as a dataclass through ``dataclass_transform``.)
"""

from __future__ import annotations

import copy
from operator import attrgetter
from typing import TYPE_CHECKING, Any, Callable, ClassVar, Dict, List, Optional, Tuple, Type, TypeVar, Union, overload

from ansible_collections.bcd.devices.plugins.module_utils.support import speed
from ansible_collections.bcd.devices.plugins.module_utils.support.errors import BcdError

if TYPE_CHECKING:  # pragma: no cover - type checkers only; never imported at run time
    from typing_extensions import dataclass_transform
else:
    def dataclass_transform(**_kwargs):
        return lambda function: function

_C = TypeVar("_C", bound=type)
_R = TypeVar("_R")
_V = TypeVar("_V")

_FIELDS = "__record_fields__"
_CLASSVAR = ("ClassVar", "typing.ClassVar", "t.ClassVar")
_MUTABLE = (list, dict, set)


class _Missing:
    """No default."""

    def __repr__(self) -> str:
        return "MISSING"


MISSING: Any = _Missing()


class FrozenInstanceError(BcdError, AttributeError):
    """Assigning to, or deleting, a field of a frozen record (a fault of the code, never of the input)."""


class Field:
    """One field of a record: its name, and its default or default factory (``MISSING`` when none)."""

    __slots__ = ("name", "default", "default_factory")

    def __init__(self, name: str, default: Any = MISSING, default_factory: Any = MISSING) -> None:
        self.name = name
        self.default = default
        self.default_factory = default_factory

    def __repr__(self) -> str:
        return "Field(%r)" % self.name


@overload
def field(*, default: _V) -> _V: ...


@overload
def field(*, default_factory: Callable[[], _V]) -> _V: ...


def field(*, default: Any = MISSING, default_factory: Any = MISSING) -> Any:
    """A field's default (``default``) or the factory of a new one for each record (``default_factory``)."""
    if default is not MISSING and default_factory is not MISSING:
        raise ValueError("a field has a default or a default factory, not both")
    # Made through the module's namespace, not by name: pylint (ansible-test's sanity) follows a call to its
    # result, so it would read every ``items: List[int] = field(default_factory=list)`` of a record as the Field
    # (it knows ``dataclasses.field``, not this one) and flag ``items.append(...)`` or ``first, second =
    # record.items``. A lookup it cannot follow leaves the field typed by its annotation.
    made: Type[Field] = globals()["Field"]
    return made("", default, default_factory)


def _is_classvar(annotation: Any) -> bool:
    if isinstance(annotation, str):
        return annotation.startswith(_CLASSVAR)
    return getattr(annotation, "__origin__", None) is ClassVar


def _own_fields(cls: type) -> List[Field]:
    """The fields ``cls``'s own body declares; defaults are left on the class as dataclasses leaves them."""
    found = []
    for name, annotation in cls.__dict__.get("__annotations__", {}).items():
        if _is_classvar(annotation):
            continue
        default = cls.__dict__.get(name, MISSING)
        factory: Any = MISSING
        if isinstance(default, Field):
            factory = default.default_factory
            default = default.default
        if isinstance(default, _MUTABLE):  # shared by every record: refused, as dataclasses refuses it
            raise ValueError("mutable default %s for field %s is not allowed: use default_factory"
                             % (type(default), name))
        if default is MISSING and name in cls.__dict__:
            delattr(cls, name)
        elif default is not MISSING:
            setattr(cls, name, default)
        found.append(Field(name, default, factory))
    return found


def _all_fields(cls: type) -> Tuple[Field, ...]:
    by_name: Dict[str, Field] = {}
    for base in reversed(cls.__mro__[1:]):
        for item in base.__dict__.get(_FIELDS, ()):
            by_name[item.name] = item
    for item in _own_fields(cls):  # one a base declared keeps its place, as in dataclasses
        by_name[item.name] = item
    return tuple(by_name.values())


def _init_source(items: Tuple[Field, ...], frozen: bool) -> Tuple[str, Dict[str, Any]]:
    """The ``__init__`` of a record with these fields, and the names its code reads."""
    names: Dict[str, Any] = {"_MISSING": MISSING, "_setattr": object.__setattr__}
    params = []
    body = []
    seen_default = False
    for item in items:
        if item.default is not MISSING:
            names["_d_" + item.name] = item.default
            params.append("%s=_d_%s" % (item.name, item.name))
            value = item.name
            seen_default = True
        elif item.default_factory is not MISSING:
            names["_f_" + item.name] = item.default_factory
            params.append("%s=_MISSING" % item.name)
            value = "_f_%s() if %s is _MISSING else %s" % (item.name, item.name, item.name)
            seen_default = True
        else:
            if seen_default:
                raise TypeError("non-default argument %r follows default argument" % item.name)
            params.append(item.name)
            value = item.name
        if frozen:
            body.append("    _setattr(self, %r, %s)" % (item.name, value))
        else:
            body.append("    self.%s = %s" % (item.name, value))
    source = "def __init__(self%s):\n%s\n" % ("".join(", " + param for param in params), "\n".join(body) or "    pass")
    return source, names


def _compiled(source: str, names: Dict[str, Any], qualname: str) -> Callable[..., None]:
    """The ``__init__`` that ``source`` defines over ``names``, named ``qualname`` (as Python's own messages name it)."""
    exec(source, names)  # pylint: disable=exec-used
    init: Callable[..., None] = names["__init__"]
    init.__qualname__ = qualname
    return init


def _init(cls: type, items: Tuple[Field, ...], frozen: bool) -> Callable[..., None]:
    """The record's ``__init__``, compiled when the first record of the class is made; its source is built now,
    so a field order ``__init__`` cannot take is refused when the class is declared."""
    source, names = _init_source(items, frozen)
    qualname = cls.__qualname__ + ".__init__"
    return speed.on_first_call(cls, "__init__", lambda: _compiled(source, names, qualname))


def _shared_methods(values: Callable[[Any], Tuple[Any, ...]]) -> Tuple[Callable[..., Any], ...]:
    """``__eq__``, ``__hash__`` and ``__repr__`` over ``values``, a getter of a record's fields as a tuple."""
    def __eq__(self: Any, other: Any) -> Any:
        if other.__class__ is self.__class__:
            return values(self) == values(other)
        return NotImplemented

    def __hash__(self: Any) -> int:
        return hash(values(self))

    def __repr__(self: Any) -> str:
        own: Tuple[Field, ...] = getattr(self.__class__, _FIELDS)
        return "%s(%s)" % (self.__class__.__qualname__,
                           ", ".join("%s=%r" % (item.name, getattr(self, item.name)) for item in own))

    return __eq__, __hash__, __repr__


def _frozen_setattr(self: Any, name: str, value: Any) -> None:
    raise FrozenInstanceError("cannot assign to field %r" % name)


def _frozen_delattr(self: Any, name: str) -> None:
    raise FrozenInstanceError("cannot delete field %r" % name)


def _fields_getter(items: Tuple[Field, ...]) -> Callable[[Any], Tuple[Any, ...]]:
    if not items:
        return lambda _record: ()
    if len(items) == 1:
        single = attrgetter(items[0].name)
        return lambda record: (single(record),)
    getter: Callable[[Any], Tuple[Any, ...]] = attrgetter(*(item.name for item in items))
    return getter


def _set_new(cls: type, name: str, value: Any) -> None:
    if name not in cls.__dict__:
        setattr(cls, name, value)


def _process(cls: _C, frozen: bool, eq: bool) -> _C:
    items = _all_fields(cls)
    setattr(cls, _FIELDS, items)
    _set_new(cls, "__init__", _init(cls, items, frozen))
    equal, hashed, shown = _shared_methods(_fields_getter(items))
    _set_new(cls, "__repr__", shown)
    if eq:
        _set_new(cls, "__eq__", equal)
        if "__hash__" not in cls.__dict__ or cls.__dict__["__hash__"] is None:
            # None makes a mutable record unhashable, as dataclasses does; typeshed has __hash__ a method only
            cls.__hash__ = hashed if frozen else None  # type: ignore[method-assign,assignment]
    if frozen:
        for name, method in (("__setattr__", _frozen_setattr), ("__delattr__", _frozen_delattr)):
            if name in cls.__dict__:
                raise TypeError("cannot overwrite %s in frozen record %s" % (name, cls.__name__))
            setattr(cls, name, method)
    return cls


@overload
def record(cls: _C, *, frozen: bool = False, eq: bool = True) -> _C: ...


@overload
def record(cls: None = None, *, frozen: bool = False, eq: bool = True) -> Callable[[_C], _C]: ...


@dataclass_transform(field_specifiers=(field,))
def record(cls: Optional[_C] = None, *, frozen: bool = False, eq: bool = True) -> Union[_C, Callable[[_C], _C]]:
    """The class as a record: ``@record``, ``@record(frozen=True)``, ``@record(frozen=True, eq=False)``."""
    def wrap(klass: _C) -> _C:
        return _process(klass, frozen, eq)

    return wrap if cls is None else wrap(cls)


def fields(value: Any) -> Tuple[Field, ...]:
    """A record's (or record class's) fields, in order."""
    klass = value if isinstance(value, type) else type(value)
    try:
        found: Tuple[Field, ...] = klass.__dict__[_FIELDS]
    except KeyError:
        raise TypeError("%s is not a record" % klass.__name__) from None
    return found


def is_record(value: Any) -> bool:
    """Whether ``value`` is a record or a record class."""
    klass = value if isinstance(value, type) else type(value)
    return _FIELDS in klass.__dict__


def replace(value: _R, **changes: Any) -> _R:
    """A new record of the same class, its fields ``value``'s except those named in ``changes``."""
    items = fields(value)
    names = set(item.name for item in items)
    unknown = sorted(set(changes) - names)
    if unknown:
        raise TypeError("%s has no field %s" % (type(value).__name__, ", ".join(unknown)))
    for item in items:
        if item.name not in changes:
            changes[item.name] = getattr(value, item.name)
    return type(value)(**changes)


_ATOMIC = (str, int, float, bool, type(None), bytes)


def asdict(value: Any, dict_factory: Callable[..., Any] = dict) -> Any:
    """A record as a dict, recursing into records, lists, tuples and dicts as ``dataclasses.asdict`` does."""
    if not is_record(value) or isinstance(value, type):
        raise TypeError("asdict() should be called on record instances")
    return _asdict(value, dict_factory)


def _asdict(value: Any, dict_factory: Callable[..., Any]) -> Any:
    if isinstance(value, _ATOMIC):
        return value
    if is_record(value) and not isinstance(value, type):
        return dict_factory([(item.name, _asdict(getattr(value, item.name), dict_factory)) for item in fields(value)])
    if isinstance(value, tuple) and hasattr(value, "_fields"):
        return type(value)(*[_asdict(item, dict_factory) for item in value])
    if isinstance(value, (list, tuple)):
        return type(value)(_asdict(item, dict_factory) for item in value)
    if isinstance(value, dict):
        return type(value)((_asdict(key, dict_factory), _asdict(item, dict_factory)) for key, item in value.items())
    return copy.deepcopy(value)
