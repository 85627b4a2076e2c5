# -*- coding: utf-8 -*-
# Copyright: contributors to bcd.devices
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""The types of the events a node journals and reports (``state/events.py`` signs them).

A bind and a release are attested (signed, so the control plane can trust which devices an
allocation has); a refusal is reported but says nothing about devices. The planner builds the
events (``domain/plan/reports.py``), the actions journal them, the ledger settles on them. A condition's
appearing and clearing, and each step of a GPU's recovery (maintenance started and ended, a reset and its
outcome), are signed too, their body naming their type (``TYPED_BODY_TYPES``).
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
# A GPU still unhealthy after its reset (bcd.devices.gpu_reset), kept in maintenance until a person acts; and a
# GPU whose recovery stopped without finishing (its lease ended), raised with a fresh GPUUnhealthy (domain/health.py).
GPU_RESET_INEFFECTIVE = "GPUResetIneffective"
GPU_RECOVERY_STALLED = "GPURecoveryStalled"
# A live hold whose assignment the pass refused, kept as it was bound: the node still has it, so the refusal is
# said this way, never as an AllocationFailed (on which the control plane would let the hold's devices go).
HOLD_CHANGE_REFUSED = "HoldChangeRefused"
CONDITION_TYPES: Tuple[str, ...] = (GPU_UNHEALTHY, VENDOR_SPEC_STALE, VENDOR_SPEC_UNSUPPORTED, KUBERNETES_RELEASE_STUCK,
                                    KUBERNETES_RELEASES_UNREADABLE, HOLD_SPEC_DAMAGED, GPU_RESET_INEFFECTIVE,
                                    GPU_RECOVERY_STALLED, HOLD_CHANGE_REFUSED)
CLEARED = "Cleared"
CONDITION_EVENT_TYPES: Tuple[str, ...] = CONDITION_TYPES + tuple(kind + CLEARED for kind in CONDITION_TYPES)
# The conditions keyed by GPU (one per GPU, ``condition_key``).
GPU_CONDITION_TYPES: Tuple[str, ...] = (GPU_UNHEALTHY, GPU_RESET_INEFFECTIVE, GPU_RECOVERY_STALLED)
# The conditions keyed by allocation (one per allocation, ``condition_key``): their events name it.
ALLOCATION_CONDITION_TYPES: Tuple[str, ...] = (KUBERNETES_RELEASE_STUCK, HOLD_CHANGE_REFUSED)
# The GPU conditions' reasons (their events' ``body.reason``; a clearing's is CONDITION_CLEARED).
GPU_CONDITION_REASONS = {
    GPU_UNHEALTHY: "GPUFaulted",
    GPU_RESET_INEFFECTIVE: "ResetIneffective",
    GPU_RECOVERY_STALLED: "RecoveryStalled",
}
CONDITION_CLEARED = "ConditionCleared"

# The steps of a GPU's recovery, each one signed event per GPU (bcd.devices.maintenance, bcd.devices.gpu_reset):
# its body names its type, like a condition's, and carries type, node_id, boot_id, generation (the node's last
# observed one, or null), device_ids (the one GPU), reason and message.
GPU_MAINTENANCE_STARTED = "GPUMaintenanceStarted"
GPU_MAINTENANCE_ENDED = "GPUMaintenanceEnded"
GPU_RESET = "GPUReset"
RECOVERY_EVENT_TYPES: Tuple[str, ...] = (GPU_MAINTENANCE_STARTED, GPU_MAINTENANCE_ENDED, GPU_RESET)
MAINTENANCE_STARTED = "MaintenanceStarted"
MAINTENANCE_ENDED = "MaintenanceEnded"
RESET_HEALTHY = "ResetHealthy"  # the GPU was reset and reads healthy
RESET_INEFFECTIVE = "ResetIneffective"  # the GPU was reset and is still unhealthy
RESET_FAILED = "ResetFailed"  # the reset itself failed (nvidia-smi's error in the message)
RECOVERY_REASONS = {
    GPU_MAINTENANCE_STARTED: (MAINTENANCE_STARTED,),
    GPU_MAINTENANCE_ENDED: (MAINTENANCE_ENDED,),
    GPU_RESET: (RESET_HEALTHY, RESET_INEFFECTIVE, RESET_FAILED),
}
# A GPU's MIG layout changed (bcd.devices.mig_layout, the boot unit, or someone else, seen by them): one signed event
# per MIG instance made or destroyed, its device_ids the instance's atom (<gpu>/gi<n>/ci<m>), and one per MIG mode
# change, its device_ids the GPU; the body as a recovery step's.
MIG_INSTANCE_CREATED = "MIGInstanceCreated"
MIG_INSTANCE_DESTROYED = "MIGInstanceDestroyed"
MIG_MODE_CHANGED = "MIGModeChanged"
MIG_EVENT_TYPES: Tuple[str, ...] = (MIG_INSTANCE_CREATED, MIG_INSTANCE_DESTROYED, MIG_MODE_CHANGED)
LAYOUT_APPLIED = "LayoutApplied"  # the module made the change
BOOT_LAYOUT = "BootLayout"  # the boot unit made the recorded layout again
CHANGED_OUTSIDE = "ChangedOutside"  # the layout differs from the one recorded: someone else changed it (or a crash)
MIG_REASONS = {kind: (LAYOUT_APPLIED, BOOT_LAYOUT, CHANGED_OUTSIDE) for kind in MIG_EVENT_TYPES}
# The signed types whose body names its type (the signature covers the body, not the event's type).
TYPED_BODY_TYPES: Tuple[str, ...] = CONDITION_EVENT_TYPES + RECOVERY_EVENT_TYPES + MIG_EVENT_TYPES

ATTESTED_TYPES: Tuple[str, ...] = (ALLOCATION_BOUND, ALLOCATION_RELEASED)
# Every type the node signs: a bind, a release, a condition's appearing or clearing, a step of a GPU's recovery, a
# change of a GPU's MIG layout.
SIGNED_TYPES: Tuple[str, ...] = ATTESTED_TYPES + TYPED_BODY_TYPES
EVENT_TYPES: Tuple[str, ...] = (ALLOCATION_BOUND, ALLOCATION_RELEASED, ALLOCATION_FAILED) + TYPED_BODY_TYPES


def condition_key(condition_type: str, device_ids: Sequence[str] = (), allocation_id: Optional[str] = None) -> str:
    """The key the ledger keeps a raised condition under: one per GPU for the GPU conditions (``GPUUnhealthy/<UUID>``,
    ``GPUResetIneffective/<UUID>``, ``GPURecoveryStalled/<UUID>``), one per allocation for the allocation
    conditions (``KubernetesReleaseStuck/<allocation>``, ``HoldChangeRefused/<allocation>``), else its type
    alone."""
    if condition_type in GPU_CONDITION_TYPES:
        return "%s/%s" % (condition_type, device_ids[0] if device_ids else "")
    if condition_type in ALLOCATION_CONDITION_TYPES:
        return "%s/%s" % (condition_type, allocation_id or "")
    return condition_type
