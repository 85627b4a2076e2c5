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

This file holds what a slice is: its name, the properties and huge page limits a
hold's limits become, the checks every slice request passes, and how a slice's
state compares with what is wanted. The backends that make slices on a host are
in ``node/slices.py``.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Collection, Dict, FrozenSet, List, Mapping, Optional, Protocol, Tuple

from ansible_collections.bcd.devices.plugins.module_utils.domain.input.assignment import (
    ALLOCATION_ID,
    MAX_CPU,
    InvalidAssignment,
    Limits,
    check_cpulist,
    check_nodelist,
)
from ansible_collections.bcd.devices.plugins.module_utils.domain.input.cpulist import format_cpulist, parse_cpulist
from ansible_collections.bcd.devices.plugins.module_utils.support.errors import BcdError, RetryableError
from ansible_collections.bcd.devices.plugins.module_utils.support.records import field, record
from ansible_collections.bcd.devices.plugins.module_utils.support.speed import lazy_pattern

if TYPE_CHECKING:
    from ansible_collections.bcd.devices.plugins.module_utils.domain.input.assignment import Assignment

SLICE_NAME_RE = lazy_pattern(r"^bcd-alloc-%s\.slice$" % ALLOCATION_ID)
CGROUP_ROOT = "/sys/fs/cgroup"
PARENT_SLICES = ("bcd.slice", "bcd.slice/bcd-alloc.slice")
SLICE_DIR = CGROUP_ROOT + "/bcd.slice/bcd-alloc.slice"
RECORD_DIR = "/run/bcd/slices"
MIB = 1 << 20
GIB = 1 << 30
HUGE_SIZES = (("2MB", "hugepages_2mi", 2 * MIB), ("1GB", "hugepages_1gi", GIB))
PROPERTY_ORDER = ("AllowedCPUs", "AllowedMemoryNodes", "CPUQuota", "MemoryMax", "MemoryHigh")
CPU_QUOTA_RE = lazy_pattern(r"^[0-9]{1,20}%$")  # cpu_quota() of any int64 cpu_millis
PROPERTY_RE = {
    "AllowedCPUs": None,  # a cpulist, checked by check_cpulist
    "AllowedMemoryNodes": None,
    "CPUQuota": CPU_QUOTA_RE,
    "MemoryMax": lazy_pattern(r"^[0-9]{1,20}$"),
    "MemoryHigh": lazy_pattern(r"^[0-9]{1,20}$"),
}


class SliceError(BcdError):
    """A slice request that is refused as it is: a malformed name or property, or a ``CPUQuota`` that starves
    its workload. Permanent: the same request never succeeds, so no pass retries it (``TransientSliceError``
    is what may work later)."""


class TransientSliceError(SliceError, RetryableError):
    """A slice operation that failed now (``systemctl``, a cgroup file) or that what the slice holds now
    refuses (a workload still running, no headroom over its use): the next pass tries again."""


def slice_name(allocation_id: str) -> str:
    return "bcd-alloc-%s.slice" % allocation_id


def allocation_of(name: str) -> str:
    """The allocation id a slice name stands for."""
    return name[len("bcd-alloc-"):-len(".slice")]


def check_slice_name(name: object) -> str:
    if not isinstance(name, str) or not SLICE_NAME_RE.fullmatch(name):
        raise SliceError("slice name %r does not match %s" % (name, SLICE_NAME_RE.pattern))
    return name


