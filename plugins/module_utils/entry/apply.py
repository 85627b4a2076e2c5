# -*- coding: utf-8 -*-
# Copyright: contributors to bcd.devices
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""Apply: execute a plan through a host, in order, journaling before reporting.

Each action is carried out in the order the spec page gives for it:

* a bind writes its files, then journals ``AllocationBound``, then marks the
  hold reported in the ledger;
* a release is recorded in the ledger first, then its files are removed, then
  ``AllocationReleased`` is journaled and the record dropped;
* a refusal journals ``AllocationFailed``, then remembers the generation.

A failure of any write stops that action and is returned as a retryable error:
no event is sent for it, and the next pass (whose plan sees what is on disk)
finishes the work. A crash between any two steps leaves the same situation.
"""

from __future__ import annotations

from ansible_collections.bcd.devices.plugins.module_utils.state.events import EventsError
from ansible_collections.bcd.devices.plugins.module_utils.node.fsutil import FsError
from ansible_collections.bcd.devices.plugins.module_utils.entry.helper import HelperError
from ansible_collections.bcd.devices.plugins.module_utils.domain.kube_release import clear_marker, quarantine, save_releases
from ansible_collections.bcd.devices.plugins.module_utils.state.ledger import record_event, save_ledger
from ansible_collections.bcd.devices.plugins.module_utils.node.slices import SliceError

RETRYABLE = (OSError, EventsError, FsError, SliceError, HelperError)


class Applier(object):
    """Carries out one plan; ``key`` is loaded (or created) only when an attested event is due."""

    def __init__(self, host, journal, ledger, state_path, key_loader, releases=None, now=0.0):
        self.releases = releases
        self.now = now
        self.host = host
        self.journal = journal
        self.ledger = ledger
        self.state_path = state_path
        self.key_loader = key_loader
        self._key = None

    def key(self):
        if self._key is None:
            self._key = self.key_loader()
        return self._key

    def report(self, action, then=None):
        """Journal the action's event, run ``then`` (what reporting settles: a release record dropped),
        then record the event in the ledger. A crash anywhere after the journal is caught up next pass."""
        event = action.event
        attested = event["type"] in ("AllocationBound", "AllocationReleased")
        journaled = self.journal.append(event["type"], event["body"], self.key() if attested else None)
        if then is not None:
            then()
        record_event(self.ledger, journaled, action.limits)
        self.save()

    def save(self):
        save_ledger(self.state_path, self.ledger)

    def write_files(self, action):
        for change in action.files:
            if change.after is None:
                self.host.remove_node_file(change.kind, action.allocation_id)
            else:
                self.host.write_node_file(change.kind, action.allocation_id, change.after)

    def run_slice(self, action):
        op = action.slice
        if op["op"] == "apply":
            self.host.apply_slice(op["name"], op["properties"], op["hugetlb_max"])
        else:
            self.host.remove_slice(op["name"])

    def save_releases(self):
        save_releases(self.state_path, self.releases.pending)

    def run_kubernetes(self, action):
        """A Kubernetes release's steps: recorded before its files go, reported (then dropped) once free."""
        verb, alloc = action.action, action.allocation_id
        if verb == "quarantine-releases":
            quarantine(self.state_path, self.now)
            self.releases.unreadable, self.releases.marker = None, True
        elif verb == "clear-marker":
            clear_marker(self.state_path)
            self.releases.marker = False
        elif verb == "drop-release":
            self.releases.pending.pop(alloc, None)
            self.save_releases()
        else:
            if action.release is not None:
                self.releases.pending[alloc] = action.release
                self.save_releases()
            self.write_files(action)
            if action.event:
                def drop_record():
                    self.releases.pending.pop(alloc, None)
                    self.save_releases()
                self.report(action, then=drop_record)

    def run(self, action):
        verb = action.action
        alloc = action.allocation_id
        if not action.changes:
            return
        if verb in ("release-kube", "report-release", "drop-release", "withdraw", "quarantine-releases",
                    "clear-marker"):
            self.run_kubernetes(action)
        elif verb in ("release", "finish-release"):
            if alloc not in self.ledger.releasing:
                self.ledger.releasing[alloc] = {"generation": action.generation, "device_ids": action.device_ids}
                self.save()
            self.write_files(action)
            self.report(action)
            if action.slice:  # after the report: a slice that cannot be stopped now is a leftover next pass
                self.run_slice(action)
        elif verb == "bind":
            if action.slice:  # the slice exists before the spec names it
                self.run_slice(action)
            self.write_files(action)
            self.report(action)
        elif verb in ("report-bound", "refuse"):
            self.report(action)
        elif action.slice:
            self.run_slice(action)
            if verb == "apply-slice" and alloc in self.ledger.bound:  # the limits the slice now has
                self.ledger.bound[alloc]["limits"] = action.limits
                self.save()
        else:
            self.write_files(action)


def apply_plan(plan, host, journal, ledger, state_path, key_loader, releases=None, now=0.0):
    """Run every action; return ``(done, errors)``: the actions carried out and the retryable errors."""
    applier = Applier(host, journal, ledger, state_path, key_loader, releases, now)
    done, errors = [], []
    for action in plan.actions:
        try:
            applier.run(action)
        except RETRYABLE as exc:
            errors.append("%s: %s" % (action.text, exc))
            continue
        if action.changes:
            done.append(action)
    return done, errors
