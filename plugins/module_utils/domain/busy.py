# -*- coding: utf-8 -*-
# Copyright: contributors to bcd.devices
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""The other direction: who claims a GPU, for whatever would reset or re-partition it.

The spec page: a VM start, ``gpu.reset``, ``diag.dcgm`` from level 2 and the ``mig-layout``
unit refuse a GPU a live hold or a pending release names. ``claims_on`` lists every claim on
one GPU, each with a ``kind`` and a one-line ``text``:

* ``hold``: a live hold of the GPU whole, of one of its MIG instances or of a slot;
* ``hold-unreadable``: a hold spec that cannot be read back (it may name any GPU);
* ``release``: a Kubernetes release whose pods may still use the device;
* ``releases-unreadable``: the pending releases file could not be read (every GPU counts);
* ``vm``: a running or paused VM has the GPU through VFIO, or had it at the last pass;
* ``maintenance``: the operator took the GPU out of service.

A GPU is *busy* when any claim but maintenance is there: maintenance keeps new holds off a
GPU precisely so that it can be reset once its holds are gone.

A GPU is reset (``bcd.devices.gpu_reset``) only when it is in maintenance and free, on a real node with
``reset_argv``: ``nvidia-smi --gpu-reset -i <UUID>``, as nvidia-smi(1) documents it: ``-r, --gpu-reset`` resets
the GPUs ``-i, --id`` names (an index, a PCI bus id or a UUID; without ``-i``, every GPU of the node), as root,
with no application using them. The UUID is always given: a reset never reaches a GPU it was not asked for.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, Dict, Iterable, List, Mapping, Optional, Sequence

from ansible_collections.bcd.devices.plugins.module_utils.domain.input.atoms import CLASS_MIG, CLASS_SLOT, Atom, atom_from_id
from ansible_collections.bcd.devices.plugins.module_utils.domain.maintenance import MaintenanceRecord, Records, reset_ineffective

if TYPE_CHECKING:
    from ansible_collections.bcd.devices.plugins.module_utils.domain.cdi.hold_spec import LiveHold
    from ansible_collections.bcd.devices.plugins.module_utils.domain.inventory_model import Domain
    from ansible_collections.bcd.devices.plugins.module_utils.domain.kube_release import Releases

NOT_BUSY = ("maintenance",)

# One claim on a GPU: ``{kind, text}`` and the fields that name its owner (``allocation_id``, ``device_id``,
# ``instance_id``, ``reason``).
Claim = Dict[str, str]


def _claim(kind: str, text: str, **fields: str) -> Claim:
    claim = {"kind": kind, "text": text}
    claim.update(fields)
    return claim


def _hold_text(atom: Atom, owner: str) -> str:
    if atom.device_class == CLASS_MIG and atom.gi is not None and atom.ci is not None:  # parse_atom sets both
        return "MIG instance gi%d/ci%d held by %s" % (atom.gi, atom.ci, owner)
    if atom.device_class == CLASS_SLOT and atom.slot is not None:  # parse_atom sets it for a slot
        return "slot s%d held by %s" % (atom.slot, owner)
    return "held whole by %s" % owner


def claims_on(uuid: str, holds: Iterable[LiveHold], releases: Releases, domains: Iterable[Domain],
              vfio: Mapping[str, str], maintenance: Records) -> List[Claim]:
    """Every claim on GPU ``uuid``: ``holds`` are ``LiveHold``s, ``releases`` a ``Releases``, ``domains``
    the running or paused VMs, ``vfio`` the GPUs VMs had at the last pass (``{gpu: instance}``),
    ``maintenance`` ``{gpu: {reason, since}}``."""
    found: List[Claim] = []
    for hold in holds:
        if hold.problem and not hold.atoms:
            found.append(_claim("hold-unreadable", "hold spec %s cannot be read back (%s)" % (hold.path, hold.problem),
                                allocation_id=hold.allocation_id))
            continue
        for atom in hold.atoms:
            if atom.gpu_uuid == uuid:
                found.append(_claim("hold", _hold_text(atom, hold.allocation_id), allocation_id=hold.allocation_id,
                                    device_id=atom.id))
    for release in sorted(releases.pending.values(), key=lambda r: r.allocation_id):
        for device_id in release.device_ids:
            atom = atom_from_id(device_id)
            if atom is not None and atom.gpu_uuid == uuid:
                text = "Kubernetes release of %s pending (%s)" % (release.allocation_id, device_id)
                found.append(_claim("release", text, allocation_id=release.allocation_id, device_id=device_id))
    if releases.marker or releases.unreadable is not None:
        found.append(_claim("releases-unreadable", "the pending Kubernetes releases could not be read"))
    instances = [domain.instance_id for domain in domains if uuid in domain.gpus]
    if vfio.get(uuid) and vfio[uuid] not in instances:
        instances.append(vfio[uuid])
    for instance in instances:
        found.append(_claim("vm", "passed through to VM %s" % instance, instance_id=instance))
    record = maintenance.get(uuid)
    if record is not None:
        found.append(_claim("maintenance", "in maintenance (%s)" % record["reason"], reason=record["reason"]))
    return found


def busy_entry(uuid: str, claims: List[Claim]) -> Dict[str, Any]:
    return {"uuid": uuid, "busy": any(claim["kind"] not in NOT_BUSY for claim in claims), "claimed_by": claims}


def health_fields(seen: bool, health: Sequence[str], record: Optional[MaintenanceRecord]) -> Dict[str, Any]:
    """What a busy entry says of the GPU's health: ``healthy`` (null when the node does not list the GPU now),
    ``problems``, ``reset_ineffective`` (its last reset left it unhealthy: it waits for a person) and
    ``recoverable``: unhealthy, seen, not declared reset-ineffective, and not in an operator's maintenance (one
    without a recovery's lease), so a recovery (``bcd.devices.gpu_recover``) takes it."""
    ineffective = bool(health) and reset_ineffective(record)
    return {"healthy": (not health) if seen else None, "problems": list(health), "reset_ineffective": ineffective,
            "recoverable": seen and bool(health) and not ineffective
            and (record is None or record.get("lease") is not None)}


def reset_argv(uuid: str) -> List[str]:
    """The command that resets GPU ``uuid`` on a real node (root only)."""
    return ["nvidia-smi", "--gpu-reset", "-i", uuid]
