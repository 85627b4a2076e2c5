# -*- coding: utf-8 -*-
# Copyright: contributors to bcd.devices
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""GPU health: a GPU that has faulted is not handed out.

A GPU is unhealthy when the driver says its memory needs a reset to be trusted again, or
that it faulted in a way only a reset or a reboot clears:

* NVML: retired pages pending (``nvmlDeviceGetRetiredPagesPendingStatus``: a page is marked
  for retirement, which takes effect at the next reset), a row remapping failure
  (``nvmlDeviceGetRemappedRows``: ``failureOccurred``; the GPU ran out of spare rows) or a
  remapping pending (``isPending``: it takes effect at the next reset);
* XIDs of the reset or reboot classes, from the kernel log (``NVRM: Xid (PCI:<bus>): <xid>, …``)
  of this boot. Which ones, from NVIDIA's Xid catalog (docs.nvidia.com/deploy/xid-errors, its
  "Resolution Bucket (Immediate Action)" of ``RESET_GPU`` or ``RESTART_BM``, and the dynamic
  page retirement guide for 48 and 64): ``XID_CLASSES`` below, each with why.

A new hold on an unhealthy GPU, or on a part of it, is refused with ``device-missing`` and
``GPU-… is unhealthy: <what>``: the control plane re-places it without a new reason in its
contract. Kept holds are not released (that is the control plane's call); the node condition
``GPUUnhealthy`` names them.

XIDs count since the GPU's last reset, as far as the node can know it: the kernel's ring
buffer holds this boot's, and a reset (``bcd.devices.gpu_reset``) or taking a GPU out of maintenance
(``bcd.devices.maintenance`` ``state: absent``, after the reset and its checks) records the time, in the
state directory's ``health.json``; an XID logged before it no longer counts. NVML's state is the GPU's own
and clears with the reset itself.

A recovery (``bcd.devices.gpu_recover``) leaves two more conditions, from what ``maintenance.json`` records
(``domain/maintenance.py``):

* ``GPUResetIneffective``: the GPU's last reset left it unhealthy; it stays in maintenance until a person reboots
  the node or replaces the GPU. It clears when the GPU reads healthy, or leaves maintenance.
* ``GPURecoveryStalled``: the GPU is still unhealthy, in maintenance, and the recovery that took it there ended
  (or the engine running it died: its lease ran out) at least ``reraise_after`` seconds ago without putting it
  back in service, nor declaring its reset ineffective. When it appears, the pass journals the GPU's
  ``GPUUnhealthy`` again, a new occurrence with a new seq, so that the rulebook runs the recovery again; it clears
  when a recovery holds the GPU's lease again, the GPU is healthy, or leaves maintenance.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, Dict, Iterable, List, Mapping, Optional, Sequence, Tuple

from ansible_collections.bcd.devices.plugins.module_utils.domain.event_types import (
    GPU_CONDITION_REASONS,
    GPU_RECOVERY_STALLED,
    GPU_RESET_INEFFECTIVE,
    GPU_UNHEALTHY,
)
from ansible_collections.bcd.devices.plugins.module_utils.domain.inventory_model import XidSeen
from ansible_collections.bcd.devices.plugins.module_utils.domain.maintenance import Records, iso_utc, live_lease, reset_ineffective
from ansible_collections.bcd.devices.plugins.module_utils.support import bounded_json
from ansible_collections.bcd.devices.plugins.module_utils.support.speed import lazy_pattern

if TYPE_CHECKING:
    from ansible_collections.bcd.devices.plugins.module_utils.domain.inventory_model import Gpu, Inventory

# xid -> what it means, for the ones only a GPU reset or a reboot clears.
XID_CLASSES = {
    48: "double-bit ECC error (reset the GPU)",
    64: "a page or row could not be retired or remapped (reset the GPU)",
    74: "NVLink error (reset the GPU)",
    79: "GPU has fallen off the bus (reboot the node)",
    94: "contained ECC error (reset the GPU)",
    95: "uncontained ECC error (reset the GPU)",
    119: "GSP RPC timeout (reset the GPU)",
    120: "GSP error (reset the GPU)",
    140: "unrecovered ECC error (reset the GPU)",
    154: "the driver asks for a GPU reset or a reboot (recovery action changed)",
}

MAX_LOG_BYTES = 4 * 1024 * 1024  # of the kernel log looked at
_XID_RE = lazy_pattern(r"NVRM: Xid \(PCI:([0-9A-Fa-f]{4}:[0-9A-Fa-f]{2}:[0-9A-Fa-f]{2})(?:\.[0-7])?\): ([0-9]{1,4})\b")
_KMSG_RE = lazy_pattern(r"^[0-9]+,[0-9]+,([0-9]+),[^;]*;")  # /dev/kmsg: priority,seq,usec since boot,flags;text


def xids_from_log(text: Optional[str], boot_time: Optional[float] = None) -> Dict[str, List[XidSeen]]:
    """``{"0000:3b:00": [(xid, when), ...]}`` (bus ids lower-case, without the function) of the reset
    and reboot classes, in the order logged, from kernel log text (dmesg lines, or /dev/kmsg records,
    whose time since boot ``boot_time`` turns into seconds since the epoch; else ``when`` is None)."""
    found: Dict[str, List[XidSeen]] = {}
    for line in (text or "")[-MAX_LOG_BYTES:].splitlines():
        match = _XID_RE.search(line)
        if not match or int(match.group(2)) not in XID_CLASSES:
            continue
        stamp = _KMSG_RE.match(line)
        when = boot_time + int(stamp.group(1)) / 1e6 if stamp and boot_time is not None else None
        found.setdefault(match.group(1).lower(), []).append((int(match.group(2)), when))
    return found


def bus_of(pci_bus_id: Optional[str]) -> Optional[str]:
    """``0000:3b:00`` of ``0000:3b:00.0`` (what the kernel log names), or None."""
    if not pci_bus_id:
        return None
    return pci_bus_id.lower().split(".", 1)[0]


def problems(retired_pages_pending: bool = False, row_remap_failure: bool = False, xids: Iterable[int] = (),
             row_remap_pending: bool = False) -> Tuple[str, ...]:
    """What makes a GPU unhealthy, as short texts; empty when nothing does."""
    out: List[str] = []
    if retired_pages_pending:
        out.append("retired pages pending (reset the GPU)")
    if row_remap_failure:
        out.append("row remapping failed (the GPU has no spare rows left)")
    elif row_remap_pending:
        out.append("row remapping pending (reset the GPU)")
    for xid in xids:
        if xid in XID_CLASSES:
            out.append("Xid %d: %s" % (xid, XID_CLASSES[xid]))
    return tuple(out)


def gpu_health(gpu: Gpu, cleared: Optional[Mapping[str, float]] = None) -> Tuple[str, ...]:
    """What makes ``gpu`` unhealthy now: the driver's own state (``gpu.health``), and its XIDs logged after
    ``cleared`` (``{uuid: when}``: when it last left maintenance; an XID of unknown time counts until then)."""
    since = (cleared or {}).get(gpu.uuid)
    xids: List[int] = []
    for xid, when in gpu.xids:
        if (since is None or (when is not None and when > since)) and xid not in xids:
            xids.append(xid)
    return tuple(gpu.health) + problems(xids=xids)


def parse_cleared(content: Optional[bytes], where: str) -> Dict[str, float]:
    """``{uuid: when}`` from ``health.json``'s bytes (``where``: its node path, as the bounded reader read it, at
    most its cap); anything else is no record. The pass account owns the state directory and could forge it;
    it decides which holds are bound anyway (docs/security.md). Content past the bounded parser's limits is
    ``StateFileError`` naming ``where``."""
    try:
        data = bounded_json.loads(content, where) if content else {}
    except ValueError:
        return {}
    if not isinstance(data, dict):
        return {}
    return dict((uuid, when) for uuid, when in data.items()
                if isinstance(uuid, str) and isinstance(when, (int, float)) and not isinstance(when, bool))


def unhealthy_message(uuid: str, health: Iterable[str]) -> str:
    return "%s is unhealthy: %s" % (uuid, "; ".join(health))


def unhealthy_condition(inventory: Inventory, holders: Mapping[str, Sequence[str]],
                        cleared: Optional[Mapping[str, float]] = None) -> Optional[Dict[str, Any]]:
    """The condition ``GPUUnhealthy`` when any GPU is unhealthy: each with what, and the kept holds on it
    (``holders``: ``{gpu uuid: [allocation, ...]}``). None when every GPU is healthy."""
    sick = [(gpu, gpu_health(gpu, cleared)) for gpu in inventory.gpus]
    sick = [(gpu, health) for gpu, health in sick if health]
    if not sick:
        return None
    parts: List[str] = []
    for gpu, health in sick:
        held = holders.get(gpu.uuid) or []
        parts.append("%s%s" % (unhealthy_message(gpu.uuid, health),
                               " (kept holds: %s)" % ", ".join(held) if held else ""))
    return {
        "type": GPU_UNHEALTHY,
        "status": "True",
        "reason": GPU_CONDITION_REASONS[GPU_UNHEALTHY],
        "message": "; ".join(parts) + "; new holds on them are refused (device-missing), kept ones stay",
    }


# -- after a recovery ----------------------------------------------------------------------------------

PUT_BACK = "put it back in service (bcd.devices.maintenance, state absent)"


def ineffective_resets(inventory: Inventory, maintenance: Records,
                       cleared: Optional[Mapping[str, float]] = None) -> List[Tuple[str, str]]:
    """``[(uuid, message)]``: the GPUs whose last reset left them unhealthy, in maintenance, and not seen healthy
    since (one the inventory no longer lists stays: it may have fallen off the bus)."""
    seen = dict((gpu.uuid, gpu) for gpu in inventory.gpus)
    found: List[Tuple[str, str]] = []
    for uuid in sorted(maintenance):
        record = maintenance[uuid]
        if not reset_ineffective(record):
            continue
        gpu = seen.get(uuid)
        health = gpu_health(gpu, cleared) if gpu is not None else tuple(record["reset"]["problems"])
        if gpu is not None and not health:
            continue
        when = iso_utc(record["reset"]["at"]) or "an unknown time"
        if gpu is None:
            what = "%s is not seen since its reset at %s, which left it unhealthy: %s" % (
                uuid, when, "; ".join(health) or "unknown")
        else:
            what = "%s is still unhealthy after its reset at %s: %s" % (uuid, when, "; ".join(health))
        found.append((uuid, what + "; it stays in maintenance: reboot the node or replace the GPU, then " + PUT_BACK))
    return found


def stalled_recoveries(inventory: Inventory, maintenance: Records, cleared: Optional[Mapping[str, float]],
                       now: float) -> List[Tuple[str, str, str]]:
    """``[(uuid, message, raised again)]``: the GPUs still unhealthy, in maintenance under a lease that ended at least
    its ``reraise_after`` seconds before ``now``, and not declared ``GPUResetIneffective``: their recovery stopped
    without finishing. ``raised again`` is the message of the ``GPUUnhealthy`` the pass journals again for each."""
    found: List[Tuple[str, str, str]] = []
    for gpu in inventory.gpus:
        record = maintenance.get(gpu.uuid)
        lease = (record or {}).get("lease")
        if lease is None or live_lease(record, now) is not None or reset_ineffective(record):
            continue
        if now - lease["until"] < lease["reraise_after"]:
            continue
        health = gpu_health(gpu, cleared)
        if not health:
            continue
        ended = iso_utc(lease["until"]) or "an unknown time"
        found.append((gpu.uuid,
                      "the recovery %s of %s ended at %s without putting it back in service, and it is still unhealthy: "
                      "%s; GPUUnhealthy is raised again so that the rulebook runs bcd.devices.gpu_recover again"
                      % (lease["id"], gpu.uuid, ended, "; ".join(health)),
                      "%s; raised again: its recovery %s ended at %s without finishing"
                      % (unhealthy_message(gpu.uuid, health), lease["id"], ended)))
    return found


def recovery_conditions(inventory: Inventory, maintenance: Records, cleared: Optional[Mapping[str, float]],
                        now: float) -> List[Dict[str, Any]]:
    """The conditions ``GPUResetIneffective`` and ``GPURecoveryStalled`` a pass returns, each naming every GPU it
    covers; none when no GPU is in either."""
    conditions: List[Dict[str, Any]] = []
    ineffective = ineffective_resets(inventory, maintenance, cleared)
    if ineffective:
        conditions.append({"type": GPU_RESET_INEFFECTIVE, "status": "True",
                           "reason": GPU_CONDITION_REASONS[GPU_RESET_INEFFECTIVE],
                           "message": "; ".join(message for _uuid, message in ineffective)})
    stalled = stalled_recoveries(inventory, maintenance, cleared, now)
    if stalled:
        conditions.append({"type": GPU_RECOVERY_STALLED, "status": "True",
                           "reason": GPU_CONDITION_REASONS[GPU_RECOVERY_STALLED],
                           "message": "; ".join(message for _uuid, message, _again in stalled)})
    return conditions
