# -*- coding: utf-8 -*-
# Copyright: contributors to bcd.devices
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""``bcd-holds busy`` and ``bcd.devices.gpu_busy``; ``bcd.devices.maintenance``.

A busy check reads under the pass lock, shared: a pass and a busy check never see half a
change, and several checks run at once. Maintenance is changed under the pass lock,
exclusive, and recorded in the state directory as its owner (``state/store.py``).
"""

from __future__ import annotations

import time

from ansible_collections.bcd.devices.plugins.module_utils.domain.busy import busy_entry, claims_on
from ansible_collections.bcd.devices.plugins.module_utils.domain.cdi.hold_spec import read_hold
from ansible_collections.bcd.devices.plugins.module_utils.domain.maintenance import (
    MaintenanceError,
    change,
    check_gpus,
    check_reason,
    listing,
)
from ansible_collections.bcd.devices.plugins.module_utils.state.store import DEFAULT_STATE_DIR, NodeState
from ansible_collections.bcd.devices.plugins.module_utils.support.errors import BcdError
from ansible_collections.bcd.devices.plugins.module_utils.support.text import printable


class BusyError(BcdError):
    """Bad input to a busy check or a maintenance change; the message is fit for a user."""


def _known(host, uuids, holds, extra=()):
    """Every UUID must be a GPU of this node (in its inventory, or named by a hold or a record)."""
    known = set(gpu.uuid for gpu in host.inventory().gpus) | set(extra)
    known |= set(atom.gpu_uuid for hold in holds for atom in hold.atoms)
    unknown = [uuid for uuid in uuids if uuid not in known]
    if unknown:
        raise BusyError("%s %s not on this node" % (", ".join(unknown), "is" if len(unknown) == 1 else "are"))


def busy_check(host, gpus, state_dir=DEFAULT_STATE_DIR, lock_timeout=120.0):
    """``[{uuid, busy, claimed_by}]`` for each GPU of ``gpus``; ``BusyError`` for bad input."""
    try:
        uuids = check_gpus(gpus)
    except MaintenanceError as exc:
        raise BusyError(str(exc))
    state = NodeState(host.path(state_dir), state_dir)
    with state.lock(lock_timeout, create=False, shared=True):
        state.load(write=False)
        holds = [read_hold(allocation_id, path, content)
                 for allocation_id, (path, content) in sorted(host.hold_files().items())]
        domains, _error = host.domains()
        _known(host, uuids, holds, list(state.maintenance) + list(state.ledger.vfio))
        return [busy_entry(uuid, claims_on(uuid, holds, state.releases, domains, state.ledger.vfio,
                                           state.maintenance)) for uuid in uuids]


def set_maintenance(host, gpus, present, reason=None, state_dir=DEFAULT_STATE_DIR, check_mode=False,
                    lock_timeout=120.0):
    """Put ``gpus`` in maintenance (``present``) or take them out: ``(changed, before, after)``, the
    records as ``listing`` gives them. Check mode computes the same and writes nothing."""
    try:
        uuids = check_gpus(gpus)
        reason = check_reason(reason) if present else None
    except MaintenanceError as exc:
        raise BusyError(str(exc))
    state = NodeState(host.path(state_dir), state_dir)
    with state.lock(lock_timeout, create=not check_mode):
        state.load(write=not check_mode)
        if state.maintenance_problem and not check_mode:
            raise BusyError("%s: remove or fix it first" % state.maintenance_problem)
        if present:
            holds = [read_hold(allocation_id, path, content)
                     for allocation_id, (path, content) in host.hold_files().items()]
            _known(host, uuids, holds)
        before = state.maintenance
        now = time.time()
        after, changed = change(before, uuids, present, reason, now)
        if changed and not check_mode:
            state.save_maintenance(after, [] if present else changed, now)
    return bool(changed), listing(before), listing(after)


def busy_message(entries):
    """The module's ``msg``: each busy GPU and what claims it (maintenance left out: it makes no GPU busy), or
    that none of them is busy. Escaped like ``busy_lines``."""
    busy = ["%s is busy: %s" % (printable(entry["uuid"]), "; ".join(
        printable(claim["text"]) for claim in entry["claimed_by"] if claim["kind"] != "maintenance"))
        for entry in entries if entry["busy"]]
    if busy:
        return "; ".join(busy)
    return "%s %s free" % (", ".join(printable(entry["uuid"]) for entry in entries), "is" if len(entries) == 1 else "are")


def busy_lines(entries):
    """What ``bcd-holds busy`` prints: one line per GPU. A claim's text names what the state directory, a
    hold spec or the VMs say (an allocation id, a path, a reason): each is escaped (``support/text.py``), so
    nothing in it can redraw the line, and a busy GPU is never shown free."""
    lines = []
    for entry in entries:
        texts = [printable(claim["text"]) for claim in entry["claimed_by"]]
        state = "busy" if entry["busy"] else "free"
        lines.append("%s: %s%s" % (printable(entry["uuid"]), state, (": " + "; ".join(texts)) if texts else ""))
    return lines
