# -*- coding: utf-8 -*-
# Copyright: contributors to bcd.devices
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""The input: one ``DeviceAssignment`` as it arrives over the network, checked field by field.

Every field is hostile until proven otherwise. ``parse_assignment`` turns one raw
entry into an ``Assignment`` or raises ``InvalidAssignment`` (an ``invalid-assignment``
refusal) with a message that names the field; the hold request the root helper is
sent is read back by the same checks (``parse_hold_request``). The devices section
as a whole (its size, its count of entries and atoms, the split into assignments
and refusals) is ``section.py``'s; every bound on the input is here, together.
Nothing here touches the host; an allocation id that passes can safely name a
file or a slice.

A refusal is journaled as an ``AllocationFailed`` event, which a gateway hands on
only if it fits the events' grammar (``domain/event_grammar.py``: no curly
bracket, no control character, an allocation id or ``devices[N]``). So a
message says each pattern in words, quotes a value it was sent only through
``support.text.quoted`` (printable ASCII, curly brackets and backslashes
escaped, cut short), and an entry without a valid allocation id is refused
under its position in the section, ``devices[N]``.
"""

from __future__ import annotations

from typing import Any, Dict, Iterator, List, Optional, Protocol, Sequence, Tuple, Union

from ansible_collections.bcd.devices.plugins.module_utils.domain.input.env_policy import (
    ENV_KEY_RE,
    ENV_KEY_SAID,
    check_env_allowed,
    check_env_key,
    check_env_value,
)
from ansible_collections.bcd.devices.plugins.module_utils.domain.input.refusals import Reason, Refusal
from ansible_collections.bcd.devices.plugins.module_utils.support.errors import BcdError, type_name
from ansible_collections.bcd.devices.plugins.module_utils.support.records import field, record
from ansible_collections.bcd.devices.plugins.module_utils.support.speed import lazy_pattern
from ansible_collections.bcd.devices.plugins.module_utils.support.text import quoted

# An allocation id names files and a slice: the one pattern every such name is built from.
ALLOCATION_ID = r"[A-Za-z0-9_]{1,80}"
ALLOCATION_ID_RE = lazy_pattern(r"^%s$" % ALLOCATION_ID)
# ALLOCATION_ID in words: a refusal is journaled, and no event may hold a curly bracket (domain/event_grammar.py)
ALLOCATION_ID_SAID = "1 to 80 letters, digits and underscores"
CPULIST_RE = lazy_pattern(r"^[0-9]+(-[0-9]+)?(,[0-9]+(-[0-9]+)?)*$")
CPULIST_MAX = 1024
DECIMAL_RE = lazy_pattern(r"^[0-9]{1,20}$")  # int64's decimal string, bounded before int() reads it
# The kernel's own ceilings (NR_CPUS and MAX_NUMNODES at their largest): a number beyond them names
# nothing on any host, and bounding them keeps every cpulist a few thousand numbers at most.
MAX_CPU = 8191
MAX_NODE = 1023
MAX_INTEGER = (1 << 63) - 1  # int64, as the control plane's protobuf carries every number
MAX_ENV_LINES = 256
_TEXT_CONTROL_RE = lazy_pattern("[\x00-\x1f\x7f]")  # C0 and DEL: a text field's refused characters, found at C speed
TEXT_MAX = 256
# Honoured per pass: a devices section is one node's, and every hold costs a spec, an env file, perhaps a
# slice, and a journal write. 512 is every part of the largest node its own hold (16 GPUs of 32 slots or
# VFs each); at 1024 the worst section's bind cost 1.1 s of CPU, over the bound below (issue 22).
MAX_ASSIGNMENTS = 512
# Entries beyond MAX_ASSIGNMENTS are refused one by one (so the section still reports and the rest
# converge); a list longer than this is not a node's section at all and fails the task, read no further.
MAX_LISTED = 2 * MAX_ASSIGNMENTS
MAX_DEVICES = 1024  # atoms of one assignment
# Bounds on the whole section, so that the largest one a pass accepts costs it at most about a second
# and 100 MB (hack/bench.py measures it: `make bench`, "worst accepted"). Each bound alone would allow
# 1024 assignments of 1024 atoms, which cost 0.2.0 96 s and 1.55 GB a pass, every pass of the timers.
# - Atoms: at most 4096 in the section (a pass's cost grows with the atoms it plans; 32 768 took 127 MB).
#   A node has at most about 16 GPUs, each a whole GPU, up to 7 MIG instances or a few dozen slots:
#   4096 is 256 atoms for each of 16 GPUs. An assignment whose devices would take the section past
#   it is refused (invalid-assignment, saying so), and the ones after it are still read.
# - Bytes: at most 4 MiB, counted by a walk of the raw section before anything else reads it, as an
#   upper bound of its JSON written indented (section.py's section_size), so above the compact JSON the stored input
#   is (node/state_files.py). A real node's
#   section is a few KiB; 512 assignments of 8 atoms and a long env line each are 4 MiB. A larger
#   section fails the pass, and is read no further. Both stay far under what the state files' reader
#   takes back (node/state_files.py: 8 MiB and 524 288 values for nodespec.json).
MAX_ATOMS = 4096
MAX_SECTION_BYTES = 4 * 1024 * 1024
MAX_SECTION_DEPTH = 16  # a section nests 5 levels (devices[].devices[].id)

BINDING_HOLD = "BINDING_HOLD"
BINDING_UNSPECIFIED = "BINDING_UNSPECIFIED"
BINDING_KUBERNETES = "BINDING_KUBERNETES"
BINDINGS = (BINDING_HOLD, BINDING_KUBERNETES)  # the bindings bcd takes; any other is unsupported-binding

LIMIT_LISTS = ("cpus", "mems")
LIMIT_NUMBERS = ("cpu_millis", "memory_bytes", "hugepages_2mi", "hugepages_1gi")
# The fields of a DeviceAssignment and of its devices (the spec page's table): any other key is a typo
# or a field bcd does not know, and is refused rather than silently read as absent. ``instance_id`` is
# known and not read (the spec page: GPUs for VMs arrive in the ``instances`` section; the binding that
# carries it, BINDING_INSTANCE, is unsupported-binding).
ASSIGNMENT_FIELDS = ("allocation_id", "reservation_id", "binding", "devices", "limits", "env")
UNREAD_FIELDS = ("instance_id",)
DEVICE_FIELDS = ("id", "device_class")

# Which env keys a hold may set, and which values: domain/input/env_policy.py (docs/security.md, "The env policy").


class InvalidAssignment(BcdError):
    """An assignment that cannot be honoured as given; the message names the field, ``reason`` is the
    ``AllocationFailed`` reason it is refused with."""

    reason = Reason.INVALID_ASSIGNMENT


class UnsupportedBinding(InvalidAssignment):
    """An assignment whose binding bcd does not take (``binding BINDING_INSTANCE is not supported``)."""

    reason = Reason.UNSUPPORTED_BINDING


def unsupported_binding(binding: str) -> str:
    """The spec's ``unsupported-binding`` message; proto3's zero value (what a missing or empty binding
    reads as) is said to be missing, not named by a word the user never wrote."""
    if binding == BINDING_UNSPECIFIED:
        return "binding is missing"
    return "binding %s is not supported" % quoted(binding, quote="")


def check_binding(raw: Dict[Any, Any]) -> str:
    """The binding of a raw assignment, checked before anything else of it (the spec page's order:
    binding, then the rest): proto3 leaves out the zero value, so a missing or empty binding is
    BINDING_UNSPECIFIED, refused with the other bindings bcd does not take, never guessed to be a plain hold."""
    binding = _text(raw.get("binding"), "binding", maximum=64) or BINDING_UNSPECIFIED
    if binding not in BINDINGS:
        raise UnsupportedBinding(unsupported_binding(binding))
    return binding


@record(frozen=True)
class DeviceRef:
    """One atom as the control plane booked it: an id and a device class."""

    id: str
    device_class: str = "gpu"


@record(frozen=True)
class Limits:
    """Host resources booked with the devices. ``None`` means not booked."""

    cpus: Optional[str] = None
    mems: Optional[str] = None
    cpu_millis: Optional[int] = None
    memory_bytes: Optional[int] = None
    hugepages_2mi: Optional[int] = None
    hugepages_1gi: Optional[int] = None

    def is_empty(self) -> bool:
        """Whether nothing is booked: every limit unset."""
        return all(getattr(self, name) is None for name in LIMIT_LISTS + LIMIT_NUMBERS)


@record(frozen=True)
class Assignment:
    """A checked ``DeviceAssignment``."""

    allocation_id: str
    reservation_id: str = ""
    binding: str = BINDING_UNSPECIFIED
    devices: Tuple[DeviceRef, ...] = ()
    limits: Optional[Limits] = None
    env: Tuple[str, ...] = ()

    @property
    def kubernetes(self) -> bool:
        """Whether Kubernetes holds it (``BINDING_KUBERNETES``), not a plain hold."""
        return self.binding == BINDING_KUBERNETES


@record
class ParsedInput:
    """The devices section as a pass reads it (``section.parse_assignments``): the assignments it honours and
    the entries it refuses, in the section's order."""

    assignments: List[Assignment] = field(default_factory=list)
    refusals: List[Refusal] = field(default_factory=list)
    # Allocation ids of refused entries that are still valid names: a live hold
    # of that name is kept, never dropped because its new input was bad.
    refused_ids: List[str] = field(default_factory=list)
    # Every entry's key (allocation id, or ``devices[N]``) in input order, for reporting in spec order.
    order: List[str] = field(default_factory=list)
    # What the pass read otherwise than written: a limit given as its zero value, which is unset.
    warnings: List[str] = field(default_factory=list)

    def position(self, key: str) -> int:
        """Where ``key`` stands in the section (after every entry when it is not one)."""
        return self.order.index(key) if key in self.order else len(self.order)


