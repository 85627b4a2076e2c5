# -*- coding: utf-8 -*-
# Copyright: contributors to bcd.devices
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""The typed steps of a plan.

The planner returns a list of these; check mode returns them unapplied; a real
pass runs ``apply.apply_plan``, which calls each action's ``apply`` in order.
Every action knows its own line of the plan (``text``, written from its own
fields), the files it writes or removes (``node_files``, shown by ``--diff``),
the event it reports (``event``) and how to carry itself out through two objects
it is handed: the host's *writer*, which does root's work (node files and
slices, here or through the root helper), and the node's *state* (the journal,
the ledger and the pending releases): ``seams.Writer`` and ``seams.StateSink``.
The order within each action is what keeps a crash harmless (see
docs/architecture.md):

* a bind creates its slice, writes its files, then journals ``AllocationBound``
  (one whose spec cannot be written removes the env file it wrote);
* a release is recorded first (with the plan's others, by ``apply_plan``), then
  its files go, then ``AllocationReleased`` is journaled (which settles the
  record), and only then is an empty slice stopped;
* a refusal journals ``AllocationFailed``.

A failure of any step stops that action: ``apply_plan`` says what that means for
the pass.
"""

from __future__ import annotations

import abc
from typing import Any, ClassVar, Dict, List, Optional, Sequence, Tuple, Union

from ansible_collections.bcd.devices.plugins.module_utils.domain.cdi.hold_spec import cdi_device
from ansible_collections.bcd.devices.plugins.module_utils.domain.input.refusals import reason_shown
from ansible_collections.bcd.devices.plugins.module_utils.domain.kube_release import PendingRelease
from ansible_collections.bcd.devices.plugins.module_utils.domain.plan.seams import StateSink, Writer
from ansible_collections.bcd.devices.plugins.module_utils.domain.slices import settings_text
from ansible_collections.bcd.devices.plugins.module_utils.support.errors import BcdError, RetryableError
from ansible_collections.bcd.devices.plugins.module_utils.support.records import record

# Every class here is ``eq=False``: a step is itself, compared by identity (its content compares through
# ``to_dict()``), and no ``__eq__``/``__hash__`` is generated for it. Each module run imports these
# classes, and generating those methods was a measurable part of a no-op's cost (docs/performance.md).


@record(frozen=True, eq=False)
class FileChange:
    """One node file a step writes (``after``) or removes (``after`` is None)."""

    kind: str  # "cdi" or "allocation-env": the root helper names the file from it and the allocation id
    path: str  # the node path: the file a writer in this process writes or removes (checked), what diffs say
    before: Optional[bytes]
    after: Optional[bytes]
    hold: Optional[dict] = None  # what the file is rendered from (assignment.hold_request): the helper's input

    @property
    def change(self) -> str:
        if self.after is None:
            return "remove"
        return "create" if self.before is None else "update"

    def apply(self, writer: Writer, allocation_id: str) -> None:
        try:
            if self.after is None:
                writer.remove_node_file(self.kind, allocation_id, path=self.path)
            else:
                writer.write_node_file(self.kind, allocation_id, self.after, self.hold, path=self.path)
        except OSError as exc:  # a directory in the way, a read-only file system: said with the node path
            raise RetryableError("cannot %s %s: %s" % ("remove" if self.after is None else "write", self.path,
                                                       exc.strerror or exc))

    def diff(self) -> Dict[str, str]:
        return {
            "before_header": self.path if self.before is not None else "%s (absent)" % self.path,
            "after_header": self.path if self.after is not None else "%s (removed)" % self.path,
            "before": (self.before or b"").decode("utf-8", "replace"),
            "after": (self.after or b"").decode("utf-8", "replace"),
        }


@record(frozen=True, eq=False)
class SpecAside:
    """A damaged spec set aside in /etc/cdi (never deleted); ``aside`` is the name planned for it."""

    path: str
    before: Optional[bytes]
    aside: str
    now: float
    kind: str = "cdi"
    after: Optional[bytes] = None
    change: str = "set-aside"

    def apply(self, writer: Writer, allocation_id: str) -> None:
        try:
            writer.set_aside_spec(allocation_id, self.now)
        except OSError as exc:
            raise RetryableError("cannot set %s aside: %s" % (self.path, exc.strerror or exc))

    def diff(self) -> Dict[str, str]:
        return {"before_header": self.path, "after_header": "%s (set aside as %s)" % (self.path, self.aside),
                "before": (self.before or b"").decode("utf-8", "replace"), "after": ""}


@record(frozen=True, eq=False)
class SliceApply:
    """Create a hold slice (or set its limits again)."""

    name: str
    properties: Dict[str, str]
    hugetlb_max: Dict[str, int]
    before: Optional[str] = None  # the slice's settings as the host shows them now, for --diff
    limits: Optional[dict] = None  # what the properties are built from: the helper's input

    def describe(self) -> str:
        settings = settings_text(self.properties, self.hugetlb_max).splitlines()
        return "%s (%s)" % (self.name, ", ".join(settings) or "no limits")

    def run(self, writer: Writer) -> None:
        writer.apply_slice(self)

    def to_dict(self) -> Dict[str, Any]:
        return {"op": "apply", "name": self.name, "properties": dict(self.properties),
                "hugetlb_max": dict(self.hugetlb_max)}

    def diff(self) -> Dict[str, str]:
        header = "slice %s" % self.name
        return {"before_header": header if self.before is not None else "%s (absent)" % header,
                "after_header": header, "before": self.before or "",
                "after": settings_text(self.properties, self.hugetlb_max)}


@record(frozen=True, eq=False)
class SliceStop:
    """Stop an empty hold slice."""

    name: str
    before: Optional[str] = None

    def run(self, writer: Writer) -> None:
        writer.stop_slice(self.name)

    def to_dict(self) -> Dict[str, Any]:
        return {"op": "remove", "name": self.name}

    def diff(self) -> Dict[str, str]:
        header = "slice %s" % self.name
        return {"before_header": header, "after_header": "%s (stopped)" % header, "before": self.before or "",
                "after": ""}


Event = Dict[str, Any]  # {"type": one of event_types.EVENT_TYPES, "body": {...}}, journaled by apply
SliceOp = Union[SliceApply, SliceStop]


@record(frozen=True, eq=False)
class Action(abc.ABC):
    """One planned step: a sum type. Each kind below carries only its own fields and is built whole,
    once, by the planner; none is changed after. ``kind`` is its name in the returned plan;
    ``changes`` is False for a step that is only shown (it changes nothing); ``text`` is its line of the
    plan, which it writes from its own fields."""

    kind: ClassVar[str] = ""
    changes: ClassVar[bool] = True

    allocation_id: str

    @property
    @abc.abstractmethod
    def text(self) -> str:
        """The step's one line of the plan."""

    @abc.abstractmethod
    def apply(self, writer: Writer, state: StateSink) -> None:
        """Carry the step out through ``writer`` and ``state``; raises on failure (nothing reported)."""

    @property
    def needs(self) -> Tuple[str, ...]:
        """The allocations whose steps, earlier in the plan, free what this one takes (a bind's)."""
        return ()

    def recorded_release(self) -> Optional[Tuple[str, Optional[int], List[str]]]:
        """``(allocation_id, generation, device_ids)`` when the step removes a reported hold's files: the
        release is recorded before the plan touches anything (record before remove)."""
        return None

    def node_files(self) -> Sequence[Union[FileChange, SpecAside]]:
        """The node files the step writes, removes or sets aside (``--diff``)."""
        return ()

    def slice_op(self) -> Optional[SliceOp]:
        return None

    def event_type(self) -> Optional[str]:
        event = getattr(self, "event", None)
        return event["type"] if event else None

    def write_files(self, writer: Writer) -> None:
        for change in self.node_files():
            change.apply(writer, self.allocation_id)

    def to_dict(self) -> Dict[str, Any]:
        """The step as the module returns it in ``plan``."""
        data = {"action": self.kind, "allocation_id": self.allocation_id, "text": self.text}  # type: Dict[str, Any]
        op = self.slice_op()
        if op is not None:
            data["slice"] = op.to_dict()
        device_ids = getattr(self, "device_ids", ())
        if device_ids:
            data["device_ids"] = list(device_ids)
        files = self.node_files()
        if files:
            data["files"] = [{"path": change.path, "change": change.change} for change in files]
        event_type = self.event_type()
        if event_type:
            data["event"] = event_type
        if self.needs:
            data["needs"] = list(self.needs)
        locality = getattr(self, "locality", None)
        if locality:
            data["locality"] = dict(locality)
        return data

    def diffs(self) -> List[Dict[str, str]]:
        """``--diff`` entries: every file the step writes or removes, and its slice's settings."""
        entries = [change.diff() for change in self.node_files()]
        op = self.slice_op()
        if op is not None:
            entries.append(op.diff())
        return entries


def _removed(files: Sequence[Union[FileChange, SpecAside]]) -> str:
    """The files a step removes, as its line names them."""
    return " and ".join(change.path for change in files)


def _aside(files: Sequence[Union[FileChange, SpecAside]]) -> SpecAside:
    """The damaged spec a step sets aside."""
    return next(change for change in files if isinstance(change, SpecAside))


def _held_by(holders: Optional[Sequence[str]]) -> str:
    """Who holds a Kubernetes release's devices, as a line says it (None: the kubelet could not be asked)."""
    if holders is None:
        return "the kubelet cannot be asked: counted as held"
    return "held by " + ", ".join(holders)


@record(frozen=True, eq=False)
class Bind(Action):
    """A new hold: its slice first (the spec names it), then its files, then ``AllocationBound``.
    ``waits_for``: the allocations whose steps, earlier in the plan, free its atoms or its memory (a
    release, or the new bind of a hold moving off them unreported); when any of them fails, the bind is
    not applied (retried next pass): one atom is never in two live specs."""

    kind: ClassVar[str] = "bind"

    files: Tuple[Union[FileChange, SpecAside], ...]
    event: Optional[Event]  # None: a Rebind the node reported bound as it is
    device_ids: Tuple[str, ...]
    generation: int
    limits: Optional[dict]  # the limits the ledger records with the hold
    slice: Optional[SliceApply] = None
    waits_for: Tuple[str, ...] = ()
    # its cpus or mems lie outside its GPUs' NUMA nodes: admission.locality's note (said, never refused)
    locality: Optional[dict] = None

    @property
    def text(self) -> str:
        where = ", in %s" % self.slice.describe() if self.slice is not None else ""
        remote = "; not NUMA-local: %s" % self.locality["text"] if self.locality is not None else ""
        return self._what() + where + remote

    def _what(self) -> str:
        return "bind %s: %s -> %s, %s" % (self.allocation_id, ", ".join(cdi_device(device_id) for device_id in self.device_ids),
                                          self._written("cdi"), self._written("allocation-env"))

    def _written(self, kind: str) -> str:
        """The path of the file of ``kind`` the step writes."""
        return next(change.path for change in self.files if isinstance(change, FileChange) and change.kind == kind)

    @property
    def needs(self) -> Tuple[str, ...]:
        return self.waits_for

    def node_files(self) -> Sequence[Union[FileChange, SpecAside]]:
        return self.files

    def slice_op(self) -> Optional[SliceOp]:
        return self.slice

    def apply(self, writer: Writer, state: StateSink) -> None:
        if self.slice is not None:
            self.slice.run(writer)
        self.write_files(writer)
        if self.event:
            state.report(self.event, self.limits)
        else:  # a Rebind the node reported bound as it is: only its slice's limits are recorded
            state.set_hold_limits(self.allocation_id, self.limits)

    def write_files(self, writer: Writer) -> None:
        """The hold's files in order (the env file before the spec, which makes the hold live). A bind whose
        spec is not written removes the env file it wrote: an env file never outlives a bind that did not
        finish, naming devices no live spec holds (a pass that died in between leaves it to the next pass,
        which removes it: ``RemoveEnv``)."""
        written = []  # type: List[FileChange]
        try:
            for change in self.node_files():
                change.apply(writer, self.allocation_id)
                if isinstance(change, FileChange) and change.kind == "allocation-env" and change.after is not None:
                    written.append(change)
        except Exception:
            for change in written:
                try:
                    writer.remove_node_file(change.kind, self.allocation_id, path=change.path)
                except (OSError, BcdError):  # left for the next pass, which finds it without a live spec
                    pass
            raise


@record(frozen=True, eq=False)
class Rebind(Bind):
    """A wanted hold whose spec is damaged: the file set aside, the hold written again from
    its assignment; ``AllocationBound`` only when the node had not reported it bound with these devices."""

    kind: ClassVar[str] = "rebind"

    def _what(self) -> str:
        aside = _aside(self.files)
        return "rebind %s from its assignment (its spec is damaged): set %s aside as %s, write %s, %s%s" % (
            self.allocation_id, aside.path, aside.aside, self._written("cdi"), self._written("allocation-env"),
            ", report AllocationBound" if self.event else " (already reported bound: nothing to report)")


@record(frozen=True, eq=False)
class Release(Action):
    """A plain hold no longer wanted (``why``): recorded (with the plan's other releases, before any step:
    ``recorded_release``), its files removed, reported; then its slice stopped if empty (after the report: a
    slice that cannot be stopped now is a leftover next pass). ``busy``: its slice, which still runs a
    workload and is kept."""

    kind: ClassVar[str] = "release"

    files: Tuple[Union[FileChange, SpecAside], ...]
    event: Optional[Event]  # None: a damaged spec never reported bound has nothing to report
    device_ids: Tuple[str, ...]
    generation: int
    why: str
    slice: Optional[SliceStop] = None
    busy: Optional[str] = None

    @property
    def text(self) -> str:
        return self._what() + self._then()

    def _what(self) -> str:
        return "%s %s (%s): remove %s, report AllocationReleased" % (self.kind, self.allocation_id, self.why,
                                                                     _removed(self.files) or "no files left")

    def _then(self) -> str:
        if self.slice is not None:
            return ", then stop %s (empty)" % self.slice.name
        if self.busy is not None:
            return "; %s still runs a workload and is kept with its limits" % self.busy
        return ""

    def node_files(self) -> Sequence[Union[FileChange, SpecAside]]:
        return self.files

    def slice_op(self) -> Optional[SliceOp]:
        return self.slice

    def recorded_release(self) -> Optional[Tuple[str, Optional[int], List[str]]]:
        if self.event:
            return (self.allocation_id, self.generation, list(self.device_ids))
        return None

    def apply(self, writer: Writer, state: StateSink) -> None:
        # recorded already: apply_plan records every release of the plan before it touches anything
        self.write_files(writer)
        if self.event:
            state.report(self.event)
        if self.slice is not None:
            self.slice.run(writer)


@record(frozen=True, eq=False)
class ReleaseDamaged(Release):
    """A hold whose spec is damaged that goes: its spec set aside, its env file removed,
    and ``AllocationReleased`` with the devices the node last reported bound (none if it never did)."""

    def _what(self) -> str:
        aside = _aside(self.files)
        return "release %s (%s; its spec is damaged): set %s aside as %s%s%s" % (
            self.allocation_id, self.why, aside.path, aside.aside,
            "".join(", remove %s" % change.path for change in self.files if change is not aside),
            ", report AllocationReleased" if self.event else " (never reported bound: nothing to report)")


@record(frozen=True, eq=False)
class FinishRelease(Release):
    """A plain release an earlier pass recorded but did not finish."""

    kind: ClassVar[str] = "finish-release"


@record(frozen=True, eq=False)
class RewriteFile(Action):
    """A kept hold's file written again."""

    file: FileChange
    device_ids: Tuple[str, ...]
    generation: int

    def node_files(self) -> Sequence[Union[FileChange, SpecAside]]:
        return (self.file,)

    def apply(self, writer: Writer, state: StateSink) -> None:
        self.write_files(writer)


@record(frozen=True, eq=False)
class Rerender(RewriteFile):
    """A kept hold's spec, when what it renders to changed (``why``: vendor spec, reservation id, limits)."""

    kind: ClassVar[str] = "rerender"

    why: str

    @property
    def text(self) -> str:
        return "re-render %s (%s)" % (self.file.path, self.why)


@record(frozen=True, eq=False)
class WriteEnv(RewriteFile):
    """A kept hold's env file, when missing (``/run`` is tmpfs) or out of date."""

    kind: ClassVar[str] = "write-env"

    @property
    def text(self) -> str:
        return "rewrite %s (%s)" % (self.file.path, "missing" if self.file.before is None else "out of date")


@record(frozen=True, eq=False)
class RemoveEnv(Action):
    """An env file with no live spec, no record of a hold and no bind of this pass behind it (a bind that never
    finished: the pass died between its env file and its spec), removed before anything is bound: its GPUs
    count as claimed until it is gone, so no other allocation's env file names them beside it."""

    kind: ClassVar[str] = "remove-env"

    files: Tuple[FileChange, ...]

    @property
    def text(self) -> str:
        return "remove %s: %s has no live spec (a bind that never finished)" % (_removed(self.files), self.allocation_id)

    def node_files(self) -> Sequence[Union[FileChange, SpecAside]]:
        return self.files

    def apply(self, writer: Writer, state: StateSink) -> None:
        self.write_files(writer)


@record(frozen=True, eq=False)
class ReportBound(Action):
    """A hold on disk whose ``AllocationBound`` was never journaled (a pass died in between), or whose
    devices or cgroup parent are not those the node last reported (``why``: one of the three below)."""

    kind: ClassVar[str] = "report-bound"

    NEVER_JOURNALED: ClassVar[str] = "never-journaled"
    MOVED: ClassVar[str] = "moved"  # on new devices: ``reported_on`` the ones the node last reported
    REPARENTED: ClassVar[str] = "reparented"  # its cgroup parent (the event's) changed

    event: Event
    device_ids: Tuple[str, ...]
    generation: int
    limits: Optional[dict]
    why: str
    reported_on: Tuple[str, ...] = ()

    @property
    def text(self) -> str:
        if self.why == self.MOVED:
            why = "on its new devices: the node last reported it bound on %s" % ", ".join(self.reported_on)
        elif self.why == self.REPARENTED:
            parent = self.event["body"].get("cgroup_parent") or "none (its slice is gone)"
            why = "again: its cgroup parent is now %s" % parent
        else:
            why = "its AllocationBound was never journaled"
        return "report %s bound (%s)" % (self.allocation_id, why)

    def apply(self, writer: Writer, state: StateSink) -> None:
        state.report(self.event, self.limits)


@record(frozen=True, eq=False)
class Refuse(Action):
    """An assignment refused at this generation: one ``AllocationFailed`` (its body says why)."""

    kind: ClassVar[str] = "refuse"

    event: Event
    generation: int

    @property
    def text(self) -> str:
        reason, message = self.event["body"]["reason"], self.event["body"]["message"]
        return "refuse %s%s: %s" % (self.allocation_id, reason_shown(reason, message), message)

    def apply(self, writer: Writer, state: StateSink) -> None:
        state.report(self.event)


@record(frozen=True, eq=False)
class ReportCondition(Action):
    """A node condition that appeared or cleared since the last pass: one signed event
    (``domain/plan/condition_events.py``); journaling it records the condition in the ledger."""

    kind: ClassVar[str] = "report-condition"

    event: Event
    device_ids: Tuple[str, ...]

    @property
    def text(self) -> str:
        return "report %s: %s" % (self.event["type"], self.event["body"]["message"])

    def apply(self, writer: Writer, state: StateSink) -> None:
        state.report(self.event)


@record(frozen=True, eq=False)
class CreateSlice(Action):
    """A kept hold's slice created again (gone after a reboot)."""

    kind: ClassVar[str] = "create-slice"

    slice: SliceApply
    device_ids: Tuple[str, ...]
    generation: int
    limits: Optional[dict]

    @property
    def text(self) -> str:
        return "create %s again: the hold is kept but its slice is gone" % self.slice.describe()

    def slice_op(self) -> Optional[SliceOp]:
        return self.slice

    def apply(self, writer: Writer, state: StateSink) -> None:
        self.slice.run(writer)
        state.set_hold_limits(self.allocation_id, self.limits)


@record(frozen=True, eq=False)
class ApplySlice(CreateSlice):
    """A kept hold's slice whose limits differ from the wanted ones (``why``), set again."""

    kind: ClassVar[str] = "apply-slice"

    why: str

    @property
    def text(self) -> str:
        return "set %s: %s" % (self.slice.describe(), self.why)


@record(frozen=True, eq=False)
class StopSlice(Action):
    """A slice whose hold is gone, stopped once empty."""

    kind: ClassVar[str] = "stop-slice"

    slice: SliceStop

    @property
    def text(self) -> str:
        return "stop %s: its hold is gone and it is empty" % self.slice.name

    def slice_op(self) -> Optional[SliceOp]:
        return self.slice

    def apply(self, writer: Writer, state: StateSink) -> None:
        self.slice.run(writer)


@record(frozen=True, eq=False)
class KeepSlice(Action):
    """Shown only: a slice (``name``) whose hold is gone still runs a workload, so it is kept."""

    kind: ClassVar[str] = "keep-slice"
    changes: ClassVar[bool] = False

    name: str

    @property
    def text(self) -> str:
        return "keep %s: its hold is gone but it still runs a workload; it is stopped once empty" % self.name

    def apply(self, writer: Writer, state: StateSink) -> None:
        return None


@record(frozen=True, eq=False)
class ReleaseKubernetes(Action):
    """A Kubernetes hold that goes (``why``): recorded in the pending releases first, its files removed at
    once, and ``AllocationReleased`` journaled only when no pod holds its devices (``event`` set). A release
    taken back (the allocation stays, on other devices or as a plain hold) is never reported; ``holders``:
    who holds its devices meanwhile (None: the kubelet could not be asked)."""

    kind: ClassVar[str] = "release-kube"

    files: Tuple[FileChange, ...]
    device_ids: Tuple[str, ...]
    generation: int
    release: PendingRelease  # recorded before anything is removed
    why: str
    holders: Optional[Sequence[str]] = None
    event: Optional[Event] = None

    @property
    def text(self) -> str:
        if self.event:
            return "release %s (%s, Kubernetes): record it, remove %s; no pod holds its devices: report " \
                "AllocationReleased" % (self.allocation_id, self.why, _removed(self.files))
        if self.release.taken_back:
            return "withdraw %s (%s, Kubernetes): remove %s; its old devices stay claimed until free (%s), never " \
                "reported (the allocation stays)" % (self.allocation_id, self.why, _removed(self.files),
                                                     _held_by(self.holders))
        return "release %s (%s, Kubernetes): record it in releasing.json, remove %s; report it once no pod holds " \
            "its devices (%s)" % (self.allocation_id, self.why, _removed(self.files), _held_by(self.holders))

    def node_files(self) -> Sequence[Union[FileChange, SpecAside]]:
        return self.files

    def apply(self, writer: Writer, state: StateSink) -> None:
        state.record_kube_release(self.release)
        self.write_files(writer)
        if self.event:
            state.report(self.event)


@record(frozen=True, eq=False)
class Withdraw(Action):
    """A Kubernetes hold's files removed unreported: its allocation is bound anew in this pass (``why`` it
    went), or its pending release's files were left by a crash (``why`` None)."""

    kind: ClassVar[str] = "withdraw"

    files: Tuple[FileChange, ...]
    device_ids: Tuple[str, ...]
    generation: int
    why: Optional[str] = None

    @property
    def text(self) -> str:
        if self.why is None:
            return "remove %s: %s is being released" % (_removed(self.files), self.allocation_id)
        return "withdraw %s (%s, Kubernetes): remove %s; no pod holds its old devices (the allocation stays: not " \
            "reported)" % (self.allocation_id, self.why, _removed(self.files))

    def node_files(self) -> Sequence[Union[FileChange, SpecAside]]:
        return self.files

    def apply(self, writer: Writer, state: StateSink) -> None:
        self.write_files(writer)


@record(frozen=True, eq=False)
class ReportRelease(Action):
    """A pending Kubernetes release no pod holds any more: reported (which settles its record)."""

    kind: ClassVar[str] = "report-release"

    files: Tuple[FileChange, ...]
    event: Event
    device_ids: Tuple[str, ...]
    generation: int

    @property
    def text(self) -> str:
        return "report %s released: no pod holds its devices any more" % self.allocation_id

    def node_files(self) -> Sequence[Union[FileChange, SpecAside]]:
        return self.files

    def apply(self, writer: Writer, state: StateSink) -> None:
        self.write_files(writer)
        state.report(self.event)


@record(frozen=True, eq=False)
class TakeBackRelease(Action):
    """A pending Kubernetes release the spec takes back while pods (``holders``) still hold old devices the
    new hold does not take: recorded as taken back (never reported), narrowed to those devices."""

    kind: ClassVar[str] = "take-back-release"

    device_ids: Tuple[str, ...]
    generation: int
    release: PendingRelease  # the narrowed release
    holders: Optional[Sequence[str]]

    @property
    def text(self) -> str:
        return "take back the pending Kubernetes release of %s: never reported; keep %s claimed until free (%s)" % (
            self.allocation_id, ", ".join(self.device_ids), _held_by(self.holders))

    def apply(self, writer: Writer, state: StateSink) -> None:
        state.record_kube_release(self.release)


@record(frozen=True, eq=False)
class DropRelease(Action):
    """A pending Kubernetes release the spec takes back (``why``): dropped unreported."""

    kind: ClassVar[str] = "drop-release"

    generation: int
    why: str

    @property
    def text(self) -> str:
        return "drop the pending Kubernetes release of %s: %s (not reported)" % (self.allocation_id, self.why)

    def apply(self, writer: Writer, state: StateSink) -> None:
        state.drop_kube_release(self.allocation_id)


@record(frozen=True, eq=False)
class QuarantineReleases(Action):
    """An unreadable releases file (in ``state_dir``, unreadable for ``problem``) set aside (never deleted)
    and the marker written."""

    kind: ClassVar[str] = "quarantine-releases"

    now: float
    state_dir: str
    problem: str

    @property
    def text(self) -> str:
        return "set %s/releasing.json aside (%s) and claim every GPU until the kube side is known" % (
            self.state_dir, self.problem)

    def apply(self, writer: Writer, state: StateSink) -> None:
        state.quarantine_releases(self.now)


@record(frozen=True, eq=False)
class ClearMarker(Action):
    """The unreadable-releases marker (in ``state_dir``) removed, once the kube side allows."""

    kind: ClassVar[str] = "clear-marker"

    state_dir: str

    @property
    def text(self) -> str:
        return "remove %s/releasing.unreadable: no pod holds a GPU of an allocation this node does not know" % (
            self.state_dir)

    def apply(self, writer: Writer, state: StateSink) -> None:
        state.clear_releases_marker()
