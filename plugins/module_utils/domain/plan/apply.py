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

from typing import Any, Dict, List, Optional, Protocol, Sequence, Set, Tuple

from ansible_collections.bcd.devices.plugins.module_utils.domain.kube_release import PendingRelease
from ansible_collections.bcd.devices.plugins.module_utils.domain.plan.actions import Action, ReleaseKubernetes
from ansible_collections.bcd.devices.plugins.module_utils.domain.plan.seams import NodeFileKind, SliceSettings, StateSink, Writer
from ansible_collections.bcd.devices.plugins.module_utils.support.errors import RetryableError


class Steps(Protocol):
    """What ``apply_plan`` reads of a plan (``planner.Plan``): its actions, in order."""

    @property
    def actions(self) -> Sequence[Action]: ...


class Changed:
    """Whether a pass changed the node: set by each call of a writer's or the state's that changes something
    and returned, so a pass that changed the node says so even when an action failed half-way (a release whose
    spec went and whose env file did not)."""

    def __init__(self) -> None:
        self.value = False


class NotingWriter:
    """The host's writer as the actions see it: each call goes to ``inner``, and one that changes the node
    and returns sets ``changed``. It implements ``seams.Writer`` method by method, so a method renamed or
    retyped in the protocol or in a writer fails the type check here."""

    def __init__(self, inner: Writer, changed: Changed) -> None:
        self._inner = inner
        self._changed = changed

    def batch(self) -> None:
        self._inner.batch()

    def flush(self) -> None:
        self._inner.flush()

    def write_node_file(self, kind: NodeFileKind, allocation_id: str, content: bytes, hold: Optional[Dict[str, Any]] = None,
                        path: Optional[str] = None) -> None:
        self._inner.write_node_file(kind, allocation_id, content, hold, path=path)
        self._changed.value = True

    def remove_node_file(self, kind: NodeFileKind, allocation_id: str, path: Optional[str] = None) -> None:
        self._inner.remove_node_file(kind, allocation_id, path=path)
        self._changed.value = True

    def set_aside_spec(self, allocation_id: str, now: float) -> object:
        result = self._inner.set_aside_spec(allocation_id, now)
        self._changed.value = True
        return result

    def apply_slice(self, op: SliceSettings) -> None:
        self._inner.apply_slice(op)
        self._changed.value = True

    def stop_slice(self, name: str) -> None:
        self._inner.stop_slice(name)
        self._changed.value = True


class NotingState:
    """The node's state as the actions see it: as ``NotingWriter``, for ``seams.StateSink``. Queuing a report
    counts as a change (the event is the node's news); flushing, by itself, does not."""

    def __init__(self, inner: StateSink, changed: Changed) -> None:
        self._inner = inner
        self._changed = changed

    def report(self, event: Dict[str, Any], limits: Optional[Dict[str, Any]] = None) -> None:
        self._inner.report(event, limits)
        self._changed.value = True

    def flush(self, save: bool = True) -> object:
        return self._inner.flush(save)

    def begin_releases(self, releases: Sequence[Tuple[str, Optional[int], List[str]]]) -> None:
        self._inner.begin_releases(releases)

    def set_hold_limits(self, allocation_id: str, limits: Optional[Dict[str, Any]]) -> None:
        self._inner.set_hold_limits(allocation_id, limits)
        self._changed.value = True

    def record_kube_release(self, release: PendingRelease) -> None:
        self._inner.record_kube_release(release)
        self._changed.value = True

    def drop_kube_release(self, allocation_id: str) -> None:
        self._inner.drop_kube_release(allocation_id)
        self._changed.value = True

    def quarantine_releases(self, now: float) -> None:
        self._inner.quarantine_releases(now)
        self._changed.value = True

    def clear_releases_marker(self) -> None:
        self._inner.clear_releases_marker()
        self._changed.value = True


def apply_plan(plan: Steps, writer: Writer, state: StateSink) -> Tuple[List[Action], List[str], bool]:
    """Run every action in order; return ``(done, errors, changed)``: the actions carried out, one
    retryable error per action that failed, and whether the node was changed at all (an action that failed
    after a step that changed it counts: a release whose spec was removed and whose env file could not be).
    A failure holds up that allocation's later actions in this pass (a hold whose env file could not be
    written is not reported bound), and every bind that needs its release (``Bind.needs``); the other
    allocations' go on."""
    done: List[Action] = []
    errors: List[str] = []
    failed: Set[str] = set()
    changed = Changed()
    releases = [action.recorded_release() for action in plan.actions if action.changes]
    try:
        state.begin_releases([release for release in releases if release is not None])
    except (OSError, RetryableError) as exc:  # nothing may be removed unrecorded: nothing is done
        return done, ["cannot record this pass's releases: %s" % exc], False
    noted_writer, noted_state = NotingWriter(writer, changed), NotingState(state, changed)
    writer.batch()  # each directory fsynced once, at writer.flush(), not once per file
    settled: Set[str] = set()  # Kubernetes releases reported in this pass, still pending on disk
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
    return done, errors, changed.value
