# -*- coding: utf-8 -*-
# Copyright: contributors to bcd.devices
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""The steps of a Kubernetes release (docs/kubernetes.md): release a hold while pods may hold its devices,
withdraw one never reported, report a pending release once its devices are free, take one back or drop
it, and set an unreadable ``releasing.json`` aside (and clear its marker)."""

from __future__ import annotations

from typing import ClassVar, Optional, Sequence, Tuple, Union

from ansible_collections.bcd.devices.plugins.module_utils.domain.kube_release import PendingRelease
from ansible_collections.bcd.devices.plugins.module_utils.domain.plan.actions.step import Action, Event, FileChange, SpecAside, removed_text
from ansible_collections.bcd.devices.plugins.module_utils.domain.plan.seams import StateSink, Writer
from ansible_collections.bcd.devices.plugins.module_utils.support.records import record


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
                "AllocationReleased" % (self.allocation_id, self.why, removed_text(self.files))
        if self.release.taken_back:
            return "withdraw %s (%s, Kubernetes): remove %s; its old devices stay claimed until free (%s), never " \
                "reported (the allocation stays)" % (self.allocation_id, self.why, removed_text(self.files),
                                                     _held_by(self.holders))
        return "release %s (%s, Kubernetes): record it in releasing.json, remove %s; report it once no pod holds " \
            "its devices (%s)" % (self.allocation_id, self.why, removed_text(self.files), _held_by(self.holders))

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
            return "remove %s: %s is being released" % (removed_text(self.files), self.allocation_id)
        return "withdraw %s (%s, Kubernetes): remove %s; no pod holds its old devices (the allocation stays: not " \
            "reported)" % (self.allocation_id, self.why, removed_text(self.files))

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


def _held_by(holders: Optional[Sequence[str]]) -> str:
    """Who holds a Kubernetes release's devices, as a line says it (None: the kubelet could not be asked)."""
    if holders is None:
        return "the kubelet cannot be asked: counted as held"
    return "held by " + ", ".join(holders)
