# -*- coding: utf-8 -*-
# Copyright: contributors to bcd.devices
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""The ledger: what the node has *reported*, so every report happens exactly once.

The holds themselves are read from ``/etc/cdi`` on every pass; the ledger
(``<state_dir>/ledger.json``, 0600) only remembers what a pass cannot see on
the host:

``bound``
    holds whose ``AllocationBound`` was journaled (a hold written but never
    reported, because the pass died in between, is reported by the next pass);
``releasing``
    plain releases recorded before their files are removed (a release cut
    short is finished, and reported, by the next pass);
``failures``
    the generation each allocation's ``AllocationFailed`` was journaled for;
``vfio``
    the GPUs running domains had at the last pass;
``observed_generation``
    the last generation a pass finished (``CONVERGED`` or ``FAILED``);
``journal_seq``
    the seq of the last journaled event whose effect is in the ledger: a pass
    that died between journaling an event and recording it is caught up by
    ``catch_up`` from the journal, so nothing is reported twice;
``last_state``
    the section state of the last pass (the retry timer runs a pass only
    while it is ``PROGRESSING``).
"""

from __future__ import annotations

import json
import os
from dataclasses import asdict, dataclass, field
from typing import Dict, Optional

from ansible_collections.bcd.devices.plugins.module_utils.node.fsutil import read_bytes, write_atomic

LEDGER_NAME = "ledger.json"


@dataclass
class Ledger:
    bound: Dict[str, dict] = field(default_factory=dict)
    releasing: Dict[str, dict] = field(default_factory=dict)
    failures: Dict[str, int] = field(default_factory=dict)
    vfio: Dict[str, str] = field(default_factory=dict)
    observed_generation: Optional[int] = None
    last_state: Optional[str] = None
    journal_seq: int = 0
    problem: Optional[str] = None

    def to_json(self):
        data = asdict(self)
        data.pop("problem")
        return (json.dumps(data, indent=2, sort_keys=True) + "\n").encode("utf-8")


def _dict_of(value, kind):
    if not isinstance(value, dict):
        return {}
    return dict((key, item) for key, item in value.items() if isinstance(key, str) and isinstance(item, kind))


def load_ledger(state_path):
    """Read the ledger; a missing one is empty, a damaged one is empty with ``problem`` set."""
    content = read_bytes(os.path.join(state_path, LEDGER_NAME))
    if content is None:
        return Ledger()
    try:
        data = json.loads(content.decode("utf-8"))
        if not isinstance(data, dict):
            raise ValueError("not a JSON object")
    except ValueError as exc:
        return Ledger(problem="%s/%s is unreadable (%s); reports may repeat" % (state_path, LEDGER_NAME, exc))
    observed = data.get("observed_generation")
    return Ledger(
        bound=_dict_of(data.get("bound"), dict),
        releasing=_dict_of(data.get("releasing"), dict),
        failures=_dict_of(data.get("failures"), int),
        vfio=_dict_of(data.get("vfio"), str),
        observed_generation=observed if isinstance(observed, int) and not isinstance(observed, bool) else None,
        last_state=data.get("last_state") if isinstance(data.get("last_state"), str) else None,
        journal_seq=data.get("journal_seq") if isinstance(data.get("journal_seq"), int) else 0,
    )


def record_event(ledger, event, limits=None):
    """What journaling ``event`` means for the ledger; applied after each append and by ``catch_up``."""
    body = event.get("body") or {}
    allocation_id = body.get("allocation_id")
    generation = body.get("generation")
    if event.get("type") == "AllocationBound":
        record = {"generation": generation, "device_ids": list(body.get("device_ids") or [])}
        if limits:
            record["limits"] = limits
        ledger.bound[allocation_id] = record
    elif event.get("type") == "AllocationReleased":
        ledger.releasing.pop(allocation_id, None)
        bound = ledger.bound.get(allocation_id)
        # a late Kubernetes release of old devices leaves a newer hold of the same id reported
        if bound is not None and sorted(bound.get("device_ids") or []) == sorted(body.get("device_ids") or []):
            ledger.bound.pop(allocation_id, None)
    elif event.get("type") == "AllocationFailed" and isinstance(generation, int):
        ledger.failures[allocation_id] = generation
    ledger.journal_seq = max(ledger.journal_seq, event.get("seq") or 0)


def catch_up(ledger, events):
    """Replay the journaled events the ledger has not recorded yet (seq above ``journal_seq``); return them."""
    replayed = []
    for event in sorted(events, key=lambda e: e.get("seq") or 0):
        if (event.get("seq") or 0) > ledger.journal_seq:
            record_event(ledger, event)
            replayed.append(event)
    return replayed


def save_ledger(state_path, ledger):
    """Write the ledger when it changed (a pass that changes nothing rewrites nothing); state files
    take the state directory's owner, so root's passes and the bcd account's share them."""
    path = os.path.join(state_path, LEDGER_NAME)
    content = ledger.to_json()
    if read_bytes(path) != content:
        write_atomic(path, content, 0o600, 0o700, owner_from_dir=True)


def catch_up_state(state_path, journal, releases=None, write=True):
    """Bring the ledger (and the pending Kubernetes releases) up to the journal, before anything reads
    or acknowledges it: a pass that died between journaling an event and recording it is finished here.
    Returns the ledger."""
    from ansible_collections.bcd.devices.plugins.module_utils.domain.kube_release import save_releases

    ledger = load_ledger(state_path)
    replayed = catch_up(ledger, journal.unacked())
    if not replayed:
        return ledger
    releases_changed = False
    for event in replayed:
        body = event.get("body") or {}
        record = releases.pending.get(body.get("allocation_id")) if releases is not None else None
        if event.get("type") == "AllocationReleased" and record is not None \
                and record.generation == body.get("generation"):
            del releases.pending[record.allocation_id]
            releases_changed = True
    if write:
        save_ledger(state_path, ledger)
        if releases_changed:
            save_releases(state_path, releases.pending)
    return ledger