def _text(value: object, where: str, required: bool = False, maximum: int = TEXT_MAX) -> str:
    """A text field: a string of at most ``maximum`` characters and no control character; ``""`` when it is
    absent or empty (``InvalidAssignment`` then when it is ``required``)."""
    if value is None or value == "":
        if required:
            raise InvalidAssignment("%s: required" % where)
        return ""
    if not isinstance(value, str):
        raise InvalidAssignment("%s: must be a string, not %s" % (where, type_name(value)))
    if len(value) > maximum:
        raise InvalidAssignment("%s: longer than %d characters" % (where, maximum))
    if _TEXT_CONTROL_RE.search(value):
        raise InvalidAssignment("%s: contains a control character" % where)
    return value


def _number(value: object, where: str, strings: bool = False) -> Optional[int]:
    """A non-negative int64. With ``strings``, also its decimal string: proto3's JSON mapping writes
    int64 fields as strings (``"memory_bytes": "4294967296"``)."""
    if value is None:
        return None
    if strings and isinstance(value, str):
        if not DECIMAL_RE.fullmatch(value):
            raise InvalidAssignment("%s: %s is not a non-negative integer or its decimal string"
                                    % (where, quoted(value)))
        value = int(value)
    if isinstance(value, bool) or not isinstance(value, int) or value < 0:
        raise InvalidAssignment("%s: must be a non-negative integer" % where)
    if value > MAX_INTEGER:
        raise InvalidAssignment("%s: larger than %d" % (where, MAX_INTEGER))
    return value


