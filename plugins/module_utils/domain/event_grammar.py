# -*- coding: utf-8 -*-
# Copyright: contributors to bcd.devices
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""The grammar of every event a node journals: what each field may hold, and nothing else.

A gateway (the event source ``bcd.devices.gateway``) checks each event of a delivery here before anything else,
and hands on only what passes: an event's fields end up as the extra vars of a playbook run, which ansible-core
renders as templates, so no field may hold a template delimiter, whoever signed it. ``check_event(event)`` is
None for an event that fits, else one line naming the field and what is wrong with it (the line holds no curly
bracket and no control character of its own, so it can be shown anywhere).

What each field may hold (docs/events.md has the bodies per type):

==================  ====================================================================================
``seq``             an integer from 1 to 2^63-1
``type``            one of ``event_types.EVENT_TYPES``
``purpose``         ``attested-report``; with ``signature`` on every signed type, on none other
``signature``       base64 of 64 bytes (an Ed25519 signature)
``format``          2, with ``seal`` (a sealed event); both absent for an event of format 1
``seal``            base64 of 64 bytes
``body.node_id``    a host name: RFC 1123 labels joined by dots, at most 253 characters
``body.boot_id``    a UUID, or empty (a node that could not read one)
``body.type``       the event's own ``type`` (every type but a hold's three: conditions, recovery steps)
``allocation_id``   the collection's allocation id (``input/assignment.py``); on ``AllocationFailed`` also
                    ``devices[N]``, the position a refusal without a usable id is reported under
``generation``      an integer from 0 to 2^63-1
``device_ids``      atom ids (``input/atoms.py``: a GPU, ``<gpu>/gi<n>/ci<m>``, ``<gpu>/s<n>``) that can name
                    a CDI device, at most ``MAX_DEVICES``
``cdi_devices``     ``bcd.dev/gpu=<CDI name>``, at most ``MAX_DEVICES``
``cdi_spec_path``   ``/etc/cdi/bcd-<allocation id>.json``
``env_file``        ``/run/bcd/allocations/<allocation id>.env``
``cgroup_parent``   a hold's slice, ``bcd-alloc-<allocation id>.slice``
``reason``          a refusal reason (``input/refusals.py``) on ``AllocationFailed``; the condition's own
                    reason on a condition; ``ConditionCleared`` on a clearing; one of ``RECOVERY_REASONS``
                    on a step of a GPU's recovery; one of ``MIG_REASONS`` on a MIG layout change
``message``         at most ``MAX_MESSAGE`` printable characters (``str.isprintable``: no control, format or
                    separator character but the space), none of them a curly bracket
==================  ====================================================================================

