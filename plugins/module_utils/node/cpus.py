# -*- coding: utf-8 -*-
# Copyright: contributors to bcd.devices
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""The host's CPUs and NUMA nodes as admission checks them, read from sysfs under ``root``.

* ``/sys/devices/system/cpu/online``: the online CPUs;
* ``/sys/devices/system/node/online``: the NUMA nodes (absent on a kernel without NUMA: one node 0
  with every CPU and the memory);
* ``/sys/devices/system/node/has_memory``: the nodes with memory, the only ones ``cpuset.mems`` takes
  (absent: every online node);
* ``/sys/devices/system/node/node<N>/cpulist``: each node's CPUs, for the locality note.

Every file is read without following a FIFO's wait and to at most ``MAX_BYTES``, every list is bounded
by the kernel's own ceilings (``assignment.MAX_CPU``, ``MAX_NODE``), so no host makes a pass read or
count more than a few thousand numbers. A fakehw host reads the same files under its root when its
hardware file describes no CPUs (``node/fakehw_data.py``).
"""

from __future__ import annotations

import errno
from typing import TYPE_CHECKING, Dict, FrozenSet, Optional, Set, Tuple

from ansible_collections.bcd.devices.plugins.module_utils.domain.input.assignment import MAX_CPU, MAX_NODE
from ansible_collections.bcd.devices.plugins.module_utils.domain.plan.admission import HostCpus
from ansible_collections.bcd.devices.plugins.module_utils.node.fsutil import NotRegularFile, read_regular
from ansible_collections.bcd.devices.plugins.module_utils.support.errors import BcdError
from ansible_collections.bcd.devices.plugins.module_utils.support.speed import lazy_pattern

if TYPE_CHECKING:
    from ansible_collections.bcd.devices.plugins.module_utils.node.fsutil import NodePaths

CPU_ONLINE = "/sys/devices/system/cpu/online"
NODE_ONLINE = "/sys/devices/system/node/online"
NODE_HAS_MEMORY = "/sys/devices/system/node/has_memory"
NODE_CPULIST = "/sys/devices/system/node/node%d/cpulist"
# The longest list the kernel writes: every other CPU of 8192 online ("0,2,4,…") is some 20 KiB.
MAX_BYTES = 64 * 1024
HOST_CPULIST_RE = lazy_pattern(r"^([0-9]{1,9}(-[0-9]{1,9})?(,[0-9]{1,9}(-[0-9]{1,9})?)*)?$")


class Unreadable(BcdError):
    """A sysfs file that is there but cannot be used; the message names it (``read_host_cpus`` returns it)."""


def _read(host: NodePaths, node_path: str) -> Optional[str]:
    """The text of a small sysfs file under the host's root; None when it is not there."""
    try:
        content = read_regular(host.path(node_path), MAX_BYTES)
    except NotRegularFile:
        raise Unreadable("%s is not a regular file" % node_path)
    except OSError as exc:
        if exc.errno in (errno.ENOENT, errno.ENOTDIR):
            return None
        raise Unreadable("cannot read %s: %s" % (node_path, exc.strerror or exc))
    if len(content) > MAX_BYTES:
        raise Unreadable("%s is larger than %d bytes" % (node_path, MAX_BYTES))
    return content.decode("ascii", "replace")


def parse_host_cpulist(text: str, highest: int, where: str) -> FrozenSet[int]:
    """The numbers of a cpulist the kernel wrote (``0-3,8``; empty for none), none above ``highest``, its ranges
    ascending and disjoint."""
    text = text.strip()
    if not HOST_CPULIST_RE.fullmatch(text):
        raise Unreadable("%s: %r is not a cpulist" % (where, text[:80]))
    numbers: Set[int] = set()
    last = -1
    for part in text.split(",") if text else ():
        low, _sep, high = part.partition("-")
        low_number, high_number = int(low), int(high or low)
        # ascending and disjoint, as the kernel writes them: at most ``highest`` + 1 numbers in all
        if high_number > highest or low_number > high_number or low_number <= last:
            raise Unreadable("%s: %s is not an ascending list of %s up to %d"
                             % (where, part, "CPUs" if highest == MAX_CPU else "NUMA nodes", highest))
        numbers.update(range(low_number, high_number + 1))
        last = high_number
    return frozenset(numbers)


def read_host_cpus(host: NodePaths) -> Tuple[Optional[HostCpus], Optional[str]]:
    """``(HostCpus, None)`` from sysfs under the host's root; ``(None, why)`` when the CPUs cannot be read
    (``why`` is None when ``cpu/online`` is simply not there)."""
    try:
        text = _read(host, CPU_ONLINE)
        if text is None:
            return None, None
        online = parse_host_cpulist(text, MAX_CPU, CPU_ONLINE)
        text = _read(host, NODE_ONLINE)
        if text is None:  # a kernel without NUMA: one node, every CPU and the memory on it
            return HostCpus(online=online, memory_nodes=frozenset([0]), node_cpus={0: online}), None
        nodes = parse_host_cpulist(text, MAX_NODE, NODE_ONLINE)
        text = _read(host, NODE_HAS_MEMORY)
        memory = parse_host_cpulist(text, MAX_NODE, NODE_HAS_MEMORY) if text is not None else nodes
        node_cpus: Dict[int, FrozenSet[int]] = {}
        for node in sorted(nodes):  # at most MAX_NODE + 1 small files
            text = _read(host, NODE_CPULIST % node)
            if text is not None:  # a node whose CPUs are not known: no locality is said for its GPUs
                node_cpus[node] = parse_host_cpulist(text, MAX_CPU, NODE_CPULIST % node) & online
    except Unreadable as exc:
        return None, str(exc)
    return HostCpus(online=online, memory_nodes=memory, node_cpus=node_cpus), None
