# -*- coding: utf-8 -*-
# Copyright: contributors to bcd.devices
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""Kubernetes releases: a ``BINDING_KUBERNETES`` hold is released in four steps.

1. **Recorded first** in ``<state_dir>/releasing.json`` (0600: device ids,
   generation, time) before anything is removed.
2. **Withdrawn**: its CDI spec and env file are removed at once, so the device
   plugins stop advertising the devices.
3. **Reported when free**: each pass asks the kube side whether a pod still
   holds a device of the allocation (unreachable counts as held); only when
   none does is ``AllocationReleased`` journaled and the record dropped.
4. **Claimed meanwhile**: until reported, the devices stay the allocation's.

A spec that wants the allocation again (with any binding, on any devices) takes
the release back: it is never reported, since the allocation is live. Old
devices the new hold does not take, while pods still hold them, stay claimed
by the allocation (the record kept, marked ``taken_back``) and are dropped,
unreported, once free; the allocation never conflicts with its own record.

A release pending over five minutes raises ``KubernetesReleaseStuck``. An
unreadable ``releasing.json`` is renamed aside (kept), the marker
``releasing.unreadable`` is written, and every GPU counts as claimed by
``(pending Kubernetes releases that could not be read)`` until the kube side
reports that no pod holds a device of an allocation the node does not know,
or an operator removes the marker.
"""

from __future__ import annotations

import time
from typing import TYPE_CHECKING, AbstractSet, Any, Dict, Iterable, List, Mapping, Optional, Protocol, Sequence, Set, Tuple

from ansible_collections.bcd.devices.plugins.module_utils.domain.event_types import KUBERNETES_RELEASE_STUCK, KUBERNETES_RELEASES_UNREADABLE
from ansible_collections.bcd.devices.plugins.module_utils.domain.input.atoms import CLASS_MIG, CLASS_SLOT, Atom, AtomRefused, atom_from_id
from ansible_collections.bcd.devices.plugins.module_utils.support.records import field, record

if TYPE_CHECKING:
    from ansible_collections.bcd.devices.plugins.module_utils.domain.inventory_model import Inventory

Condition = Dict[str, Any]  # a node condition as a pass returns it: type, status, reason, message (JSON)

STUCK_AFTER = 300  # seconds


@record
class PendingRelease:
    allocation_id: str
    device_ids: List[str]
    generation: int
    since: float  # epoch seconds
    taken_back: bool = False  # the spec wants the allocation again: never reported, dropped once free

    def to_json(self) -> Dict[str, Any]:
        data: Dict[str, Any] = {"device_ids": list(self.device_ids), "generation": self.generation,
                                "since": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(self.since))}
        if self.taken_back:
            data["taken_back"] = True
        return data


@record
class Releases:
    """What ``releasing.json`` and its marker say."""

    pending: Dict[str, PendingRelease] = field(default_factory=dict)
    unreadable: Optional[str] = None  # why releasing.json could not be read: it is to be set aside
    marker: bool = False


class PodsHolding(Protocol):
    """What ``pods_holding`` reads of one look at the kube side (``plan/seams.PodView``, ``node/kubelet.KubeView``)."""

    @property
    def held(self) -> AbstractSet[str]: ...

    @property
    def error(self) -> Optional[str]: ...

    def holders(self, device_id: str) -> List[str]: ...


def device_names(device_ids: Iterable[str], inventory: Inventory) -> Set[str]:
    """The names the kube side uses for a hold's devices: GPU UUIDs, MIG UUIDs for MIG instances, and a
    slot's own atom id (``GPU-…/s<n>``), so a pod on one slot does not hold the GPU's other slots."""
    names: Set[str] = set()
    for device_id in device_ids:
        try:
            atom = atom_from_id(device_id)
        except AtomRefused:
            names.add(device_id)
            continue
        if atom.device_class == CLASS_MIG:
            gpu = inventory.gpu(atom.gpu_uuid)
            instance = gpu.mig_instance(atom.gi, atom.ci) if gpu is not None and atom.gi is not None and atom.ci is not None \
                else None
            names.add(instance.uuid if instance is not None else atom.gpu_uuid)
        elif atom.device_class == CLASS_SLOT:
            names.add(slot_name(atom))
        else:
            names.add(atom.gpu_uuid)
    return names


def slot_name(atom: Atom) -> str:
    """A slot as the kube side names it: its atom id, spelled one way."""
    return "%s/s%s" % (atom.gpu_uuid, atom.slot)  # a slot's atom: its number is set


def _gpu_of(name: str) -> str:
    """The GPU UUID a kube-side name starts with (a slot's ``GPU-…/s<n>``), or the name itself."""
    return name.split("/", 1)[0]


def pods_holding(view: Optional[PodsHolding], device_ids: Sequence[str], inventory: Inventory) -> Optional[List[str]]:
    """Who still holds any of the devices (``None`` means the kube side could not be asked: held). A slot
    is held when a pod holds that slot, or its whole GPU (a pod process with the GPU open names no slot);
    a whole GPU when a pod holds it or any slot of it."""
    if view is None or view.error is not None:
        return None
    names = device_names(device_ids, inventory)
    slotted: Set[str] = set()  # GPUs of the hold's slots: a name for the whole GPU holds them
    whole: Set[str] = set()  # the hold's whole GPUs: a pod on any slot of one holds it
    for device_id in device_ids:
        try:
            atom = atom_from_id(device_id)
        except AtomRefused:
            continue
        if atom.device_class == CLASS_SLOT:
            slotted.add(atom.gpu_uuid)
        elif atom.whole:
            whole.add(atom.gpu_uuid)
    holders: List[str] = []
    for name in sorted(view.held):
        if name in names or name in slotted or ("/" in name and _gpu_of(name) in whole):
            for holder in view.holders(name) or [name]:
                if holder not in holders:
                    holders.append(holder)
    return holders


def stuck_condition(stuck: Sequence[PendingRelease], now: float) -> Condition:
    return {
        "type": KUBERNETES_RELEASE_STUCK,
        "status": "True",
        "reason": "PodsHoldDevices",
        "message": "; ".join("%s released %ds ago, pods still hold its devices"
                             % (release.allocation_id, int(now - release.since)) for release in stuck),
    }


def unreadable_condition(state_dir: str) -> Condition:
    """The condition an unreadable ``releasing.json`` raises, naming it and its marker under ``state_dir``
    (their names are node/state_files.py's; a test holds the message to them)."""
    return {
        "type": KUBERNETES_RELEASES_UNREADABLE,
        "status": "True",
        "reason": "ReleasesFileUnreadable",
        "message": "%s/releasing.json could not be read; every GPU stays claimed until the kubelet reports no pod on "
                   "a GPU of an unknown allocation, or an operator removes %s/releasing.unreadable"
                   % (state_dir, state_dir),
    }


def release_conditions(pending: Iterable[PendingRelease], marker: bool, now: float, state_dir: str) -> List[Condition]:
    """The node conditions Kubernetes releases raise: stuck over five minutes, or the file unreadable."""
    conditions: List[Condition] = []
    stuck = sorted((r for r in pending if now - r.since > STUCK_AFTER), key=lambda r: r.allocation_id)
    if stuck:
        conditions.append(stuck_condition(stuck, now))
    if marker:
        conditions.append(unreadable_condition(state_dir))
    return conditions


def pending_summary(pending: Iterable[PendingRelease], now: float,
                    holders: Optional[Mapping[str, Optional[List[str]]]] = None) -> List[Dict[str, Any]]:
    """Pending releases as ``holds_info`` and ``bcd-holds status`` show them, with their age, and (from a
    pass) who holds their devices: ``held_by`` lists pods and processes, or is None when the kube side
    could not be asked."""
    summary: List[Dict[str, Any]] = []
    for release in sorted(pending, key=lambda r: r.allocation_id):
        entry: Dict[str, Any] = {"allocation_id": release.allocation_id, "device_ids": list(release.device_ids),
                                 "generation": release.generation, "age_seconds": int(max(0, now - release.since)),
                                 "taken_back": release.taken_back}
        if holders is not None:
            entry["held_by"] = holders.get(release.allocation_id)
        summary.append(entry)
    return summary


# The CDI kind of bcd's holds; its device names are atom ids with "/" as "_".
BCD_CDI_KIND = "bcd.dev/gpu"


def dra_device_ids(claim_resources: Iterable[Tuple[str, Iterable[str]]]) -> List[str]:
    """The devices a pod holds through DRA claims, from ``(device_name,
    cdi_device_names)`` per claim resource: each name that says which GPU or
    MIG device it is, the same as a device plugin's id would.

    That is a CDI device of bcd's own kind (``bcd.dev/gpu=GPU-…_gi1_ci0``: an
    atom id, ``/`` written ``_``), and a CDI device or device name that is a
    ``GPU-…`` or ``MIG-…`` UUID (``nvidia.com/gpu=GPU-…``). A driver's own
    names (``gpu-0``) say nothing bcd can check and add nothing; the pod
    processes with a GPU open still count (docs/kubernetes.md).
    """
    ids: List[str] = []
    for device_name, cdi_names in claim_resources:
        names = [device_name]
        for cdi_name in cdi_names:
            kind, _sep, name = cdi_name.partition("=")
            names.append(name.replace("_", "/") if kind == BCD_CDI_KIND else name)
        for name in names:
            if name.startswith(("GPU-", "MIG-")) and name not in ids:
                ids.append(name)
    return ids
