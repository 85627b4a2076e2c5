# -*- coding: utf-8 -*-
# Copyright: contributors to bcd.devices
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""The types of the events a node journals and reports (``state/events.py`` signs them).

A bind and a release are attested (signed, so the control plane can trust which devices an
allocation has); a refusal is reported but says nothing about devices. The planner builds the
events (``domain/plan/reports.py``), the actions journal them, the ledger settles on them.
"""

from __future__ import annotations

from typing import Optional, Sequence, Tuple

ALLOCATION_BOUND = "AllocationBound"
ALLOCATION_RELEASED = "AllocationReleased"
ALLOCATION_FAILED = "AllocationFailed"

# The conditions a pass returns (the planner builds them: domain/health.py, cdi_staleness.py, reports.py,
# kube_release.py), each journaled as an event when it appears and, as <type>Cleared, when it clears.
GPU_UNHEALTHY = "GPUUnhealthy"
VENDOR_SPEC_STALE = "VendorSpecStale"
VENDOR_SPEC_UNSUPPORTED = "VendorSpecUnsupported"
KUBERNETES_RELEASE_STUCK = "KubernetesReleaseStuck"
KUBERNETES_RELEASES_UNREADABLE = "KubernetesReleasesUnreadable"
HOLD_SPEC_DAMAGED = "HoldSpecDamaged"
CONDITION_TYPES = (GPU_UNHEALTHY, VENDOR_SPEC_STALE, VENDOR_SPEC_UNSUPPORTED, KUBERNETES_RELEASE_STUCK,
                   KUBERNETES_RELEASES_UNREADABLE, HOLD_SPEC_DAMAGED)  # type: Tuple[str, ...]
CLEARED = "Cleared"
CONDITION_EVENT_TYPES = CONDITION_TYPES + tuple(kind + CLEARED for kind in CONDITION_TYPES)  # type: Tuple[str, ...]

ATTESTED_TYPES = (ALLOCATION_BOUND, ALLOCATION_RELEASED)  # type: Tuple[str, ...]
# Every type the node signs: a bind, a release, and a condition's appearing or clearing.
SIGNED_TYPES = ATTESTED_TYPES + CONDITION_EVENT_TYPES  # type: Tuple[str, ...]
EVENT_TYPES = (ALLOCATION_BOUND, ALLOCATION_RELEASED, ALLOCATION_FAILED) + CONDITION_EVENT_TYPES  # type: Tuple[str, ...]


def condition_key(condition_type: str, device_ids: Sequence[str] = (), allocation_id: Optional[str] = None) -> str:
    """The key the ledger keeps a raised condition under: one per unhealthy GPU (``GPUUnhealthy/<UUID>``), one
    per stuck Kubernetes release (``KubernetesReleaseStuck/<allocation>``), else its type alone."""
    if condition_type == GPU_UNHEALTHY:
        return "%s/%s" % (condition_type, device_ids[0] if device_ids else "")
    if condition_type == KUBERNETES_RELEASE_STUCK:
        return "%s/%s" % (condition_type, allocation_id or "")
    return condition_type
