# -*- coding: utf-8 -*-
# Copyright: contributors to bcd.devices
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""Who claims what on a GPU's MIG side, and the one check every MIG change goes through.

The spec page: the ``mig-layout`` unit "refuses a GPU a live hold or a pending release names". Here that
is made finer, as issue 48 asks: a change that keeps every held instance as it is may go ahead. A GPU's
claims (``domain/busy.claims_on``: holds, pending Kubernetes releases, VMs, unreadable records) and the
processes the driver lists on it are sorted into those on the GPU whole and those on one MIG instance:

* a claim on the GPU whole (a hold of the GPU or of a slot, a VM that has it or is to have it, a Kubernetes
  release of the GPU, a hold spec, the releases file or the stored node spec that cannot be read, a process on
  the GPU outside MIG) refuses every change;
* a claim on MIG instance ``gi``/``ci`` (a hold or a pending release of that atom, a process on that MIG
  device) refuses destroying that compute instance or its GPU instance, and a MIG mode change;
* creating an instance on a GPU nothing holds whole is never refused here (where it fits is the planner's).

``op_refusal`` is that check for one ``MigOp``. The planner runs it on every op it plans, and the root helper
runs it again on every op a peer asks for, against the claims root reads itself: the same function, so the
account cannot destroy an instance someone holds by asking for the op directly.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, Dict, Iterable, List, Mapping, Optional, Sequence, Tuple

from ansible_collections.bcd.devices.plugins.module_utils.domain.input.atoms import CLASS_MIG, Atom, AtomRefused, atom_from_id
from ansible_collections.bcd.devices.plugins.module_utils.support.records import field, record

if TYPE_CHECKING:
    from ansible_collections.bcd.devices.plugins.module_utils.domain.busy import Claim
    from ansible_collections.bcd.devices.plugins.module_utils.domain.mig.model import GpuProcess, MigOp

# Claims that do not stop a change: a GPU in maintenance is one no new hold takes, which is when an operator
# re-partitions it.
NOT_CLAIMING = ("maintenance",)

InstanceKey = Tuple[int, int]  # (gi, ci)


@record
class GpuClaims:
    """What claims one GPU: ``whole`` the texts of claims on the GPU whole, ``instances`` those on each MIG
    instance ``(gi, ci)``. Each text names the claim's owner (``held whole by alloc_a``)."""

    uuid: str
    whole: List[str] = field(default_factory=list)
    instances: Dict[InstanceKey, List[str]] = field(default_factory=dict)

    def held(self, gi: int, ci: Optional[int] = None) -> List[str]:
        """The claims on compute instance ``ci`` of GPU instance ``gi``, or on any of its compute instances."""
        return [text for (g, c), texts in sorted(self.instances.items()) if g == gi and (ci is None or c == ci)
                for text in texts]

    @property
    def any(self) -> bool:
        return bool(self.whole) or bool(self.instances)


def gpu_claims(uuid: str, claims: Iterable[Claim], processes: Iterable[GpuProcess] = ()) -> GpuClaims:
    """Sort GPU ``uuid``'s claims (``busy.claims_on``) and the processes using it."""
    found = GpuClaims(uuid=uuid)
    for claim in claims:
        if claim["kind"] in NOT_CLAIMING:
            continue
        atom = _atom(claim.get("device_id"))
        if atom is not None and atom.device_class == CLASS_MIG and atom.gi is not None and atom.ci is not None:
            found.instances.setdefault((atom.gi, atom.ci), []).append(claim["text"])
        else:
            found.whole.append(claim["text"])
    for process in processes:
        if process.gpu != uuid:
            continue
        text = "host process %d%s uses it" % (process.pid, " (%s)" % process.name if process.name else "")
        if process.gi is not None and process.ci is not None:
            found.instances.setdefault((process.gi, process.ci), []).append(
                "host process %d%s uses MIG instance gi%d/ci%d" % (
                    process.pid, " (%s)" % process.name if process.name else "", process.gi, process.ci))
        else:
            found.whole.append(text)
    return found


def planned_vm_claims(uuid: str, instances: Optional[Sequence[Mapping[str, Any]]],
                      running: Iterable[str] = ()) -> List[Claim]:
    """The claims of the VMs that are to have GPU ``uuid``: the node spec's ``instances`` (what the last pass took)
    naming it, but for those ``running`` already (``busy.claims_on`` names them). ``instances`` None: the stored
    node spec could not be read, and every GPU counts as claimed."""
    if instances is None:
        return [{"kind": "vm", "text": "the stored node spec cannot be read (a VM may be about to have it)"}]
    found: List[Claim] = []
    for instance in instances:
        instance_id = str(instance.get("instance_id"))
        if uuid in (instance.get("gpus") or ()) and instance_id not in running:
            found.append({"kind": "vm", "text": "to be passed through to VM %s" % instance_id,
                          "instance_id": instance_id})
    return found


def _atom(device_id: Optional[str]) -> Optional[Atom]:
    """The atom a claim names, or None: a claim without one, or with one that does not parse, is on the GPU
    whole (the safe side)."""
    if not device_id:
        return None
    try:
        return atom_from_id(device_id)
    except AtomRefused:
        return None


def op_refusal(op: MigOp, claims: GpuClaims) -> Optional[str]:
    """Why ``op`` may not be carried out on its GPU now, or None. The text names the GPU's claims."""
    if op.gpu != claims.uuid:
        return "the claims read are of %s, not %s" % (claims.uuid, op.gpu)
    if claims.whole:
        return "; ".join(claims.whole)
    if op.kind == "mode":
        texts = [text for _key, texts in sorted(claims.instances.items()) for text in texts]
        if texts:
            return "MIG mode cannot change under its MIG instances: %s" % "; ".join(texts)
        return None
    if op.kind == "destroy" and op.gi is not None:
        texts = claims.held(op.gi, op.ci)
        if texts:
            return "it would destroy %s: %s" % (
                "MIG instance gi%d/ci%d" % (op.gi, op.ci) if op.ci is not None else "GPU instance gi%d" % op.gi,
                "; ".join(texts))
    return None


def first_refusal(ops: Sequence[MigOp], claims: GpuClaims) -> Optional[str]:
    """The reasons the first of ``ops`` that may not be carried out gives, or None when all may."""
    for op in ops:
        why = op_refusal(op, claims)
        if why is not None:
            return why
    return None