def check_cpulist(value: object, where: str, highest: int = MAX_CPU, what: str = "CPU") -> Optional[str]:
    """A cpulist such as ``0-3,8,10-11`` of at most 1024 characters, ranges ascending, no number above
    ``highest`` (a CPU id by default; ``check_nodelist`` for NUMA nodes)."""
    if value is None:
        return None
    if not isinstance(value, str):
        raise InvalidAssignment("%s: must be a cpulist string such as 0-3,8" % where)
    if len(value) > CPULIST_MAX:
        raise InvalidAssignment("%s: cpulist longer than %d characters" % (where, CPULIST_MAX))
    if not CPULIST_RE.fullmatch(value):
        raise InvalidAssignment("%s: %s is not a cpulist such as 0-3,8" % (where, quoted(value)))
    for part in value.split(","):
        low, _sep, high = part.partition("-")
        for number in (low, high or low):
            if int(number) > highest:
                shown = number if len(number) <= 20 else "%s... (%d digits)" % (number[:12], len(number))
                raise InvalidAssignment("%s: %s %s is beyond %d, the most any host has"
                                        % (where, what, shown, highest))
        if int(low) > int(high or low):
            raise InvalidAssignment("%s: range %s runs backwards" % (where, part))
    return value


def check_nodelist(value: object, where: str) -> Optional[str]:
    """A cpulist of NUMA nodes (``mems``)."""
    return check_cpulist(value, where, MAX_NODE, "NUMA node")


