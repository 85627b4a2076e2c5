# -*- coding: utf-8 -*-
# Copyright: contributors to bcd.devices
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""The typed steps of a plan, and the apply loop that carries them out.

The planner returns a list of these; check mode returns them unapplied; a real
pass runs ``apply_plan``, which calls each action's ``apply`` in order. Every
action knows its own line of the plan (``text``), the files it writes or
removes (``files``, shown by ``--diff``), the event it reports (``event``) and
how to carry itself out through two objects it is handed: the host's *writer*,
which does root's work (node files and slices, here or through the root helper:
``node/writers.py``), and the node's *state* (the journal and the ledger:
``state/store.py``). The order within each action is what keeps a
crash harmless (see docs/architecture.md):

* a bind creates its slice, writes its files, then journals ``AllocationBound``;
* a release is recorded first, then its files go, then ``AllocationReleased``
  is journaled (which settles the record), and only then is an empty slice
  stopped;
* a refusal journals ``AllocationFailed``.

A failure of any step stops that action; ``apply_plan`` returns it as a
retryable error, no event is sent for it, and the next pass, whose plan sees
what is on disk, finishes the work.
"""

from __future__ import annotations

import abc
from dataclasses import dataclass, field
from typing import Any, ClassVar, Dict, List, Optional, Set, Tuple, Union

from ansible_collections.bcd.devices.plugins.module_utils.domain.errors import RetryableError
from ansible_collections.bcd.devices.plugins.module_utils.domain.slices import settings_text


@dataclass
class FileChange:
    """One node file a step writes (``after``) or removes (``after`` is None)."""

    kind: str  # "cdi" or "allocation-env": the writer builds the path from it
    path: str  # the node path, for diffs and messages
    before: Optional[bytes]
    after: Optional[bytes]
    hold: Optional[dict] = None  # what the file is rendered from (assignment.hold_request): the helper's input

    @property
    def change(self):
        if self.after is None:
            return "remove"
        return "create" if self.before is None else "update"

    def apply(self, writer, allocation_id):
        try:
            if self.after is None:
                writer.remove_node_file(self.kind, allocation_id)
            else:
                writer.write_node_file(self.kind, allocation_id, self.after, self.hold)
        except OSError as exc:  # a directory in the way, a read-only file system: said with the node path
            raise RetryableError("cannot %s %s: %s" % ("remove" if self.after is None else "write", self.path,
                                                       exc.strerror or exc))

    def diff(self):
        return {
            "before_header": self.path if self.before is not None else "%s (absent)" % self.path,
            "after_header": self.path if self.after is not None else "%s (removed)" % self.path,
            "before": (self.before or b"").decode("utf-8", "replace"),
            "after": (self.after or b"").decode("utf-8", "replace"),
        }


@dataclass
class SpecAside:
    """A damaged spec set aside in /etc/cdi (never deleted); ``aside`` is the name planned for it."""

    path: str
    before: Optional[bytes]
    aside: str
    now: float
    kind: str = "cdi"
    after: Optional[bytes] = None
    change: str = "set-aside"

    def apply(self, writer, allocation_id):
        try:
            writer.set_aside_spec(allocation_id, self.now)
        except OSError as exc:
            raise RetryableError("cannot set %s aside: %s" % (self.path, exc.strerror or exc))

    def diff(self):
        return {"before_header": self.path, "after_header": "%s (set aside as %s)" % (self.path, self.aside),
                "before": (self.before or b"").decode("utf-8", "replace"), "after": ""}


@dataclass
class SliceApply:
    """Create a hold slice (or set its limits again)."""

    name: str
    properties: Dict[str, str]
    hugetlb_max: Dict[str, int]
    before: Optional[str] = None  # the slice's settings as the host shows them now, for --diff
    limits: Optional[dict] = None  # what the properties are built from: the helper's input

    def describe(self):
        settings = settings_text(self.properties, self.hugetlb_max).splitlines()
        return "%s (%s)" % (self.name, ", ".join(settings) or "no limits")

    def run(self, writer):
        writer.apply_slice(self)

    def to_dict(self):
        return {"op": "apply", "name": self.name, "properties": dict(self.properties),
                "hugetlb_max": dict(self.hugetlb_max)}

    def diff(self):
        header = "slice %s" % self.name
        return {"before_header": header if self.before is not None else "%s (absent)" % header,
                "after_header": header, "before": self.before or "",
                "after": settings_text(self.properties, self.hugetlb_max)}


@dataclass
class SliceStop:
    """Stop an empty hold slice."""

    name: str
    before: Optional[str] = None

    def run(self, writer):
        writer.stop_slice(self.name)

    def to_dict(self):
        return {"op": "remove", "name": self.name}

    def diff(self):
        header = "slice %s" % self.name
        return {"before_header": header, "after_header": "%s (stopped)" % header, "before": self.before or "",
                "after": ""}


@dataclass
class Action(abc.ABC):
    """One planned step. ``kind`` is its name in the returned plan; ``changes`` is False for a step
    that is only shown (it changes nothing)."""

    kind: ClassVar[str] = ""
    changes: ClassVar[bool] = True

    allocation_id: str
    text: str
    files: List[FileChange] = field(default_factory=list)
    event: Optional[dict] = None  # {"type": ..., "body": {...}}, journaled by apply
    device_ids: List[str] = field(default_factory=list)
    generation: Optional[int] = None
    slice: Optional[Union[SliceApply, SliceStop]] = None
    limits: Optional[dict] = None  # the limits the ledger records with the hold

    @property
    def action(self):
        return self.kind

    @abc.abstractmethod
    def apply(self, writer, state):
        """Carry the step out through ``writer`` and ``state``; raises on failure (nothing reported)."""

    def recorded_release(self):
        """``(allocation_id, generation, device_ids)`` when the step removes a reported hold's files: the
        release is recorded before the plan touches anything (record before remove)."""
        return None

    def write_files(self, writer):
        for change in self.files:
            change.apply(writer, self.allocation_id)

    def to_dict(self):
        """The step as the module returns it in ``plan``."""
        data = {"action": self.kind, "allocation_id": self.allocation_id, "text": self.text}  # type: Dict[str, Any]
        if self.slice is not None:
            data["slice"] = self.slice.to_dict()
        if self.device_ids:
            data["device_ids"] = list(self.device_ids)
        if self.files:
            data["files"] = [{"path": change.path, "change": change.change} for change in self.files]
        if self.event:
            data["event"] = self.event["type"]
        return data

    def diffs(self):
        """``--diff`` entries: every file the step writes or removes, and its slice's settings."""
        entries = [change.diff() for change in self.files]
        if self.slice is not None:
            entries.append(self.slice.diff())
        return entries


