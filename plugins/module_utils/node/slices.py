# -*- coding: utf-8 -*-
# Copyright: contributors to bcd.devices
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""Slice backends: how a host makes, reads and stops hold slices.

Two backends share one small interface (``state``, ``names``, ``apply``,
``remove``): ``SystemdSlices`` (``systemctl`` and the cgroup files) and
``RecordSlices`` (a fakehw host's JSON records in ``/run/bcd/slices``). What a
slice is and what it should hold is the domain's (``domain/slices.py``).
"""

from __future__ import annotations

import json
import os
import re
from typing import TYPE_CHECKING, Any, Callable, Dict, List, Mapping, Optional, Union

from ansible_collections.bcd.devices.plugins.module_utils.domain.slices import (
    CGROUP_ROOT,
    HUGE_SIZES,
    PARENT_SLICES,
    PROPERTY_ORDER,
    RECORD_DIR,
    SLICE_DIR,
    SLICE_NAME_RE,
    SliceError,
    SliceState,
    TransientSliceError,
    check_slice_change,
    check_slice_name,
    check_slice_request,
)
from ansible_collections.bcd.devices.plugins.module_utils.node.fsutil import read_bytes, remove_file, write_atomic
from ansible_collections.bcd.devices.plugins.module_utils.support.json_bytes import json_bytes
from ansible_collections.bcd.devices.plugins.module_utils.support.speed import lazy_pattern

if TYPE_CHECKING:
    from ansible_collections.bcd.devices.plugins.module_utils.node.commands import TextRunCommand
    from ansible_collections.bcd.devices.plugins.module_utils.node.fsutil import NodePaths


class RecordSlices:
    """A fakehw host's slices: one JSON record per slice under ``<root>/run/bcd/slices``.
    A test simulates a running workload by setting ``populated`` to true (and ``memory_current``,
    ``hugetlb_current`` to what it uses); ``frozen`` stands for a real slice closed and frozen
    (``SystemdSlices.freeze``)."""

    def __init__(self, host: NodePaths) -> None:
        self.host = host

    def _path(self, name: str) -> str:
        return self.host.path("%s/%s.json" % (RECORD_DIR, check_slice_name(name)))

    def names(self) -> List[str]:
        try:
            entries = os.listdir(self.host.path(RECORD_DIR))
        except OSError:
            return []
        return sorted(entry[:-len(".json")] for entry in entries
                      if entry.endswith(".json") and SLICE_NAME_RE.fullmatch(entry[:-len(".json")]))

    def state(self, name: str, show: bool = True) -> Optional[SliceState]:  # pylint: disable=unused-argument
        """The slice's record as a ``SliceState`` (``show``: as ``SystemdSlices.state``; a record has it all)."""
        content = read_bytes(self._path(name))
        if content is None:
            return None
        try:
            parsed: object = json.loads(content.decode("utf-8"))
        except ValueError:
            parsed = {}
        record: Dict[str, Any] = parsed if isinstance(parsed, dict) else {}

        def mapping(key: str, kind: type) -> Dict[str, Any]:
            value = record.get(key)
            return dict((k, v) for k, v in value.items() if isinstance(v, kind)) if isinstance(value, dict) else {}
        used = record.get("memory_current")
        return SliceState(name=name, properties=mapping("properties", str), hugetlb_max=mapping("hugetlb_max", int),
                          hugetlb_current=mapping("hugetlb_current", int), populated=record.get("populated") is True,
                          memory_current=used if isinstance(used, int) and not isinstance(used, bool) else None)

    def apply(self, name: str, properties: Mapping[str, str], huge: Mapping[str, int]) -> None:
        check_slice_request(name, properties, huge)
        current = self.state(name)
        check_slice_change(current, properties, huge, name)
        record: Dict[str, Any] = {"name": name, "properties": properties, "hugetlb_max": huge,
                                  "hugetlb_current": current.hugetlb_current if current else {},
                                  "populated": current.populated if current else False}
        if current is not None and current.memory_current is not None:
            record["memory_current"] = current.memory_current
        self._write(name, record)

    def _write(self, name: str, record: Dict[str, Any]) -> None:
        write_atomic(self._path(name), json_bytes(record), 0o644)

    def freeze(self, name: str, frozen: bool) -> None:
        """The record's ``frozen`` (``cgroup.freeze`` of a real slice)."""
        content = read_bytes(self._path(name))
        try:
            record: object = json.loads(content.decode("utf-8")) if content is not None else None
        except ValueError:
            record = None
        if isinstance(record, dict):
            record["frozen"] = frozen
            self._write(name, record)

    def remove(self, name: str) -> None:
        """Stopped only when empty, by ``stop_when_empty``: frozen, checked again, then removed."""
        stop_when_empty(self, name, lambda: remove_file(self._path(name)))


class SystemdSlices:
    """Slices on a real systemd with cgroup v2: ``systemctl start``, ``set-property --runtime``, ``stop``,
    and the ``hugetlb`` files systemd has no property for."""

    def __init__(self, host: NodePaths, runner: TextRunCommand) -> None:
        self.host = host
        self.runner = runner

    def available(self) -> Optional[str]:
        """Why slices cannot be made here, or None: systemd must manage a cgroup-v2 host."""
        if not os.path.exists(self.host.path(CGROUP_ROOT + "/cgroup.controllers")):
            return "the host has no cgroup v2 hierarchy at %s" % CGROUP_ROOT
        if not os.path.isdir(self.host.path("/run/systemd/system")):
            return "systemd is not the service manager"
        return None

    def _dir(self, name: str) -> str:
        return self.host.path("%s/%s" % (SLICE_DIR, check_slice_name(name)))

    def names(self) -> List[str]:
        try:
            entries = os.listdir(self.host.path(SLICE_DIR))
        except OSError:
            return []
        return sorted(entry for entry in entries if SLICE_NAME_RE.fullmatch(entry))

    def state(self, name: str, show: bool = True) -> Optional[SliceState]:
        """The slice as the host shows it; ``show=False``: its cgroup files only (no ``systemctl show``),
        which is all ``check_slice_change`` reads."""
        directory = self._dir(name)
        if not os.path.isdir(directory):
            return None
        events = read_bytes(os.path.join(directory, "cgroup.events")) or b""
        # a cgroup under the slice is a unit or container being started (or left behind): it counts as a
        # workload, so the slice is neither stopped under it nor squeezed
        populated = b"populated 0" not in events or _descendants(directory) > 0
        current: Dict[str, int] = {}
        limits: Dict[str, int] = {}
        for size, _attribute, _page in HUGE_SIZES:
            for target, filename in ((current, "hugetlb.%s.current" % size), (limits, "hugetlb.%s.max" % size)):
                value = (read_bytes(os.path.join(directory, filename)) or b"").strip()
                if value.isdigit():
                    target[size] = int(value)
        memory = (read_bytes(os.path.join(directory, "memory.max")) or b"").strip()
        high = (read_bytes(os.path.join(directory, "memory.high")) or b"").strip()
        used = (read_bytes(os.path.join(directory, "memory.current")) or b"").strip()
        return SliceState(name=name, properties=self._properties(name) if show else None, hugetlb_max=limits,
                          hugetlb_current=current, populated=populated,
                          memory_max=int(memory) if memory.isdigit() else None, hugetlb_exact=False,
                          memory_current=int(used) if used.isdigit() else None,
                          memory_high=int(high) if high.isdigit() else None,
                          cpu_quota=parse_cpu_max(read_bytes(os.path.join(directory, "cpu.max")) or b""))

    def _properties(self, name: str) -> Optional[Dict[str, str]]:
        """The slice's properties as systemd has them now (in ``slice_properties`` form), so a drift pass
        can set again what was changed by hand; None when systemctl cannot tell."""
        rc, out, _err = self.runner(["systemctl", "show", name] + ["--property=%s" % key for key in SHOW_PROPERTIES])
        if rc != 0:
            return None
        return parse_show(out)

    def _systemctl(self, *args: str) -> None:
        argv = ["systemctl"] + list(args)
        rc, _out, err = self.runner(argv)
        if rc != 0:
            raise TransientSliceError("%s failed (%d): %s" % (" ".join(argv), rc, err.strip() or "no message"))

    def apply(self, name: str, properties: Mapping[str, str], huge: Mapping[str, int]) -> None:
        check_slice_request(name, properties, huge)
        check_slice_change(self.state(name, show=False), properties, huge, name)
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
                path = os.path.join(self._dir(name), "hugetlb.%s.max" % size)
                if value == 0 and not os.path.exists(path):
                    continue  # a size the node's kernel does not have: nothing of it can be faulted in
                _write_cgroup(path, str(value))

    def freeze(self, name: str, frozen: bool) -> None:
        """Close and freeze the slice (``frozen``), or thaw and open it again; no systemd property for either.

        Closed: ``cgroup.max.descendants`` 0, so no cgroup can be made under the slice. systemd makes one
        for every unit it starts there (``systemd-run --slice``, a container's scope) and a container
        runtime for every container, so such a start fails at once (``mkdir``: EAGAIN) and nothing that
        already runs is touched. Frozen: ``cgroup.freeze`` 1, for a process root moves straight into the
        slice's own cgroup, which the closing cannot keep out. A file the kernel lacks (before 4.14 and
        5.2) is skipped. A close that fails half-way is undone; a thaw writes both files whatever fails."""
        directory = self._dir(name)
        writes = [("cgroup.max.descendants", "0"), ("cgroup.freeze", "1")] if frozen else \
            [("cgroup.freeze", "0"), ("cgroup.max.descendants", "max")]
        failed: Optional[SliceError] = None
        for filename, value in writes:
            path = os.path.join(directory, filename)
            if not os.path.exists(path):
                continue
            try:
                _write_cgroup(path, value)
            except SliceError as exc:
                failed = failed or exc
                if frozen:
                    break
        if failed is not None and frozen:
            try:
                self.freeze(name, False)
            except SliceError:
                pass  # the first error is the one to report
        if failed is not None:
            raise failed

    def remove(self, name: str) -> None:
        """``systemctl stop``, only once empty (``stop_when_empty``)."""
        check_slice_name(name)
        stop_when_empty(self, name, lambda: self._systemctl("stop", name))


def stop_when_empty(slices: Union[RecordSlices, SystemdSlices], name: str, stop: Callable[[], object]) -> None:
    """Stop a slice only while nothing runs in it, closing the check-then-stop race as far as the kernel
    lets us: the slice is closed and frozen (``freeze``: no cgroup can be made under it, and what is moved
    straight into it does not run), ``populated`` read again, and only then stopped. A unit or container
    started into it after that fails to start (its cgroup cannot be made) and nothing of it is stopped; a
    process moved into the slice's own cgroup is frozen on arrival and never runs before the stop; one that
    joined before the close is seen by the second read, and the slice is thawed, opened and kept. A slice
    that is gone is no error (a release may be repeated); one that cannot be stopped is thawed and opened
    again, and so is one whose cgroup outlives the stop."""
    current = slices.state(name, show=False)
    if current is None:
        return
    if current.populated:
        raise TransientSliceError("%s still runs a workload; it is stopped once empty" % name)
    slices.freeze(name, True)
    try:
        again = slices.state(name, show=False)
        if again is not None and again.populated:
            raise TransientSliceError("%s still runs a workload (it joined as the slice was stopped); it is stopped "
                                      "once empty" % name)
        stop()
    except BaseException:
        try:
            slices.freeze(name, False)
        except SliceError:
            pass  # the first error is the one to report; a slice left frozen is empty, and the next pass retries
        raise
    if slices.state(name, show=False) is not None:
        # stopped, but its cgroup stays (a process was moved straight into it): thawed and opened again, so a
        # slice of that name started later is not born frozen and closed
        slices.freeze(name, False)


SHOW_PROPERTIES = ("AllowedCPUs", "AllowedMemoryNodes", "CPUQuotaPerSecUSec", "MemoryMax", "MemoryHigh")
_TIMESPAN_UNITS = {"us": 1, "ms": 1000, "s": 1000000, "min": 60000000, "h": 3600000000}
_TIMESPAN_RE = lazy_pattern(r"([0-9]+(?:\.[0-9]+)?)(us|ms|s|min|h)")


def _descendants(directory: str) -> int:
    """``nr_descendants`` of a cgroup's ``cgroup.stat`` (0 where it cannot be read)."""
    match = re.search(rb"^nr_descendants ([0-9]{1,9})$", read_bytes(os.path.join(directory, "cgroup.stat")) or b"",
                      re.MULTILINE)
    return int(match.group(1)) if match else 0


def parse_cpu_max(content: bytes) -> Optional[int]:
    """A cgroup's ``cpu.max`` (``"12400 100000"``: quota and period in microseconds) as whole percents of one
    CPU, rounded as systemd shows ``CPUQuota``; None for ``max`` (no quota) or anything else."""
    parts = content.split()
    if len(parts) != 2 or not all(part.isdigit() and len(part) <= 20 for part in parts) or int(parts[1]) == 0:
        return None
    return int(round(int(parts[0]) * 100.0 / int(parts[1])))


def parse_timespan_usec(text: str) -> Optional[int]:
    """systemd's timespan (``1.240000s``, ``500ms``, ``1min 4s``) in microseconds, or None."""
    text = text.strip()
    parts = _TIMESPAN_RE.findall(text)
    if not parts or "".join(number + unit for number, unit in parts) != text.replace(" ", ""):
        return None
    return int(round(sum(float(number) * _TIMESPAN_UNITS[unit] for number, unit in parts)))


def parse_show(text: str) -> Dict[str, str]:
    """``systemctl show`` output as the properties this module sets (unset ones left out)."""
    values: Dict[str, str] = {}
    for line in text.splitlines():
        key, sep, value = line.partition("=")
        if sep:
            values[key.strip()] = value.strip()
    properties: Dict[str, str] = {}
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


def _write_cgroup(path: str, value: str) -> None:
    """cgroup files are written in place (no temporary file: the kernel owns them)."""
    try:
        with open(path, "w") as handle:
            handle.write(value)
    except OSError as exc:
        raise TransientSliceError("cannot write %r to %s: %s" % (value, path, exc))
