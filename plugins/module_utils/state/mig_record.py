# -*- coding: utf-8 -*-
# Copyright: contributors to bcd.devices
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""The MIG layout the node had when the collection last saw it (``<state_dir>/mig-layout.json``).

MIG instances do not survive a reboot. What the boot unit (``bcd-holds mig-layout --boot``) makes again is
recorded here by every ``bcd.devices.mig_layout`` run, after it changed what it changes: per GPU, whether MIG is
on, each GPU instance in GI id order with its profile, placement and compute profiles (``layout``: made again
in that order, at those placements, so that the driver hands out the same GI/CI ids to the holds that name
them), and each compute instance as seen (``instances``), which the next run compares with what it finds: an
instance made or destroyed by someone else (or by a run that stopped before it journaled) is journaled then,
as ``ChangedOutside``, unless the node rebooted in between (``boot_id``).

A record that cannot be read is an empty one with the reason: the boot run then makes nothing and fails saying
why (``bcd-holds mig-layout --boot`` exits 2), and the next module run writes it whole again. ``mig_pending`` is
the mode a GPU takes at its next reset or reboot, when that differs from its mode: the boot run makes that mode,
and a change the module asked for and journaled is not journaled again when a reset completes it.
"""

from __future__ import annotations

from typing import Any, Dict, List, Optional, Tuple

from ansible_collections.bcd.devices.plugins.module_utils.domain.mig.model import (
    ComputeInstance,
    GpuInstance,
    MigGpu,
    Placement,
)
from ansible_collections.bcd.devices.plugins.module_utils.support import bounded_json
from ansible_collections.bcd.devices.plugins.module_utils.support.errors import StateFileError
from ansible_collections.bcd.devices.plugins.module_utils.support.json_bytes import json_bytes
from ansible_collections.bcd.devices.plugins.module_utils.support.records import field, record
from ansible_collections.bcd.devices.plugins.module_utils.support.speed import lazy_pattern

MAX_GPUS = 256
MAX_INSTANCES = 8
_UUID_RE = lazy_pattern(r"^(GPU|MIG)-[A-Za-z0-9-]{1,128}$")
_PROFILE_RE = lazy_pattern(r"^[0-9a-z][0-9a-z.+-]{0,63}$")


@record(frozen=True)
class RecordedGpu:
    """One GPU as last seen: MIG on or off, the mode it takes at its next reset or reboot (``mig_pending``), its
    GPU instances with their compute instances."""

    mig_enabled: bool
    instances: Tuple[GpuInstance, ...] = ()
    mig_pending: Optional[bool] = None  # None: as mig_enabled

    @property
    def mode_after_reset(self) -> bool:
        return self.mig_enabled if self.mig_pending is None else self.mig_pending


@record
class MigRecord:
    """The node's MIG layouts as last seen, and the boot they were seen in."""

    boot_id: str = ""
    gpus: Dict[str, RecordedGpu] = field(default_factory=dict)


def recorded(gpu: MigGpu) -> RecordedGpu:
    """What is recorded of ``gpu`` as it is now."""
    pending = None if gpu.pending is None or bool(gpu.pending) == bool(gpu.mode) else bool(gpu.pending)
    return RecordedGpu(mig_enabled=bool(gpu.mode), instances=tuple(sorted(gpu.instances, key=lambda i: i.gi)),
                       mig_pending=pending)


def render_record(rec: MigRecord) -> bytes:
    gpus: Dict[str, Any] = {}
    for uuid in sorted(rec.gpus):
        gpu = rec.gpus[uuid]
        gpus[uuid] = {"mig_enabled": gpu.mig_enabled, "mig_pending": gpu.mig_pending, "instances": [
            {"gi": inst.gi, "profile": inst.profile, "placement": [inst.placement.start, inst.placement.size],
             "compute": [{"ci": ci.ci, "profile": ci.profile, "uuid": ci.uuid} for ci in inst.compute]}
            for inst in gpu.instances]}
    return json_bytes({"version": 1, "boot_id": rec.boot_id, "gpus": gpus}, indent=1)


def parse_record(content: Optional[bytes], where: str = "mig-layout.json") -> Tuple[MigRecord, Optional[str]]:
    """``(record, problem)``: the record, or an empty one and why the file could not be read (the bounded parser's
    limits, ``support/bounded_json``, as for every state file)."""
    if content is None:
        return MigRecord(), None
    try:
        return _record(bounded_json.loads(content, where)), None
    except StateFileError as exc:
        return MigRecord(), str(exc)
    except (ValueError, TypeError, KeyError) as exc:
        return MigRecord(), "cannot be read (%s); the next mig_layout run writes it again" % (str(exc)[:200] or type(exc).__name__)


def _int(value: object, low: int = 0, high: int = 1 << 20) -> int:
    if not isinstance(value, int) or isinstance(value, bool) or not low <= value <= high:
        raise ValueError("%r is not a number from %d to %d" % (value, low, high))
    return value


def _text(value: object, pattern: Any, what: str) -> str:
    if not isinstance(value, str) or not pattern.match(value):
        raise ValueError("%s is not %s" % (repr(value)[:80], what))
    return value


def _record(data: object) -> MigRecord:
    if not isinstance(data, dict) or data.get("version") != 1:
        raise ValueError("not a version 1 record")
    boot_id = data.get("boot_id")
    gpus_data = data.get("gpus")
    if not isinstance(boot_id, str) or len(boot_id) > 64 or not isinstance(gpus_data, dict) or len(gpus_data) > MAX_GPUS:
        raise ValueError("boot_id or gpus malformed")
    gpus: Dict[str, RecordedGpu] = {}
    for uuid, gpu in gpus_data.items():
        _text(uuid, _UUID_RE, "a GPU UUID")
        if not isinstance(gpu, dict) or not isinstance(gpu.get("mig_enabled"), bool) \
                or not isinstance(gpu.get("mig_pending"), (bool, type(None))):
            raise ValueError("%s: malformed" % uuid)
        items = gpu.get("instances")
        if not isinstance(items, list) or len(items) > MAX_INSTANCES:
            raise ValueError("%s: instances malformed" % uuid)
        instances: List[GpuInstance] = []
        for item in items:
            if not isinstance(item, dict) or not isinstance(item.get("placement"), list) or len(item["placement"]) != 2:
                raise ValueError("%s: an instance is malformed" % uuid)
            gi = _int(item.get("gi"), 0, 64)
            profile = _text(item.get("profile"), _PROFILE_RE, "a profile")
            computes = item.get("compute")
            if not isinstance(computes, list) or len(computes) > MAX_INSTANCES:
                raise ValueError("%s: compute instances malformed" % uuid)
            compute = tuple(ComputeInstance(
                gi=gi, ci=_int(ci.get("ci"), 0, 64), profile=_text(ci.get("profile"), _PROFILE_RE, "a profile"),
                uuid=None if ci.get("uuid") is None else _text(ci.get("uuid"), _UUID_RE, "a MIG UUID"))
                for ci in computes if isinstance(ci, dict))
            if len(compute) != len(computes):
                raise ValueError("%s: a compute instance is malformed" % uuid)
            instances.append(GpuInstance(gi=gi, profile=profile, placement=Placement(
                start=_int(item["placement"][0], 0, 64), size=_int(item["placement"][1], 0, 64)), compute=compute))
        gpus[uuid] = RecordedGpu(mig_enabled=gpu["mig_enabled"], instances=tuple(instances), mig_pending=gpu.get("mig_pending"))
    return MigRecord(boot_id=boot_id, gpus=gpus)
