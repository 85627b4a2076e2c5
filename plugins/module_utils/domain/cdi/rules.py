# -*- coding: utf-8 -*-
# Copyright: contributors to bcd.devices
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""The rules of a CDI spec, field by field: what the official schema and the reference library hold each
part to. ``validate_spec`` (``domain/cdi/validate.py``) walks a spec and applies them.

A ``Checker`` collects the problems, each naming the JSON path it looked at, and checks the JSON types
(``null`` is refused wherever the schema wants a string, array or object; an unknown field is refused, as
the library parses with ``UnmarshalStrict``). The functions below are the rules of the parts: the ``kind``,
a device's name, annotations, and ``containerEdits`` with its device nodes, mounts, hooks, ``intelRdt``,
``additionalGids`` and ``netDevices``.
"""

from __future__ import annotations

from typing import Any, Callable, Dict, List, Optional, Tuple

from ansible_collections.bcd.devices.plugins.module_utils.support.errors import type_name
from ansible_collections.bcd.devices.plugins.module_utils.support.speed import lazy_pattern

HOOK_NAMES = frozenset((
    "prestart", "createRuntime", "createContainer", "startContainer",
    "poststart", "poststop",
))

_UINT32_MAX = 4294967295
_INT64_MAX = 9223372036854775807
_ANNOTATIONS_MAX_BYTES = 256 * 1024  # Kubernetes' TotalAnnotationSizeLimitB

_VENDOR_CLASS_RE = lazy_pattern(r"[A-Za-z](?:[A-Za-z0-9_.-]*[A-Za-z0-9])?")
_DEVICE_NAME_RE = lazy_pattern(r"[A-Za-z0-9](?:[A-Za-z0-9_.:-]*[A-Za-z0-9])?")
_QUALIFIED_NAME_RE = lazy_pattern(r"(?:[A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9]")
_DNS1123_SUBDOMAIN_RE = lazy_pattern(
    r"[a-z0-9](?:[-a-z0-9]*[a-z0-9])?(?:\.[a-z0-9](?:[-a-z0-9]*[a-z0-9])?)*"
)

SPEC_FIELDS = ("cdiVersion", "kind", "annotations", "devices", "containerEdits")
DEVICE_FIELDS = ("name", "annotations", "containerEdits")
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


class Checker:
    """Collects problems; each check names the JSON path it looked at. ``version`` is the spec's
    ``cdiVersion`` as ``version_key`` gives it, None when that is not a known version (the rules that
    depend on it are then left out: ``cdiVersion`` has its own problem)."""

    def __init__(self, version: Optional[Tuple[int, int, int]]) -> None:
        self.problems: List[str] = []
        self.version = version

    def add(self, path: str, message: str) -> None:
        self.problems.append("%s: %s" % (path, message) if path else message)

    # JSON types

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
                    join(path, str(key)),
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

    def items(self, path: str, value: Any, rule: Rule) -> None:
        if self.array(path, value):
            for idx, item in enumerate(value):
                rule(self, "%s[%d]" % (path, idx), item)


# A rule of one part: ``rule(checker, path, value)`` adds what is wrong with ``value`` at ``path``.
Rule = Callable[[Checker, str, Any], None]


def kind(check: Checker, value: str) -> None:
    """A spec's ``kind``, ``vendor/class``: each part 2 characters at least, starting with a letter, ending
    with a letter or digit, and holding only letters, digits, ``_``, ``-`` and ``.``."""
    vendor, sep, klass = value.partition("/")
    if not sep or not vendor or not klass:
        check.add("kind", "%r is not of the form vendor/class" % value)
        return
    for part, text in (("vendor", vendor), ("class", klass)):
        if len(text) < 2:
            # The library checks the characters between the first and
            # the last; a one-character name breaks that check.
            check.add("kind", "%s %r must be at least 2 characters long" % (part, text))
    if not _VENDOR_CLASS_RE.fullmatch(vendor):
        check.add(
            "kind",
            "vendor %r must start with a letter, end with a letter or digit, "
            "and hold only letters, digits, '_', '-' and '.'" % vendor,
        )
    if not _VENDOR_CLASS_RE.fullmatch(klass):
        check.add(
            "kind",
            "class %r must start with a letter, end with a letter or digit, "
            "and hold only letters, digits, '_', '-' and '.'" % klass,
        )


def device_name(check: Checker, path: str, name: str, index: int, seen: Dict[str, int]) -> None:
    """The name of device ``index`` at ``path``: a CDI device name, not one an earlier device has (``seen``:
    name -> the index of the device that has it; this one is added)."""
    if not _DEVICE_NAME_RE.fullmatch(name):
        check.add(
            path,
            "%r is not a CDI device name (letters, digits, '_', '-', '.', ':'; "
            "starting and ending with a letter or digit; no '/')" % name,
        )
    if name in seen:
        check.add(
            path,
            "%r is already the name of devices[%d]" % (name, seen[name]),
        )
    else:
        seen[name] = index


def annotation_map(check: Checker, path: str, value: Any) -> None:
    """An ``annotations`` object: string values, keys that are Kubernetes qualified names, 256 KiB in all."""
    if not isinstance(value, dict):
        check.add(path, "must be an object, not %s" % type_name(value))
        return
    size = 0
    for key, val in value.items():
        key_path = "%s[%r]" % (path, key)
        if not isinstance(key, str):
            check.add(key_path, "annotation keys must be strings")
            continue
        for msg in qualified_name_problems(key):
            check.add(key_path, msg)
        if check.string(key_path, val):
            # surrogatepass: a lone surrogate (JSON's "\ud800") is counted, and left to the writer to refuse
            size += len(key.encode("utf-8", "surrogatepass")) + len(val.encode("utf-8", "surrogatepass"))
    if size > _ANNOTATIONS_MAX_BYTES:
        check.add(path, "annotations total %d bytes, more than %d" % (size, _ANNOTATIONS_MAX_BYTES))


def edits(check: Checker, path: str, value: Any, device: bool) -> None:
    """A ``containerEdits`` object, each of its fields by its rule; a ``device``'s needs one edit at least."""
    if not check.obj(path, value, _EDIT_FIELDS):
        return
    if "env" in value:
        check.env(join(path, "env"), value["env"])
    if "deviceNodes" in value:
        check.items(join(path, "deviceNodes"), value["deviceNodes"], device_node)
    if "mounts" in value:
        check.items(join(path, "mounts"), value["mounts"], mount)
    if "hooks" in value:
        check.items(join(path, "hooks"), value["hooks"], hook)
    if "intelRdt" in value:
        intel_rdt(check, join(path, "intelRdt"), value["intelRdt"])
    if "additionalGids" in value:
        gids_path = join(path, "additionalGids")
        if check.array(gids_path, value["additionalGids"]):
            for idx, gid in enumerate(value["additionalGids"]):
                check.integer("%s[%d]" % (gids_path, idx), gid, 0, _UINT32_MAX)
    if "netDevices" in value:
        net_devices(check, join(path, "netDevices"), value["netDevices"])
    if device and not has_an_edit(value):
        check.add(
            path,
            "a device needs at least one edit (env, deviceNodes, mounts, hooks, "
            "additionalGids, intelRdt or netDevices); runtimes refuse "
            "'empty device edits'",
        )


