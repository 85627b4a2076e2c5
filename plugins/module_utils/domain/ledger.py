# -*- coding: utf-8 -*-
# Copyright: contributors to bcd.devices
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""The ledger: what the node has *reported*, so every report happens exactly once.

A pass reads the holds themselves from ``/etc/cdi``; the ledger remembers only what it cannot see on the
host, and the planner decides from it (``Observed.ledger``) as from the rest of what a pass observed:

``bound``
    holds whose ``AllocationBound`` was journaled (a hold written but never reported, because the pass
    died in between, is reported by the next pass), each a ``BoundHold``: the devices and cgroup parent
    its last one named and the limits it books (``limits_of``);
``unfinished_releases``
    plain releases recorded before their files are removed (a release cut short is finished, and
    reported, by the next pass), each an ``UnfinishedRelease``. Kubernetes releases pending on pods are
    ``kube_release.Releases``;
``failures``
    each allocation's last ``AllocationFailed``, a ``JournaledRefusal``: its generation and the
    ``Refusal``. A refusal is final at its generation (the control plane re-places the reservation), so a
    later pass at that generation refuses it again with the same reason, unreported, instead of binding it
    (``refusal_at``);
``vfio``
    the GPUs running domains had at the last pass;
``renders``
    per kept hold, a digest of what its files were last rendered from and of the files
    (``cdi.hold_spec.render_record``): a pass renders a hold again only when either changed;
``observed_generation``
    the last generation a pass finished (``CONVERGED`` or ``FAILED``);
``journal_seq``
    the seq of the last journaled event whose effect is in the ledger (the state catches up from the
    journal what a crash kept from being recorded);
``last_state``
    the section state of the last pass (the retry timer runs a pass only while it is ``PROGRESSING``);
``conditions``
    the node conditions whose appearing was journaled and whose clearing was not
    (``plan/condition_events.py``), by key (``GPUUnhealthy/<GPU UUID>``, ``KubernetesReleaseStuck/<allocation>``,
    or the type alone): each the devices and allocation its events name.

The file it is kept in, how it is read back (once, into these records: no reader parses a record of it)
and how a journaled event settles in it are the state's (``state/ledger.py``).
"""

from __future__ import annotations

from typing import Any, Dict, Iterable, Optional, Tuple

from ansible_collections.bcd.devices.plugins.module_utils.domain.input.assignment import Limits
from ansible_collections.bcd.devices.plugins.module_utils.domain.input.refusals import Refusal
from ansible_collections.bcd.devices.plugins.module_utils.support.records import field, record, replace


@record(frozen=True)
class BoundHold:
    """A hold whose ``AllocationBound`` the node journaled: what its last one said and what it books."""

    generation: Optional[int] = None
    device_ids: Tuple[str, ...] = ()
    cgroup_parent: Optional[str] = None  # the cgroup parent its last AllocationBound named (None: none)
    limits: Optional[Limits] = None  # what it books (None: nothing, or limits the ledger holds are not valid)
    # False: a ledger from before cgroup parents were recorded, which kept none (the hold's spec says it)
    parent_recorded: bool = True
    # whether the file's record names its limits (``"limits": null`` included): written back as it was read
    limits_recorded: bool = False

    def reported_parent(self, spec_parent: Optional[str]) -> Optional[str]:
        """The cgroup parent the node last reported for the hold: its record's, or (an older ledger that kept
        none) ``spec_parent``, the one its spec names."""
        return self.cgroup_parent if self.parent_recorded else spec_parent

    def reported_on(self, device_ids: Iterable[str]) -> bool:
        """Whether the node last reported the hold bound on ``device_ids`` (in any order)."""
        return sorted(self.device_ids) == sorted(device_ids)


@record(frozen=True)
class UnfinishedRelease:
    """A plain release recorded before its files are removed, kept until it is reported."""

    generation: Optional[int] = None  # None: the record kept none (the pass that finishes it says its own)
    device_ids: Tuple[str, ...] = ()


@record(frozen=True)
class JournaledRefusal:
    """An allocation's last ``AllocationFailed``: the generation it was refused at, and the refusal (None: a
    ledger of 0.1.0 kept the generation alone; then the refusal is not replayed, only not reported twice)."""

    generation: int
    refusal: Optional[Refusal] = None


@record
class Ledger:
    bound: Dict[str, BoundHold] = field(default_factory=dict)
    unfinished_releases: Dict[str, UnfinishedRelease] = field(default_factory=dict)
    failures: Dict[str, JournaledRefusal] = field(default_factory=dict)
    vfio: Dict[str, str] = field(default_factory=dict)
    renders: Dict[str, Dict[str, Any]] = field(default_factory=dict)  # allocation -> {key, spec, env, notes}
    observed_generation: Optional[int] = None
    last_state: Optional[str] = None
    journal_seq: int = 0
    # condition key -> {device_ids, allocation_id, message}: raised, not cleared
    conditions: Dict[str, Dict[str, Any]] = field(default_factory=dict)
    problem: Optional[str] = None  # why the file could not be read (not saved)

    def limits_of(self, allocation_id: str) -> Optional[Limits]:
        """The limits the node's reported hold of the allocation books (None: none, or no reported hold)."""
        bound = self.bound.get(allocation_id)
        return bound.limits if bound is not None else None

    def book(self, allocation_id: str, limits: Optional[Limits]) -> None:
        """The reported hold of the allocation books ``limits`` now (its slice was set, or a kept hold without a
        slice books others); nothing when the node never reported it."""
        bound = self.bound.get(allocation_id)
        if bound is not None:
            self.bound[allocation_id] = replace(bound, limits=limits, limits_recorded=True)

    def refusal_at(self, allocation_id: str, generation: Optional[int]) -> Optional[Refusal]:
        """The allocation's refusal journaled at ``generation``, or None."""
        journaled = self.failures.get(allocation_id)
        if journaled is None or journaled.generation != generation:
            return None
        return journaled.refusal

    def refused_at(self, allocation_id: str) -> Optional[int]:
        """The generation of the allocation's last journaled refusal, or None."""
        journaled = self.failures.get(allocation_id)
        return journaled.generation if journaled is not None else None
