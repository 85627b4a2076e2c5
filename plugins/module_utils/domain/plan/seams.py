# -*- coding: utf-8 -*-
# Copyright: contributors to bcd.devices
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""The interfaces a plan talks to, declared where the plan is: the domain imports nothing above it, so
the node's and the state's classes meet these by their methods alone (``typing.Protocol``), and mypy
checks them where the converger hands them over.

- ``Writer``: root's work, node files and slices, done by this process or sent to the root helper
  (``node/writers.py``: ``DirectWriter``, ``HelperWriter``). An action's ``apply`` calls it.
- ``StateSink``: what the node remembers, the journal, the ledger and the pending Kubernetes releases
  (``state/store.py``: ``NodeState``). An action's ``apply``, and ``apply_plan`` around them, call it.
- ``PodView``: one look at the kube side, what pods hold (``node/kubelet.py``: ``KubeView``). The planner
  reads it (``Observed.kube``).
"""

from __future__ import annotations

from typing import AbstractSet, Any, Dict, List, Literal, Mapping, Optional, Protocol, Sequence, Tuple

from ansible_collections.bcd.devices.plugins.module_utils.domain.kube_release import PendingRelease

# The node files of a hold, by kind: its CDI spec and its env file. The root helper names the file from the
# kind and the allocation id, so a writer is never handed a kind it does not know.
NodeFileKind = Literal["cdi", "allocation-env"]


class SliceSettings(Protocol):
    """What a writer reads of a slice step (``actions.SliceApply``): the slice, its properties and huge page
    limits (done here), and the limits they are built from (the root helper builds them again)."""

    @property
    def name(self) -> str: ...

    @property
    def properties(self) -> Mapping[str, str]: ...

    @property
    def hugetlb_max(self) -> Mapping[str, int]: ...

    @property
    def limits(self) -> Optional[Dict[str, Any]]: ...


class Writer(Protocol):
    """Root's work: a hold's node files (``kind``: ``cdi`` or ``allocation-env``) and its slice."""

    def batch(self) -> None:
        """From now until ``flush``, each directory changed is made durable once, at ``flush``."""

    def flush(self) -> None:
        """Make every rename and removal since ``batch`` durable (before any event reports them)."""

    def write_node_file(self, kind: NodeFileKind, allocation_id: str, content: bytes, hold: Optional[Dict[str, Any]] = None,
                        path: Optional[str] = None) -> None:
        """Write a hold's file atomically: ``content`` at ``path`` (the planner's) here, or rendered again
        from ``hold`` by the root helper."""

    def remove_node_file(self, kind: NodeFileKind, allocation_id: str, path: Optional[str] = None) -> None:
        """Remove a hold's file."""

    def set_aside_spec(self, allocation_id: str, now: float) -> object:
        """Rename a damaged spec aside (never delete it)."""

    def apply_slice(self, op: SliceSettings) -> None:
        """Create a hold's slice, or set its limits again."""

    def stop_slice(self, name: str) -> None:
        """Stop an empty hold slice."""


class StateSink(Protocol):
    """What a pass records: the events it reports (journaled at ``flush``), the plain releases it begins, the
    limits of a kept hold's slice, the pending Kubernetes releases and their unreadable marker."""

    def report(self, event: Dict[str, Any], limits: Optional[Dict[str, Any]] = None) -> None:
        """Queue ``event`` (and the limits the ledger records with a bound hold) for the next ``flush``."""

    def flush(self, save: bool = True) -> object:
        """Journal the queued reports; ``save=False`` leaves the ledger's save to the pass."""

    def begin_releases(self, releases: Sequence[Tuple[str, Optional[int], List[str]]]) -> None:
        """Record plain releases ``(allocation_id, generation, device_ids)`` before any file of theirs goes."""

    def set_hold_limits(self, allocation_id: str, limits: Optional[Dict[str, Any]]) -> None:
        """The limits a kept hold's slice now has."""

    def record_kube_release(self, release: PendingRelease) -> None:
        """A Kubernetes release, pending until no pod holds its devices (recorded before its files go)."""

    def drop_kube_release(self, allocation_id: str) -> None:
        """A pending Kubernetes release the spec takes back, dropped."""

    def quarantine_releases(self, now: float) -> None:
        """Set an unreadable releases file aside and write the marker."""

    def clear_releases_marker(self) -> None:
        """Remove the unreadable-releases marker."""


class PodView(Protocol):
    """What pods hold, as one look at the kube side saw it. ``error`` set: the kubelet could not be asked,
    and every device counts as held."""

    @property
    def held(self) -> AbstractSet[str]: ...

    @property
    def error(self) -> Optional[str]: ...

    def holders(self, device_id: str) -> List[str]:
        """Who holds ``device_id``, for messages."""
