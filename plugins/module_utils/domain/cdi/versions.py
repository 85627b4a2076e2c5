# -*- coding: utf-8 -*-
# Copyright: contributors to bcd.devices
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""CDI versions: those the reference library knows, how two compare, and the lowest one a spec's content
allows.

Each release of the CDI specification added fields, and the reference library refuses a spec whose
``cdiVersion`` is below what its content uses (``requiresV040`` ... ``requiresV110``): ``requirements`` lists
what raises it, ``minimum_version`` gives the lowest version that allows it all. ``validate_spec``
(``domain/cdi/validate.py``) holds a spec's ``cdiVersion`` to it; ``render_spec`` (``domain/cdi/hold_spec.py``)
writes it.
"""

from __future__ import annotations

import functools
from typing import Any, Dict, List, Tuple

from ansible_collections.bcd.devices.plugins.module_utils.support.errors import BcdError
from ansible_collections.bcd.devices.plugins.module_utils.support.speed import lazy_pattern

# The versions the reference library (spec 1.1.0) knows. 0.1.0 and 0.2.0 are
# still "known", but every spec needs at least EARLIEST_VERSION.
KNOWN_VERSIONS = (
    "0.1.0", "0.2.0", "0.3.0", "0.4.0", "0.5.0", "0.6.0", "0.7.0", "0.8.0",
    "1.0.0", "1.1.0",
)
EARLIEST_VERSION = "0.3.0"

_VERSION_RE = lazy_pattern(r"v?(0|[1-9][0-9]*)\.(0|[1-9][0-9]*)\.(0|[1-9][0-9]*)")


class CdiVersionError(BcdError, ValueError):
    """A CDI version string is not of the form ``X.Y.Z`` (an optional leading
    ``v`` is allowed, as the reference library allows it)."""


def version_key(version: object) -> Tuple[int, int, int]:
    """Return ``(major, minor, patch)`` of a CDI version such as ``"0.6.0"``,
    for comparing versions. Raises ``CdiVersionError`` for anything else."""
    if not isinstance(version, str):
        raise CdiVersionError("CDI version %r is not a string" % (version,))
    return _parsed_version(version)


@functools.lru_cache(maxsize=64)  # a pass compares the same few versions thousands of times
def _parsed_version(version: str) -> Tuple[int, int, int]:
    match = _VERSION_RE.fullmatch(version)
    if match is None:
        raise CdiVersionError("%r is not a CDI version (X.Y.Z)" % (version,))
    return (int(match.group(1)), int(match.group(2)), int(match.group(3)))


def is_known_version(version: object) -> bool:
    """Whether ``version`` is one of ``KNOWN_VERSIONS`` (a leading ``v`` allowed)."""
    try:
        key = version_key(version)
    except CdiVersionError:
        return False
    return key in _KNOWN_KEYS


_KNOWN_KEYS = frozenset(version_key(v) for v in KNOWN_VERSIONS)


# --- the minimum version of a spec's content -------------------------------


def _as_dict(value: object) -> Dict[str, Any]:
    return value if isinstance(value, dict) else {}


def _as_list(value: object) -> List[Any]:
    return value if isinstance(value, list) else []


def _all_edits(spec: Dict[str, Any]) -> List[Tuple[str, Dict[str, Any]]]:
    """(path, containerEdits) for the spec and each device, skipping
    whatever is not a mapping."""
    out = [("containerEdits", _as_dict(spec.get("containerEdits")))]
    for idx, device in enumerate(_as_list(spec.get("devices"))):
        out.append((
            "devices[%d].containerEdits" % idx,
            _as_dict(_as_dict(device).get("containerEdits")),
        ))
    return out


def requirements(spec: object) -> List[Tuple[str, str]]:
    """Every (version, reason) the content of ``spec`` requires, in the order
    found. Mirrors ``requiresV040`` ... ``requiresV110`` of the library."""
    spec = _as_dict(spec)
    found: List[Tuple[str, str]] = []
    edits = _all_edits(spec)

    for path, edit in edits:
        for idx, mount in enumerate(_as_list(edit.get("mounts"))):
            if _as_dict(mount).get("type"):
                found.append(("0.4.0", "%s.mounts[%d].type" % (path, idx)))

    for device in _as_list(spec.get("devices")):
        name = _as_dict(device).get("name")
        if isinstance(name, str) and name[:1].isdigit() and name[:1].isascii():
            found.append(("0.5.0", "device name %r starts with a digit" % name))
    for path, edit in edits:
        for idx, node in enumerate(_as_list(edit.get("deviceNodes"))):
            if _as_dict(node).get("hostPath"):
                found.append(("0.5.0", "%s.deviceNodes[%d].hostPath" % (path, idx)))

    if _as_dict(spec.get("annotations")):
        found.append(("0.6.0", "annotations"))
    for idx, device in enumerate(_as_list(spec.get("devices"))):
        if _as_dict(_as_dict(device).get("annotations")):
            found.append(("0.6.0", "devices[%d].annotations" % idx))
    kind = spec.get("kind")
    if isinstance(kind, str) and "/" in kind and "." in kind.split("/", 1)[1]:
        found.append(("0.6.0", "a '.' in the class part of kind %r" % kind))

    for path, edit in edits:
        if edit.get("intelRdt") is not None:
            found.append(("0.7.0", "%s.intelRdt" % path))
        if _as_list(edit.get("additionalGids")):
            found.append(("0.7.0", "%s.additionalGids" % path))

    for path, edit in edits:
        if _as_list(edit.get("netDevices")):
            found.append(("1.1.0", "%s.netDevices" % path))
        rdt = edit.get("intelRdt")
        if isinstance(rdt, dict):
            if rdt.get("schemata") is not None:
                found.append(("1.1.0", "%s.intelRdt.schemata" % path))
            if rdt.get("enableMonitoring") is True:
                found.append(("1.1.0", "%s.intelRdt.enableMonitoring" % path))
    return found


def minimum_version(spec: object) -> str:
    """The lowest ``cdiVersion`` the content of ``spec`` allows under the CDI
    library's rules: 0.3.0 at least; 0.4.0 for ``mounts[].type``; 0.5.0 for a
    device name starting with a digit or any ``deviceNodes[].hostPath``; 0.6.0
    for annotations or a ``.`` in the class part of ``kind``; 0.7.0 for
    ``additionalGids`` or ``intelRdt``; 1.1.0 for ``netDevices`` (and
    ``intelRdt.schemata``/``enableMonitoring``). Parts that are malformed are
    ignored here (``validate_spec`` reports them)."""
    return highest(requirements(spec))


def highest(found: List[Tuple[str, str]]) -> str:
    """The newest version of ``found`` (``requirements``), ``EARLIEST_VERSION`` at least."""
    best = EARLIEST_VERSION
    for version, _reason in found:
        if version_key(version) > version_key(best):
            best = version
    return best


def requirements_above(spec: object, version: str) -> List[Tuple[str, str]]:
    """The ``(version, reason)`` requirements of ``spec``'s content newer than ``version``,
    newest first: what a runtime whose library loads at most ``version`` would refuse."""
    limit = version_key(version)
    found = [item for item in requirements(spec) if version_key(item[0]) > limit]
    return sorted(found, key=lambda item: version_key(item[0]), reverse=True)
