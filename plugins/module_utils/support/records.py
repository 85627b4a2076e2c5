# -*- coding: utf-8 -*-
# Copyright: contributors to bcd.devices
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""Records: the plain data classes the converger is made of, built cheaply at import.

``dataclasses.dataclass`` compiles five or six generated methods per class with ``exec`` when a
module is imported (``__init__``, ``__repr__``, ``__eq__``, ``__hash__``, a frozen class's
``__setattr__`` and ``__delattr__``). Every module run imports the converger afresh on the node,
and its 59 classes cost 22 ms of the 60 a no-op of 16 holds took there: more than the pass.

``record`` is a strict subset of ``dataclasses.dataclass``: every record must behave identically
when the decorator is swapped for ``dataclasses.dataclass`` (with ``field`` for
``dataclasses.field``), and ``tests/unit/plugins/module_utils/support/test_records.py`` makes each
record class of module_utils a dataclass and compares them. It compiles one method, the ``__init__``
(its speed matters: a pass makes thousands of records of a few classes), once a process has made
``COMPILE_AFTER`` records of the class; the ones before are made by a shared ``__init__`` that takes the
same arguments. Comparison, hashing, ``repr`` and freezing are shared functions over the class's fields,
read with one C-level ``operator.attrgetter``. What it keeps of dataclasses, and nothing more:

- fields are the class's annotations in order, a base record's first; ``ClassVar`` ones are not
  fields; a field without a default comes before those with one;
- a default is a value; a list, dict or set default is refused (``ValueError``, as dataclasses
  refuses it): ``field(default_factory=list)`` makes one for each record;
- ``eq=True``: equal when of the same class with equal fields; a mutable record is unhashable, a
  frozen one hashes its fields; ``eq=False`` keeps identity;
- ``frozen=True``: setting or deleting an attribute raises ``FrozenInstanceError``;
- a method the class body defines itself is kept.

``replace``, ``fields`` and ``asdict`` are the dataclasses functions of the same names, for records.
(Type checkers read ``record`` as a dataclass through ``dataclass_transform``.) What it saves is
measured on every supported Python in docs/performance.md ("Records and dataclasses; JSON").
"""

from __future__ import annotations

import copy
import sys
from operator import attrgetter
from typing import TYPE_CHECKING, Any, Callable, ClassVar, Dict, Tuple

from ansible_collections.bcd.devices.plugins.module_utils.support.errors import BcdError

if TYPE_CHECKING:  # pragma: no cover - type checkers only; never imported at run time
    from typing_extensions import dataclass_transform
else:
    def dataclass_transform(**_kwargs):
        return lambda function: function

_FIELDS = "__record_fields__"
_CLASSVAR = ("ClassVar", "typing.ClassVar", "t.ClassVar")
_MUTABLE = (list, dict, set)
# The record of a class a process makes with its compiled ``__init__`` (the ones before, with the shared one):
# compiling costs about 0.1 ms a class, the shared ``__init__`` about 1 us a record more than the compiled
# one, and a 16-hold no-op makes 354 records of 23 classes, all but one fewer than 32 times (it compiled 22
# ``__init__``, 2.5 ms of the pass), a 256-hold bind 4 917 of 26 (docs/performance.md, "Records and dataclasses").
COMPILE_AFTER = 32


class _Missing:
    """No default."""

    def __repr__(self):
        return "MISSING"


MISSING: Any = _Missing()


class FrozenInstanceError(BcdError, AttributeError):
    """Assigning to, or deleting, a field of a frozen record (a fault of the code, never of the input)."""


class Field:
    """One field of a record: its name, and its default or default factory (``MISSING`` when none)."""

    __slots__ = ("name", "default", "default_factory")

    def __init__(self, name, default=MISSING, default_factory=MISSING):
        self.name = name
        self.default = default
        self.default_factory = default_factory

    def __repr__(self):
        return "Field(%r)" % self.name


def field(*, default: Any = MISSING, default_factory: Any = MISSING) -> Any:
    """A field's default (``default``) or the factory of a new one for each record (``default_factory``)."""
    if default is not MISSING and default_factory is not MISSING:
        raise ValueError("a field has a default or a default factory, not both")
    # Made through the module's namespace, not by name: pylint (ansible-test's sanity) follows a call to
    # its result, so it would read every ``items: List[int] = field(default_factory=list)`` of a record as
    # the Field object (it knows ``dataclasses.field``, not this one) and flag ``items.append(...)`` or
    # ``first, second = record.items``. A lookup it cannot follow leaves the field typed by its annotation.
    made = vars(sys.modules[__name__])["Field"]
    return made(None, default, default_factory)


def _is_classvar(annotation):
    if isinstance(annotation, str):
        return annotation.startswith(_CLASSVAR)
    return getattr(annotation, "__origin__", None) is ClassVar


def _own_fields(cls):
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


def _all_fields(cls):
    by_name: Dict[str, Field] = {}
    for base in reversed(cls.__mro__[1:]):
        for item in base.__dict__.get(_FIELDS, ()):
            by_name[item.name] = item
    for item in _own_fields(cls):  # one a base declared keeps its place, as in dataclasses
        by_name[item.name] = item
    return tuple(by_name.values())


def _init_source(items, frozen):
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