@dataclass
class Bind(Action):
    """A new hold: its slice first (the spec names it), then its files, then ``AllocationBound``.
    ``needs``: the allocations whose release, earlier in the plan, frees its atoms or its memory; when
    any of them fails, the bind is not applied (retried next pass): one atom is never in two live specs."""

    kind: ClassVar[str] = "bind"
    needs: Tuple[str, ...] = ()

    def apply(self, writer, state):
        if self.slice is not None:
            self.slice.run(writer)
        self.write_files(writer)
        state.report(self.event, self.limits)


@dataclass
class Rebind(Bind):
    """A wanted hold whose spec is damaged: the file set aside, the hold written again from its
    assignment; ``AllocationBound`` only when the node had not reported it bound with these devices."""

    kind: ClassVar[str] = "rebind"

    def apply(self, writer, state):
        if self.slice is not None:
            self.slice.run(writer)
        self.write_files(writer)
        if self.event:
            state.report(self.event, self.limits)
        else:
            state.set_hold_limits(self.allocation_id, self.limits)


class Release(Action):
    """A plain hold no longer wanted: recorded, its files removed, reported; then its slice stopped
    if empty (after the report: a slice that cannot be stopped now is a leftover next pass)."""

    kind = "release"

    def recorded_release(self):
        if self.event:  # a damaged spec never reported bound has nothing to report
            return (self.allocation_id, self.generation, self.device_ids)
        return None

    def apply(self, writer, state):
        if self.event:
            state.begin_release(self.allocation_id, self.generation, self.device_ids)
        self.write_files(writer)
        if self.event:
            state.report(self.event)
        if self.slice is not None:
            self.slice.run(writer)


class FinishRelease(Release):
    """A plain release an earlier pass recorded but did not finish."""

    kind = "finish-release"


class RewriteFile(Action):
    """A kept hold's file written again."""

    def apply(self, writer, state):
        self.write_files(writer)


class Rerender(RewriteFile):
    """A kept hold's spec, when what it renders to changed (vendor spec, reservation id, limits)."""

    kind = "rerender"


class WriteEnv(RewriteFile):
    """A kept hold's env file, when missing (``/run`` is tmpfs) or out of date."""

    kind = "write-env"


class ReportBound(Action):
    """A hold on disk whose ``AllocationBound`` was never journaled (a pass died in between)."""

    kind = "report-bound"

    def apply(self, writer, state):
        state.report(self.event, self.limits)


class Refuse(Action):
    """An assignment refused at this generation: one ``AllocationFailed``."""

    kind = "refuse"

    def apply(self, writer, state):
        state.report(self.event)


