# -*- coding: utf-8 -*-
# Copyright: contributors to bcd.devices
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""The steps of a plain hold's life: bind it (or bind it again on other atoms), keep its files as they
should be, report it bound, release it, and refuse it (``AllocationFailed``)."""

from __future__ import annotations

from typing import Any, ClassVar, Dict, List, Optional, Sequence, Tuple, Union

from ansible_collections.bcd.devices.plugins.module_utils.domain.cdi.hold_spec import cdi_device
from ansible_collections.bcd.devices.plugins.module_utils.domain.input.refusals import reason_shown
from ansible_collections.bcd.devices.plugins.module_utils.domain.plan.actions.step import (
    Action,
    Event,
    FileChange,
    SliceApply,
    SliceOp,
    SliceStop,
    SpecAside,
    aside_of,
    removed_text,
)
from ansible_collections.bcd.devices.plugins.module_utils.domain.plan.seams import StateSink, Writer
from ansible_collections.bcd.devices.plugins.module_utils.support.errors import BcdError
from ansible_collections.bcd.devices.plugins.module_utils.support.records import record


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
    limits: Optional[Dict[str, Any]]  # the limits the ledger records with the hold
    slice: Optional[SliceApply] = None
    waits_for: Tuple[str, ...] = ()
    # its cpus or mems lie outside its GPUs' NUMA nodes: admission.locality's note (said, never refused)
    locality: Optional[Dict[str, Any]] = None

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
        written: List[FileChange] = []
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
        aside = aside_of(self.files)
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
                                                                     removed_text(self.files) or "no files left")

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
        aside = aside_of(self.files)
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
        return "remove %s: %s has no live spec (a bind that never finished)" % (removed_text(self.files), self.allocation_id)

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
    limits: Optional[Dict[str, Any]]
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
