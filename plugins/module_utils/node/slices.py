# -*- coding: utf-8 -*-
# Copyright: contributors to bcd.devices
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""Hold slices: the cgroup-v2 slice a hold with ``limits`` runs in.

A plain hold whose assignment books host CPU or memory gets
``bcd-alloc-<allocation_id>.slice`` (under ``bcd.slice/bcd-alloc.slice``),
created before its CDI spec names it. bcd never moves processes into it: the
spec's ``bcd.dev/cgroup-parent`` annotation, ``BCD_CGROUP_PARENT`` and
``AllocationBound.cgroup_parent`` name it, and the workload manager places the
workload there. A slice is stopped only once ``cgroup.events`` says
``populated 0``: a release never kills a workload.

Two backends share one small interface (``state``, ``names``, ``apply``,
``remove``): ``SystemdSlices`` (``systemctl`` and the cgroup files) and
``RecordSlices`` (a fakehw host's JSON records in ``/run/bcd/slices``).
"""

from __future__ import annotations

import json
import os
import re
from dataclasses import dataclass, field
from typing import Dict, Optional

from ansible_collections.bcd.devices.plugins.module_utils.domain.assignment import (
    InvalidAssignment,
    Limits,
    check_cpulist,
    parse_cpulist,
)
from ansible_collections.bcd.devices.plugins.module_utils.node.fsutil import read_bytes, remove_file, write_atomic

SLICE_NAME_RE = re.compile(r"^bcd-alloc-[A-Za-z0-9_]{1,80}\.slice$")
CGROUP_ROOT = "/sys/fs/cgroup"
PARENT_SLICES = ("bcd.slice", "bcd.slice/bcd-alloc.slice")
SLICE_DIR = CGROUP_ROOT + "/bcd.slice/bcd-alloc.slice"
RECORD_DIR = "/run/bcd/slices"
MIB = 1 << 20
GIB = 1 << 30
HUGE_SIZES = (("2MB", "hugepages_2mi", 2 * MIB), ("1GB", "hugepages_1gi", GIB))
PROPERTY_ORDER = ("AllowedCPUs", "AllowedMemoryNodes", "CPUQuota", "MemoryMax", "MemoryHigh")
PROPERTY_RE = {
    "AllowedCPUs": None,  # a cpulist, checked by check_cpulist
    "AllowedMemoryNodes": None,
    "CPUQuota": re.compile(r"^[0-9]{1,9}%$"),
    "MemoryMax": re.compile(r"^[0-9]{1,20}$"),
    "MemoryHigh": re.compile(r"^[0-9]{1,20}$"),
}


class SliceError(Exception):
    """A slice operation that failed or was refused; retryable."""


def slice_name(allocation_id):
    return "bcd-alloc-%s.slice" % allocation_id


def allocation_of(name):
    """The allocation id a slice name stands for."""
    return name[len("bcd-alloc-"):-len(".slice")]


def check_slice_name(name):
    if not isinstance(name, str) or not SLICE_NAME_RE.fullmatch(name):
        raise SliceError("slice name %r does not match %s" % (name, SLICE_NAME_RE.pattern))
    return name


def cpu_quota(cpu_millis):
    """``cpu_millis`` as whole percents of one CPU, rounded up: 1234 -> ``124%``."""
    return "%d%%" % ((cpu_millis + 9) // 10)


def slice_properties(limits):
    """The ``systemctl set-property`` properties of a hold's limits, in a fixed order; absent limits set nothing."""
    properties = {}
    if limits is None:
        return properties
    if limits.cpus:
        properties["AllowedCPUs"] = limits.cpus
    if limits.mems:
        properties["AllowedMemoryNodes"] = limits.mems
    if limits.cpu_millis:
        properties["CPUQuota"] = cpu_quota(limits.cpu_millis)
    if limits.memory_bytes:
        properties["MemoryMax"] = str(limits.memory_bytes)
        properties["MemoryHigh"] = str(limits.memory_bytes * 9 // 10)
    return properties


def hugetlb_max(limits):
    """``{"2MB": bytes, "1GB": bytes}`` for the huge page sizes the limits book."""
    result = {}
    if limits is None:
        return result
    for size, attribute, page in HUGE_SIZES:
        count = getattr(limits, attribute)
        if count:
            result[size] = count * page
    return result


def check_slice_request(name, properties, huge):
    """Everything a slice operation carries, checked before it reaches a command line or a file.
    The root helper runs the same check as root."""
    check_slice_name(name)
    if not isinstance(properties, dict) or not isinstance(huge, dict):
        raise SliceError("properties and hugetlb_max must be mappings")
    for key, value in properties.items():
        if key not in PROPERTY_RE:
            raise SliceError("unknown slice property %r" % (key,))
        if not isinstance(value, str):
            raise SliceError("slice property %s must be a string" % key)
        pattern = PROPERTY_RE[key]
        if pattern is None:
            try:
                check_cpulist(value, key)
            except InvalidAssignment as exc:
                raise SliceError(str(exc))
        elif not pattern.fullmatch(value):
            raise SliceError("slice property %s=%r is not valid" % (key, value))
    for size, value in huge.items():
        if size not in dict((s, p) for s, _a, p in HUGE_SIZES):
            raise SliceError("unknown huge page size %r" % (size,))
        if isinstance(value, bool) or not isinstance(value, int) or value < 0:
            raise SliceError("hugetlb_max %s must be a non-negative integer" % size)


@dataclass
class SliceState:
    """A slice as the host shows it."""

    name: str
    properties: Optional[Dict[str, str]] = None  # None: the backend cannot read them back
    hugetlb_max: Dict[str, int] = field(default_factory=dict)
    hugetlb_current: Dict[str, int] = field(default_factory=dict)
    populated: bool = False
    memory_max: Optional[int] = None  # the cgroup's memory.max, where properties cannot be read back
    hugetlb_exact: bool = True  # False: hugetlb_max lists only the sizes the host lets us read


class RecordSlices(object):
    """A fakehw host's slices: one JSON record per slice under ``<root>/run/bcd/slices``.
    A test simulates a running workload by setting ``populated`` to true."""

    def __init__(self, host):
        self.host = host

    def _path(self, name):
        return self.host.path("%s/%s.json" % (RECORD_DIR, check_slice_name(name)))

    def names(self):
        try:
            entries = os.listdir(self.host.path(RECORD_DIR))
        except OSError:
            return []
        return sorted(entry[:-len(".json")] for entry in entries
                      if entry.endswith(".json") and SLICE_NAME_RE.fullmatch(entry[:-len(".json")]))

    def state(self, name):
        content = read_bytes(self._path(name))
        if content is None:
            return None
        try:
            record = json.loads(content.decode("utf-8"))
        except ValueError:
            record = {}
        record = record if isinstance(record, dict) else {}

        def mapping(key, kind):
            value = record.get(key)
            return dict((k, v) for k, v in value.items() if isinstance(v, kind)) if isinstance(value, dict) else {}
        return SliceState(name=name, properties=mapping("properties", str), hugetlb_max=mapping("hugetlb_max", int),
                          hugetlb_current=mapping("hugetlb_current", int), populated=record.get("populated") is True)

    def apply(self, name, properties, huge):
        check_slice_request(name, properties, huge)
        current = self.state(name)
        record = {"name": name, "properties": properties, "hugetlb_max": huge,
                  "hugetlb_current": current.hugetlb_current if current else {},
                  "populated": current.populated if current else False}
        write_atomic(self._path(name), (json.dumps(record, indent=2, sort_keys=True) + "\n").encode(), 0o644)

    def remove(self, name):
        remove_file(self._path(name))


class SystemdSlices(object):
    """Slices on a real systemd with cgroup v2: ``systemctl start``, ``set-property --runtime``, ``stop``,
    and the ``hugetlb`` files systemd has no property for."""

    def __init__(self, host, runner):
        self.host = host
        self.runner = runner

    def available(self):
        """Why slices cannot be made here, or None: systemd must manage a cgroup-v2 host."""
        if not os.path.exists(self.host.path(CGROUP_ROOT + "/cgroup.controllers")):
            return "the host has no cgroup v2 hierarchy at %s" % CGROUP_ROOT
        if not os.path.isdir(self.host.path("/run/systemd/system")):
            return "systemd is not the service manager"
        return None

    def _dir(self, name):
        return self.host.path("%s/%s" % (SLICE_DIR, check_slice_name(name)))

    def names(self):
        try:
            entries = os.listdir(self.host.path(SLICE_DIR))
        except OSError:
            return []
        return sorted(entry for entry in entries if SLICE_NAME_RE.fullmatch(entry))

    def state(self, name):
        directory = self._dir(name)
        if not os.path.isdir(directory):
            return None
        events = read_bytes(os.path.join(directory, "cgroup.events")) or b""
        populated = b"populated 0" not in events
        current = {}
        limits = {}
        for size, _attribute, _page in HUGE_SIZES:
            for target, filename in ((current, "hugetlb.%s.current" % size), (limits, "hugetlb.%s.max" % size)):
                value = (read_bytes(os.path.join(directory, filename)) or b"").strip()
                if value.isdigit():
                    target[size] = int(value)
        memory = (read_bytes(os.path.join(directory, "memory.max")) or b"").strip()
        return SliceState(name=name, properties=self._properties(name), hugetlb_max=limits,
                          hugetlb_current=current, populated=populated,
                          memory_max=int(memory) if memory.isdigit() else None, hugetlb_exact=False)

    def _properties(self, name):
        """The slice's properties as systemd has them now (in ``slice_properties`` form), so a drift pass
        can set again what was changed by hand; None when systemctl cannot tell."""
        rc, out, _err = self.runner(["systemctl", "show", name] + ["--property=%s" % key for key in SHOW_PROPERTIES])
        if rc != 0:
            return None
        return parse_show(out)

    def _systemctl(self, *args):
        argv = ["systemctl"] + list(args)
        rc, _out, err = self.runner(argv)
        if rc != 0:
            raise SliceError("%s failed (%d): %s" % (" ".join(argv), rc, err.strip() or "no message"))

    def apply(self, name, properties, huge):
        check_slice_request(name, properties, huge)
        self._systemctl("start", name)
        if properties:
            assignments = ["%s=%s" % (key, properties[key]) for key in PROPERTY_ORDER if key in properties]
            self._systemctl("set-property", "--runtime", name, *assignments)
        if huge:
            for parent in ("",) + PARENT_SLICES:
                control = self.host.path("%s/%s/cgroup.subtree_control" % (CGROUP_ROOT, parent) if parent
                                         else "%s/cgroup.subtree_control" % CGROUP_ROOT)
                _write_cgroup(control, "+hugetlb")
            for size, value in sorted(huge.items()):
                _write_cgroup(os.path.join(self._dir(name), "hugetlb.%s.max" % size), str(value))

    def remove(self, name):
        check_slice_name(name)
        self._systemctl("stop", name)


SHOW_PROPERTIES = ("AllowedCPUs", "AllowedMemoryNodes", "CPUQuotaPerSecUSec", "MemoryMax", "MemoryHigh")
_TIMESPAN_UNITS = {"us": 1, "ms": 1000, "s": 1000000, "min": 60000000, "h": 3600000000}
_TIMESPAN_RE = re.compile(r"([0-9]+(?:\.[0-9]+)?)(us|ms|s|min|h)")


def parse_timespan_usec(text):
    """systemd's timespan (``1.240000s``, ``500ms``, ``1min 4s``) in microseconds, or None."""
    text = text.strip()
    parts = _TIMESPAN_RE.findall(text)
    if not parts or "".join(number + unit for number, unit in parts) != text.replace(" ", ""):
        return None
    return int(round(sum(float(number) * _TIMESPAN_UNITS[unit] for number, unit in parts)))


def parse_show(text):
    """``systemctl show`` output as the properties this module sets (unset ones left out)."""
    values = {}
    for line in text.splitlines():
        key, sep, value = line.partition("=")
        if sep:
            values[key.strip()] = value.strip()
    properties = {}
    for key in ("AllowedCPUs", "AllowedMemoryNodes"):
        if values.get(key):
            properties[key] = values[key]
    quota = values.get("CPUQuotaPerSecUSec")
    usec = parse_timespan_usec(quota) if quota and quota != "infinity" else None
    if usec is not None:
        properties["CPUQuota"] = "%d%%" % int(round(usec / 10000.0))
    for key in ("MemoryMax", "MemoryHigh"):
        if values.get(key, "").isdigit():
            properties[key] = values[key]
    return properties


def same_properties(current, wanted):
    """Whether the slice has every wanted property (cpulists compared as sets; others as rendered)."""
    for key, value in wanted.items():
        have = current.get(key)
        if key in ("AllowedCPUs", "AllowedMemoryNodes") and have is not None:
            try:
                if parse_cpulist(have) == parse_cpulist(value):
                    continue
            except ValueError:
                return False
        if have != value:
            return False
    return True


def _write_cgroup(path, value):
    """cgroup files are written in place (no temporary file: the kernel owns them)."""
    try:
        with open(path, "w") as handle:
            handle.write(value)
    except OSError as exc:
        raise SliceError("cannot write %r to %s: %s" % (value, path, exc))


def wanted_slice(limits):
    """``(properties, hugetlb_max)`` for limits, or None when they book nothing a slice enforces."""
    if limits is None or limits.is_empty():
        return None
    return slice_properties(limits), hugetlb_max(limits)


def limits_of_slice(state):
    """What a slice still holds of the host, as ``Limits``: its memory limit and huge page limits."""
    properties = state.properties or {}
    memory = properties.get("MemoryMax")
    if memory is None and state.memory_max is not None:
        memory = str(state.memory_max)
    pages = dict((attribute, state.hugetlb_max.get(size, 0) // page) for size, attribute, page in HUGE_SIZES)
    return Limits(mems=properties.get("AllowedMemoryNodes") or None,
                  memory_bytes=int(memory) if memory and memory.isdigit() else None,
                  hugepages_2mi=pages["hugepages_2mi"] or None, hugepages_1gi=pages["hugepages_1gi"] or None)
