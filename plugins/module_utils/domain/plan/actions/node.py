# -*- coding: utf-8 -*-
# Copyright: contributors to bcd.devices
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""The steps that touch the node rather than one hold's files: report a condition that appeared or
cleared, and create, set, keep or stop a hold's slice."""

from __future__ import annotations

from typing import Any, ClassVar, Dict, Optional, Tuple

from ansible_collections.bcd.devices.plugins.module_utils.domain.plan.actions.step import Action, Event, SliceApply, SliceOp, SliceStop
from ansible_collections.bcd.devices.plugins.module_utils.domain.plan.seams import StateSink, Writer
from ansible_collections.bcd.devices.plugins.module_utils.support.records import record


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
    limits: Optional[Dict[str, Any]]

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