class CreateSlice(Action):
    """A kept hold's slice created again (gone after a reboot)."""

    kind = "create-slice"

    def apply(self, writer, state):
        if self.slice is None:  # the planner gives every create-slice its slice
            raise AssertionError("create-slice without a slice")
        self.slice.run(writer)
        state.set_hold_limits(self.allocation_id, self.limits)


class ApplySlice(CreateSlice):
    """A kept hold's slice whose limits differ from the wanted ones, set again."""

    kind = "apply-slice"


class StopSlice(Action):
    """A slice whose hold is gone, stopped once empty."""

    kind = "stop-slice"

    def apply(self, writer, state):
        if self.slice is None:  # the planner gives every stop-slice its slice
            raise AssertionError("stop-slice without a slice")
        self.slice.run(writer)


class KeepSlice(Action):
    """Shown only: a slice whose hold is gone still runs a workload, so it is kept."""

    kind = "keep-slice"
    changes = False

    def apply(self, writer, state):
        return None


@dataclass
class ReleaseKubernetes(Action):
    """A Kubernetes hold no longer wanted: recorded in the pending releases first, its files removed at
    once, and ``AllocationReleased`` journaled only when no pod holds its devices (``event`` set)."""

    kind: ClassVar[str] = "release-kube"
    release: Optional[object] = None  # the PendingRelease recorded before anything is removed

    def apply(self, writer, state):
        state.record_kube_release(self.release)
        self.write_files(writer)
        if self.event:
            state.report(self.event)


class Withdraw(Action):
    """A pending Kubernetes release's files, left by a crash, removed."""

    kind = "withdraw"

    def apply(self, writer, state):
        self.write_files(writer)


class ReportRelease(Action):
    """A pending Kubernetes release no pod holds any more: reported (which settles its record)."""

    kind = "report-release"

    def apply(self, writer, state):
        self.write_files(writer)
        state.report(self.event)


@dataclass
class TakeBackRelease(Action):
    """A pending Kubernetes release the spec takes back while pods still hold old devices the new hold
    does not take: recorded as taken back (never reported), narrowed to those devices."""

    kind: ClassVar[str] = "take-back-release"
    release: Optional[object] = None

    def apply(self, writer, state):
        state.record_kube_release(self.release)


class DropRelease(Action):
    """A pending Kubernetes release the spec takes back: dropped unreported."""

    kind = "drop-release"

    def apply(self, writer, state):
        state.drop_kube_release(self.allocation_id)


@dataclass
class QuarantineReleases(Action):
    """An unreadable releases file set aside (never deleted) and the marker written."""

    kind: ClassVar[str] = "quarantine-releases"
    now: float = 0.0

    def apply(self, writer, state):
        state.quarantine_releases(self.now)


class ClearMarker(Action):
    """The unreadable-releases marker removed, once the kube side allows."""

    kind = "clear-marker"

    def apply(self, writer, state):
        state.clear_releases_marker()


def apply_plan(plan, writer, state):
    """Run every action in order; return ``(done, errors)``: the actions carried out, and one
    retryable error per action that failed. A failure holds up that allocation's later actions in
    this pass (a hold whose env file could not be written is not reported bound), and every bind that
    needs its release (``Bind.needs``); the other allocations' go on."""
    done = []  # type: List[Action]
    errors = []  # type: List[str]
    failed = set()  # type: Set[str]
    releases = [action.recorded_release() for action in plan.actions if action.changes]
    try:
        state.begin_releases([release for release in releases if release is not None])
    except (OSError, RetryableError) as exc:  # nothing may be removed unrecorded: nothing is done
        return done, ["cannot record this pass's releases: %s" % exc]
    writer.batch()  # each directory fsynced once, at writer.flush(), not once per file
    for action in plan.actions:
        if not action.changes or (action.allocation_id and action.allocation_id in failed):
            continue
        waits = [needed for needed in getattr(action, "needs", ()) if needed in failed]
        if waits:  # the hold it replaces is still live: binding now would put one atom in two live specs
            errors.append("%s: waits for the release of %s, which failed; retried next pass"
                          % (action.allocation_id, ", ".join(waits)))
            failed.add(action.allocation_id)
            continue
        try:
            action.apply(writer, state)
        except (OSError, RetryableError) as exc:
            errors.append("%s: %s" % (action.allocation_id or action.kind, exc))
            if action.allocation_id:
                failed.add(action.allocation_id)
            continue
        done.append(action)
    writer.flush()  # the pass's renames and removals durable before any event reporting them is journaled
    try:
        state.flush(save=False)  # the pass's reports, journaled before any is returned; the pass saves the ledger
    except (OSError, RetryableError) as exc:
        errors.append("cannot journal this pass's events: %s" % exc)
    return done, errors
