# -*- coding: utf-8 -*-
# Copyright: contributors to bcd.devices
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""Root's own reading of the node for the root helper, and the quotas it checks on what it read.

A request is decided by what root reads, never by what the peer says the node has: the hardware
once per ``VIEW_SECONDS`` (``NodeView``, not once a request), the holds root wrote on every
``hold.write`` (``node_holds``, each file parsed again only once it changed: ``HoldFileCache``), who
claims what (``claims_on_node``).

What root keeps is bounded (docs/security.md, "Quotas on what root creates"), in the module's own
units (``domain/input/assignment.py``): a fresh hold spec or env file only while the node has fewer
than ``MAX_HOLD_FILES`` of its kind (``check_quota``); a hold's atoms (``MAX_DEVICES``, as the module
parses it) and those of all holds (``MAX_ATOMS``, ``check_atoms``); a spec's bytes
(``MAX_HOLD_SPEC_BYTES``, what a pass reads back) and the env files' (``MAX_ENV_BYTES``, a devices
section's: ``check_env_bytes``). Every refusal names its numbers, and a pass retries them like any
failed write.
"""

from __future__ import annotations

import os
import stat
import threading
import time
from typing import Any, Callable, Dict, List, Optional, Sequence, Tuple, TypeVar, cast

from ansible_collections.bcd.devices.plugins.module_utils.domain.cdi.hold_spec import SPEC_DIR, SPEC_FILE_RE, read_hold
from ansible_collections.bcd.devices.plugins.module_utils.domain.input.assignment import (
    MAX_ASSIGNMENTS,
    MAX_ATOMS,
    MAX_SECTION_BYTES,
)
from ansible_collections.bcd.devices.plugins.module_utils.domain.input.atoms import Atom, atoms_of
from ansible_collections.bcd.devices.plugins.module_utils.domain.plan.claims import Claims
from ansible_collections.bcd.devices.plugins.module_utils.domain.plan.conflicts import claims_on_disk, named_atoms, visible_names
from ansible_collections.bcd.devices.plugins.module_utils.entry.helper.request import Refused
from ansible_collections.bcd.devices.plugins.module_utils.node.fsutil import read_bytes
from ansible_collections.bcd.devices.plugins.module_utils.node.hosts import Host, read_spec
from ansible_collections.bcd.devices.plugins.module_utils.node.kubelet import view_to_json
from ansible_collections.bcd.devices.plugins.module_utils.node.state_files import DEFAULT_STATE_DIR, StateFiles
from ansible_collections.bcd.devices.plugins.module_utils.node.vendor_spec import ParsedSpecCache
from ansible_collections.bcd.devices.plugins.module_utils.node.writers import NODE_FILE_NAMES, TooManyEntries, count_node_files, node_file_path
from ansible_collections.bcd.devices.plugins.module_utils.state.releases import load_releases
from ansible_collections.bcd.devices.plugins.module_utils.support.errors import BcdError

RUN_SPEC_DIR = "/var/run/cdi"  # the other directory CDI runtimes load: a bcd spec there claims as in /etc/cdi
# How long root's reading of the node's hardware (GPUs, VMs, the kubelet's pods) serves requests: NodeView.
VIEW_SECONDS = 1.0
# Quotas on what root creates (docs/security.md), the module's bounds on a devices section
# (domain/input/assignment.py) applied to what is on the node, so root keeps no more than the largest section
# a pass honours would make it keep:
# - holds: at most MAX_ASSIGNMENTS specs, and as many env files. A pass honours no more entries than that
#   and releases what is no longer wanted before it binds. Overwriting a hold's file is always allowed; a
#   fresh one past the quota is refused.
# - atoms: MAX_DEVICES a hold (the request is parsed as the module parses an entry) and MAX_ATOMS over all
#   holds, this one's replacing what its own files name. Slots are bookkeeping (any s<N> of a listed GPU
#   is held), so the node's GPUs bound the atoms no tighter; this does. A spec's bytes are the vendor
#   spec's edits (root's own data) once a spec and once an atom, and ids bounded per atom, so the atoms
#   bound the specs' bytes as they bound a section's: 13 MiB for the largest section with toolkit 1.17.8's
#   spec (512 holds of 8 slots), against 60 MiB of 47 424 atoms before.
# - bytes: a spec at most MAX_HOLD_SPEC_BYTES, what a pass reads back (past it, a spec reads as damaged);
#   the env files, which carry the account's text (its env lines), at most MAX_SECTION_BYTES in all: an
#   env file is never larger than its entry as the module counts a section (section_size), so a section
#   the module accepts never fills it.
MAX_HOLD_FILES = MAX_ASSIGNMENTS
MAX_ENV_BYTES = MAX_SECTION_BYTES

# allocation -> the atoms of its bcd specs, and allocation -> those its env file names (node_holds)
Holds = Tuple[Dict[str, List[Atom]], Dict[str, List[Atom]]]
# kind -> allocation -> the bytes of its files of that kind (node_holds' sizes)
Sizes = Dict[str, Dict[str, int]]
# a file's device, inode, size, mtime and ctime (HoldFileCache.signature)
Signature = Tuple[int, int, int, int, int]
Read = TypeVar("Read")


class NodeView:
    """Root's reading of the node's hardware, shared by the requests one helper serves: ``fresh`` gives the
    host a request reads the GPUs (NVML or ``nvidia-smi``, which takes the driver's lock), the running VMs
    (``virsh``) and, for ``kube.look``, the kubelet's pods through (``kube_view``). It is read anew once it
    is ``seconds`` old, or at once where the host can tell cheaply that it changed (``Host.view_key``: a
    fakehw file's times), so a flood of requests costs root one reading a ``VIEW_SECONDS``, not one each.

    Why a view up to a second old is safe for the writes that use it:

    * What decides one GPU, one hold is never from this view: the holds root wrote (the specs, env files
      and pending releases, ``claims_on_node``) are read for each ``hold.write``, with the count and the
      write, under one lock; a slice's workload and use are read for each ``slice.apply`` and
      ``slice.stop`` (never kill, never narrow).
    * What is from it changes without asking the helper: a VM is started, a MIG layout made, a pod
      scheduled whenever the host likes. Read fresh, it could change the instant after the read, before the
      write; a second more only widens a race no reading closes. The pass that sends the request planned
      from a reading older still (its own, at its start), and the next pass checks the node again.
    * A stale view errs both ways, neither unsafe: a device that went a moment ago is still resolved (the
      hold names a device the node lacks, as when it goes after the write: ``holds_info`` reports it
      missing); one that came a moment ago is refused ``device-missing``, retryable, and the pass retries.
      A pod that ended a moment ago still holds its device (a release waits longer); one that started a
      moment ago could be missed, as it could be by a fresh reading taken just before it started.

    Every host it gives shares its ``vendor_cache``: the vendor spec is read for each ``hold.write`` (a changed
    file is used at once) but parsed again only when the file changed (``vendor_spec.ParsedSpecCache``).

    ``seconds=0`` reads the node for every request (``handle_request`` given a host, as the fuzzer does)."""

    def __init__(self, host: Host, seconds: float = VIEW_SECONDS, clock: Callable[[], float] = time.monotonic) -> None:
        self.host, self.seconds, self.clock = host, float(seconds), clock
        self.readings = 0  # hosts made: how many times the hardware may have been read
        self._lock = threading.Lock()
        self._looking = threading.Lock()
        self._current: Optional[Tuple[Host, float, object]] = None  # (host, when, key)
        self._kube: Optional[Tuple[Host, Dict[str, Any]]] = None  # (host, view as JSON data)
        # the vendor spec as parsed, for every host of every interval: parsed again only when its file changed
        self.vendor_cache = ParsedSpecCache()

    def fresh(self) -> Host:
        """The host of this interval: a new one (whose hardware is read when first asked for) once the last
        is ``seconds`` old, or the host's ``view_key`` changed."""
        with self._lock:
            now, key = self.clock(), self.host.view_key()
            current = self._current
            if current is None or key != current[2] or not 0 <= now - current[1] < self.seconds:
                fresh = self.host.fresh()
                fresh.vendor_cache = self.vendor_cache
                current = self._current = (fresh, now, key)
                self.readings += 1
            return current[0]

    def kube_view(self, host: Host) -> Dict[str, Any]:
        """What pods hold, as ``kube.look`` answers it: asked of the kubelet once for ``host`` (a host of
        ``fresh``), by one request while the others of its interval wait for the answer."""
        with self._looking:
            if self._kube is None or self._kube[0] is not host:
                self._kube = (host, view_to_json(host.direct_kube_side().look(host.inventory())))
            return self._kube[1]


def claims_on_node(host: Host, state_dir: str = DEFAULT_STATE_DIR, holds: Optional[Holds] = None) -> Claims:
    """Who claims what on the node by root's own reading (``conflicts.claims_on_disk``): the bcd specs in
    /etc/cdi and /var/run/cdi, the env files of allocations without one, the pending Kubernetes releases,
    the GPUs running VMs have. A plain release of a pass is made (its files removed) before the bind that
    takes its devices (``apply.apply_plan``), so what is on disk when that bind asks is what the planner
    counted. Raises ``Refused`` (retryable) where the pending releases cannot be read: nothing is written
    that one of them may hold. ``holds``: ``node_holds(host)`` when already read."""
    specs, env_files = holds if holds is not None else node_holds(host)
    try:
        releases = load_releases(StateFiles(host.path(state_dir), state_dir))
    except (BcdError, OSError) as exc:
        raise Refused("cannot read the pending releases: %s" % exc, retryable=True)
    if releases.unreadable is not None or releases.marker:
        raise Refused("the pending releases in %s cannot be read: every GPU stays claimed until a pass sets them "
                      "aside and the kubelet is asked" % state_dir, retryable=True)
    pending = dict((allocation_id, atoms_of(release.device_ids)) for allocation_id, release in releases.pending.items())
    domains, _error = host.domains()
    vms = [(gpu, domain.instance_id) for domain in domains for gpu in domain.gpus]
    return claims_on_disk(specs, env_files, pending, vms)


class HoldFileCache:
    """Root's reading of the holds on disk, kept between requests (``node_holds``): a file is read and parsed
    again only when its identity and times changed (device, inode, size, mtime, ctime), as they do at every
    write of a hold (a new file renamed into place) and at any write in place. So a pass of 512 binds through
    the helper reads each hold's files once, not once a bind, instead of reading them whole at every request
    (docs/performance.md, "Speed tricks, measured (issue 47)"). Only regular files are kept (a link or anything
    else is read as it is, every time), and only those the last listing found, so it holds at most what the
    directories hold."""

    def __init__(self) -> None:
        self.kept: Dict[str, Tuple[Signature, object]] = {}  # real path -> (signature, atoms)

    @staticmethod
    def signature(info: os.stat_result) -> Signature:
        return (info.st_dev, info.st_ino, info.st_size, info.st_mtime_ns, info.st_ctime_ns)

    def atoms(self, path: str, info: Optional[os.stat_result], read: Callable[[], Read],
              seen: Dict[str, Tuple[Signature, object]]) -> Read:
        """The atoms of the file at ``path`` (its ``lstat`` ``info``), from ``read()`` unless kept; ``seen``
        collects what this listing found."""
        if info is None or not stat.S_ISREG(info.st_mode):
            return read()
        key = self.signature(info)
        kept = self.kept.get(path)
        # what is kept for a path was read by the same ``read`` as now: a spec's and an env file's are in
        # directories of their own, and node_holds reads each directory's files one way
        value = cast(Read, kept[1]) if kept is not None and kept[0] == key else read()
        seen[path] = (key, value)
        return value


HOLD_FILES = HoldFileCache()


def _listed(directory: str) -> List[Tuple[str, Optional[os.stat_result]]]:
    """``[(name, lstat or None)]`` of ``directory``, sorted by name; [] when it is not there. Any other error
    propagates: holds must not be given away because a directory could not be read."""
    try:
        entries = list(os.scandir(directory))
    except (FileNotFoundError, NotADirectoryError):
        return []
    found: List[Tuple[str, Optional[os.stat_result]]] = []
    for entry in sorted(entries, key=lambda item: item.name):
        try:
            info: Optional[os.stat_result] = entry.stat(follow_symlinks=False)
        except OSError:
            info = None
        found.append((entry.name, info))
    return found


def node_holds(host: Host, cache: HoldFileCache = HOLD_FILES, sizes: Optional[Sizes] = None) -> Holds:
    """``(specs, env_files)``: allocation -> the atoms of its bcd specs (/etc/cdi and /var/run/cdi), and of its
    env file (its ``NVIDIA_VISIBLE_DEVICES`` names kept per file, a MIG UUID resolved on the node's inventory
    at each request: ``conflicts.named_atoms``), as root reads them (``cache``: what an earlier request read, where the
    file has not changed since). ``sizes``, a dict, gets kind -> allocation -> the bytes of its regular
    files of that kind, from the listing (nothing more is read for them)."""
    seen: Dict[str, Tuple[Signature, object]] = {}
    if sizes is None:
        sizes = {}
    spec_sizes, env_sizes = sizes.setdefault("cdi", {}), sizes.setdefault("allocation-env", {})
    specs: Dict[str, List[Atom]] = {}
    for spec_dir in (SPEC_DIR, RUN_SPEC_DIR):
        real_dir = host.path(spec_dir)  # once: a name the pattern matches has no "/" or ".." to check
        for name, info in _listed(real_dir):
            match = SPEC_FILE_RE.fullmatch(name)
            if not match:
                continue
            allocation_id, node_path, path = match.group(1), "%s/%s" % (spec_dir, name), "%s/%s" % (real_dir, name)

            def read(allocation_id: str = allocation_id, node_path: str = node_path, path: str = path) -> Optional[List[Atom]]:
                content = read_spec(path)
                return None if content is None else read_hold(allocation_id, node_path, content).atoms
            try:
                atoms = cache.atoms(path, info, read, seen)
            except OSError:  # a directory of that name is no hold (as Host.hold_files)
                continue
            if atoms is not None:
                specs.setdefault(allocation_id, []).extend(atoms)
                spec_sizes[allocation_id] = spec_sizes.get(allocation_id, 0) + _size(info)
    env_files: Dict[str, List[Atom]] = {}
    directory, pattern = NODE_FILE_NAMES["allocation-env"]
    real_dir = host.path(directory)
    try:
        listed = _listed(real_dir)[:4 * MAX_HOLD_FILES]
    except OSError:
        listed = []
    for name, info in listed:
        match = pattern.fullmatch(name)
        if match:
            allocation_id, path = match.group(1), "%s/%s" % (real_dir, name)

            def read_names(path: str = path) -> Tuple[str, ...]:
                return visible_names(read_bytes(path))
            names = cache.atoms(path, info, read_names, seen)
            env_files[allocation_id] = named_atoms(names, host.inventory() if _names_mig(names) else None)
            env_sizes[allocation_id] = _size(info)
    cache.kept = seen
    return specs, env_files


def _names_mig(names: Optional[Sequence[str]]) -> bool:
    """Whether an env file's names include a MIG UUID: only those need the inventory to say what they are."""
    return any(name.startswith("MIG-") for name in names or ())


def _size(info: Optional[os.stat_result]) -> int:
    """A listed file's bytes: a regular file's size, nothing for anything else (a link is no hold's)."""
    return info.st_size if info is not None and stat.S_ISREG(info.st_mode) else 0


def atoms_held(holds: Holds, leave_out: Optional[str] = None) -> int:
    """How many atoms the holds on the node name (``node_holds``' specs, and env files of allocations without
    a spec), ``leave_out``'s not counted: each allocation's distinct atoms."""
    specs, env_files = holds
    total = 0
    for owner in set(specs) | set(env_files):
        if owner != leave_out:
            total += len(set(atom.id for atom in specs[owner])) if owner in specs else len(env_files[owner])
    return total


def check_quota(host: Host, kind: str, allocation_id: str) -> None:
    """A hold's file may always be written again; a fresh one only while the node has fewer than
    ``MAX_HOLD_FILES`` of its kind (counted by name, a bounded scan)."""
    path = node_file_path(kind, allocation_id)
    if os.path.lexists(host.path(path)):
        return
    directory, pattern = NODE_FILE_NAMES[kind]
    what = "hold specs" if kind == "cdi" else "env files"
    try:
        count = count_node_files(host.path(directory), pattern, MAX_HOLD_FILES)
    except TooManyEntries as exc:
        raise Refused("quota: cannot count the %s in %s (%s); %s is not created" % (what, directory, exc, path),
                      retryable=True)
    if count >= MAX_HOLD_FILES:
        raise Refused("quota: %s already holds %d %s, the most a node may have (a pass honours at most %d "
                      "holds); %s is not created until one is removed"
                      % (directory, count, what, MAX_ASSIGNMENTS, path), retryable=True)


def check_atoms(kind: str, allocation_id: str, atoms: Sequence[Atom], holds: Holds) -> None:
    """The node's holds name at most ``MAX_ATOMS`` with this one written, its atoms replacing what its own files
    named (``holds``: ``node_holds``); retryable, as the quota: once others are released it fits."""
    others = atoms_held(holds, leave_out=allocation_id)
    if others + len(atoms) > MAX_ATOMS:
        raise Refused("quota: %d atoms would take the holds on the node to %d, past the %d atoms a pass honours "
                      "(%d taken by the other holds); %s is not written until they name fewer"
                      % (len(atoms), others + len(atoms), MAX_ATOMS, others, node_file_path(kind, allocation_id)),
                      retryable=True)


def check_env_bytes(kind: str, allocation_id: str, content: bytes, sizes: Sizes) -> None:
    """The env files take at most ``MAX_ENV_BYTES`` with this one written (``sizes``: ``node_holds``'), its
    own counted once; retryable, as the quota."""
    if kind != "allocation-env":
        return
    directory, _pattern = NODE_FILE_NAMES[kind]
    taken = sum(size for owner, size in sizes.get(kind, {}).items() if owner != allocation_id)
    if taken + len(content) > MAX_ENV_BYTES:
        raise Refused("quota: %d bytes would take the env files in %s to %d, past the %d bytes of a devices "
                      "section (%d taken by the other env files); %s is not written until they take fewer"
                      % (len(content), directory, taken + len(content), MAX_ENV_BYTES, taken,
                         node_file_path(kind, allocation_id)), retryable=True)
