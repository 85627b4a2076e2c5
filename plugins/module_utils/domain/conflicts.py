# -*- coding: utf-8 -*-
# Copyright: contributors to bcd.devices
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""Conflicts: who already has a GPU or a part of it, and when a new hold overlaps.

``claims.Claims`` gathers every claim on the node — live holds, holds bound
earlier in the same pass, pending Kubernetes releases, and GPUs that VMs have or
are to have through VFIO. ``conflicts`` checks a new hold's atoms against it, in
the order docs/troubleshooting.md gives under ``overlap``. A release this pass
makes is no conflict: the hold waits for it instead (``Claims.needs``).

* an atom listed twice in the assignment: ``a device is listed twice``
* its parent GPU passed through to a VM: ``<GPU> is passed through to instance <id>``
* its parent GPU in maintenance: ``<GPU> is in maintenance (<reason>)``
* the atom held by another allocation: ``<atom> is assigned to <allocation>``
* a whole GPU while part of it is held: ``<GPU> has <atom> assigned to <allocation>``
* a part of a GPU another allocation holds whole: ``<GPU> is assigned to <allocation>``
"""

from __future__ import annotations

from typing import List

from ansible_collections.bcd.devices.plugins.module_utils.domain.claims import Claims

UNREADABLE_RELEASES = "(pending Kubernetes releases that could not be read)"


def conflicts(atoms, claims: Claims, owner=None) -> List[str]:
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
        instance = claims.vm_of(atom.gpu_uuid)
        if instance is not None:
            add("%s is passed through to instance %s" % (atom.gpu_uuid, instance))
            continue
        reason = claims.maintenance_of(atom.gpu_uuid)
        if reason is not None:
            add("%s is in maintenance (%s)" % (atom.gpu_uuid, reason))
            continue
        others = claims.holding([atom], owner)
        key = atom.key
        same = next((claim for claim in others if claim.atom.key == key), None)
        if same is not None:
            add("%s is assigned to %s" % (atom.id, same.owner))
        elif atom.whole:
            part = next((claim for claim in others if not claim.atom.whole), None)
            if part is not None:
                add("%s has %s assigned to %s" % (atom.gpu_uuid, part.atom.id, part.owner))
        else:
            whole = next((claim for claim in others if claim.atom.whole), None)
            if whole is not None:
                add("%s is assigned to %s" % (atom.gpu_uuid, whole.owner))
    return found
