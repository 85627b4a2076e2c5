# -*- coding: utf-8 -*-
# Copyright: contributors to bcd.devices
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""The apply loop: a real pass carries its plan out here, each action in order (``actions``), through the
host's writer and the node's state (``seams.Writer``, ``seams.StateSink``).

Every release of the plan is recorded before anything is touched. A failure of any step stops that action,
and ``apply_plan`` returns it as a retryable error: no event is sent for it, and the next pass, whose plan
sees what is on disk, finishes the work. What the steps before it changed still counts: the pass says
``changed`` whenever any step changed the node.
"""

from __future__ import annotations

from typing import Any, FrozenSet, List, Protocol, Sequence, Set, Tuple

from ansible_collections.bcd.devices.plugins.module_utils.domain.plan.actions import Action, ReleaseKubernetes
from ansible_collections.bcd.devices.plugins.module_utils.domain.plan.seams import StateSink, Writer
from ansible_collections.bcd.devices.plugins.module_utils.support.errors import RetryableError


class Steps(Protocol):
    """What ``apply_plan`` reads of a plan (``planner.Plan``): its actions, in order."""

    @property
    def actions(self) -> Sequence[Action]: ...


# What an action may call that changes the node (its files and slices, the journal, the releases it keeps):
# ``apply_plan`` notes each call that returned, so a pass that changed the node says so even when an action
# failed half-way (a release whose spec went and whose env file did not).
WRITER_CHANGES = frozenset(("write_node_file", "remove_node_file", "set_aside_spec", "apply_slice", "stop_slice"))
STATE_CHANGES = frozenset(("report", "set_hold_limits", "record_kube_release", "drop_kube_release",
                           "quarantine_releases", "clear_releases_marker"))


class _Noted:
    """``inner`` (the writer or the state) as the actions see it: each call of a method in ``changing`` that
    returns sets ``done[0]``."""

    def __init__(self, inner: Any, changing: FrozenSet[str], done: List[bool]) -> None:
        self._inner = inner
        self._changing = changing
        self._done = done

    def __getattr__(self, name: str) -> Any:
        value = getattr(self._inner, name)
        if name not in self._changing:
            return value

        def call(*args: Any, **kwargs: Any) -> Any:
            result = value(*args, **kwargs)
            self._done[0] = True
            return result
        return call


def apply_plan(plan: Steps, writer: Writer, state: StateSink) -> Tuple[List[Action], List[str], bool]:
    """Run every action in order; return ``(done, errors, changed)``: the actions carried out, one
    retryable error per action that failed, and whether the node was changed at all (an action that failed
    after a step that changed it counts: a release whose spec was removed and whose env file could not be).
    A failure holds up that allocation's later actions in this pass (a hold whose env file could not be
    written is not reported bound), and every bind that needs its release (``Bind.needs``); the other
    allocations' go on."""
    done = []  # type: List[Action]
    errors = []  # type: List[str]
    failed = set()  # type: Set[str]
    changed = [False]
    releases = [action.recorded_release() for action in plan.actions if action.changes]
    try:
        state.begin_releases([release for release in releases if release is not None])
    except (OSError, RetryableError) as exc:  # nothing may be removed unrecorded: nothing is done
        return done, ["cannot record this pass's releases: %s" % exc], False
    noted_writer, noted_state = _Noted(writer, WRITER_CHANGES, changed), _Noted(state, STATE_CHANGES, changed)
    writer.batch()  # each directory fsynced once, at writer.flush(), not once per file
    settled = set()  # type: Set[str]  # Kubernetes releases reported in this pass, still pending on disk
    for action in plan.actions:
        if not action.changes or (action.allocation_id and action.allocation_id in failed):
            continue
        waits = [needed for needed in action.needs if needed in failed]
        if waits:  # the hold it replaces is still live: binding now would put one atom in two live specs
            errors.append("%s: waits for the release of %s, which failed; retried next pass"
                          % (action.allocation_id, ", ".join(waits)))
            failed.add(action.allocation_id)
            continue
        try:
            if settled.intersection(action.needs):
                # a bind that takes a settled Kubernetes release's devices: the release leaves the pending
                # releases on disk first (its removals made durable, its report journaled), so the root
                # helper, which counts every pending release as a claim, sees what the planner saw
                writer.flush()
                state.flush(save=False)
                writer.batch()
                settled.clear()
            action.apply(noted_writer, noted_state)
        except (OSError, RetryableError) as exc:
            errors.append("%s: %s" % (action.allocation_id or action.kind, exc))
            if action.allocation_id:
                failed.add(action.allocation_id)
            continue
        if isinstance(action, ReleaseKubernetes) and action.event:
            settled.add(action.allocation_id)
        done.append(action)
    writer.flush()  # the pass's renames and removals durable before any event reporting them is journaled
    try:
        state.flush(save=False)  # the pass's reports, journaled before any is returned; the pass saves the ledger
    except (OSError, RetryableError) as exc:
        errors.append("cannot journal this pass's events: %s" % exc)
    return done, errors, changed[0]
