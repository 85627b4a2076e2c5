# -*- coding: utf-8 -*-
# Copyright: contributors to bcd.devices
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""The typed steps of a plan, a sum type, every kind named here: what every step is and what it
touches (``step``: ``Action``, ``FileChange``, ``SpecAside``, ``SliceApply``, ``SliceStop``), the steps
of a hold (``holds``), of a Kubernetes release (``kubernetes``) and of the node, its conditions and
its slices (``node``).

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

from ansible_collections.bcd.devices.plugins.module_utils.domain.plan.actions.holds import (
    Bind,
    FinishRelease,
    Rebind,
    Refuse,
    Release,
    ReleaseDamaged,
    RemoveEnv,
    ReportBound,
    Rerender,
    RewriteFile,
    WriteEnv,
)
from ansible_collections.bcd.devices.plugins.module_utils.domain.plan.actions.kubernetes import (
    ClearMarker,
    DropRelease,
    QuarantineReleases,
    ReleaseKubernetes,
    ReportRelease,
    TakeBackRelease,
    Withdraw,
)
from ansible_collections.bcd.devices.plugins.module_utils.domain.plan.actions.node import ApplySlice, CreateSlice, KeepSlice, ReportCondition, StopSlice
from ansible_collections.bcd.devices.plugins.module_utils.domain.plan.actions.step import Action, Event, FileChange, SliceApply, SliceOp, SliceStop, SpecAside

__all__ = [
    "Action", "Event", "FileChange", "SliceApply", "SliceOp", "SliceStop", "SpecAside",
    "Bind", "Rebind", "Release", "ReleaseDamaged", "FinishRelease", "RewriteFile", "Rerender", "WriteEnv",
    "RemoveEnv", "ReportBound", "Refuse",
    "ReleaseKubernetes", "Withdraw", "ReportRelease", "TakeBackRelease", "DropRelease", "QuarantineReleases",
    "ClearMarker",
    "ReportCondition", "CreateSlice", "ApplySlice", "StopSlice", "KeepSlice",
]