A field the table does not list for the event's type is refused, and so is a missing one. The work per event
is bounded by its size: every length is checked before a pattern reads the text, and a mapping or list longer
than its type allows is refused before it is walked.
"""

from __future__ import annotations

import itertools
import json
import re
from typing import Any, Callable, Dict, Optional, Tuple

from ansible_collections.bcd.devices.plugins.module_utils.domain.cdi.hold_spec import ENV_DIR, KIND, SPEC_DIR, SPEC_PREFIX
from ansible_collections.bcd.devices.plugins.module_utils.domain.event_types import (
    ALLOCATION_BOUND,
    ALLOCATION_FAILED,
    ALLOCATION_RELEASED,
    CLEARED,
    CONDITION_CLEARED,
    CONDITION_EVENT_TYPES,
    CONDITION_TYPES,
    EVENT_TYPES,
    GPU_RECOVERY_STALLED,
    GPU_RESET_INEFFECTIVE,
    GPU_UNHEALTHY,
    HOLD_CHANGE_REFUSED,
    HOLD_SPEC_DAMAGED,
    KUBERNETES_RELEASE_STUCK,
    KUBERNETES_RELEASES_UNREADABLE,
    MIG_REASONS,
    RECOVERY_REASONS,
    SIGNED_TYPES,
    VENDOR_SPEC_STALE,
    VENDOR_SPEC_UNSUPPORTED,
)
from ansible_collections.bcd.devices.plugins.module_utils.domain.input.assignment import (
    ALLOCATION_ID,
    ALLOCATION_ID_RE,
    ALLOCATION_ID_SAID,
    MAX_DEVICES,
    MAX_INTEGER,
    TEXT_MAX,
)
from ansible_collections.bcd.devices.plugins.module_utils.domain.input.atoms import CDI_NAME_RE, CLASS_GPU, AtomRefused, atom_from_id
from ansible_collections.bcd.devices.plugins.module_utils.domain.input.refusals import REASONS
from ansible_collections.bcd.devices.plugins.module_utils.domain.slices import SLICE_NAME_RE
from ansible_collections.bcd.devices.plugins.module_utils.support.speed import LazyPattern, lazy_pattern

# What state/events.py writes (a test holds these equal to its PURPOSE and SEAL_FORMAT; the domain does not
# import the state layer).
ATTESTED_PURPOSE = "attested-report"
SEAL_FORMAT = 2

TOP_FIELDS = ("seq", "type", "body", "purpose", "signature", "format", "seal")

# The reason each condition is raised with (domain/health.py, cdi/staleness.py, plan/reports.py,
# kube_release.py; docs/events.md, "Conditions"); a clearing's is CONDITION_CLEARED, a recovery step's one of
# RECOVERY_REASONS. A condition type added to event_types.py without its reason here fails test_event_grammar,
# and the events of a type with no reason known are refused.
CONDITION_REASONS: Dict[str, str] = {
    GPU_UNHEALTHY: "GPUFaulted",
    VENDOR_SPEC_STALE: "NodeDiffersFromSpec",
    VENDOR_SPEC_UNSUPPORTED: "UnknownCdiVersion",
    KUBERNETES_RELEASE_STUCK: "PodsHoldDevices",
    KUBERNETES_RELEASES_UNREADABLE: "ReleasesFileUnreadable",
    HOLD_SPEC_DAMAGED: "SpecUnreadable",
    GPU_RESET_INEFFECTIVE: "ResetIneffective",
    GPU_RECOVERY_STALLED: "RecoveryStalled",
    HOLD_CHANGE_REFUSED: "KeptAsBound",
}

# A message lists what a refusal or a condition names (every missing device of a hold, every damaged spec):
# a pass's longest is a few hundred KB at the input's own bounds (1024 devices of 256 characters each).
MAX_MESSAGE = 1 << 20
MAX_NODE_ID = 253

_LABEL = r"[A-Za-z0-9]([A-Za-z0-9-]{0,61}[A-Za-z0-9])?"
NODE_ID_RE = lazy_pattern(r"^%s(\.%s)*$" % (_LABEL, _LABEL))
BOOT_ID_RE = lazy_pattern(r"^[0-9A-Fa-f]{8}-[0-9A-Fa-f]{4}-[0-9A-Fa-f]{4}-[0-9A-Fa-f]{4}-[0-9A-Fa-f]{12}$")
# parse_assignments reports an entry without a usable allocation id under its position in the section
REFUSAL_POSITION_RE = lazy_pattern(r"^devices\[(0|[1-9][0-9]{0,5})\]$")
SIGNATURE_RE = lazy_pattern(r"^[A-Za-z0-9+/]{86}==$")  # base64 of 64 bytes
CDI_SPEC_PATH_RE = lazy_pattern(r"^%s%s\.json$" % (re.escape(SPEC_DIR + "/" + SPEC_PREFIX), ALLOCATION_ID))
ENV_FILE_RE = lazy_pattern(r"^%s%s\.env$" % (re.escape(ENV_DIR + "/"), ALLOCATION_ID))
_MESSAGE_REFUSED_RE = lazy_pattern(r"[{}]")
_SHOWN = 60  # characters of a refused value quoted in a reason

_HOLD = ("node_id", "boot_id", "allocation_id", "generation", "device_ids")
_TYPED = ("type", "node_id", "boot_id", "generation", "device_ids", "reason", "message")


def _fields() -> Dict[str, Tuple[Tuple[str, ...], Tuple[str, ...]]]:
    """For each type: the body fields it must carry, and those it may. Every type event_types.py lists but the
    three of a hold names its type in its body (a condition, its clearing, a step of a GPU's recovery)."""
    fields: Dict[str, Tuple[Tuple[str, ...], Tuple[str, ...]]] = {
        ALLOCATION_BOUND: (_HOLD + ("cdi_devices", "cdi_spec_path", "env_file"), ("cgroup_parent",)),
        ALLOCATION_RELEASED: (_HOLD, ()),
        ALLOCATION_FAILED: (("node_id", "allocation_id", "generation", "reason", "message"), ()),
    }
    for kind in EVENT_TYPES:
        if kind not in fields:
            fields[kind] = (_TYPED, ("allocation_id",) if kind in CONDITION_EVENT_TYPES else ())
    return fields


BODY_FIELDS = _fields()


def shown(value: Any) -> str:
    """A refused value as a reason quotes it: JSON, ASCII only, at most ``_SHOWN`` characters, curly brackets
    escaped (so the reason itself holds none)."""
    try:
        text = json.dumps(value, ensure_ascii=True, allow_nan=False)
    except (TypeError, ValueError):
        text = type(value).__name__
    if len(text) > _SHOWN:
        text = text[:_SHOWN] + "..."
    return text.replace("{", "\\u007b").replace("}", "\\u007d")


def _is_int(value: Any, least: int) -> bool:
    return isinstance(value, int) and not isinstance(value, bool) and least <= value <= MAX_INTEGER


def node_id_error(value: Any) -> Optional[str]:
    if isinstance(value, str) and len(value) <= MAX_NODE_ID and NODE_ID_RE.fullmatch(value):
        return None
    return ("%s is not a host name (RFC 1123: labels of letters, digits and hyphens joined by dots, at most %d "
            "characters)" % (shown(value), MAX_NODE_ID))


def node_of(event: Any) -> Optional[str]:
    """The node an event's body names, when that is a host name; else None."""
    body = event.get("body") if isinstance(event, dict) else None
    node = body.get("node_id") if isinstance(body, dict) else None
    return node if node_id_error(node) is None else None


def _boot_id(value: Any, _kind: str) -> Optional[str]:
    if isinstance(value, str) and (value == "" or (len(value) == 36 and BOOT_ID_RE.fullmatch(value))):
        return None
    return "%s is not a boot id (a UUID, or empty)" % shown(value)


def _node_id(value: Any, _kind: str) -> Optional[str]:
    return node_id_error(value)


def _allocation_id(value: Any, kind: str) -> Optional[str]:
    if isinstance(value, str) and len(value) <= 80 and ALLOCATION_ID_RE.fullmatch(value):
        return None
    if kind == ALLOCATION_FAILED:
        if isinstance(value, str) and len(value) <= 16 and REFUSAL_POSITION_RE.fullmatch(value):
            return None
        return "%s is not an allocation id (%s) nor devices[N]" % (shown(value), ALLOCATION_ID_SAID)
    return "%s is not an allocation id (%s)" % (shown(value), ALLOCATION_ID_SAID)


def _generation(value: Any, _kind: str) -> Optional[str]:
    if _is_int(value, 0):
        return None
    return "must be an integer from 0 to %d, got %s" % (MAX_INTEGER, shown(value))


def device_id_error(value: Any) -> Optional[str]:
    """None for an atom id a hold can name (``input/atoms.py``), else why not."""
    why = "%s is not a device id (a GPU, <gpu>/gi<n>/ci<m> or <gpu>/s<n>, that can name a CDI device)" % shown(value)
    if not isinstance(value, str) or not value or len(value) > TEXT_MAX:
        return why
    try:
        atom = atom_from_id(value)
    except AtomRefused:
        return why
    if (atom.device_class == CLASS_GPU and "/" in value) or not CDI_NAME_RE.fullmatch(atom.cdi_name):
        return why
    return None


def _listed(value: Any, each: Callable[[Any], Optional[str]]) -> Optional[Tuple[str, str]]:
    """``(where, why)`` of the first bad item of a list (where is ``""`` for the list itself)."""
    if not isinstance(value, list):
        return "", "must be a list, got %s" % shown(value)
    if len(value) > MAX_DEVICES:
        return "", "lists %d items, more than %d" % (len(value), MAX_DEVICES)
    for index, item in enumerate(value):
        why = each(item)
        if why is not None:
            return "[%d]" % index, why
    return None


def cdi_device_error(value: Any) -> Optional[str]:
    prefix = KIND + "="
    if (isinstance(value, str) and value.startswith(prefix) and len(value) <= len(prefix) + TEXT_MAX
            and CDI_NAME_RE.fullmatch(value[len(prefix):])):
        return None
    return "%s is not a CDI device of this collection (%s<device id with / as _>)" % (shown(value), prefix)


def _path(pattern: LazyPattern, what: str) -> Callable[[Any, str], Optional[str]]:
    def check(value: Any, _kind: str) -> Optional[str]:
        if isinstance(value, str) and len(value) <= 200 and pattern.fullmatch(value):
            return None
        return "%s is not %s" % (shown(value), what)
    return check


def _cgroup_parent(value: Any, _kind: str) -> Optional[str]:
    if isinstance(value, str) and len(value) <= 120 and SLICE_NAME_RE.fullmatch(value):
        return None
    return "%s is not a hold's slice (bcd-alloc-<allocation id>.slice)" % shown(value)


def reasons_of(kind: str) -> Tuple[str, ...]:
    """The reasons an event of type ``kind`` may carry."""
    if kind == ALLOCATION_FAILED:
        return REASONS
    if kind in RECOVERY_REASONS:
        return tuple(RECOVERY_REASONS[kind])
    if kind in MIG_REASONS:
        return tuple(MIG_REASONS[kind])
    if kind in CONDITION_EVENT_TYPES:
        if kind.endswith(CLEARED) and kind[:-len(CLEARED)] in CONDITION_TYPES:
            return (CONDITION_CLEARED,)
        return (CONDITION_REASONS[kind],) if kind in CONDITION_REASONS else ()
    return ()


def _reason(value: Any, kind: str) -> Optional[str]:
    known = reasons_of(kind)
    if isinstance(value, str) and value in known:
        return None
    return "%s is not a reason of %s (%s)" % (shown(value), kind, ", ".join(known) or "none known")


def message_error(value: Any) -> Optional[str]:
    """None for text a message may be, else why not (naming the first refused character and where it is)."""
    if not isinstance(value, str):
        return "must be text, got %s" % shown(value)
    if len(value) > MAX_MESSAGE:
        return "is %d characters long, more than %d" % (len(value), MAX_MESSAGE)
    if value.isprintable() and not _MESSAGE_REFUSED_RE.search(value):
        return None
    for index, char in enumerate(value):
        if char in "{}" or not char.isprintable():
            return ("holds U+%04X at character %d; a message holds printable characters only, and no curly "
                    "bracket (a template delimiter)" % (ord(char), index + 1))
    return None  # not reached: one of the two tests above found a character


def _message(value: Any, _kind: str) -> Optional[str]:
    return message_error(value)


def _body_type(value: Any, kind: str) -> Optional[str]:
    if value == kind:
        return None
    return "must name the event's own type, %s, got %s" % (kind, shown(value))


_CHECKS: Dict[str, Callable[[Any, str], Optional[str]]] = {
    "node_id": _node_id,
    "boot_id": _boot_id,
    "allocation_id": _allocation_id,
    "generation": _generation,
    "cdi_spec_path": _path(CDI_SPEC_PATH_RE, "a hold's spec (%s/%s<allocation id>.json)" % (SPEC_DIR, SPEC_PREFIX)),
    "env_file": _path(ENV_FILE_RE, "a hold's env file (%s/<allocation id>.env)" % ENV_DIR),
    "cgroup_parent": _cgroup_parent,
    "reason": _reason,
    "message": _message,
    "type": _body_type,
}
_LISTS: Dict[str, Callable[[Any], Optional[str]]] = {"device_ids": device_id_error, "cdi_devices": cdi_device_error}


def _first_unknown(mapping: Dict[Any, Any], known: Tuple[str, ...]) -> Optional[Any]:
    """A key of ``mapping`` not in ``known``. Of ``len(known) + 1`` distinct keys one is unknown, so no more
    are looked at, however long the mapping."""
    for key in itertools.islice(mapping, len(known) + 1):
        if key not in known:
            return key
    return None


def _top(event: Dict[str, Any]) -> Optional[str]:
    unknown = _first_unknown(event, TOP_FIELDS)
    if unknown is not None:
        return "%s: unknown field (an event has %s)" % (shown(unknown), ", ".join(TOP_FIELDS))
    seq, kind = event.get("seq"), event.get("type")
    if not _is_int(seq, 1):
        return "seq: must be an integer from 1 to %d, got %s" % (MAX_INTEGER, shown(seq))
    if not isinstance(kind, str) or kind not in EVENT_TYPES:
        return "type: %s is not a type of event a node journals" % shown(kind)
    if not isinstance(event.get("body"), dict):
        return "body: must be a mapping, got %s" % shown(event.get("body"))
    if kind in SIGNED_TYPES:
        if event.get("purpose") != ATTESTED_PURPOSE:
            return "purpose: every %s carries %s, got %s" % (kind, ATTESTED_PURPOSE, shown(event.get("purpose")))
        if not isinstance(event.get("signature"), str) or not SIGNATURE_RE.fullmatch(event["signature"]):
            return "signature: must be the base64 of an Ed25519 signature (88 characters), got %s" % shown(event.get("signature"))
    else:
        for name in ("purpose", "signature"):
            if name in event:
                return "%s: %s carries none (it is not a signed type)" % (name, kind)
    if "format" in event or "seal" in event:
        if event.get("format") != SEAL_FORMAT or isinstance(event.get("format"), bool):
            return "format: must be %d (a sealed event), got %s" % (SEAL_FORMAT, shown(event.get("format")))
        if not isinstance(event.get("seal"), str) or not SIGNATURE_RE.fullmatch(event["seal"]):
            return "seal: must be the base64 of an Ed25519 signature (88 characters), got %s" % shown(event.get("seal"))
    return None


def check_event(event: Any) -> Optional[str]:
    """None when ``event`` fits the grammar of its type, else one line naming the first field that does not."""
    if not isinstance(event, dict):
        return "not an event: a mapping is expected, got %s" % shown(event)
    why = _top(event)
    if why is not None:
        return why
    kind, body = event["type"], event["body"]
    required, optional = BODY_FIELDS[kind]
    unknown = _first_unknown(body, required + optional)
    if unknown is not None:
        return "body.%s: unknown field for %s (its body has %s)" % (
            shown(unknown).strip('"'), kind, ", ".join(required + optional))
    for name in required:
        if name not in body:
            return "body.%s: missing (every %s carries it)" % (name, kind)
    for name in required + optional:
        if name not in body:
            continue
        if name in _LISTS:
            bad = _listed(body[name], _LISTS[name])
            if bad is not None:
                return "body.%s%s: %s" % (name, bad[0], bad[1])
            continue
        why = _CHECKS[name](body[name], kind)
        if why is not None:
            return "body.%s: %s" % (name, why)
    return None


def is_sealed_form(event: Dict[str, Any]) -> bool:
    """Whether an event that passed ``check_event`` is of format 2 (sealed); else it is of format 1."""
    return "seal" in event