def device_node(check: Checker, path: str, node: Any) -> None:
    """One of ``deviceNodes``."""
    if not check.obj(path, node, _DEVICE_NODE_FIELDS):
        return
    if "path" not in node:
        check.add(path, "missing required field 'path'")
    else:
        check.string(join(path, "path"), node["path"], required=True)
    for key in ("hostPath", "permissions", "type"):
        if key in node:
            check.string(join(path, key), node[key])
    dev_type = node.get("type")
    if isinstance(dev_type, str) and dev_type not in _DEVICE_NODE_TYPES:
        check.add(join(path, "type"), "%r is not a device type (b, c, u or p)" % dev_type)
    perms = node.get("permissions")
    if isinstance(perms, str) and perms.strip("rwm") != "":
        check.add(join(path, "permissions"), "%r may hold only r, w and m" % perms)
    for key in ("major", "minor"):
        if key in node:
            # The schema allows int64; the library refuses negative numbers.
            check.integer(join(path, key), node[key], 0, _INT64_MAX)
    for key in ("uid", "gid", "fileMode"):
        if key in node:
            check.integer(join(path, key), node[key], 0, _UINT32_MAX)


def mount(check: Checker, path: str, value: Any) -> None:
    """One of ``mounts``."""
    if not check.obj(path, value, _MOUNT_FIELDS):
        return
    for key in ("hostPath", "containerPath"):
        if key not in value:
            check.add(path, "missing required field %r" % key)
        else:
            check.string(join(path, key), value[key], required=True)
    if "options" in value:
        check.strings(join(path, "options"), value["options"])
    if "type" in value:
        check.string(join(path, "type"), value["type"])


