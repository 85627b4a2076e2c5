# -*- coding: utf-8 -*-
# Copyright: contributors to bcd.devices
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""What a phase of the planner decided, as one immutable value.

Each phase of a pass (``planner.plan_pass``) is a function of what was observed
and of the claims; it returns its actions and everything else it decided
(warnings, retryable errors, refusals, holds, renders, the releases it makes,
the Kubernetes releases left pending, ...) as a ``Decided``, never by writing
into a shared pass. ``plan_pass`` adds the phases' values up (``+``) in the
spec's order and builds the ``Plan`` once, from the sum.
"""

from __future__ import annotations

from itertools import chain
from typing import Any, Dict, FrozenSet, Iterable, Mapping, Optional, Tuple

from ansible_collections.bcd.devices.plugins.module_utils.support.records import field, fields, record

# (allocation, reason, message): a refusal to report
Refusal = Tuple[str, str, str]


@record(frozen=True)
class Decided:
    """The decisions of one phase (or of several, added up in order)."""

    actions: Tuple[Any, ...] = ()  # actions.Action, in the plan's order
    warnings: Tuple[str, ...] = ()
    errors: Tuple[str, ...] = ()  # retryable: the pass cannot finish now
    failures: Tuple[Refusal, ...] = ()
    holds: Tuple[dict, ...] = ()  # the holds once the plan is applied (summaries)
    renders: Tuple[Tuple[str, dict], ...] = ()  # (allocation, render_record) for the next pass
    conditions: Tuple[dict, ...] = ()
    pending_releases: Tuple[dict, ...] = ()  # the pending releases' summaries
    vfio: Tuple[Tuple[str, str], ...] = ()  # (GPU UUID, instance) running domains have now
    # a release this pass makes: (allocation, the atoms it frees, the limits it booked or None)
    releasing: Tuple[Tuple[str, Tuple[Any, ...], Optional[Any]], ...] = ()
    # a Kubernetes release still pending after this pass: (allocation, PendingRelease, who holds its devices)
    pending: Tuple[Tuple[str, Any, Any], ...] = ()
    # (allocation, atoms): old devices of a Kubernetes hold wanted again that its new hold takes: the
    # allocation's still, claimed as a live hold's (no hold before it in spec order gets them)
    retained: Tuple[Tuple[str, Tuple[Any, ...]], ...] = ()
    # (allocation, limits record): what a kept hold without a slice books now, for the ledger (one with a
    # slice records it when its slice is set)
    booked: Tuple[Tuple[str, Optional[dict]], ...] = ()
    gone: FrozenSet[str] = frozenset()  # allocations live before the pass that are no longer
    damaged: Tuple[Tuple[str, Any], ...] = ()  # (allocation, LiveHold) whose damaged spec is set aside
    released_slices: FrozenSet[str] = frozenset()  # slices whose release this pass handles
    sliced: FrozenSet[str] = frozenset()  # slices wanted after this pass
    marker_cleared: bool = False  # releasing.unreadable is removed in this pass

    def __add__(self, other: Decided) -> Decided:
        """Both phases' decisions, this one's first."""
        return Decided.join((self, other))

    @staticmethod
    def join(parts: Iterable[Decided]) -> Decided:
        """The decisions of ``parts`` added up in order, in one step: a loop that collects each item's
        ``Decided`` and joins them once costs what its items do, where ``+=`` in the loop would copy
        what was decided so far at every item."""
        parts = [part for part in parts if part != _NOTHING]
        if len(parts) < 2:
            return parts[0] if parts else _NOTHING
        merged = {}  # type: Dict[str, Any]
        for name, kind in _FIELDS:
            values = [getattr(part, name) for part in parts]
            if kind is bool:
                merged[name] = any(values)
            elif kind is tuple:
                merged[name] = tuple(chain.from_iterable(values))
            else:
                merged[name] = frozenset().union(*values)
        return Decided(**merged)


_NOTHING = Decided()
# (field name, its kind): how ``Decided.join`` adds each field up
_FIELDS = tuple((item.name, type(getattr(_NOTHING, item.name))) for item in fields(Decided))


@record(frozen=True)
class Pass:
    """What every phase of one pass reads: its inputs, and what follows from them alone."""

    generation: int
    parsed: Any  # assignment.Parsed
    observed: Any  # planner.Observed
    instances: Any  # the VM instance specs
    wanted: Any  # Mapping[str, Assignment]: the allocations wanted (but those re-sent with an unsupported binding)
    unsupported: FrozenSet[str]  # live holds re-sent with a binding the node does not take: kept as they are
    # the wanted allocations that are live once the pass is applied (kept, or bound anew): a Kubernetes
    # release of one of them is taken back unreported, its new AllocationBound standing for it
    superseded: FrozenSet[str]
    marker: bool  # releasing.unreadable is there (or the releases file is unreadable): every GPU claimed
    # allocations an earlier round of the pass found their new hold refused for, with that refusal: their old
    # hold is now released like any other, and they are not bound in this pass (``planner.plan_pass``)
    withheld: Mapping[str, Tuple[str, str]] = field(default_factory=dict)
