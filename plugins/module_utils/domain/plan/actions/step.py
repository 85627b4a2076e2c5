# -*- coding: utf-8 -*-
# Copyright: contributors to bcd.devices
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""What every step of a plan is (``Action``) and what a step touches: the node files it writes, removes
or sets aside (``FileChange``, ``SpecAside``) and the slice it creates or stops (``SliceApply``,
``SliceStop``). The steps themselves are in ``holds``, ``kubernetes`` and ``node`` beside it; the package
(``actions``) names them all."""

from __future__ import annotations

import abc
from typing import Any, ClassVar, Dict, List, Optional, Sequence, Tuple, Union

from ansible_collections.bcd.devices.plugins.module_utils.domain.plan.seams import NodeFileKind, StateSink, Writer
from ansible_collections.bcd.devices.plugins.module_utils.domain.slices import settings_text
from ansible_collections.bcd.devices.plugins.module_utils.support.errors import RetryableError
from ansible_collections.bcd.devices.plugins.module_utils.support.records import record

# Every class here is ``eq=False``: a step is itself, compared by identity (its content compares through
# ``to_dict()``), and no ``__eq__``/``__hash__`` is generated for it. Each module run imports these
# classes, and generating those methods was a measurable part of a no-op's cost (docs/performance.md).


@record(frozen=True, eq=False)
class FileChange:
    """One node file a step writes (``after``) or removes (``after`` is None)."""

    kind: NodeFileKind  # the root helper names the file from it and the allocation id
    path: str  # the node path: the file a writer in this process writes or removes (checked), what diffs say
    before: Optional[bytes]
    after: Optional[bytes]
    hold: Optional[Dict[str, Any]] = None  # what the file is rendered from (assignment.hold_request): the helper's input

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
    limits: Optional[Dict[str, Any]] = None  # what the properties are built from: the helper's input

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
        data: Dict[str, Any] = {"action": self.kind, "allocation_id": self.allocation_id, "text": self.text}
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


def removed_text(files: Sequence[Union[FileChange, SpecAside]]) -> str:
    """The files a step removes, as its line names them."""
    return " and ".join(change.path for change in files)


def aside_of(files: Sequence[Union[FileChange, SpecAside]]) -> SpecAside:
    """The damaged spec a step sets aside."""
    return next(change for change in files if isinstance(change, SpecAside))
