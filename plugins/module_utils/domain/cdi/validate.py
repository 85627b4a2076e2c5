# -*- coding: utf-8 -*-
# Copyright: contributors to bcd.devices
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""Check a CDI spec before it is written, the way container runtimes will read it.

A runtime that finds one bad file in ``/etc/cdi`` rejects that whole file, so a
hold whose spec breaks a rule silently grants nothing. ``validate_spec`` lists
every problem a runtime (or the official JSON schema) would find in a spec
given as a plain dict, so the converger can refuse instead of writing it.

It checks, with the standard library only (the node has no ``jsonschema``):

* what the official schema (``schema/schema.json`` + ``defs.json`` of
  cncf-tags/container-device-interface, spec 1.1.0) checks: required fields and
  the JSON types of every field; ``null`` is refused wherever the schema wants a
  string, array or object;
* unknown fields, which the schema lets through but runtimes do not (the
  reference library parses with ``UnmarshalStrict``);
* the reference library's rules: ``kind`` as ``vendor/class``, device names,
  at least one device, at least one edit per device, env entries ``KEY=VALUE``,
  hook names, device node types and permissions, annotation keys as Kubernetes
  qualified names, duplicate device names and net devices, and the version
  rule (``cdiVersion`` must be a known version, not below what the content
  needs: see ``minimum_version``).