def cpu_quota(cpu_millis: int) -> str:
    """``cpu_millis`` as whole percents of one CPU, rounded up: 1234 -> ``124%``."""
    return "%d%%" % ((cpu_millis + 9) // 10)


def slice_properties(limits: Optional[Limits]) -> Dict[str, str]:
    """The ``systemctl set-property`` properties of a hold's limits, in a fixed order; absent limits set nothing."""
    properties: Dict[str, str] = {}
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


def hugetlb_max(limits: Optional[Limits]) -> Dict[str, int]:
    """``{"2MB": bytes, "1GB": bytes}`` for limits that book huge pages: every size, the one not booked
    as 0. A size left at ``max`` would let the workload fault in pages admission promised to others, so
    a hold that books one size is held to none of the other (a backend skips a 0 for a size the node does
    not have). Limits that book no huge pages set none (``{}``)."""
    result: Dict[str, int] = {}
    if limits is None:
        return result
    for size, attribute, page in HUGE_SIZES:
        result[size] = (getattr(limits, attribute) or 0) * page
    return result if any(result.values()) else {}


def check_slice_request(name: object, properties: object, huge: object) -> None:
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
                (check_nodelist if key == "AllowedMemoryNodes" else check_cpulist)(value, key)
            except InvalidAssignment as exc:
                raise SliceError(str(exc))
        elif not pattern.fullmatch(value):
            raise SliceError("slice property %s=%r is not valid" % (key, value))
    for size, value in huge.items():
        if size not in dict((s, p) for s, _a, p in HUGE_SIZES):
            raise SliceError("unknown huge page size %r" % (size,))
        if isinstance(value, bool) or not isinstance(value, int) or value < 0:
            raise SliceError("hugetlb_max %s must be a non-negative integer" % size)


@record
class SliceState:
    """A slice as the host shows it."""

    name: str
    properties: Optional[Dict[str, str]] = None  # None: the backend cannot read them back
    hugetlb_max: Dict[str, int] = field(default_factory=dict)
    hugetlb_current: Dict[str, int] = field(default_factory=dict)
    populated: bool = False
    memory_max: Optional[int] = None  # the cgroup's memory.max, where properties cannot be read back
    memory_high: Optional[int] = None  # the cgroup's memory.high, likewise
    cpu_quota: Optional[int] = None  # the cgroup's cpu.max as whole percents of one CPU, likewise
    memory_current: Optional[int] = None  # what its processes use now (memory.current), when known
    hugetlb_exact: bool = True  # False: hugetlb_max lists only the sizes the host lets us read


def same_properties(current: Mapping[str, str], wanted: Mapping[str, str]) -> bool:
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


# Headroom a change of a running slice's limits must leave (docs/slices-and-admission.md, "Limits on a
# running slice"): MemoryMax at least current use plus max(64 MiB, 5 % of it), MemoryHigh (90 % of
# MemoryMax) never below current use, every huge page limit one page above what is faulted in, and no
# CPUQuota below 10 % of one CPU (for a fresh slice too).
MEMORY_MARGIN_MIN = 64 * MIB
MEMORY_MARGIN_PERCENT = 5
CPU_QUOTA_FLOOR = 10  # percent of one CPU: 10 ms of every 100 ms period
CPU_MILLIS_FLOOR = CPU_QUOTA_FLOOR * 10
# and at most every CPU a cpulist may name (MAX_CPU): past it systemd refuses the CPUQuota, and no host has them
CPU_QUOTA_CEILING = (MAX_CPU + 1) * 100
CPU_MILLIS_CEILING = CPU_QUOTA_CEILING * 10


def memory_margin(used: int) -> int:
    """What a running slice's MemoryMax must leave over its use: max(64 MiB, 5 % of it, rounded up)."""
    return max(MEMORY_MARGIN_MIN, (used * MEMORY_MARGIN_PERCENT + 99) // 100)


def least_memory_bytes(used: int) -> int:
    """The least ``memory_bytes`` a slice whose workload uses ``used`` bytes may get: MemoryMax at least
    ``used + memory_margin(used)``, and MemoryHigh (90 % of it, rounded down) at least ``used``."""
    return max(used + memory_margin(used), (used * 10 + 8) // 9)


def cpu_quota_problem(properties: Mapping[str, str]) -> Optional[str]:
    """Why a slice's CPUQuota is refused (below ``CPU_QUOTA_FLOOR`` % of one CPU, or above ``CPU_QUOTA_CEILING``),
    or None."""
    quota = properties.get("CPUQuota")
    if not isinstance(quota, str) or not CPU_QUOTA_RE.fullmatch(quota):
        return None
    percent = int(quota[:-1])
    if percent > CPU_QUOTA_CEILING:
        return ("CPUQuota=%d%%, above the ceiling of %d%% (%d CPUs, all a cpulist may name): at most %d cpu_millis"
                % (percent, CPU_QUOTA_CEILING, MAX_CPU + 1, CPU_MILLIS_CEILING))
    if percent >= CPU_QUOTA_FLOOR:
        return None
    return ("CPUQuota=%d%%, below the floor of %d%% of one CPU: at least %d cpu_millis are needed (or none, "
            "for no quota)" % (percent, CPU_QUOTA_FLOOR, CPU_MILLIS_FLOOR))


def limits_problem(limits: Optional[Limits]) -> Optional[str]:
    """Why a sliced hold's limits are refused before anything is made (``invalid-assignment``), or None."""
    wanted = wanted_slice(limits)
    problem = None if wanted is None else cpu_quota_problem(wanted[0])
    if problem is None or limits is None or limits.cpu_millis is None:  # a CPUQuota comes of cpu_millis alone
        return None
    return "limits.cpu_millis: %d gives %s" % (limits.cpu_millis, problem)


# cpus and mems as a slice's properties: (property, the limit it comes from, what it lists, the host's set of them)
CPUSET_PROPERTIES = (("AllowedCPUs", "cpus", "CPU", "online"), ("AllowedMemoryNodes", "mems", "NUMA node", "memory_nodes"))


class HostCpuSets(Protocol):
    """What ``cpuset_problem`` reads of the host (``admission.HostCpus``): its online CPUs and its NUMA nodes
    with memory."""

    @property
    def online(self) -> FrozenSet[int]: ...

    @property
    def memory_nodes(self) -> FrozenSet[int]: ...


def _host_set(host: HostCpuSets, have: str) -> FrozenSet[int]:
    """The host's set ``have`` names in ``CPUSET_PROPERTIES``."""
    return host.online if have == "online" else host.memory_nodes


def _cpuset(value: object) -> Optional[FrozenSet[int]]:
    """A cpulist property as a set of numbers; None for none (every CPU or node) or one that does not parse."""
    if not isinstance(value, str) or not value.strip():
        return None
    try:
        return frozenset(parse_cpulist(value))
    except (ValueError, InvalidAssignment):
        return None


# Why a running slice's cpus and mems never narrow (what follows a narrowing's numbers in every message).
RUNNING_CPUSET = ("a running workload's cpus and mems only widen or stay (it would lose CPUs, or the memory nodes "
                  "its pages are on)")


def cpuset_problem(current: Optional[SliceState], properties: Mapping[str, str], host: Optional[HostCpuSets] = None,
                   name: str = "the slice") -> Optional[Tuple[str, bool]]:
    """Why a slice's new ``cpus``/``mems`` are refused, or None (docs/security.md, "Limits on a running slice"):

    * numbers the host lacks (``host``, an ``admission.HostCpus``: CPUs not online, NUMA nodes without
      memory); not checked where the host was not read (None). Permanent: ``(message, False)``;
    * on a populated slice whose properties are known, a narrowing: a CPU or node it has now that the new
      list leaves out (a list where it had none narrows from every one). Its workload would lose CPUs, or
      the memory nodes its pages are on (an OOM kill in the cpuset), so ``cpus`` and ``mems`` of a running
      slice only widen or stay. Retryable: ``(message, True)``, the same change is made once it is empty.

    The planner (a kept hold's new limits), the helper's ``slice.apply`` and every backend's ``apply`` ask
    this one function."""
    label = current.name if current is not None else name
    if host is not None:
        problems: List[str] = []
        for key, limit, noun, have in CPUSET_PROPERTIES:
            wanted = _cpuset(properties.get(key))
            lacking = wanted - _host_set(host, have) if wanted is not None else None
            if lacking:
                problems.append("limits.%s %s: %s %s on this node (%s: %s)" % (
                    limit, properties[key], _counted(noun, lacking),
                    "not online" if have == "online" else "without memory",
                    "online" if have == "online" else "NUMA nodes with memory",
                    format_cpulist(_host_set(host, have)) or "none"))
        if problems:
            return "%s: %s" % (label, "; ".join(problems)), False
    found = narrowing(current, properties)
    if found is None:
        return None
    return "%s; %s: set once the slice is empty" % (found, RUNNING_CPUSET), True


def narrowing(current: Optional[SliceState], properties: Mapping[str, str]) -> Optional[str]:
    """What new ``cpus``/``mems`` (``properties``) take from the populated slice ``current`` whose properties are
    known (``<slice>: limits.cpus 0-1 narrows AllowedCPUs=0-3: it leaves out CPUs 2-3``), or None: nothing, an
    empty slice, or one whose properties are not known."""
    if current is None or not current.populated or current.properties is None:
        return None
    problems: List[str] = []
    for key, limit, noun, _have in CPUSET_PROPERTIES:
        present = _cpuset(current.properties.get(key))
        wanted = _cpuset(properties.get(key))
        if wanted is None:  # none: every CPU or node, a widening (or the same)
            continue
        if present is None:
            problems.append("limits.%s %s narrows %s from every %s to %s"
                            % (limit, properties[key], key, noun, format_cpulist(wanted)))
        elif not present <= wanted:
            problems.append("limits.%s %s narrows %s=%s: it leaves out %s" % (
                limit, properties[key], key, format_cpulist(present), _counted(noun, present - wanted)))
    return "%s: %s" % (current.name, "; ".join(problems)) if problems else None


def _counted(noun: str, numbers: Collection[int]) -> str:
    """``CPU 3``, ``NUMA nodes 0-1``."""
    return "%s%s %s" % (noun, "s" if len(numbers) > 1 else "", format_cpulist(numbers))


def check_slice_change(current: Optional[SliceState], properties: Mapping[str, str], huge: Mapping[str, int],
                       name: str = "the slice", host: Optional[HostCpuSets] = None) -> None:
    """Refuse slice settings that leave a running workload no headroom: a change never kills a workload,
    and never starves it. ``current`` is the slice ``name``'s ``SliceState`` (None: no slice yet). Every
    backend's ``apply`` runs it as the writer (root, or the helper as root); the helper runs it first too.

    * ``CPUQuota`` at least ``CPU_QUOTA_FLOOR`` % of one CPU, on any slice;
    * on a populated slice whose use is known: ``MemoryMax`` at least use + ``memory_margin``, ``MemoryHigh``
      at least use, and each huge page limit at least one page above what is faulted in.

    Only a setting that takes something away is held to these: one below what the slice has now, or
    where it has no limit (``lowers``). Setting the same again (a drift repair, a change of another
    limit) or more is never refused, whatever the workload uses: a workload at its ``MemoryHigh`` (page
    cache keeps it there), past it, or with every huge page it booked faulted in keeps its slice's
    limits settable, and a slice bound under the CPU floor keeps its quota.
    """
    refused = cpuset_problem(current, properties, host, name)
    if refused is not None:
        raise (TransientSliceError if refused[1] else SliceError)(refused[0])
    present = current_settings(current)
    problem = cpu_quota_problem(properties)
    if problem is not None and lowers(_percent(properties.get("CPUQuota")), present.get("CPUQuota")):
        raise SliceError("%s: cpu_millis gives %s" % (current.name if current is not None else name, problem))
    if current is None or not current.populated:
        return
    used = current.memory_current
    memory_max, memory_high = (value if isinstance(value, str) else None
                               for value in (properties.get("MemoryMax"), properties.get("MemoryHigh")))
    if used is not None and memory_max is not None and memory_max.isdigit():
        margin = memory_margin(used)
        high = int(memory_high) if memory_high is not None and memory_high.isdigit() else None
        if (int(memory_max) < used + margin and lowers(int(memory_max), present.get("MemoryMax"))) or \
                (high is not None and high < used and lowers(high, present.get("MemoryHigh"))):
            raise TransientSliceError(
                "%s: memory_bytes %s leaves no headroom over the slice's current use %d: at least %d is needed "
                "(MemoryMax >= current + %s = %d, and MemoryHigh, 90%% of it, >= current); a change of its "
                "limits never kills its workload" % (current.name, memory_max, used, least_memory_bytes(used),
                                                     _margin_text(margin), used + margin))
    elif used is not None and memory_high is not None and memory_high.isdigit() and int(memory_high) < used \
            and lowers(int(memory_high), present.get("MemoryHigh")):
        raise TransientSliceError("%s: MemoryHigh %s is below the slice's current use %d; a change of its limits never "
                                  "kills its workload" % (current.name, memory_high, used))
    pages = dict((size, (attribute, page)) for size, attribute, page in HUGE_SIZES)
    for size, value in sorted(huge.items()):
        faulted = current.hugetlb_current.get(size, 0)
        attribute, page = pages.get(size, ("hugetlb.%s" % size, 1))
        if faulted and value < faulted + page and lowers(value, current.hugetlb_max.get(size)):
            raise TransientSliceError(
                "%s: %s %d (hugetlb.%s.max=%d) leaves no headroom over the %s huge pages faulted in, %d bytes "
                "(%d pages): at least %d pages (%d bytes, one page more) are needed; a change of its limits "
                "never kills its workload" % (current.name, attribute, value // page, size, value, size, faulted,
                                              faulted // page, faulted // page + 1, faulted + page))


def lowers(new: Optional[int], present: Optional[int]) -> bool:
    """Whether a new limit takes something away: it is below ``present``, or there is no limit now (None)."""
    return new is not None and (present is None or new < present)


def _percent(quota: object) -> Optional[int]:
    """``"124%"`` as 124; None for anything else."""
    return int(quota[:-1]) if isinstance(quota, str) and CPU_QUOTA_RE.fullmatch(quota) else None


def current_settings(current: Optional[SliceState]) -> Dict[str, int]:
    """What a slice holds now, as numbers: ``CPUQuota`` (percent), ``MemoryMax``, ``MemoryHigh``; a setting
    that is unset, unlimited or unknown is left out. From its properties where the backend reads them back,
    else from its cgroup files (``SliceState.memory_max`` and the like)."""
    if current is None:
        return {}
    properties = current.properties or {}
    found: Dict[str, Optional[int]] = {"CPUQuota": _percent(properties.get("CPUQuota"))}
    for key in ("MemoryMax", "MemoryHigh"):
        value = properties.get(key)
        found[key] = int(value) if isinstance(value, str) and value.isdigit() else None
    fallback = {"CPUQuota": current.cpu_quota, "MemoryMax": current.memory_max, "MemoryHigh": current.memory_high}
    for key, number in fallback.items():
        if found[key] is None and isinstance(number, int) and not isinstance(number, bool):
            found[key] = number
    return dict((key, value) for key, value in found.items() if value is not None)


def _margin_text(margin: int) -> str:
    return "64 MiB" if margin == MEMORY_MARGIN_MIN else "5%% (%d)" % margin


def cgroup_parent_of(assignment: Assignment, kubernetes: Optional[bool] = None) -> Optional[str]:
    """The slice a hold's spec names: plain holds with limits only (a Kubernetes hold lives in kubepods.slice)."""
    kubernetes = assignment.kubernetes if kubernetes is None else kubernetes
    if kubernetes or assignment.limits is None or assignment.limits.is_empty():  # wanted_slice(limits) is None
        return None
    return slice_name(assignment.allocation_id)


def wanted_slice(limits: Optional[Limits]) -> Optional[Tuple[Dict[str, str], Dict[str, int]]]:
    """``(properties, hugetlb_max)`` for limits, or None when they book nothing a slice enforces."""
    if limits is None or limits.is_empty():
        return None
    return slice_properties(limits), hugetlb_max(limits)


def limits_of_slice(state: SliceState) -> Limits:
    """What a slice still holds of the host, as ``Limits``: its memory limit and huge page limits."""
    properties = state.properties or {}
    memory = properties.get("MemoryMax")
    if memory is None and state.memory_max is not None:
        memory = str(state.memory_max)
    pages = dict((attribute, state.hugetlb_max.get(size, 0) // page) for size, attribute, page in HUGE_SIZES)
    return Limits(mems=properties.get("AllowedMemoryNodes") or None,
                  memory_bytes=int(memory) if memory and memory.isdigit() else None,
                  hugepages_2mi=pages["hugepages_2mi"] or None, hugepages_1gi=pages["hugepages_1gi"] or None)


def settings_text(properties: Optional[Mapping[str, str]], hugetlb_max: Optional[Mapping[str, int]]) -> str:
    """A slice's settings, one ``key=value`` a line, as ``--diff`` shows them."""
    lines = ["%s=%s" % item for item in (properties or {}).items()]
    lines.extend("hugetlb.%s.max=%d" % item for item in sorted((hugetlb_max or {}).items()))
    return "".join(line + "\n" for line in lines)


def settings_of(state: SliceState) -> str:
    """The settings of a slice as the host shows them (what the backend can read back)."""
    return settings_text(state.properties, state.hugetlb_max)
