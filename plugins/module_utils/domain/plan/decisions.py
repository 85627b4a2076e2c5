# -*- coding: utf-8 -*-
# Copyright: contributors to bcd.devices
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""What the phases of a pass hand each other, each a small named value.

Each phase of a pass (``planner.plan_pass``) is a function of what was observed
and of the claims; it returns what it decided, never by writing into a shared
pass:

- the release phases (Kubernetes releases, releases cut short, holds no longer
  wanted, stale env files) a ``Released``: their steps, the allocations no
  longer live, what each release frees once made (``Freed``: claimed until
  then), the Kubernetes releases left pending (``Pending``), the old atoms of
  a hold bound again that stay its own, the damaged specs set aside;
- the claims phase the ``claims.Claims`` every later check asks;
- the kept and the new holds an ``Outcome`` (and the claims with theirs
  added): their steps, warnings, retryable errors, refusals (``refusals.Refusal``, the
  one shape a refusal has from the input to the result),
  the holds once applied, what they render and book, the slices they want.

A phase that loops over holds collects each hold's value and joins them once
(``Released.join``, ``Outcome.join``): sequences in order, sets united,
mappings updated (a later value replaces an earlier one, but a tuple adds up),
flags or-ed. ``plan_pass`` builds the ``Plan`` once, from the phases' values.
"""

from __future__ import annotations

from itertools import chain
from typing import Any, Dict, FrozenSet, Iterable, List, Mapping, Optional, Sequence, Tuple, Type, TypeVar

from ansible_collections.bcd.devices.plugins.module_utils.domain.cdi.hold_spec import LiveHold
from ansible_collections.bcd.devices.plugins.module_utils.domain.input.assignment import Assignment, Limits, ParsedInput
from ansible_collections.bcd.devices.plugins.module_utils.domain.input.atoms import Atom
from ansible_collections.bcd.devices.plugins.module_utils.domain.input.refusals import Refusal
from ansible_collections.bcd.devices.plugins.module_utils.domain.kube_release import PendingRelease
from ansible_collections.bcd.devices.plugins.module_utils.domain.plan.actions import Action
from ansible_collections.bcd.devices.plugins.module_utils.domain.plan.observed import Observed
from ansible_collections.bcd.devices.plugins.module_utils.support.records import field, fields, record


@record(frozen=True)
class Freed:
    """What a release this pass makes frees once it is made: its atoms, and what it booked of the host's memory
    (None: nothing, or a slice still running a workload keeps it). Claimed until then: a hold that takes them
    waits for the release (``claims.Claims.needs``)."""

    atoms: Tuple[Atom, ...]
    booked: Optional[Limits] = None


@record(frozen=True)
class Pending:
    """A Kubernetes release still pending after this pass, and who holds its devices (None: the kubelet could not
    be asked, and every device counts as held)."""

    release: PendingRelease
    holders: Optional[List[str]]


_J = TypeVar("_J", bound="Joined")


class Joined:
    """A phase's value that adds up, in the phases' order."""

    def __add__(self: _J, other: _J) -> _J:
        """Both values, this one's first."""
        return type(self).join((self, other))

    @classmethod
    def join(cls: Type[_J], parts: Iterable[_J]) -> _J:
        """The values of ``parts`` added up in order, in one step: a loop that collects each item's value and
        joins them once costs what its items do, where ``+=`` in the loop would copy what was decided so far
        at every item."""
        nothing = cls()
        kept = [part for part in parts if part != nothing]
        if len(kept) < 2:
            return kept[0] if kept else nothing
        merged: Dict[str, Any] = {}
        for item in fields(cls):
            values = [getattr(part, item.name) for part in kept]
            kind = getattr(nothing, item.name)
            if isinstance(kind, bool):
                merged[item.name] = any(values)
            elif isinstance(kind, tuple):
                merged[item.name] = tuple(chain.from_iterable(values))
            elif isinstance(kind, frozenset):
                merged[item.name] = frozenset().union(*values)
            else:
                merged[item.name] = _updated(values)
        return cls(**merged)


