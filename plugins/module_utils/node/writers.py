# -*- coding: utf-8 -*-
# Copyright: contributors to bcd.devices
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""Who does root's work for a host: this process, or the root helper.

A pass needs root for four things: writing and removing a hold's node files,
making and stopping hold slices, and asking the kubelet (its socket is root's).
A host is handed one writer that does them: ``DirectWriter`` does them here
(privileged only when this process is root), ``HelperWriter`` sends them to the
root helper over its socket. The host, and everything above it, never asks which.

A pass's apply loop brackets its work with ``batch()`` and ``flush()``: in between,
``DirectWriter`` fsyncs each file before its rename as always but each directory it
changed only once, at ``flush()``, which the loop calls before it journals the events
that report the writes (``node/fsutil.py``, ``directory_syncs_into``). The helper
fsyncs every request's directory itself: its ``batch`` and ``flush`` do nothing.

No bytes cross the helper's socket: ``HelperWriter`` sends what a file is
rendered from (the hold's checked assignment and generation) and what a slice
is built from (its limits), and root renders and builds them itself
(docs/security.md).

Nor does a path: a node file is named by its kind and allocation id. ``DirectWriter``
writes the path the planner made (``FileChange.path``), checked to be one of its kind's
names in its kind's directory and joined under the host's root; ``HelperWriter`` sends
the kind and the id alone, and root makes the path from them (``node_file_path``).

What root keeps in ``/etc/cdi`` is bounded (docs/security.md, "Quotas on what
root creates"): ``count_node_files`` counts a kind's files for the helper's quota,
with a bounded scan, and every set-aside keeps at most ``ASIDE_PER_HOLD`` damaged
copies of an allocation and ``ASIDE_TOTAL`` in all, the oldest removed.
"""

from __future__ import annotations

import os
import stat
from contextlib import nullcontext
from typing import TYPE_CHECKING, Any, Callable, ContextManager, Dict, Iterable, List, Optional, Protocol, Set, Tuple, Union

from ansible_collections.bcd.devices.plugins.module_utils.domain.cdi.hold_spec import (
    DAMAGED_FILE_RE,
    ENV_DIR,
    SPEC_DIR,
    SPEC_FILE_RE,
    cdi_spec_path,
    damaged_spec_path,
    env_file_path,
)
from ansible_collections.bcd.devices.plugins.module_utils.domain.input.assignment import ALLOCATION_ID, ALLOCATION_ID_RE
from ansible_collections.bcd.devices.plugins.module_utils.domain.plan.seams import Writer
from ansible_collections.bcd.devices.plugins.module_utils.domain.slices import allocation_of
from ansible_collections.bcd.devices.plugins.module_utils.node.fsutil import (
    NodePaths,
    directory_syncs_into,
    fsync_directory_fd,
    remove_file,
    sync_directories,
    write_atomic,
)
from ansible_collections.bcd.devices.plugins.module_utils.support.errors import RetryableError
from ansible_collections.bcd.devices.plugins.module_utils.support.speed import lazy_pattern

if TYPE_CHECKING:
    from re import Pattern

    from ansible_collections.bcd.devices.plugins.module_utils.domain.plan.seams import NodeFileKind, SliceSettings
    from ansible_collections.bcd.devices.plugins.module_utils.node.helper_client import HelperClient
    from ansible_collections.bcd.devices.plugins.module_utils.node.kubelet import KubeSide
    from ansible_collections.bcd.devices.plugins.module_utils.node.mig_side import MigSide
    from ansible_collections.bcd.devices.plugins.module_utils.node.slices import RecordSlices, SystemdSlices
    from ansible_collections.bcd.devices.plugins.module_utils.support.speed import LazyPattern

# The node files a pass writes, by kind: the root helper accepts exactly these.
NODE_FILE_KINDS: Dict[str, Callable[[str], str]] = {
    "cdi": cdi_spec_path,
    "allocation-env": env_file_path,
}
NODE_FILE_MODE = 0o644
# Where each kind's files live and the names they have there (temporaries and damaged copies do not match).
NODE_FILE_NAMES: Dict[str, Tuple[str, LazyPattern]] = {
    "cdi": (SPEC_DIR, SPEC_FILE_RE),
    "allocation-env": (ENV_DIR, lazy_pattern(r"^(%s)\.env$" % ALLOCATION_ID)),
}
# Damaged specs set aside are kept for someone to read, but not without end: at most this many per
# allocation (the newest), and this many in /etc/cdi in all (the newest, whichever allocation's).
ASIDE_PER_HOLD = 3
ASIDE_TOTAL = 64
# Entries of a directory looked at when counting or pruning: a scan costs at most this much, whatever
# is in the directory (a node's own holds and copies are far fewer).
SCAN_LIMIT = 16384
_ASIDE_MARK = ".json.damaged-"
# A damaged copy's name as it sorts: ``(UTC time, number, allocation id, name)`` (``_aside_key``).
AsideKey = Tuple[str, int, str, str]


class TooManyEntries(RetryableError):
    """A directory with more entries than a bounded scan looks at."""


def _open_directory(local: str) -> Optional[int]:
    """A descriptor of the directory ``local`` (never through a link), or None when it is missing."""
    try:
        return os.open(local, os.O_RDONLY | getattr(os, "O_DIRECTORY", 0) | getattr(os, "O_NOFOLLOW", 0)
                       | getattr(os, "O_CLOEXEC", 0))
    except FileNotFoundError:
        return None


def _names(fd: int, scan_limit: int) -> List[str]:
    """The first ``scan_limit`` entry names of the directory open as ``fd``, in the order it lists them."""
    names: List[str] = []
    with os.scandir(fd) as listing:
        for entry in listing:
            if len(names) >= scan_limit:
                break
            names.append(entry.name)
    return names


def count_node_files(local: str, pattern: Union[LazyPattern, Pattern[str]], enough: int, scan_limit: int = SCAN_LIMIT) -> int:
    """How many names in the directory ``local`` match ``pattern``, counted up to ``enough`` (a quota
    needs no more). Names only: nothing is opened or followed. ``TooManyEntries`` when ``scan_limit``
    entries are looked at before ``enough`` are found."""
    fd = _open_directory(local)
    if fd is None:
        return 0
    count, seen = 0, 0
    try:
        with os.scandir(fd) as listing:
            for entry in listing:
                if pattern.fullmatch(entry.name):
                    count += 1
                    if count >= enough:
                        break
                seen += 1
                if seen >= scan_limit:
                    raise TooManyEntries("%s has more than %d entries; not counted further" % (local, scan_limit))
    finally:
        os.close(fd)
    return count


def _aside_key(name: str) -> Optional[AsideKey]:
    """``(UTC time, number, allocation id, name)`` of a damaged copy's name (``-2``, ``-3``… after the
    first of one second), sorting oldest first; None for any other name."""
    match = DAMAGED_FILE_RE.fullmatch(name)
    if match is None:
        return None
    rest = name[len("bcd-") + len(match.group(1)) + len(_ASIDE_MARK):]  # <YYYYmmddTHHMMSSZ>[-<n>]
    return (rest[:16], int(rest[17:]) if len(rest) > 16 else 1, match.group(1), name)


def _doomed(found: Iterable[AsideKey], per_hold: int, total: int) -> Set[str]:
    """The names past the newest ``per_hold`` of each allocation, then past the newest ``total`` of all."""
    keys = sorted(found)
    doomed: Set[str] = set()
    by_hold: Dict[str, List[AsideKey]] = {}
    for key in keys:
        by_hold.setdefault(key[2], []).append(key)
    for mine in by_hold.values():
        doomed.update(key[3] for key in mine[:max(0, len(mine) - per_hold)])
    kept = [key for key in keys if key[3] not in doomed]
    doomed.update(key[3] for key in kept[:max(0, len(kept) - total)])
    return doomed


def set_aside(local_dir: str, allocation_id: str, now: float, per_hold: int = ASIDE_PER_HOLD, total: int = ASIDE_TOTAL,
              scan_limit: int = SCAN_LIMIT) -> Optional[str]:
    """Rename ``bcd-<id>.json`` in ``local_dir`` (the real /etc/cdi) aside as
    ``bcd-<id>.json.damaged-<UTC time>``, numbered past every copy of that second (``-2``, ``-3``…) so that
    names sort in the order they were made, then prune: only names of that exact pattern, each a regular
    file owned by this process's uid (never a link, never followed), the oldest beyond ``per_hold`` of
    one allocation and beyond ``total`` in all (of the first ``scan_limit`` entries: a directory past that
    is pruned as far as it was seen, and never keeps a spec from being set aside). Returns the name given,
    or None when there was no spec."""
    spec = os.path.basename(cdi_spec_path(allocation_id))
    fd = _open_directory(local_dir)
    if fd is None:
        return None
    try:
        try:
            os.stat(spec, dir_fd=fd, follow_symlinks=False)
        except FileNotFoundError:
            return None
        base = os.path.basename(damaged_spec_path(allocation_id, now))
        keys = [key for key in (_aside_key(name) for name in _names(fd, scan_limit)) if key]
        taken = [key[1] for key in keys if key[3] == base or key[3].startswith(base + "-")]
        number = max(taken) + 1 if taken else 1
        while True:
            target = base if number == 1 else "%s-%d" % (base, number)
            try:
                os.stat(target, dir_fd=fd, follow_symlinks=False)
            except FileNotFoundError:
                break
            number += 1
        os.rename(spec, target, src_dir_fd=fd, dst_dir_fd=fd)
        made = _aside_key(target)
        if made is not None:  # the name it was given is a damaged copy's
            keys.append(made)
        uid = os.geteuid()
        for name in sorted(_doomed(keys, per_hold, total)):
            try:
                info = os.stat(name, dir_fd=fd, follow_symlinks=False)
                if stat.S_ISREG(info.st_mode) and info.st_uid == uid:
                    os.unlink(name, dir_fd=fd)
            except FileNotFoundError:
                continue
        fsync_directory_fd(fd)
    finally:
        os.close(fd)
    return target


def node_file_path(kind: str, allocation_id: str) -> str:
    """The node path of a file of ``kind`` for a checked allocation id."""
    if kind not in NODE_FILE_KINDS:
        raise ValueError("unknown node file kind %r" % (kind,))
    if not isinstance(allocation_id, str) or not ALLOCATION_ID_RE.fullmatch(allocation_id):
        raise ValueError("allocation id %r is not valid" % (allocation_id,))
    return NODE_FILE_KINDS[kind](allocation_id)


def checked_node_path(kind: str, node_path: str) -> str:
    """``node_path`` when it names a file of ``kind``: one of the kind's names, in the kind's directory (a
    planner's ``FileChange.path``); else ``ValueError``. The host joins it under its root."""
    if kind not in NODE_FILE_NAMES:
        raise ValueError("unknown node file kind %r" % (kind,))
    directory, pattern = NODE_FILE_NAMES[kind]
    parent, _slash, name = node_path.rpartition("/") if isinstance(node_path, str) else (None, "", "")
    if parent != directory or not pattern.fullmatch(name):
        raise ValueError("%r is not the path of a %s file" % (node_path, kind))
    return node_path


def _node_path(kind: str, allocation_id: str, node_path: Optional[str]) -> str:
    """The node path a ``DirectWriter`` writes or removes: the planner's, checked, where it gave one."""
    if node_path is None:
        return node_file_path(kind, allocation_id)
    return checked_node_path(kind, node_path)


class HostSide(NodePaths, Protocol):
    """What a writer asks of its host (``node/hosts.py``: ``Host``): the node's paths, its slice backend, and
    the kube side as this process reaches it."""

    @property
    def slices(self) -> Union[SystemdSlices, RecordSlices]:
        """The host's slice backend."""

    def direct_kube_side(self) -> KubeSide:
        """The kube side, asked by this process."""

    def direct_mig_side(self) -> MigSide:
        """The MIG side, read and changed by this process."""


class NodeWriter(Writer, Protocol):
    """A host's writer: the plan's ``Writer`` (``domain/plan/seams.py``), and what the host asks of it besides:
    whether root's work can be done, and who asks the kubelet."""

    @property
    def privileged(self) -> bool:
        """Whether root's work can be done: this process is root, or the root helper does it."""

    def kube_side(self, host: HostSide) -> KubeSide:
        """The kube side as whoever does root's work reaches it (the kubelet's socket is root's)."""

    def mig_side(self, host: HostSide) -> MigSide:
        """The MIG side as whoever does root's work reaches it (changing MIG instances is root's)."""


class DirectWriter:
    """Root's work done by this process, on ``host``'s own files and slice backend."""

    def __init__(self, host: HostSide) -> None:
        self.host = host
        self._unsynced: Optional[Set[str]] = None  # between batch() and flush(): directories to fsync

    @property
    def privileged(self) -> bool:
        return os.geteuid() == 0

    def batch(self) -> None:
        """From now until ``flush``, each directory this writer changes is fsynced once, at ``flush``."""
        if self._unsynced is None:
            self._unsynced = set()

    def flush(self) -> None:
        """Make every rename and removal since ``batch`` durable: fsync each directory they changed, once.
        Before anything reports them (the apply loop calls it before it journals the pass's events)."""
        if self._unsynced is not None:
            sync_directories(self._unsynced)
            self._unsynced = None

    def _writing(self) -> ContextManager[object]:
        return directory_syncs_into(self._unsynced) if self._unsynced is not None else nullcontext()

    def write_node_file(self, kind: NodeFileKind, allocation_id: str, content: bytes, hold: Optional[Dict[str, Any]] = None,
                        path: Optional[str] = None) -> None:
        """Write a hold's file atomically (0644) at ``path``, the node path the planner made (checked:
        ``checked_node_path``), under the host's root; without one (the root helper's own call), at the path
        of ``kind`` for ``allocation_id``. ``hold`` (what it was rendered from) is the helper's."""
        with self._writing():
            write_atomic(self.host.path(_node_path(kind, allocation_id, path)), content, NODE_FILE_MODE)

    def remove_node_file(self, kind: NodeFileKind, allocation_id: str, path: Optional[str] = None) -> None:
        """Remove a hold's file (a link in its place is removed, never followed): ``path`` as ``write_node_file``'s."""
        with self._writing():
            remove_file(self.host.path(_node_path(kind, allocation_id, path)))

    def set_aside_spec(self, allocation_id: str, now: float) -> Optional[str]:
        """A damaged spec renamed aside in /etc/cdi; the oldest copies beyond the bounds are removed."""
        node_file_path("cdi", allocation_id)  # a checked id
        return set_aside(self.host.path(SPEC_DIR), allocation_id, now)

    def count_node_files(self, kind: NodeFileKind, enough: int) -> int:
        """How many files of ``kind`` the node has, counted up to ``enough`` (``TooManyEntries``)."""
        directory, pattern = NODE_FILE_NAMES[kind]
        return count_node_files(self.host.path(directory), pattern, enough)

    def apply_slice(self, op: SliceSettings) -> None:
        """Create a slice or set its limits (an ``actions.SliceApply``)."""
        with self._writing():  # a fakehw node's slices are files
            self.host.slices.apply(op.name, op.properties, op.hugetlb_max)

    def stop_slice(self, name: str) -> None:
        with self._writing():
            self.host.slices.remove(name)

    def kube_side(self, host: HostSide) -> KubeSide:
        return host.direct_kube_side()

    def mig_side(self, host: HostSide) -> MigSide:
        return host.direct_mig_side()


class HelperWriter:
    """Root's work sent to the root helper (``node.helper_client.HelperClient``)."""

    privileged = True

    def __init__(self, client: HelperClient) -> None:
        self.client = client

    def batch(self) -> None:
        """The helper fsyncs each request's directory before it answers: nothing to batch here."""

    def flush(self) -> None:
        """Nothing is left to fsync: see ``batch``."""

    def write_node_file(self, kind: NodeFileKind, allocation_id: str, content: bytes, hold: Optional[Dict[str, Any]] = None,
                        path: Optional[str] = None) -> None:
        """The helper renders the file itself from ``hold`` and names it from ``kind`` and the hold's id:
        ``content`` and ``path`` never leave this process."""
        self.client.request({"op": "hold.write", "kind": kind, "hold": hold})

    def remove_node_file(self, kind: NodeFileKind, allocation_id: str, path: Optional[str] = None) -> None:
        """Root names the file it removes from ``kind`` and ``allocation_id``; ``path`` is not sent."""
        self.client.request({"op": "hold.remove", "kind": kind, "allocation_id": allocation_id})

    def set_aside_spec(self, allocation_id: str, now: float) -> None:
        """Root names the file it sets aside by its own clock."""
        self.client.request({"op": "hold.set_aside", "allocation_id": allocation_id})

    def apply_slice(self, op: SliceSettings) -> None:
        self.client.request({"op": "slice.apply", "allocation_id": allocation_of(op.name), "limits": op.limits})

    def stop_slice(self, name: str) -> None:
        self.client.request({"op": "slice.stop", "allocation_id": allocation_of(name)})

    def kube_side(self, host: HostSide) -> KubeSide:
        """Root asks the kubelet itself; anyone else asks through the helper."""
        if os.geteuid() == 0:
            return host.direct_kube_side()
        from ansible_collections.bcd.devices.plugins.module_utils.node.kubelet import HelperKubeSide  # pylint: disable=import-outside-toplevel
        return HelperKubeSide(self.client)

    def mig_side(self, host: HostSide) -> MigSide:
        """Root reads and changes MIG itself; anyone else asks the helper, which checks each op against the
        claims it reads itself."""
        if os.geteuid() == 0:
            return host.direct_mig_side()
        from ansible_collections.bcd.devices.plugins.module_utils.node.helper_client import HelperMigSide  # pylint: disable=import-outside-toplevel
        return HelperMigSide(self.client)