def check_fields(raw: Dict[Any, Any], known: Sequence[str], where: str) -> None:
    """Refuse a key of the mapping ``raw`` that is not in ``known``: ``<where>.<key>: unknown field``,
    with the nearest known field when one is close (a typo), else the known ones."""
    unknown = sorted((key for key in raw if key not in known), key=str)
    if not unknown:
        return
    key = unknown[0]
    shown = quoted(key, quote="", limit=64)
    prefix = "%s.%s" % (where, shown) if where else shown
    import difflib  # pylint: disable=import-outside-toplevel  # a refusal's suggestion only: no pass imports it
    nearest = difflib.get_close_matches(key, known, n=1, cutoff=0.6) if isinstance(key, str) and len(key) <= 64 else []
    if nearest:
        raise InvalidAssignment("%s: unknown field; did you mean %s?" % (prefix, nearest[0]))
    raise InvalidAssignment("%s: unknown field (known: %s)" % (prefix, ", ".join(known)))


def parse_limits(raw: object) -> Optional[Limits]:
    """Checked ``Limits`` from raw input (None when they book nothing); ``InvalidAssignment`` names the field."""
    if raw is None:
        return None
    if not isinstance(raw, dict):
        raise InvalidAssignment("limits: must be a mapping")
    check_fields(raw, LIMIT_LISTS + LIMIT_NUMBERS, "limits")
    # checked in the order of LIMIT_LISTS + LIMIT_NUMBERS (keyword arguments are evaluated in order)
    limits = Limits(cpus=check_cpulist(_cpulist_text(raw.get("cpus")), "limits.cpus"),
                    mems=check_nodelist(_cpulist_text(raw.get("mems")), "limits.mems"),
                    cpu_millis=_limit_number(raw, "cpu_millis"), memory_bytes=_limit_number(raw, "memory_bytes"),
                    hugepages_2mi=_limit_number(raw, "hugepages_2mi"), hugepages_1gi=_limit_number(raw, "hugepages_1gi"))
    return None if limits.is_empty() else limits


def _limit_number(raw: Dict[Any, Any], name: str) -> Optional[int]:
    """The number limit ``name`` of raw ``limits``: proto3 sends a field left unset as 0, as it sends an unset
    cpulist as "": both mean no limit (a MemoryMax=0 or a CPUQuota of 0 % would kill or starve the workload
    the hold is for), so None."""
    return _number(raw.get(name), "limits.%s" % name, strings=True) or None


def _cpulist_text(value: object) -> object:
    """A cpulist as text: an integer is the one CPU or node it names (YAML reads ``cpus: 3`` as a number,
    and ``0`` is CPU 0, not unset); an empty string is unset (proto3's zero value), so None."""
    if isinstance(value, int) and not isinstance(value, bool):
        return str(value)
    return None if value == "" else value