def _bound(where, items, args, kwargs):
    """The values a call ``__init__(self, *args, **kwargs)`` gives the fields ``items``, in their order, refused
    as Python refuses that call of the compiled ``__init__``: a ``TypeError`` for an argument too many, given
    twice or unknown, or a field without a default that none gave."""
    if len(args) > len(items):
        raise TypeError("%s() takes %d positional arguments but %d were given" % (where, len(items) + 1, len(args) + 1))
    values = list(args)
    given = 0
    for item in items[len(args):]:
        if item.name in kwargs:
            values.append(kwargs[item.name])
            given += 1
        elif item.default is not MISSING:
            values.append(item.default)
        elif item.default_factory is not MISSING:
            values.append(item.default_factory())
        else:
            raise TypeError("%s() missing 1 required positional argument: %r" % (where, item.name))
    if given != len(kwargs):
        positional = [item.name for item in items[:len(args)]]
        for name in kwargs:
            if name in positional:
                raise TypeError("%s() got multiple values for argument %r" % (where, name))
            if name not in [item.name for item in items]:
                raise TypeError("%s() got an unexpected keyword argument %r" % (where, name))
    return values


def _deferred_init(cls, items, frozen):
    """The record's ``__init__``: for the first ``COMPILE_AFTER - 1`` records of the class a process makes,
    one that sets the fields from ``_bound``; then it compiles the record's own, puts it in its place and
    makes the record with it. A class a run makes few of (most of a no-op's) never compiles one. The source
    is built now, so a field order ``__init__`` cannot take is refused when the class is declared."""
    source, names = _init_source(items, frozen)
    where = cls.__qualname__ + ".__init__"
    order = tuple(item.name for item in items)
    setter = object.__setattr__ if frozen else setattr
    made = [0]

    def __init__(self, *args, **kwargs):
        made[0] += 1
        if made[0] < COMPILE_AFTER:
            for name, value in zip(order, _bound(where, items, args, kwargs)):
                setter(self, name, value)
            return
        exec(source, names)  # pylint: disable=exec-used
        compiled = names["__init__"]
        compiled.__qualname__ = where
        if cls.__dict__.get("__init__") is __init__:
            type.__setattr__(cls, "__init__", compiled)
        compiled(self, *args, **kwargs)

    return __init__


def _shared_methods(values):
    """``__eq__``, ``__hash__`` and ``__repr__`` over ``values``, a getter of a record's fields as a tuple."""
    def __eq__(self, other):
        if other.__class__ is self.__class__:
            return values(self) == values(other)
        return NotImplemented

    def __hash__(self):
        return hash(values(self))

    def __repr__(self):
        own = getattr(self.__class__, _FIELDS)
        return "%s(%s)" % (self.__class__.__qualname__,
                           ", ".join("%s=%r" % (item.name, getattr(self, item.name)) for item in own))

    return __eq__, __hash__, __repr__


def _frozen_setattr(self, name, value):
    raise FrozenInstanceError("cannot assign to field %r" % name)


def _frozen_delattr(self, name):
    raise FrozenInstanceError("cannot delete field %r" % name)


def _fields_getter(items):
    if not items:
        return lambda _record: ()
    if len(items) == 1:
        single = attrgetter(items[0].name)
        return lambda record: (single(record),)
    return attrgetter(*(item.name for item in items))


def _set_new(cls, name, value):
    if name not in cls.__dict__:
        setattr(cls, name, value)


def _process(cls, frozen, eq):
    items = _all_fields(cls)
    setattr(cls, _FIELDS, items)
    _set_new(cls, "__init__", _deferred_init(cls, items, frozen))
    equal, hashed, shown = _shared_methods(_fields_getter(items))
    _set_new(cls, "__repr__", shown)
    if eq:
        _set_new(cls, "__eq__", equal)
        if "__hash__" not in cls.__dict__ or cls.__dict__["__hash__"] is None:
            cls.__hash__ = hashed if frozen else None
    if frozen:
        for name, method in (("__setattr__", _frozen_setattr), ("__delattr__", _frozen_delattr)):
            if name in cls.__dict__:
                raise TypeError("cannot overwrite %s in frozen record %s" % (name, cls.__name__))
            setattr(cls, name, method)
    return cls


@dataclass_transform(field_specifiers=(field,))
def record(cls=None, *, frozen: bool = False, eq: bool = True) -> Any:
    """The class as a record: ``@record``, ``@record(frozen=True)``, ``@record(frozen=True, eq=False)``."""
    def wrap(klass):
        return _process(klass, frozen, eq)

    return wrap if cls is None else wrap(cls)


def fields(value) -> Tuple[Field, ...]:
    """A record's (or record class's) fields, in order."""
    klass = value if isinstance(value, type) else type(value)
    try:
        return klass.__dict__[_FIELDS]
    except KeyError:
        raise TypeError("%s is not a record" % klass.__name__) from None


def is_record(value) -> bool:
    """Whether ``value`` is a record or a record class."""
    klass = value if isinstance(value, type) else type(value)
    return _FIELDS in klass.__dict__


def replace(value, **changes):
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


def asdict(value, dict_factory: Callable[..., Any] = dict):
    """A record as a dict, recursing into records, lists, tuples and dicts as ``dataclasses.asdict`` does."""
    if not is_record(value) or isinstance(value, type):
        raise TypeError("asdict() should be called on record instances")
    return _asdict(value, dict_factory)


def _asdict(value, dict_factory):
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
