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

An instance id (the ``instances`` section, a libvirt domain's name) and a maintenance reason are text of
someone else's: a message quotes them through ``support.text.quoted`` (printable ASCII, no curly bracket),
as it is journaled in an ``AllocationFailed`` a gateway checks (``domain/event_grammar.py``).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Dict, Iterable, List, Mapping, Optional, Sequence, Set, Tuple

from ansible_collections.bcd.devices.plugins.module_utils.domain.input.atoms import CLASS_MIG, CLASS_SLOT, Atom, AtomKey, AtomRefused, atom_from_id
from ansible_collections.bcd.devices.plugins.module_utils.domain.plan.claims import PENDING, Claims
from ansible_collections.bcd.devices.plugins.module_utils.support.text import quoted

if TYPE_CHECKING:
    from ansible_collections.bcd.devices.plugins.module_utils.domain.inventory_model import Inventory

# The one conflict of the assignment with itself: nothing the node does later resolves it.
LISTED_TWICE = "a device is listed twice"


def conflicts(atoms: Sequence[Atom], claims: Claims, owner: Optional[str] = None) -> List[str]:
    """Every conflict of a new hold's atoms with ``claims``, as messages; empty when none. Claims of
    ``owner`` itself (its own pending release taken back) are no conflict."""
    found: Dict[str, None] = {}  # in order, each once

    def add(message: str) -> None:
        found.setdefault(message)

    seen: Set[AtomKey] = set()
    for atom in atoms:
        if atom.key in seen:
            add(LISTED_TWICE)
        seen.add(atom.key)
    for atom in atoms:
        instance = claims.vm_of(atom.gpu_uuid)
        if instance is not None:
            add("%s is passed through to instance %s" % (atom.gpu_uuid, quoted(instance, quote="", limit=256)))
            continue
        reason = claims.maintenance_of(atom.gpu_uuid)
        if reason is not None:
            add("%s is in maintenance (%s)" % (atom.gpu_uuid, quoted(reason, quote="", limit=256)))
            continue
        same, part, whole = claims.holding(atom, owner)
        if same is not None:
            add("%s is assigned to %s" % (atom.id, same.owner))
        elif atom.whole:
            if part is not None:
                add("%s has %s assigned to %s" % (atom.gpu_uuid, part.atom.id, part.owner))
        elif whole is not None:
            add("%s is assigned to %s" % (atom.gpu_uuid, whole.owner))
    return list(found)


def env_file_atoms(content: Optional[bytes], inventory: Optional[Inventory] = None) -> List[Atom]:
    """What an env file names in ``NVIDIA_VISIBLE_DEVICES`` (``visible_names``), as atoms (``named_atoms``)."""
    return named_atoms(visible_names(content), inventory)


def visible_names(content: Optional[bytes]) -> Tuple[str, ...]:
    """The names of an env file's ``NVIDIA_VISIBLE_DEVICES`` (its last such line, as a shell reads it)."""
    value = None
    for line in (content or b"").decode("utf-8", "replace").splitlines():
        if line.startswith("NVIDIA_VISIBLE_DEVICES="):
            value = line.split("=", 1)[1]
    return tuple(name.strip() for name in (value or "").split(",") if name.strip())


def named_atoms(names: Sequence[str], inventory: Optional[Inventory] = None) -> List[Atom]:
    """Each ``GPU-`` name as a whole GPU (an env file does not say which slot of a GPU it was rendered for),
    and each ``MIG-`` UUID as the MIG instance the node's ``inventory`` lists under it. Names that do not
    parse, and MIG UUIDs no GPU of the inventory has (or any, without one), name nothing: no allocation could
    be handed that device."""
    migs = _mig_instances(inventory) if any(name.startswith("MIG-") for name in names) else {}
    atoms: List[Atom] = []
    for name in names:
        if name in migs:
            atoms.append(migs[name])
            continue
        if not name.startswith("GPU-"):
            continue
        try:
            atom = atom_from_id(name)
        except AtomRefused:
            continue
        if atom.whole:
            atoms.append(atom)
    return atoms


def _mig_instances(inventory: Optional[Inventory]) -> Dict[str, Atom]:
    """``MIG-`` UUID -> the MIG instance's atom, for every MIG device of ``inventory``'s GPUs."""
    found: Dict[str, Atom] = {}
    for gpu in inventory.gpus if inventory is not None else ():
        for instance in gpu.mig:
            found[instance.uuid] = Atom(id="%s/gi%d/ci%d" % (gpu.uuid, instance.gi, instance.ci),
                                        device_class=CLASS_MIG, gpu_uuid=gpu.uuid, gi=instance.gi, ci=instance.ci,
                                        mig_uuid=instance.uuid)
    return found


def env_file_claim(atoms: Sequence[Atom], number: int) -> List[Atom]:
    """What an env file without a spec claims of what it names: the MIG instances themselves, and of each GPU a
    part that no hold's atom is (the file does not say which slot, or whether all of it): a whole-GPU hold
    there overlaps it, and so does one on any part the others hold, but another allocation's slot does not
    (slot holds share a GPU, and each bind writes its env file before its spec). ``number`` keeps each env
    file's part its own."""
    return [atom if atom.device_class == CLASS_MIG else
            Atom(id="%s (env file)" % atom.gpu_uuid, device_class=CLASS_SLOT, gpu_uuid=atom.gpu_uuid, slot=-1 - number)
            for atom in atoms]


def beyond_spec(named: Sequence[Atom], spec: Optional[Sequence[Atom]]) -> List[Atom]:
    """What an env file names (``env_file_atoms``) that its allocation's spec does not hold: all of it when
    there is no spec (a bind that wrote its env file and not yet its spec, or one that never finished), else
    a GPU the spec has no atom on, or a MIG instance the spec holds neither itself nor its whole GPU (a file
    written for other devices than its spec's): the file hands them to a workload all the same."""
    if spec is None:
        return list(named)
    own = set(atom.gpu_uuid for atom in spec)
    keys = set(atom.key for atom in spec)
    whole = set(atom.gpu_uuid for atom in spec if atom.whole)
    return [atom for atom in named
            if ((atom.key not in keys and atom.gpu_uuid not in whole) if atom.device_class == CLASS_MIG
                else atom.gpu_uuid not in own)]


def claims_on_disk(specs: Mapping[str, Sequence[Atom]], env_files: Optional[Mapping[str, Sequence[Atom]]] = None,
                   pending: Optional[Mapping[str, Sequence[Atom]]] = None,
                   vms: Optional[Iterable[Tuple[str, str]]] = None) -> Claims:
    """Who claims what by the files on the node, as ``Claims``: every live bcd spec (``specs``: allocation ->
    its atoms, from ``/etc/cdi`` and ``/var/run/cdi``), every env file (``env_files``: its GPUs,
    ``env_file_atoms``) for the GPUs its allocation's spec does not have (``beyond_spec``), every pending
    Kubernetes release (``pending``), and the GPUs running VMs have (``vms``: ``(GPU UUID, instance id)``).
    The root helper checks a ``hold.write`` against it and ``doctor`` the node, with ``conflicts``: the very
    rule the planner applies to its own claims."""
    claims = Claims()
    for gpu_uuid, instance in vms or ():
        claims = claims.pass_through(instance, [gpu_uuid])
    for owner in sorted(specs):
        claims = claims.hold(owner, specs[owner])
    for number, owner in enumerate(sorted(env_files or {})):
        named = beyond_spec((env_files or {})[owner], specs.get(owner))
        if named:
            claims = claims.hold(owner, env_file_claim(named, number))
    for owner in sorted(pending or {}):
        claims = claims.hold(owner, (pending or {})[owner], PENDING)
    return claims


def one_gpu_one_hold(specs: Mapping[str, Sequence[Atom]], env_files: Optional[Mapping[str, Sequence[Atom]]] = None,
                     vms: Optional[Iterable[Tuple[str, str]]] = None) -> List[str]:
    """Every overlap between the holds on disk (``claims_on_disk``'s specs, env files and VMs), as
    ``<allocation>: <conflict>``, each pair once (the later allocation of the two is named); empty when each
    GPU, or part of one, has one hold."""
    env_files = env_files or {}
    vms = list(vms or ())
    owners = sorted(set(specs) | set(env_files))
    found: List[str] = []
    for index, owner in enumerate(owners):
        atoms = list(specs.get(owner, ())) + env_file_claim(beyond_spec(env_files.get(owner, ()), specs.get(owner)),
                                                            index + 4096)
        earlier = dict((other, specs[other]) for other in owners[:index] if other in specs)
        earlier_env = dict((other, env_files[other]) for other in owners[:index] if other in env_files)
        found.extend("%s: %s" % (owner, message)
                     for message in conflicts(atoms, claims_on_disk(earlier, earlier_env, vms=vms), owner)
                     if message != LISTED_TWICE)
    return found