Runtimes carry different releases of the library, and an old one refuses a
version it does not know (CDI library 0.8.0, as in Podman 5.4, refuses
``1.0.0``); writing the lowest version the content allows is the caller's job.
"""

from __future__ import annotations

import functools
from typing import Any, Dict, List, Optional, Tuple

from ansible_collections.bcd.devices.plugins.module_utils.support.errors import BcdError, type_name
from ansible_collections.bcd.devices.plugins.module_utils.support.patterns import lazy_pattern

__all__ = [
    "CdiVersionError",
    "EARLIEST_VERSION",
    "HOOK_NAMES",
    "KNOWN_VERSIONS",
    "minimum_version",
    "validate_spec",
    "version_key",
]

# The versions the reference library (spec 1.1.0) knows. 0.1.0 and 0.2.0 are
# still "known", but every spec needs at least EARLIEST_VERSION.
KNOWN_VERSIONS = (
    "0.1.0", "0.2.0", "0.3.0", "0.4.0", "0.5.0", "0.6.0", "0.7.0", "0.8.0",
    "1.0.0", "1.1.0",
)
EARLIEST_VERSION = "0.3.0"

HOOK_NAMES = frozenset((
    "prestart", "createRuntime", "createContainer", "startContainer",
    "poststart", "poststop",
))

_UINT32_MAX = 4294967295
_INT64_MAX = 9223372036854775807
_ANNOTATIONS_MAX_BYTES = 256 * 1024  # Kubernetes' TotalAnnotationSizeLimitB

_VERSION_RE = lazy_pattern(r"v?(0|[1-9][0-9]*)\.(0|[1-9][0-9]*)\.(0|[1-9][0-9]*)")
_VENDOR_CLASS_RE = lazy_pattern(r"[A-Za-z](?:[A-Za-z0-9_.-]*[A-Za-z0-9])?")
_DEVICE_NAME_RE = lazy_pattern(r"[A-Za-z0-9](?:[A-Za-z0-9_.:-]*[A-Za-z0-9])?")
_QUALIFIED_NAME_RE = lazy_pattern(r"(?:[A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9]")
_DNS1123_SUBDOMAIN_RE = lazy_pattern(
    r"[a-z0-9](?:[-a-z0-9]*[a-z0-9])?(?:\.[a-z0-9](?:[-a-z0-9]*[a-z0-9])?)*"
)

_SPEC_FIELDS = ("cdiVersion", "kind", "annotations", "devices", "containerEdits")
_DEVICE_FIELDS = ("name", "annotations", "containerEdits")
_EDIT_FIELDS = (
    "env", "deviceNodes", "hooks", "mounts", "intelRdt", "additionalGids",
    "netDevices",
)
_DEVICE_NODE_FIELDS = (
    "path", "hostPath", "type", "major", "minor", "fileMode", "permissions",
    "uid", "gid",
)
_DEVICE_NODE_TYPES = ("", "b", "c", "u", "p")
_MOUNT_FIELDS = ("hostPath", "containerPath", "options", "type")
_HOOK_FIELDS = ("hookName", "path", "args", "env", "timeout")
_NET_DEVICE_FIELDS = ("hostInterfaceName", "name")
# enableCMT and enableMBM exist only before 1.1.0; schemata and enableMonitoring
# only from 1.1.0 on (the library checks both ways).
_INTEL_RDT_FIELDS = (
    "closID", "l3CacheSchema", "memBwSchema", "schemata", "enableMonitoring",
    "enableCMT", "enableMBM",
)


class CdiVersionError(BcdError, ValueError):
    """A CDI version string is not of the form ``X.Y.Z`` (an optional leading
    ``v`` is allowed, as the reference library allows it)."""


def version_key(version: Any) -> Tuple[int, int, int]:
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


def _is_known_version(version: Any) -> bool:
    try:
        key = version_key(version)
    except CdiVersionError:
        return False
    return key in _KNOWN_KEYS


_KNOWN_KEYS = frozenset(version_key(v) for v in KNOWN_VERSIONS)


# --- minimum version --------------------------------------------------------


def _as_dict(value: Any) -> Dict[str, Any]:
    return value if isinstance(value, dict) else {}


def _as_list(value: Any) -> List[Any]:
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


def _requirements(spec: Any) -> List[Tuple[str, str]]:
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


def minimum_version(spec: Any) -> str:
    """The lowest ``cdiVersion`` the content of ``spec`` allows under the CDI
    library's rules: 0.3.0 at least; 0.4.0 for ``mounts[].type``; 0.5.0 for a
    device name starting with a digit or any ``deviceNodes[].hostPath``; 0.6.0
    for annotations or a ``.`` in the class part of ``kind``; 0.7.0 for
    ``additionalGids`` or ``intelRdt``; 1.1.0 for ``netDevices`` (and
    ``intelRdt.schemata``/``enableMonitoring``). Parts that are malformed are
    ignored here (``validate_spec`` reports them)."""
    return _highest(_requirements(spec))


def _highest(requirements: List[Tuple[str, str]]) -> str:
    best = EARLIEST_VERSION
    for version, _reason in requirements:
        if version_key(version) > version_key(best):
            best = version
    return best


def requirements_above(spec: Any, version: str) -> List[Tuple[str, str]]:
    """The ``(version, reason)`` requirements of ``spec``'s content newer than ``version``,
    newest first: what a runtime whose library loads at most ``version`` would refuse."""
    limit = version_key(version)
    found = [item for item in _requirements(spec) if version_key(item[0]) > limit]
    return sorted(found, key=lambda item: version_key(item[0]), reverse=True)


# --- validation -------------------------------------------------------------


class _Checker:
    """Collects problems; each check names the JSON path it looked at."""

    def __init__(self, version_key_or_none: Optional[Tuple[int, int, int]]) -> None:
        self.problems: List[str] = []
        self.version = version_key_or_none

    def add(self, path: str, message: str) -> None:
        self.problems.append("%s: %s" % (path, message) if path else message)

    # types

    def string(self, path: str, value: Any, required: bool = False) -> bool:
        if isinstance(value, str):
            if required and value == "":
                self.add(path, "must not be empty")
                return False
            return True
        self.add(path, "must be a string, not %s" % type_name(value))
        return False

    def boolean(self, path: str, value: Any) -> None:
        if not isinstance(value, bool):
            self.add(path, "must be a boolean, not %s" % type_name(value))

    def integer(self, path: str, value: Any, low: int, high: int) -> None:
        if isinstance(value, bool) or not isinstance(value, int):
            self.add(path, "must be an integer, not %s" % type_name(value))
        elif value < low or value > high:
            self.add(path, "%d is out of range (%d to %d)" % (value, low, high))

    def array(self, path: str, value: Any) -> bool:
        if isinstance(value, list):
            return True
        self.add(path, "must be an array, not %s" % type_name(value))
        return False

    def obj(self, path: str, value: Any, fields: Tuple[str, ...]) -> bool:
        if not isinstance(value, dict):
            self.add(path, "must be an object, not %s" % type_name(value))
            return False
        for key in value:
            if key not in fields:
                self.add(
                    _join(path, str(key)),
                    "unknown field (runtimes refuse the whole file; known: %s)"
                    % ", ".join(fields),
                )
        return True

    def strings(self, path: str, value: Any) -> None:
        if self.array(path, value):
            for idx, item in enumerate(value):
                self.string("%s[%d]" % (path, idx), item)

    def env(self, path: str, value: Any) -> None:
        if not self.array(path, value):
            return
        for idx, item in enumerate(value):
            item_path = "%s[%d]" % (path, idx)
            if self.string(item_path, item) and item.find("=") <= 0:
                self.add(item_path, "%r is not KEY=VALUE (needs '=' after a non-empty name)" % item)

    # CDI parts

    def annotations(self, path: str, value: Any) -> None:
        if not isinstance(value, dict):
            self.add(path, "must be an object, not %s" % type_name(value))
            return
        size = 0
        for key, val in value.items():
            key_path = "%s[%r]" % (path, key)
            if not isinstance(key, str):
                self.add(key_path, "annotation keys must be strings")
                continue
            for msg in _qualified_name_problems(key):
                self.add(key_path, msg)
            if self.string(key_path, val):
                # surrogatepass: a lone surrogate (JSON's "\ud800") is counted, and left to the writer to refuse
                size += len(key.encode("utf-8", "surrogatepass")) + len(val.encode("utf-8", "surrogatepass"))
        if size > _ANNOTATIONS_MAX_BYTES:
            self.add(path, "annotations total %d bytes, more than %d" % (size, _ANNOTATIONS_MAX_BYTES))

    def edits(self, path: str, value: Any, device: bool) -> None:
        if not self.obj(path, value, _EDIT_FIELDS):
            return
        if "env" in value:
            self.env(_join(path, "env"), value["env"])
        if "deviceNodes" in value:
            self.items(_join(path, "deviceNodes"), value["deviceNodes"], self.device_node)
        if "mounts" in value:
            self.items(_join(path, "mounts"), value["mounts"], self.mount)
        if "hooks" in value:
            self.items(_join(path, "hooks"), value["hooks"], self.hook)
        if "intelRdt" in value:
            self.intel_rdt(_join(path, "intelRdt"), value["intelRdt"])
        if "additionalGids" in value:
            gids_path = _join(path, "additionalGids")
            if self.array(gids_path, value["additionalGids"]):
                for idx, gid in enumerate(value["additionalGids"]):
                    self.integer("%s[%d]" % (gids_path, idx), gid, 0, _UINT32_MAX)
        if "netDevices" in value:
            self.net_devices(_join(path, "netDevices"), value["netDevices"])
        if device and not _has_an_edit(value):
            self.add(
                path,
                "a device needs at least one edit (env, deviceNodes, mounts, hooks, "
                "additionalGids, intelRdt or netDevices); runtimes refuse "
                "'empty device edits'",
            )

    def items(self, path: str, value: Any, check: Any) -> None:
        if self.array(path, value):
            for idx, item in enumerate(value):
                check("%s[%d]" % (path, idx), item)

    def device_node(self, path: str, node: Any) -> None:
        if not self.obj(path, node, _DEVICE_NODE_FIELDS):
            return
        if "path" not in node:
            self.add(path, "missing required field 'path'")
        else:
            self.string(_join(path, "path"), node["path"], required=True)
        for key in ("hostPath", "permissions", "type"):
            if key in node:
                self.string(_join(path, key), node[key])
        dev_type = node.get("type")
        if isinstance(dev_type, str) and dev_type not in _DEVICE_NODE_TYPES:
            self.add(_join(path, "type"), "%r is not a device type (b, c, u or p)" % dev_type)
        perms = node.get("permissions")
        if isinstance(perms, str) and perms.strip("rwm") != "":
            self.add(_join(path, "permissions"), "%r may hold only r, w and m" % perms)
        for key in ("major", "minor"):
            if key in node:
                # The schema allows int64; the library refuses negative numbers.
                self.integer(_join(path, key), node[key], 0, _INT64_MAX)
        for key in ("uid", "gid", "fileMode"):
            if key in node:
                self.integer(_join(path, key), node[key], 0, _UINT32_MAX)

    def mount(self, path: str, mount: Any) -> None:
        if not self.obj(path, mount, _MOUNT_FIELDS):
            return
        for key in ("hostPath", "containerPath"):
            if key not in mount:
                self.add(path, "missing required field %r" % key)
            else:
                self.string(_join(path, key), mount[key], required=True)
        if "options" in mount:
            self.strings(_join(path, "options"), mount["options"])
        if "type" in mount:
            self.string(_join(path, "type"), mount["type"])

    def hook(self, path: str, hook: Any) -> None:
        if not self.obj(path, hook, _HOOK_FIELDS):
            return
        if "hookName" not in hook:
            self.add(path, "missing required field 'hookName'")
        elif self.string(_join(path, "hookName"), hook["hookName"]):
            if hook["hookName"] not in HOOK_NAMES:
                self.add(
                    _join(path, "hookName"),
                    "%r is not a hook name (%s)" % (hook["hookName"], ", ".join(sorted(HOOK_NAMES))),
                )
        if "path" not in hook:
            self.add(path, "missing required field 'path'")
        else:
            self.string(_join(path, "path"), hook["path"], required=True)
        if "args" in hook:
            self.strings(_join(path, "args"), hook["args"])
        if "env" in hook:
            self.env(_join(path, "env"), hook["env"])
        if "timeout" in hook:
            self.integer(_join(path, "timeout"), hook["timeout"], 0, _UINT32_MAX)

    def intel_rdt(self, path: str, rdt: Any) -> None:
        if not self.obj(path, rdt, _INTEL_RDT_FIELDS):
            return
        if "closID" in rdt and self.string(_join(path, "closID"), rdt["closID"]):
            clos = rdt["closID"]
            if clos != "/" and (len(clos) >= 4096 or clos in (".", "..") or "/" in clos or "\n" in clos):
                self.add(_join(path, "closID"), "%r is not a valid file name" % clos)
        for key in ("l3CacheSchema", "memBwSchema"):
            if key in rdt:
                self.string(_join(path, key), rdt[key])
        if "schemata" in rdt:
            self.strings(_join(path, "schemata"), rdt["schemata"])
        for key in ("enableMonitoring", "enableCMT", "enableMBM"):
            if key in rdt:
                self.boolean(_join(path, key), rdt[key])
        if self.version is not None:
            v110 = (1, 1, 0)
            for key in ("enableCMT", "enableMBM"):
                if key in rdt and self.version >= v110:
                    self.add(_join(path, key), "is not valid from cdiVersion 1.1.0 on")
            # A set schemata or enableMonitoring: true raise the minimum version
            # (reported on cdiVersion); the field's mere presence needs 1.1.0 too.
            if rdt.get("enableMonitoring") is False and self.version < v110:
                self.add(_join(path, "enableMonitoring"), "requires cdiVersion 1.1.0 or later")

    def net_devices(self, path: str, value: Any) -> None:
        if not self.array(path, value):
            return
        if not value and self.version is not None and self.version < (1, 1, 0):
            # A non-empty list raises the minimum version (reported on
            # cdiVersion); even an empty one is refused before 1.1.0.
            self.add(path, "requires cdiVersion 1.1.0 or later, even when empty")
        hosts: Dict[str, int] = {}
        names: Dict[str, int] = {}
        for idx, dev in enumerate(value):
            dev_path = "%s[%d]" % (path, idx)
            if not self.obj(dev_path, dev, _NET_DEVICE_FIELDS):
                continue
            for key, seen in (("hostInterfaceName", hosts), ("name", names)):
                if key not in dev:
                    self.add(dev_path, "missing required field %r" % key)
                elif self.string(_join(dev_path, key), dev[key], required=True):
                    if dev[key] in seen:
                        self.add(
                            _join(dev_path, key),
                            "%r is already used by %s[%d]" % (dev[key], path, seen[dev[key]]),
                        )
                    else:
                        seen[dev[key]] = idx


def _join(path: str, key: str) -> str:
    return "%s.%s" % (path, key) if path else key


def _has_an_edit(edits: Dict[str, Any]) -> bool:
    for key in ("env", "deviceNodes", "hooks", "mounts", "additionalGids", "netDevices"):
        if isinstance(edits.get(key), list) and edits[key]:
            return True
    return edits.get("intelRdt") is not None


def _qualified_name_problems(key: str) -> List[str]:
    """Kubernetes' IsQualifiedName, applied (as the library does) to the
    lower-cased key."""
    key = key.lower()
    parts = key.split("/")
    if len(parts) == 1:
        name = parts[0]
        problems: List[str] = []
    elif len(parts) == 2:
        prefix, name = parts
        problems = []
        if not prefix:
            problems.append("the prefix before '/' must not be empty")
        elif len(prefix) > 253:
            problems.append("the prefix must be at most 253 characters")
        elif not _DNS1123_SUBDOMAIN_RE.fullmatch(prefix):
            problems.append("the prefix %r must be a DNS subdomain (a-z, 0-9, '-', '.')" % prefix)
    else:
        return ["a qualified name has at most one '/'"]
    if not name:
        problems.append("the name part must not be empty")
    elif len(name) > 63:
        problems.append("the name part must be at most 63 characters")
    elif not _QUALIFIED_NAME_RE.fullmatch(name):
        problems.append(
            "the name part %r may hold only letters, digits, '-', '_' and '.', "
            "and must start and end with a letter or digit" % name
        )
    return problems


def validate_spec(spec: Any) -> List[str]:
    """Every problem that would make a runtime (or the official CDI schema)
    refuse ``spec``, one message each, naming the JSON path; an empty list
    means the spec is valid."""
    if not isinstance(spec, dict):
        return ["the spec must be an object, not %s" % type_name(spec)]

    version = spec.get("cdiVersion")
    version_ok = isinstance(version, str) and _is_known_version(version)
    checker = _Checker(version_key(version) if version_ok else None)
    checker.obj("", spec, _SPEC_FIELDS)

    if "cdiVersion" not in spec:
        checker.add("", "missing required field 'cdiVersion'")
    elif checker.string("cdiVersion", version):
        if not version_ok:
            checker.add(
                "cdiVersion",
                "%r is not a known CDI version (%s)" % (version, ", ".join(KNOWN_VERSIONS[2:])),
            )
        else:
            reqs = _requirements(spec)
            need = _highest(reqs)
            if version_key(need) > version_key(version):
                why = [reason for ver, reason in reqs if ver == need]
                checker.add(
                    "cdiVersion",
                    "%s is below %s, the minimum this content requires (%s)"
                    % (version, need, "; ".join(why) or "the floor"),
                )

    if "kind" not in spec:
        checker.add("", "missing required field 'kind'")
    elif checker.string("kind", spec["kind"]):
        kind = spec["kind"]
        vendor, sep, klass = kind.partition("/")
        if not sep or not vendor or not klass:
            checker.add("kind", "%r is not of the form vendor/class" % kind)
        else:
            for part, text in (("vendor", vendor), ("class", klass)):
                if len(text) < 2:
                    # The library checks the characters between the first and
                    # the last; a one-character name breaks that check.
                    checker.add("kind", "%s %r must be at least 2 characters long" % (part, text))
            if not _VENDOR_CLASS_RE.fullmatch(vendor):
                checker.add(
                    "kind",
                    "vendor %r must start with a letter, end with a letter or digit, "
                    "and hold only letters, digits, '_', '-' and '.'" % vendor,
                )
            if not _VENDOR_CLASS_RE.fullmatch(klass):
                checker.add(
                    "kind",
                    "class %r must start with a letter, end with a letter or digit, "
                    "and hold only letters, digits, '_', '-' and '.'" % klass,
                )

    if "annotations" in spec:
        checker.annotations("annotations", spec["annotations"])

    if "containerEdits" in spec:
        checker.edits("containerEdits", spec["containerEdits"], device=False)

    if "devices" not in spec:
        checker.add("", "missing required field 'devices'")
    elif checker.array("devices", spec["devices"]):
        devices = spec["devices"]
        if not devices:
            checker.add("devices", "a spec needs at least one device")
        seen: Dict[str, int] = {}
        for idx, device in enumerate(devices):
            path = "devices[%d]" % idx
            if not checker.obj(path, device, _DEVICE_FIELDS):
                continue
            if "name" not in device:
                checker.add(path, "missing required field 'name'")
            elif checker.string(_join(path, "name"), device["name"]):
                name = device["name"]
                if not _DEVICE_NAME_RE.fullmatch(name):
                    checker.add(
                        _join(path, "name"),
                        "%r is not a CDI device name (letters, digits, '_', '-', '.', ':'; "
                        "starting and ending with a letter or digit; no '/')" % name,
                    )
                if name in seen:
                    checker.add(
                        _join(path, "name"),
                        "%r is already the name of devices[%d]" % (name, seen[name]),
                    )
                else:
                    seen[name] = idx
            if "annotations" in device:
                checker.annotations(_join(path, "annotations"), device["annotations"])
            if "containerEdits" not in device:
                checker.add(path, "missing required field 'containerEdits'")
            else:
                checker.edits(_join(path, "containerEdits"), device["containerEdits"], device=True)

    return checker.problems
