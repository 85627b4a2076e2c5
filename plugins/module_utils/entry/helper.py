# -*- coding: utf-8 -*-
# Copyright: contributors to bcd.devices
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""The root helper: root's work for passes that run as an ordinary account.

``bcd-holds helper`` listens on a unix socket. A peer sends one JSON object on one
line and gets one line back, ``{"ok": true}`` or ``{"ok": false, "error": …}``; then the
helper hangs up. No file content crosses the socket: the peer asks for typed
operations carrying data, and root checks that data with the rules the module
applies to network input, resolves it against the node, and builds every byte it
writes itself (docs/security.md):

* ``{"op": "hold.write", "kind": "cdi"|"allocation-env", "hold": {allocation_id,
  reservation_id, generation, binding, devices, limits, env}}``: the hold's spec or
  env file, rendered by root from its own inventory and vendor spec;
* ``{"op": "hold.remove", "kind": …, "allocation_id": …}``;
* ``{"op": "hold.set_aside", "allocation_id": …}``: a damaged spec renamed aside
  in ``/etc/cdi`` (``bcd-<id>.json.damaged-<UTC time>``), the oldest copies beyond
  ``writers.ASIDE_PER_HOLD`` per allocation and ``writers.ASIDE_TOTAL`` in all removed;
* ``{"op": "slice.apply", "allocation_id": …, "limits": {…}}``: the slice's
  properties built by root from the limits, with headroom over what its workload uses
  a CPUQuota floor, and ``cpus``/``mems`` the host has that never narrow under a running
  workload (``domain.slices.check_slice_change``);
* ``{"op": "slice.stop", "allocation_id": …}``: only once the slice is empty, checked
  again with the slice closed and frozen;
* ``{"op": "kube.look"}``: what pods hold, asked of the kubelet; the reply carries
  ``"view"``.

Every path is built from root's own ``--root``, a kind and a checked allocation id.
Only the allowed peers are served (``SO_PEERCRED``), at most ``MAX_CONNECTIONS`` at
once, each within ``REQUEST_DEADLINE`` seconds and ``MAX_REQUEST`` bytes; whatever a
peer sends gets an answer, and nothing a peer does stops the helper.