def hook(check: Checker, path: str, value: Any) -> None:
    """One of ``hooks``."""
    if not check.obj(path, value, _HOOK_FIELDS):
        return
    if "hookName" not in value:
        check.add(path, "missing required field 'hookName'")
    elif check.string(join(path, "hookName"), value["hookName"]):
        if value["hookName"] not in HOOK_NAMES:
            check.add(
                join(path, "hookName"),
                "%r is not a hook name (%s)" % (value["hookName"], ", ".join(sorted(HOOK_NAMES))),
            )
    if "path" not in value:
        check.add(path, "missing required field 'path'")
    else:
        check.string(join(path, "path"), value["path"], required=True)
    if "args" in value:
        check.strings(join(path, "args"), value["args"])
    if "env" in value:
        check.env(join(path, "env"), value["env"])
    if "timeout" in value:
        check.integer(join(path, "timeout"), value["timeout"], 0, _UINT32_MAX)


def intel_rdt(check: Checker, path: str, rdt: Any) -> None:
    """``intelRdt``, whose fields depend on the spec's ``cdiVersion``."""
    if not check.obj(path, rdt, _INTEL_RDT_FIELDS):
        return
    if "closID" in rdt and check.string(join(path, "closID"), rdt["closID"]):
        clos = rdt["closID"]
        if clos != "/" and (len(clos) >= 4096 or clos in (".", "..") or "/" in clos or "\n" in clos):
            check.add(join(path, "closID"), "%r is not a valid file name" % clos)
    for key in ("l3CacheSchema", "memBwSchema"):
        if key in rdt:
            check.string(join(path, key), rdt[key])
    if "schemata" in rdt:
        check.strings(join(path, "schemata"), rdt["schemata"])
    for key in ("enableMonitoring", "enableCMT", "enableMBM"):
        if key in rdt:
            check.boolean(join(path, key), rdt[key])
    if check.version is not None:
        v110 = (1, 1, 0)
        for key in ("enableCMT", "enableMBM"):
            if key in rdt and check.version >= v110:
                check.add(join(path, key), "is not valid from cdiVersion 1.1.0 on")
        # A set schemata or enableMonitoring: true raise the minimum version
        # (reported on cdiVersion); the field's mere presence needs 1.1.0 too.
        if rdt.get("enableMonitoring") is False and check.version < v110:
            check.add(join(path, "enableMonitoring"), "requires cdiVersion 1.1.0 or later")


def net_devices(check: Checker, path: str, value: Any) -> None:
    """``netDevices``: each host interface and each name once (1.1.0 on)."""
    if not check.array(path, value):
        return
    if not value and check.version is not None and check.version < (1, 1, 0):
        # A non-empty list raises the minimum version (reported on
        # cdiVersion); even an empty one is refused before 1.1.0.
        check.add(path, "requires cdiVersion 1.1.0 or later, even when empty")
    hosts: Dict[str, int] = {}
    names: Dict[str, int] = {}
    for idx, dev in enumerate(value):
        dev_path = "%s[%d]" % (path, idx)
        if not check.obj(dev_path, dev, _NET_DEVICE_FIELDS):
            continue
        for key, seen in (("hostInterfaceName", hosts), ("name", names)):
            if key not in dev:
                check.add(dev_path, "missing required field %r" % key)
            elif check.string(join(dev_path, key), dev[key], required=True):
                if dev[key] in seen:
                    check.add(
                        join(dev_path, key),
                        "%r is already used by %s[%d]" % (dev[key], path, seen[dev[key]]),
                    )
                else:
                    seen[dev[key]] = idx


def join(path: str, key: str) -> str:
    return "%s.%s" % (path, key) if path else key


def has_an_edit(edits: Dict[str, Any]) -> bool:
    for key in ("env", "deviceNodes", "hooks", "mounts", "additionalGids", "netDevices"):
        if isinstance(edits.get(key), list) and edits[key]:
            return True
    return edits.get("intelRdt") is not None


def qualified_name_problems(key: str) -> List[str]:
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