def _updated(mappings: Iterable[Mapping[str, Any]]) -> Dict[str, Any]:
    """``mappings`` in order, a later value replacing an earlier one of its key, but a tuple added to it."""
    merged: Dict[str, Any] = {}
    for mapping in mappings:
        for key, value in mapping.items():
            before = merged.get(key)
            merged[key] = before + value if isinstance(value, tuple) and isinstance(before, tuple) else value
    return merged


@record(frozen=True)
class Released(Joined):
    """What the release phases decided: phase 1 (Kubernetes releases pending from earlier passes, plain releases
    cut short) and phase 2 (holds no longer wanted, held again, stale env files)."""

    actions: Tuple[Action, ...] = ()
    warnings: Tuple[str, ...] = ()
    errors: Tuple[str, ...] = ()  # retryable: the pass cannot finish now
    holds: Tuple[Dict[str, Any], ...] = ()  # holds an unprivileged pass cannot release: they stay (summaries)
    gone: FrozenSet[str] = frozenset()  # allocations live before the pass that are no longer
    freeing: Mapping[str, Freed] = field(default_factory=dict)  # allocation -> what its release frees once made
    pending: Mapping[str, Pending] = field(default_factory=dict)  # allocation -> its release, pending after the pass
    # allocation -> old atoms of a Kubernetes hold wanted again that its new hold takes: the allocation's still,
    # claimed as a live hold's (no hold before it in spec order gets them)
    retained: Mapping[str, Tuple[Atom, ...]] = field(default_factory=dict)
    damaged: Mapping[str, LiveHold] = field(default_factory=dict)  # allocation -> the hold whose damaged spec goes aside
    marker_cleared: bool = False  # releasing.unreadable is removed in this pass


@record(frozen=True)
class Outcome(Joined):
    """What the phases of the kept and the new holds decided (and, joined, what goes into the plan)."""

    actions: Tuple[Action, ...] = ()  # in the plan's order
    warnings: Tuple[str, ...] = ()
    errors: Tuple[str, ...] = ()  # retryable: the pass cannot finish now
    refusals: Tuple[Refusal, ...] = ()
    holds: Tuple[Dict[str, Any], ...] = ()  # the holds once the plan is applied (summaries)
    renders: Mapping[str, Dict[str, Any]] = field(default_factory=dict)  # allocation -> render_record, for the next pass
    # allocation -> what a kept hold without a slice books now, for the ledger (one with a slice records it when
    # its slice is set)
    booked: Mapping[str, Optional[Limits]] = field(default_factory=dict)
    sliced: FrozenSet[str] = frozenset()  # slices wanted after this pass


def needs_root(what: str) -> str:
    """The retryable error of a step an unprivileged pass cannot take (a pass that can takes it)."""
    return "%s needs root or the helper; this pass is unprivileged" % what


@record(frozen=True)
class Pass:
    """What every phase of one pass reads: its inputs, and what follows from them alone."""

    generation: int
    parsed: ParsedInput
    observed: Observed
    instances: Optional[Sequence[Dict[str, Any]]]  # the VM instance specs
    wanted: Mapping[str, Assignment]  # the allocations wanted (but those in ``unsupported``)
    # live holds kept as they are, their new assignment refused before the pass: re-sent with a binding the node
    # does not take, or moved to other devices with cpus or mems that narrow the slice their workload runs in
    unsupported: FrozenSet[str]
    # the wanted allocations that are live once the pass is applied (kept, or bound anew): a Kubernetes
    # release of one of them is taken back unreported, its new AllocationBound standing for it
    superseded: FrozenSet[str]
    marker: bool  # releasing.unreadable is there (or the releases file is unreadable): every GPU claimed
    # allocations an earlier round of the pass found their new hold refused for, with that refusal: their old
    # hold is now released like any other, and they are not bound in this pass (``planner.plan_pass``)
    withheld: Mapping[str, Refusal] = field(default_factory=dict)
    # the env files no hold stands behind (``reading.stale_env_files``), removed before the binds: found once a pass
    stale_env: FrozenSet[str] = frozenset()

    def marker_stays(self, released: Released) -> bool:
        """Whether releasing.unreadable is there once the releases are made: every GPU is claimed."""
        return self.marker and not released.marker_cleared