def unset_limits(raw: object) -> List[str]:
    """The fields of raw ``limits`` given as proto3's zero value, which reads as unset: ``0`` (or ``"0"``) for a
    number, ``""`` for a cpulist. Each is dropped, and the pass warns about it (``ParsedInput.warnings``)."""
    if not isinstance(raw, dict):
        return []
    return [name for name in LIMIT_LISTS if raw.get(name) == ""] + [
        name for name in LIMIT_NUMBERS if not isinstance(raw.get(name), bool) and raw.get(name) in (0, "0")]


def _env_pairs(raw: Union[List[Any], Dict[Any, Any]]) -> Iterator[Tuple[str, str, str]]:
    """``(where, key, value)`` of each env entry: a list of ``KEY=VALUE`` strings, or a mapping."""
    if isinstance(raw, dict):
        for index, (key, value) in enumerate(raw.items()):
            where = "env[%d]" % index
            if not isinstance(key, str) or not ENV_KEY_RE.fullmatch(key):
                raise InvalidAssignment("%s: key %s is not an env key (%s)" % (where, quoted(key), ENV_KEY_SAID))
            if isinstance(value, bool) or not isinstance(value, (str, int, float)):  # YAML reads THREADS: 4 as a number
                raise InvalidAssignment("%s: the value of %s must be a string or a number, not %s"
                                        % (where, key, type_name(value)))
            yield where, key, str(value)
        return
    for index, line in enumerate(raw):
        where = "env[%d]" % index
        if not isinstance(line, str):
            raise InvalidAssignment("%s: must be a KEY=VALUE string" % where)
        key, sep, value = line.partition("=")
        if not sep or not ENV_KEY_RE.fullmatch(key):
            raise InvalidAssignment("%s: %s is not KEY=VALUE with KEY %s" % (where, quoted(line), ENV_KEY_SAID))
        yield where, key, value


def _env(raw: object, env_allow: Optional[Tuple[str, ...]] = None) -> Tuple[str, ...]:
    """The env lines, each checked by the env policy (``domain/input/env_policy.py``): a key it allows (and,
    with the operator's ``env_allow``, one that lists), a value that is one line of text."""
    if raw is None:
        return ()
    if not isinstance(raw, (list, dict)):
        raise InvalidAssignment("env: must be a list of KEY=VALUE strings")
    if len(raw) > MAX_ENV_LINES:
        raise InvalidAssignment("env: more than %d lines" % MAX_ENV_LINES)
    lines: List[str] = []
    for where, key, value in _env_pairs(raw):
        if len(key) + 1 + len(value) > 4096:
            raise InvalidAssignment("%s: longer than 4096 characters" % where)
        why = check_env_key(key) or check_env_allowed(key, env_allow) or check_env_value(key, value)
        if why:
            raise InvalidAssignment("%s: %s" % (where, why))
        lines.append("%s=%s" % (key, value))
    return tuple(lines)


def _devices(raw: object) -> Tuple[DeviceRef, ...]:
    """The devices of an assignment: a list of at least one and at most ``MAX_DEVICES`` mappings of an id and a
    device class (``gpu`` when absent)."""
    if not isinstance(raw, list):
        raise InvalidAssignment("devices: must be a list of devices, each a mapping with id and device_class")
    if not raw:
        raise InvalidAssignment("devices: at least one device is required")
    if len(raw) > MAX_DEVICES:
        raise InvalidAssignment("devices: more than %d devices" % MAX_DEVICES)
    refs: List[DeviceRef] = []
    for index, item in enumerate(raw):
        where = "devices[%d]" % index
        if not isinstance(item, dict):
            raise InvalidAssignment("%s: must be a mapping with id and device_class" % where)
        check_fields(item, DEVICE_FIELDS, where)
        device_id = _text(item.get("id"), where + ".id", required=True)
        device_class = _text(item.get("device_class"), where + ".device_class") or "gpu"
        refs.append(DeviceRef(id=device_id, device_class=device_class))
    return tuple(refs)


