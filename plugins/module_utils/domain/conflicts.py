# -*- coding: utf-8 -*-
# Copyright: contributors to bcd.devices
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""Conflicts: who already has a GPU or a part of it, and when a new hold overlaps.

``Claims`` gathers every claim on the node — live holds, holds bound earlier in
the same pass, pending Kubernetes releases, and GPUs that VMs have or are to
have through VFIO. ``conflicts`` checks a new hold's atoms against it, in the
order docs/troubleshooting.md gives under ``overlap``:

* an atom listed twice in the assignment: ``a device is listed twice``
* its parent GPU passed through to a VM: ``<GPU> is passed through to instance <id>``
* its parent GPU in maintenance: ``<GPU> is in maintenance (<reason>)``
* the atom held by another allocation: ``<atom> is assigned to <allocation>``
* a whole GPU while part of it is held: ``<GPU> has <atom> assigned to <allocation>``
* a part of a GPU another allocation holds whole: ``<GPU> is assigned to <allocation>``
"""

from __future__ import annotations

from typing import Dict, List, Tuple

from ansible_collections.bcd.devices.plugins.module_utils.domain.atoms import CLASS_GPU

UNREADABLE_RELEASES = "(pending Kubernetes releases that could not be read)"


class Claims:
    """Every claim on the node's GPUs, by allocation (or VM instance)."""

    def __init__(self):
        self.atoms = {}  # type: Dict[tuple, str]  # Atom.key -> owner
        self.whole = {}  # type: Dict[str, str]
        self.parts = {}  # type: Dict[str, List[Tuple[str, str]]]
        self.vfio = {}  # type: Dict[str, str]
        self.maintenance = {}  # type: Dict[str, str]  # GPU UUID -> reason

    def claim(self, owner, atoms):
        """Record that ``owner`` holds ``atoms`` (parsed ``Atom`` objects)."""
        for atom in atoms:
            self.atoms.setdefault(atom.key, owner)
            if atom.whole:
                self.whole.setdefault(atom.gpu_uuid, owner)
            else:
                self.parts.setdefault(atom.gpu_uuid, []).append((atom.id, owner))

    def claim_every_gpu(self, owner, gpu_uuids):
        for uuid in gpu_uuids:
            self.whole.setdefault(uuid, owner)
            self.atoms.setdefault((CLASS_GPU, uuid), owner)

    def out_of_service(self, records):
        """GPUs in maintenance (``{uuid: {reason, ...}}``): no new hold may claim them."""
        for uuid, record in records.items():
            self.maintenance[uuid] = record["reason"]

    def pass_through(self, instance_id, gpu_uuids):
        for uuid in gpu_uuids:
            self.vfio.setdefault(uuid, instance_id)


def conflicts(atoms, claims, owner=None):
    """Every conflict of a new hold's atoms with ``claims``, as messages; empty when none. Claims of
    ``owner`` itself (its own pending release taken back) are no conflict."""
    found = []  # type: List[str]

    def add(message):
        if message not in found:
            found.append(message)

    seen = set()
    for atom in atoms:
        if atom.key in seen:
            add("a device is listed twice")
        seen.add(atom.key)
    for atom in atoms:
        instance = claims.vfio.get(atom.gpu_uuid)
        if instance is not None:
            add("%s is passed through to instance %s" % (atom.gpu_uuid, instance))
            continue
        reason = claims.maintenance.get(atom.gpu_uuid)
        if reason is not None:
            add("%s is in maintenance (%s)" % (atom.gpu_uuid, reason))
            continue
        holder = claims.atoms.get(atom.key)
        if holder is not None and holder != owner:
            add("%s is assigned to %s" % (atom.id, holder))
            continue
        if atom.whole:
            for part_id, part_owner in claims.parts.get(atom.gpu_uuid, []):
                if part_owner != owner:
                    add("%s has %s assigned to %s" % (atom.gpu_uuid, part_id, part_owner))
                    break
        else:
            holder = claims.whole.get(atom.gpu_uuid)
            if holder is not None and holder != owner:
                add("%s is assigned to %s" % (atom.gpu_uuid, holder))
    return found