What root keeps and what it does are bounded (docs/security.md, "Quotas on what root
creates"), in the module's own units (``domain/input/assignment.py``): a fresh hold spec or env
file only while the node has fewer than ``MAX_HOLD_FILES`` of its kind; a hold's atoms
(``MAX_DEVICES``, as the module parses it) and those of all holds (``MAX_ATOMS``); a spec's
bytes (``MAX_HOLD_SPEC_BYTES``, what a pass reads back) and the env files' (``MAX_ENV_BYTES``,
a devices section's). Each peer other than root gets a token bucket for every operation
(``RATE_CLASSES``, ``RateLimits``); the node's hardware is read once per ``VIEW_SECONDS``,
not once a request (``NodeView``); a peer's log lines are limited, what was dropped counted
(``LogLimit``). Every refusal names its numbers, and a pass retries them like any failed write.
``node.helper_client.HelperClient`` is the other end.
"""

from __future__ import annotations

import errno
import grp
import json
import os
import pwd
import socket
import stat
import struct
import threading
import time
from typing import Any, Dict, List

from ansible_collections.bcd.devices.plugins.module_utils.domain.cdi.hold_spec import (
    MPS_PIPE_DIRECTORY,
    SPEC_DIR,
    SPEC_FILE_RE,
    RenderError,
    cdi_spec_path,
    env_atoms,
    read_hold,
    render_hold,
)
from ansible_collections.bcd.devices.plugins.module_utils.domain.cdi.runtimes import parse_runtimes_option
from ansible_collections.bcd.devices.plugins.module_utils.domain.input.assignment import (
    ALLOCATION_ID_RE,
    BINDING_HOLD,
    BINDING_KUBERNETES,
    MAX_ASSIGNMENTS,
    MAX_ATOMS,
    MAX_SECTION_BYTES,
    InvalidAssignment,
    parse_hold_request,
    parse_limits,
)
from ansible_collections.bcd.devices.plugins.module_utils.domain.input.atoms import AtomRefused, atoms_of, resolve_atom, resolve_devices
from ansible_collections.bcd.devices.plugins.module_utils.domain.input.refusals import Reason
from ansible_collections.bcd.devices.plugins.module_utils.domain.plan.actions import SliceApply
from ansible_collections.bcd.devices.plugins.module_utils.domain.plan.conflicts import LISTED_TWICE, claims_on_disk, conflicts, named_atoms, visible_names
from ansible_collections.bcd.devices.plugins.module_utils.domain.slices import SliceError, check_slice_change, slice_name, wanted_slice
from ansible_collections.bcd.devices.plugins.module_utils.node.fsutil import ensure_dir, read_bytes
from ansible_collections.bcd.devices.plugins.module_utils.node.hosts import MAX_HOLD_SPEC_BYTES, read_spec
from ansible_collections.bcd.devices.plugins.module_utils.node.kubelet import view_to_json
from ansible_collections.bcd.devices.plugins.module_utils.node.state_files import DEFAULT_STATE_DIR, StateFiles
from ansible_collections.bcd.devices.plugins.module_utils.node.vendor_spec import ParsedSpecCache
from ansible_collections.bcd.devices.plugins.module_utils.node.writers import (
    NODE_FILE_KINDS,
    NODE_FILE_NAMES,
    TooManyEntries,
    node_file_path,
)
from ansible_collections.bcd.devices.plugins.module_utils.state.releases import load_releases
from ansible_collections.bcd.devices.plugins.module_utils.support.errors import BcdError, RetryableError, type_name

# One request line: data only, no file content. A hold.write carries a whole entry of a devices section,
# which the module accepts only within MAX_SECTION_BYTES as section_size counts it (an upper bound of the
# entry's JSON: every value, key and bracket 10 bytes, a character of text up to json.dumps's 12); around
# it the op, kind, generation and the node's runtimes (MAX_RUNTIMES name and version pairs), and per device
# a device_class the section may leave out: REQUEST_FRAME, the whole request line before. So the largest
# hold the module accepts (1 024 slots of the longest ids, 256 env lines of 4 096 characters) fits:
# 4 MiB + 64 KiB, 16 peers at once.
REQUEST_FRAME = 64 * 1024
MAX_REQUEST = MAX_SECTION_BYTES + REQUEST_FRAME
MAX_DEPTH = 16  # nesting of a request's JSON
REQUEST_DEADLINE = 10.0  # seconds from connecting to a complete request
MAX_CONNECTIONS = 16  # peers served at once; more are told the helper is busy
SOCKET_MODE_GROUP = 0o660
RUN_SPEC_DIR = "/var/run/cdi"  # the other directory CDI runtimes load: a bcd spec there claims as in /etc/cdi
# op -> the keys its request carries besides "op"
OPS = {
    "hold.write": ("kind", "hold"),
    "hold.remove": ("kind", "allocation_id"),
    "hold.set_aside": ("allocation_id",),
    "slice.apply": ("allocation_id", "limits"),
    "slice.stop": ("allocation_id",),
    "kube.look": (),
}
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
# Every operation, limited per peer uid by a token bucket of its class (RateLimits); root is not limited
# (it can write /etc/cdi without the helper). A refused request costs a reply and nothing else.
# - writes (what creates or changes what root keeps): a burst of a whole pass of the most holds there
#   are, each set aside, written (spec and env file) and given a slice, four requests a hold, so no pass
#   is limited into failing; then 16 a second (a whole burst again in about two minutes).
# - releases (hold.remove, slice.stop): a bucket of their own, so that a pass releasing every hold (a spec,
#   an env file and a slice each: 1 536 requests) is never starved by writes, and generous: 2 048 at once,
#   then 32 a second. They only shrink what root keeps, but each costs root a look at the node
#   (slice.stop: systemd's view of the slice).
# - looks (kube.look): a pass asks once; 32 at once, then 2 a second. The answer comes from the node's
#   view (NodeView), read at most once a VIEW_SECONDS whoever asks.
# A malformed request or an unknown op is in no class: it is refused before the node is touched, costs
# the parse of one bounded line (MAX_REQUEST, MAX_CONNECTIONS at once) and is not logged.
RATED_OPS = ("hold.write", "hold.set_aside", "slice.apply")
RATE_BURST = 4 * MAX_ASSIGNMENTS
RATE_PER_SECOND = 16.0
RELEASE_OPS = ("hold.remove", "slice.stop")
RELEASE_BURST = 4 * MAX_ASSIGNMENTS
RELEASE_PER_SECOND = 32.0
LOOK_OPS = ("kube.look",)
LOOK_BURST = 32
LOOK_PER_SECOND = 2.0
RATE_CLASSES = ((RATED_OPS, RATE_BURST, RATE_PER_SECOND), (RELEASE_OPS, RELEASE_BURST, RELEASE_PER_SECOND),
                (LOOK_OPS, LOOK_BURST, LOOK_PER_SECOND))
RATE_PEERS = 4096  # buckets kept; beyond it, those of peers that have waited long enough to be full go
RATE_LOG_EVERY = 60.0  # seconds: a limited peer is logged once in this long, not once a refusal
# How long root's reading of the node's hardware (GPUs, VMs, the kubelet's pods) serves requests: NodeView.
VIEW_SECONDS = 1.0
# A peer's log lines: a whole pass of the most holds logs every line (four a hold), then 4 a second; what
# is dropped is counted and said once a LOG_WINDOW (LogLimit).
LOG_BURST = 4 * MAX_ASSIGNMENTS
LOG_PER_SECOND = 4.0
LOG_WINDOW = 60.0
_CREATING = threading.Lock()  # one counted creation at a time: two fresh holds never both take the last place
_ACCEPT_RETRY = (errno.EMFILE, errno.ENFILE, errno.ENOBUFS, errno.ENOMEM, errno.ECONNABORTED, errno.EINTR,
                 errno.EPROTO, errno.EPERM)


class Refused(BcdError):
    """A request the helper will not carry out; the message goes back to the peer. ``retryable``: what the
    node has now refuses it (a full quota, a workload still running, a device not there yet), so the same
    request may be carried out later, and the reply says so (``"retryable": true``); otherwise the request
    itself is at fault (malformed, or never carried out as asked) and no pass should send it again."""

    def __init__(self, message, retryable=False):
        super().__init__(message)
        self.retryable = retryable


class RateLimited(Refused):
    """A peer past its rate; ``first`` for the first refusal in ``RATE_LOG_EVERY`` seconds (the helper logs it)."""

    def __init__(self, message, first=False):
        super().__init__(message, retryable=True)
        self.first = first


class HelperSetupError(BcdError):
    """The helper cannot listen safely (its socket's directory is not root's alone)."""


def _depth(value):
    """How deeply a parsed JSON value nests (iteratively: hostile input must not recurse)."""
    deepest, pending = 0, [(value, 1)]
    while pending:
        item, level = pending.pop()
        deepest = max(deepest, level)
        if level > MAX_DEPTH:
            return level
        if isinstance(item, dict):
            pending.extend((child, level + 1) for child in item.values())
        elif isinstance(item, list):
            pending.extend((child, level + 1) for child in item)
    return deepest


def _has_nul(value):
    """A NUL anywhere in parsed JSON (``\\u0000`` escapes pass the text check)."""
    pending = [value]
    while pending:
        item = pending.pop()
        if isinstance(item, str) and "\0" in item:
            return True
        if isinstance(item, dict):
            pending.extend(list(item.keys()) + list(item.values()))
        elif isinstance(item, list):
            pending.extend(item)
    return False


def _allocation_id(value):
    if not isinstance(value, str) or not ALLOCATION_ID_RE.fullmatch(value):
        raise Refused("allocation_id %s does not match %s" % (_shown(value), ALLOCATION_ID_RE.pattern))
    return value


def _kind(value):
    if not isinstance(value, str) or value not in NODE_FILE_KINDS:
        raise Refused("unknown kind %s; known: %s" % (_shown(value), ", ".join(sorted(NODE_FILE_KINDS))))
    return value


def _shown(value):
    if isinstance(value, str):
        text = repr(value)
        return text if len(text) <= 90 else text[:87] + "..."
    return type_name(value)


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

    def __init__(self, host, seconds=VIEW_SECONDS, clock=time.monotonic):
        self.host, self.seconds, self.clock = host, float(seconds), clock
        self.readings = 0  # hosts made: how many times the hardware may have been read
        self._lock = threading.Lock()
        self._looking = threading.Lock()
        self._current = None  # (host, when, key)
        self._kube = None  # (host, view as JSON data)
        # the vendor spec as parsed, for every host of every interval: parsed again only when its file changed
        self.vendor_cache = ParsedSpecCache()

    def fresh(self):
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

    def kube_view(self, host):
        """What pods hold, as ``kube.look`` answers it: asked of the kubelet once for ``host`` (a host of
        ``fresh``), by one request while the others of its interval wait for the answer."""
        with self._looking:
            if self._kube is None or self._kube[0] is not host:
                self._kube = (host, view_to_json(host.direct_kube_side().look(host.inventory())))
            return self._kube[1]


def handle_request(host, request):
    """Carry out one request through ``host`` (whose writer does root's work here): a ``NodeView`` (what a
    served helper passes), or a host whose hardware is then read for this request alone.
    Returns extra reply fields, or None; raises ``Refused`` with the reason."""
    if not isinstance(request, dict):
        raise Refused("a request must be a JSON object, not %s" % type_name(request))
    op = request.get("op")
    if not isinstance(op, str) or op not in OPS:
        raise Refused("unknown op %s; known: %s" % (_shown(op), ", ".join(sorted(OPS))))
    unknown = sorted(str(key) for key in request if key != "op" and key not in OPS[op])
    if unknown:
        raise Refused("%s takes no %s" % (op, ", ".join(unknown)))
    view = host if isinstance(host, NodeView) else NodeView(host, seconds=0)
    host = view.fresh()  # the node as it is now, or as this interval's reading saw it (NodeView)
    if op == "kube.look":
        return {"view": view.kube_view(host)}
    if op == "hold.write":
        _write_hold(host, _kind(request.get("kind")), request.get("hold"))
    elif op == "hold.remove":
        host.writer.remove_node_file(_kind(request.get("kind")), _allocation_id(request.get("allocation_id")))
    elif op == "hold.set_aside":  # a damaged spec: renamed aside in /etc/cdi by root's clock, oldest copies pruned
        allocation_id = _allocation_id(request.get("allocation_id"))
        with _CREATING:
            host.writer.set_aside_spec(allocation_id, time.time())
    elif op == "slice.apply":
        _apply_slice(host, _allocation_id(request.get("allocation_id")), request.get("limits"))
    else:
        _stop_slice(host, _allocation_id(request.get("allocation_id")))
    return None


def _write_hold(host, kind, data):
    """Root renders the file from the hold's data, as a pass would: the node's own atoms and vendor spec."""
    try:
        assignment, generation = parse_hold_request(data)
        if assignment.binding not in (BINDING_HOLD, BINDING_KUBERNETES):
            raise Refused("binding %s is not supported" % assignment.binding)
        try:
            atoms = resolve_devices(assignment.devices, host.inventory())
        except AtomRefused as exc:
            if kind != "allocation-env" or exc.reason != Reason.DEVICE_MISSING:
                raise
            atoms = _atoms_on_disk(host, assignment, exc)
        try:  # the node's runtimes by name and version; what each loads is root's own table's word
            runtimes = parse_runtimes_option(data.get("runtimes") or [], where="hold.runtimes")
        except ValueError as exc:
            raise Refused(str(exc))
        if runtimes == "auto":
            raise Refused("hold.runtimes: must list the runtimes, not auto")
    except InvalidAssignment as exc:
        raise Refused(str(exc))
    except AtomRefused as exc:  # a device not there (yet) may come; anything else of the request not
        raise Refused(str(exc), retryable=_node_may_change(exc))
    # One write at a time: two peers never both take the last place, or one GPU. The node's holds are read
    # once, and what they refuse is refused before a render (a wide hold's costs root 0.1 s).
    with _CREATING:
        sizes: Dict[str, Dict[str, int]] = {}
        holds = node_holds(host, sizes=sizes)
        found = conflicts(atoms, claims_on_node(host, holds=holds), assignment.allocation_id)
        if found:  # another allocation's hold, pending release or VM has them: the planner's refusal, word for word;
            # retryable when another's claim may go, never for a request that lists one device twice
            raise Refused("%s: %s" % (Reason.OVERLAP, "; ".join(found)), retryable=LISTED_TWICE not in found)
        _check_quota(host, kind, assignment.allocation_id)
        _check_atoms(kind, assignment.allocation_id, atoms, holds)
        content = _render(host, kind, assignment, atoms, generation, runtimes)
        _check_env_bytes(kind, assignment.allocation_id, content, sizes)
        host.writer.write_node_file(kind, assignment.allocation_id, content)


def _render(host, kind, assignment, atoms, generation, runtimes):
    """The bytes of the hold's file of ``kind``, rendered from the node's own vendor spec; a spec larger than a
    pass reads back (``MAX_HOLD_SPEC_BYTES``: the vendor's edits on each of its atoms) is refused."""
    try:
        spec, env = render_hold(assignment, atoms, generation, host.vendor_spec(), host.exists(MPS_PIPE_DIRECTORY),
                                runtimes=runtimes)
    except (AtomRefused, RenderError) as exc:
        # the vendor spec root reads now may change; anything else of the request not
        raise Refused(str(exc), retryable=_node_may_change(exc))
    if kind == "cdi" and len(spec) > MAX_HOLD_SPEC_BYTES:
        raise Refused("quota: the spec of %s would be %d bytes for its %d atoms, past the %d bytes a pass reads "
                      "back; %s is not written" % (assignment.allocation_id, len(spec), len(atoms),
                                                   MAX_HOLD_SPEC_BYTES, node_file_path(kind, assignment.allocation_id)),
                      retryable=True)
    return spec if kind == "cdi" else env


def atoms_held(holds, leave_out=None):
    """How many atoms the holds on the node name (``node_holds``' specs, and env files of allocations without
    a spec), ``leave_out``'s not counted: each allocation's distinct atoms."""
    specs, env_files = holds
    total = 0
    for owner in set(specs) | set(env_files):
        if owner != leave_out:
            total += len(set(atom.id for atom in specs[owner])) if owner in specs else len(env_files[owner])
    return total


def _check_atoms(kind, allocation_id, atoms, holds):
    """The node's holds name at most ``MAX_ATOMS`` with this one written, its atoms replacing what its own files
    named (``holds``: ``node_holds``); retryable, as the quota: once others are released it fits."""
    others = atoms_held(holds, leave_out=allocation_id)
    if others + len(atoms) > MAX_ATOMS:
        raise Refused("quota: %d atoms would take the holds on the node to %d, past the %d atoms a pass honours "
                      "(%d taken by the other holds); %s is not written until they name fewer"
                      % (len(atoms), others + len(atoms), MAX_ATOMS, others, node_file_path(kind, allocation_id)),
                      retryable=True)


def _check_env_bytes(kind, allocation_id, content, sizes):
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


def claims_on_node(host, state_dir=DEFAULT_STATE_DIR, holds=None):
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
    the helper reads each hold's files once, not once a bind: 37 ms a request at 512 holds, read whole each
    time. Only regular files are kept (a link or anything else is read as it is, every time), and only those
    the last listing found, so it holds at most what the directories hold."""

    def __init__(self):
        self.kept: Dict[str, Any] = {}  # real path -> (signature, atoms)

    @staticmethod
    def signature(info):
        return (info.st_dev, info.st_ino, info.st_size, info.st_mtime_ns, info.st_ctime_ns)

    def atoms(self, path, info, read, seen):
        """The atoms of the file at ``path`` (its ``lstat`` ``info``), from ``read()`` unless kept; ``seen``
        collects what this listing found."""
        if info is None or not stat.S_ISREG(info.st_mode):
            return read()
        key = self.signature(info)
        kept = self.kept.get(path)
        value = kept[1] if kept is not None and kept[0] == key else read()
        seen[path] = (key, value)
        return value


HOLD_FILES = HoldFileCache()


def _listed(directory):
    """``[(name, lstat or None)]`` of ``directory``, sorted by name; [] when it is not there. Any other error
    propagates: holds must not be given away because a directory could not be read."""
    try:
        entries = list(os.scandir(directory))
    except (FileNotFoundError, NotADirectoryError):
        return []
    found = []
    for entry in sorted(entries, key=lambda item: item.name):
        try:
            info = entry.stat(follow_symlinks=False)
        except OSError:
            info = None
        found.append((entry.name, info))
    return found


def node_holds(host, cache=HOLD_FILES, sizes=None):
    """``(specs, env_files)``: allocation -> the atoms of its bcd specs (/etc/cdi and /var/run/cdi), and of its
    env file (its ``NVIDIA_VISIBLE_DEVICES`` names kept per file, a MIG UUID resolved on the node's inventory
    at each request: ``conflicts.named_atoms``), as root reads them (``cache``: what an earlier request read, where the
    file has not changed since). ``sizes``, a dict, gets kind -> allocation -> the bytes of its regular
    files of that kind, from the listing (nothing more is read for them)."""
    seen: Dict[str, Any] = {}
    if sizes is None:
        sizes = {}
    spec_sizes, env_sizes = sizes.setdefault("cdi", {}), sizes.setdefault("allocation-env", {})
    specs: Dict[str, List[Any]] = {}
    for spec_dir in (SPEC_DIR, RUN_SPEC_DIR):
        real_dir = host.path(spec_dir)  # once: a name the pattern matches has no "/" or ".." to check
        for name, info in _listed(real_dir):
            match = SPEC_FILE_RE.fullmatch(name)
            if not match:
                continue
            allocation_id, node_path, path = match.group(1), "%s/%s" % (spec_dir, name), "%s/%s" % (real_dir, name)

            def read(allocation_id=allocation_id, node_path=node_path, path=path):
                content = read_spec(path)
                return None if content is None else read_hold(allocation_id, node_path, content).atoms
            try:
                atoms = cache.atoms(path, info, read, seen)
            except OSError:  # a directory of that name is no hold (as Host.hold_files)
                continue
            if atoms is not None:
                specs.setdefault(allocation_id, []).extend(atoms)
                spec_sizes[allocation_id] = spec_sizes.get(allocation_id, 0) + _size(info)
    env_files: Dict[str, Any] = {}
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
            names = cache.atoms(path, info, lambda path=path: visible_names(read_bytes(path)), seen)
            env_files[allocation_id] = named_atoms(names, host.inventory() if _names_mig(names) else None)
            env_sizes[allocation_id] = _size(info)
    cache.kept = seen
    return specs, env_files


def _names_mig(names):
    """Whether an env file's names include a MIG UUID: only those need the inventory to say what they are."""
    return any(name.startswith("MIG-") for name in names or ())


def _size(info):
    """A listed file's bytes: a regular file's size, nothing for anything else (a link is no hold's)."""
    return info.st_size if info is not None and stat.S_ISREG(info.st_mode) else 0


def _node_may_change(exc):
    """Whether a refusal to render a hold comes from what the node has now (a device missing, a vendor spec
    that names no device node for it or would make invalid CDI), not from the request."""
    reason = getattr(exc, "reason", None)
    return reason == Reason.DEVICE_MISSING or (isinstance(exc, RenderError) and reason is None)


def _check_quota(host, kind, allocation_id):
    """A hold's file may always be written again; a fresh one only while the node has fewer than
    ``MAX_HOLD_FILES`` of its kind (counted by name, a bounded scan)."""
    path = node_file_path(kind, allocation_id)
    if os.path.lexists(host.path(path)):
        return
    directory, _pattern = NODE_FILE_NAMES[kind]
    what = "hold specs" if kind == "cdi" else "env files"
    try:
        count = host.writer.count_node_files(kind, MAX_HOLD_FILES)
    except TooManyEntries as exc:
        raise Refused("quota: cannot count the %s in %s (%s); %s is not created" % (what, directory, exc, path),
                      retryable=True)
    if count >= MAX_HOLD_FILES:
        raise Refused("quota: %s already holds %d %s, the most a node may have (a pass honours at most %d "
                      "holds); %s is not created until one is removed"
                      % (directory, count, what, MAX_ASSIGNMENTS, path), retryable=True)


def _atoms_on_disk(host, assignment, missing):
    """The env file of a kept hold whose devices are not back yet (after a reboot, before mig-layout):
    root takes what they are from the hold's own spec in /etc/cdi, which root wrote, and only for the
    very devices the request names."""
    path = cdi_spec_path(assignment.allocation_id)
    content = host.read(path)
    if content is None:
        raise missing
    hold = read_hold(assignment.allocation_id, path, content)
    if hold.problem or sorted(hold.device_ids) != sorted(ref.id for ref in assignment.devices):
        raise missing
    atoms = env_atoms(hold, [resolve_atom(atom, host.inventory())[0] for atom in hold.atoms])
    if atoms is None:
        raise missing
    return atoms


def _apply_slice(host, allocation_id, raw_limits):
    """Root builds the slice's properties from the limits, never below what its workload uses now."""
    try:
        limits = parse_limits(raw_limits)
    except InvalidAssignment as exc:
        raise Refused(str(exc))
    wanted = wanted_slice(limits)
    if wanted is None:
        raise Refused("the limits book nothing a slice enforces (cpus, mems, cpu_millis, memory_bytes, "
                      "hugepages_2mi or hugepages_1gi)")
    properties, huge = wanted
    name = slice_name(allocation_id)
    try:  # root's own check (headroom over use, the CPUQuota floor, cpus and mems the host has and that never
        # narrow under a workload); the backend's apply runs it again
        check_slice_change(host.slices.state(name), properties, huge, name, host=host.cpus()[0])
    except SliceError as exc:
        raise Refused(str(exc), retryable=isinstance(exc, RetryableError))
    host.writer.apply_slice(SliceApply(name, properties, huge))


def _stop_slice(host, allocation_id):
    """A slice is stopped only once empty: a release never kills a workload. The backend closes and freezes
    the slice and reads ``populated`` again before it stops it (``node.slices.stop_when_empty``)."""
    name = slice_name(allocation_id)
    current = host.slices.state(name)
    if current is None:
        return
    if current.populated:
        raise Refused("%s still runs a workload; it is stopped once empty" % name, retryable=True)
    try:
        host.writer.stop_slice(name)
    except SliceError as exc:
        raise Refused(str(exc), retryable=isinstance(exc, RetryableError))


class RateLimit:
    """A token bucket per peer uid for the operations ``ops`` (``RATED_OPS`` unless named): ``burst`` requests
    at once, then ``rate`` a second. A refused request costs nothing; the uids in ``exempt`` (root) are never
    limited."""

    def __init__(self, rate=RATE_PER_SECOND, burst=RATE_BURST, exempt=(0,), clock=time.monotonic, ops=RATED_OPS):
        self.rate, self.burst, self.exempt, self.clock = float(rate), float(burst), frozenset(exempt), clock
        self.ops = tuple(ops)
        self._buckets = {}  # uid -> (tokens, when)
        self._logged = {}  # uid -> when its last logged refusal was
        self._lock = threading.Lock()

    def take(self, uid):
        """None when ``uid`` may go on (one token taken), else the seconds until it may."""
        return self._take(uid)[0]

    def _take(self, uid):
        """``(wait, first)``: ``wait`` as ``take`` gives it; ``first`` for the first refusal of ``uid`` in
        ``RATE_LOG_EVERY`` seconds."""
        if uid in self.exempt:
            return None, False
        with self._lock:
            now = self.clock()
            tokens, then = self._buckets.get(uid, (self.burst, now))
            tokens = min(self.burst, tokens + max(0.0, now - then) * self.rate)
            if tokens < 1.0:
                self._buckets[uid] = (tokens, now)
                first = now - self._logged.get(uid, now - RATE_LOG_EVERY) >= RATE_LOG_EVERY
                if first:
                    self._logged[uid] = now
                return (1.0 - tokens) / self.rate, first
            self._buckets[uid] = (tokens - 1.0, now)
            if len(self._buckets) > RATE_PEERS:
                full = [key for key, (left, when) in self._buckets.items()
                        if left + (now - when) * self.rate >= self.burst]
                for key in full:
                    del self._buckets[key]
                    self._logged.pop(key, None)
            return None, False

    def check(self, uid, request):
        """Raise ``Refused`` when ``request`` is one of ``ops`` and ``uid`` has used its share."""
        if not isinstance(request, dict) or request.get("op") not in self.ops:
            return
        wait, first = self._take(uid)
        if wait is not None:
            raise RateLimited("rate limited: uid %d asked for more than %d of %s at once, or more than %g a "
                              "second; try again in %.2fs" % (uid, self.burst, ", ".join(self.ops), self.rate, wait),
                              first)


class RateLimits:
    """A ``RateLimit`` for each class of operations (``RATE_CLASSES``: writes, releases, looks), so that every
    operation a peer asks for takes from a bucket, and one class spent never starves another."""

    def __init__(self, classes=RATE_CLASSES, exempt=(0,), clock=time.monotonic):
        self.limits = [RateLimit(rate, burst, exempt, clock, ops) for ops, burst, rate in classes]

    def check(self, uid, request):
        """Raise ``Refused`` when ``uid`` has used its share of the class ``request``'s op is in."""
        for limit in self.limits:
            limit.check(uid, request)


class LogLimit:
    """A peer's log lines, limited: ``burst`` at once, then ``rate`` a second, per uid (a token bucket, as
    requests). A line past it is dropped and counted; once ``window`` seconds after the first dropped, one line
    says how many: ``uid 1000: 4711 similar lines dropped in the last 60 s``. ``flush`` says it for every uid
    whose window is over (the helper calls it twice a second, so a flood that stops is still counted)."""

    def __init__(self, log, burst=LOG_BURST, rate=LOG_PER_SECOND, window=LOG_WINDOW, clock=time.monotonic):
        self.log, self.window, self.clock = log, float(window), clock
        self._bucket = RateLimit(rate, burst, exempt=(), clock=clock)
        self._dropped: Dict[int, List[float]] = {}  # uid -> [count, when the first was dropped]
        self._lock = threading.Lock()

    def __call__(self, line, uid=None):
        """Log ``line`` of the peer ``uid`` (None: the helper's own line, never limited)."""
        if uid is None:
            self.log(line)
            return
        self.flush()
        if self._bucket.take(uid) is None:
            self.log(line)
            return
        with self._lock:
            dropped = self._dropped.setdefault(uid, [0, self.clock()])
            dropped[0] += 1

    def flush(self):
        """Say what was dropped for each uid whose window is over."""
        with self._lock:
            now = self.clock()
            due = sorted((uid, count, now - since) for uid, (count, since) in self._dropped.items()
                         if now - since >= self.window)
            for uid, _count, _seconds in due:
                del self._dropped[uid]
        for uid, count, seconds in due:
            self.log("uid %d: %d similar lines dropped in the last %d s" % (uid, count, round(seconds)))


def peer_credentials(connection):
    """``(pid, uid, gid)`` of the peer, from ``SO_PEERCRED``."""
    data = connection.getsockopt(socket.SOL_SOCKET, socket.SO_PEERCRED, struct.calcsize("3i"))
    return struct.unpack("3i", data)


class Policy:
    """Who may talk to the helper: root, the allowed users, members of the allowed groups."""

    def __init__(self, users=(), groups=()):
        self.uids = set(pwd.getpwnam(user).pw_uid if not str(user).isdigit() else int(user) for user in users)
        self.gids = set(grp.getgrnam(group).gr_gid if not str(group).isdigit() else int(group) for group in groups)

    def allows(self, uid, gid):
        if uid == 0 or uid in self.uids or gid in self.gids:
            return True
        if not self.gids:
            return False
        try:
            name = pwd.getpwuid(uid).pw_name
        except KeyError:
            return False
        return any(name in grp.getgrgid(gid_).gr_mem for gid_ in self.gids if _group_exists(gid_))


def _group_exists(gid):
    try:
        grp.getgrgid(gid)
    except KeyError:
        return False
    return True


def _reply(connection, ok, error=None, extra=None, retryable=False):
    """One reply line. A refusal the same request may get past later (the node's state, the helper busy, a
    slow peer) says ``"retryable": true``; one without it is final for that request."""
    message = {"ok": True} if ok else {"ok": False, "error": error}
    if not ok and retryable:
        message["retryable"] = True
    message.update(extra or {})
    try:
        connection.sendall((json.dumps(message) + "\n").encode("utf-8"))
    except OSError:
        pass


def _hang_up(connection):
    """Say no more and read what the peer still sends, briefly: closing with its bytes unread would
    reset the connection, and the peer might never read the reason it was given."""
    try:
        connection.shutdown(socket.SHUT_WR)
        connection.settimeout(0.5)
        for _attempt in range(16):
            if not connection.recv(65536):
                break
    except OSError:
        pass


def serve_connection(host, connection, policy, log=None, deadline=REQUEST_DEADLINE, limiter=None):
    """Answer one peer's one request, within ``deadline`` seconds of its connecting; never raises.
    ``limiter`` (``RateLimits`` or a ``RateLimit``, shared by the connections of one helper) limits what it
    asks for; ``host`` is the helper's ``NodeView``, or a host read for this request alone."""
    with connection:
        end = time.monotonic() + deadline
        try:
            _pid, uid, gid = peer_credentials(connection)
        except OSError as exc:
            _reply(connection, False, "cannot read peer credentials: %s" % exc)
            return
        if not policy.allows(uid, gid):
            _reply(connection, False, "uid %d gid %d may not use this helper" % (uid, gid))
            _hang_up(connection)
            return
        chunks = []  # type: List[bytes]  # the line's pieces, kept apart: no copy of the line per piece
        size, ended = 0, False
        while not ended:
            left = end - time.monotonic()
            if left <= 0:
                _reply(connection, False, "no complete request within %gs" % deadline, retryable=True)
                _hang_up(connection)
                return
            try:
                connection.settimeout(left)
                chunk = connection.recv(65536)
            except socket.timeout:
                continue
            except OSError:
                return
            if not chunk:
                break  # the peer finished sending: a last line without its newline is still answered
            newline = chunk.find(b"\n")
            ended = newline >= 0
            chunk = chunk[:newline] if ended else chunk
            chunks.append(chunk)
            size += len(chunk)
            if size > MAX_REQUEST:
                _reply(connection, False, "request longer than %d bytes" % MAX_REQUEST)
                _hang_up(connection)
                return
        line = b"".join(chunks)
        if line.strip():
            connection.settimeout(max(0.1, end - time.monotonic()))
            _answer(host, connection, line, uid, log, limiter)


# Lines longer than the old whole line (REQUEST_FRAME) are parsed at most BIG_PARSES at a time: json.loads of
# 4 MiB of "[{},{},...]" makes some 130 MB of objects, and sixteen at once would pass the unit's MemoryMax=1G.
# A hold that long waits its turn (the largest the module accepts parses in about 5 ms).
BIG_PARSES = 2
_BIG_PARSING = threading.BoundedSemaphore(BIG_PARSES)


def _parse_request(line):
    if len(line) <= REQUEST_FRAME:
        return json.loads(line.decode("utf-8"))
    with _BIG_PARSING:
        return json.loads(line.decode("utf-8"))


def _answer(host, connection, line, uid, log, limiter=None):
    try:
        request = _parse_request(line)
        if _depth(request) > MAX_DEPTH:
            raise Refused("a request nests deeper than %d levels" % MAX_DEPTH)
        if _has_nul(request):
            raise Refused("a request must not contain NUL characters")
        if limiter is not None:
            limiter.check(uid, request)
        extra = handle_request(host, request)
    except (ValueError, UnicodeDecodeError) as exc:
        _reply(connection, False, "malformed request: %s" % exc)
    except RecursionError:
        _reply(connection, False, "a request nests deeper than %d levels" % MAX_DEPTH)
    except Refused as exc:
        _reply(connection, False, str(exc), retryable=exc.retryable)
        if log and getattr(exc, "first", False):  # a limited peer once a minute, not once a refusal: never dropped
            _log(log, None, "uid %d: %s" % (uid, exc))
    except (BcdError, OSError) as exc:  # I/O, a unit systemd could not start now: retryable; a request root refuses: not
        _reply(connection, False, "failed: %s" % exc, retryable=isinstance(exc, (OSError, RetryableError)))
    except Exception as exc:  # a bug must cost one reply, never the helper: say so, and log it
        _reply(connection, False, "internal error (%s); see the helper's log" % type(exc).__name__)
        if log:
            _log(log, uid, "uid %d: internal error answering a request: %s: %s" % (uid, type(exc).__name__, exc))
    else:
        if log:
            _log(log, uid, "uid %d: %s %s" % (uid, request.get("op"), _what_it_touched(request)))
        _reply(connection, True, extra=extra)


def _log(log, uid, line):
    """A peer's line: through a ``LogLimit`` as that peer's (``uid`` None: a line never dropped), else as it is."""
    if isinstance(log, LogLimit):
        log(line, uid)
    else:
        log(line)


def _what_it_touched(request):
    """The log names what an answered request changed: the slice unit, or the file kind and allocation."""
    allocation_id = request.get("allocation_id")
    if isinstance(request.get("hold"), dict):
        allocation_id = request["hold"].get("allocation_id")
    if request.get("op") in ("slice.apply", "slice.stop") and isinstance(allocation_id, str):
        return slice_name(allocation_id)
    return " ".join(value for value in (request.get("kind"), allocation_id) if isinstance(value, str))


def _check_socket_directory(directory):
    """The socket's directory must be a directory root owns that no one else can write, so nobody can
    swap the socket for a link between binding it and setting its owner and mode."""
    info = os.lstat(directory)
    if not stat.S_ISDIR(info.st_mode):
        raise HelperSetupError("the helper socket's directory %s is not a directory" % directory)
    if info.st_uid != os.geteuid() or info.st_mode & 0o022:
        raise HelperSetupError("the helper socket's directory %s must be owned by uid %d and writable by no one "
                               "else (it is uid %d, mode %04o)" % (directory, os.geteuid(), info.st_uid,
                                                                   stat.S_IMODE(info.st_mode)))


def listen(socket_path, users=(), groups=()):
    """Bind the helper's socket: 0660 owned by root and the allowed group, else 0600 for the allowed user.
    It is created under a umask that leaves it 0600, in a directory only root can write."""
    directory = os.path.dirname(os.path.abspath(socket_path))
    ensure_dir(directory, 0o755)  # it and any directory above it 0755, whatever the umask; an existing one as it is
    _check_socket_directory(directory)
    try:
        existing = os.lstat(socket_path)
    except FileNotFoundError:
        existing = None
    if existing is not None:
        if not (stat.S_ISSOCK(existing.st_mode) or stat.S_ISLNK(existing.st_mode)):
            raise HelperSetupError("%s exists and is not a socket; not replacing it" % socket_path)
        os.unlink(socket_path)
    server = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    old_umask = os.umask(0o177)
    try:
        server.bind(socket_path)
    finally:
        os.umask(old_umask)
    if groups:
        gid = grp.getgrnam(groups[0]).gr_gid if not str(groups[0]).isdigit() else int(groups[0])
        os.chown(socket_path, 0, gid, follow_symlinks=False)
        os.chmod(socket_path, SOCKET_MODE_GROUP)
    elif users:
        uid = pwd.getpwnam(users[0]).pw_uid if not str(users[0]).isdigit() else int(users[0])
        os.chown(socket_path, uid, 0, follow_symlinks=False)
    server.listen(64)
    return server


def _busy(connection, max_connections):
    """A peer beyond the limit is told at once and let go: it holds no thread."""
    with connection:
        connection.settimeout(1.0)
        _reply(connection, False, "busy: %d requests are being served; try again" % max_connections, retryable=True)


def serve(host, server, policy, log=None, stop=None, deadline=REQUEST_DEADLINE, max_connections=MAX_CONNECTIONS,
          limiter=None):
    """Accept peers until ``stop`` (a threading.Event) is set, each in its own thread, at most
    ``max_connections`` at once, each peer's operations limited by ``limiter`` (``RateLimits`` by default),
    the node's hardware read once per ``VIEW_SECONDS`` (``NodeView``, unless ``host`` is one already), a
    peer's lines to ``log`` limited (``LogLimit``, unless ``log`` is one). Running out of file descriptors
    or memory pauses accepting; it never stops the helper."""
    limiter = limiter if limiter is not None else RateLimits()
    host = host if isinstance(host, NodeView) else NodeView(host)
    log = log if log is None or isinstance(log, LogLimit) else LogLimit(log)
    server.settimeout(0.5)
    slots = threading.BoundedSemaphore(max_connections)
    pressed = False
    while stop is None or not stop.is_set():
        if log is not None:
            log.flush()
        try:
            connection, _address = server.accept()
        except socket.timeout:
            continue
        except OSError as exc:
            if stop is not None and stop.is_set():
                return
            if exc.errno in (errno.EBADF, errno.EINVAL):
                return  # the listening socket was closed
            if exc.errno in (errno.EMFILE, errno.ENFILE, errno.ENOBUFS, errno.ENOMEM) and log and not pressed:
                log("accept failed (%s); pausing until descriptors free up" % exc)
            pressed = exc.errno in (errno.EMFILE, errno.ENFILE, errno.ENOBUFS, errno.ENOMEM)
            time.sleep(0.05 if exc.errno in _ACCEPT_RETRY else 0.5)
            continue
        pressed = False
        if not slots.acquire(blocking=False):
            _busy(connection, max_connections)
            continue
        try:
            thread = threading.Thread(target=_serve_one, args=(host, connection, policy, log, deadline, slots,
                                                               limiter))
            thread.daemon = True
            thread.start()
        except RuntimeError:  # no thread to be had: tell the peer, free the slot
            slots.release()
            _busy(connection, max_connections)


def _serve_one(host, connection, policy, log, deadline, slots, limiter=None):
    try:
        serve_connection(host, connection, policy, log, deadline, limiter)
    finally:
        slots.release()