def parse_assignment(raw: object, index: int = 0, env_allow: Optional[Tuple[str, ...]] = None) -> Assignment:
    """Check one raw assignment; raise ``InvalidAssignment`` naming the field. ``env_allow``: the
    operator's allowlist of env keys (``env_policy.parse_env_allow``), None for none."""
    if not isinstance(raw, dict):
        raise InvalidAssignment("devices[%d]: an assignment must be a mapping" % index)
    binding = check_binding(raw)
    check_fields(dict((key, value) for key, value in raw.items() if key not in UNREAD_FIELDS), ASSIGNMENT_FIELDS, "")
    allocation_id = raw.get("allocation_id")
    if not isinstance(allocation_id, str) or not is_allocation_id(allocation_id):
        raise InvalidAssignment("allocation_id: %s is not an allocation id (%s)" % (quoted(allocation_id), ALLOCATION_ID_SAID))
    return Assignment(
        allocation_id=allocation_id,
        reservation_id=_text(raw.get("reservation_id"), "reservation_id"),
        binding=binding,
        devices=_devices(raw.get("devices")),
        limits=parse_limits(raw.get("limits")),
        env=_env(raw.get("env"), env_allow),
    )


def limits_record(limits: Optional[Limits]) -> Optional[Dict[str, Union[str, int]]]:
    """Limits as plain data (what the ledger records with a hold, and the helper is sent)."""
    if limits is None:
        return None
    return dict((key, value) for key, value in vars(limits).items() if value is not None)


HOLD_FIELDS = ("allocation_id", "reservation_id", "generation", "binding", "devices", "limits", "env", "runtimes")


class NamedRuntime(Protocol):
    """What a hold request says of a container runtime (``domain/cdi/runtimes.Runtime``): its name and
    version; the root helper maps them to CDI versions by its own table."""

    @property
    def name(self) -> str: ...

    @property
    def version(self) -> str: ...


def hold_request(assignment: Assignment, generation: int, runtimes: Sequence[NamedRuntime] = ()) -> Dict[str, Any]:
    """A hold as the unprivileged side sends it to the root helper: data only (the checked assignment, the
    generation its files carry and the node's runtimes by name and version), from which root renders the
    files itself (and maps the runtimes to CDI versions by its own table)."""
    return {"allocation_id": assignment.allocation_id, "reservation_id": assignment.reservation_id,
            "generation": generation, "binding": assignment.binding,
            "devices": [{"id": ref.id, "device_class": ref.device_class} for ref in assignment.devices],
            "limits": limits_record(assignment.limits), "env": list(assignment.env),
            "runtimes": [{"name": r.name, "version": r.version} for r in runtimes]}


def parse_hold_request(data: object) -> Tuple[Assignment, int]:
    """``(assignment, generation)`` from a ``hold_request``, checked by the rules network input is;
    ``InvalidAssignment`` names the field (an unknown one included)."""
    if not isinstance(data, dict):
        raise InvalidAssignment("hold: must be a mapping, not %s" % type_name(data))
    unknown = sorted(str(key) for key in data if key not in HOLD_FIELDS)
    if unknown:
        raise InvalidAssignment("hold.%s: unknown field" % quoted(unknown[0], quote="", limit=64))
    generation = _number(data.get("generation"), "generation")
    if generation is None:
        raise InvalidAssignment("generation: required")
    return (parse_assignment(dict((key, value) for key, value in data.items() if key not in ("generation", "runtimes"))),
            generation)


def is_allocation_id(value: object) -> bool:
    """Whether ``value`` is an allocation id (``ALLOCATION_ID``): its length bounded before the pattern reads it."""
    return isinstance(value, str) and len(value) <= 80 and ALLOCATION_ID_RE.fullmatch(value) is not None
