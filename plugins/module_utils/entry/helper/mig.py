# -*- coding: utf-8 -*-
# Copyright: contributors to bcd.devices
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""The root helper's MIG operations: ``mig.look`` and ``mig.change`` (``request.OPS``).

Changing MIG instances is root's, and destroying one destroys whatever a workload had on it, so root takes
nothing of the account's but the op itself, read by the allowlist grammar of ``domain/mig/wire.py`` before
anything of the node is read (``checked_change``). Then, with no hold written meanwhile (``hold.write``'s lock,
held until the op is done) and one MIG reading or change at a time, root reads **itself**:

* the GPUs' MIG side, from ``nvidia-smi`` or the fakehw file (``host.direct_mig_side().read()``): the GPU must be
  one of them, and the processes the driver lists on it claim it;
* the holds: every bcd spec in ``/etc/cdi`` and ``/var/run/cdi`` (a spec that cannot be read back claims every
  GPU), and the env files of ``/run/bcd/allocations`` for what their allocation's spec does not name
  (``reading.node_holds``, ``conflicts.beyond_spec``), as ``claims_on_node`` reads them for ``hold.write``;
* the pending Kubernetes releases, the GPUs VMs had at the last pass and those the stored node spec's
  ``instances`` are to give VMs, from the state directory (``DEFAULT_STATE_DIR``, as ``claims_on_node``), and
  the VMs running now (``host.domains``);

and runs the one check every MIG op goes through (``domain/mig/guard.op_refusal``, the planner's own). An op it
refuses is ``Refused`` with the guard's words, retryable (the holds may go); else root carries it out and
replies what was made, or the tool's words.
"""

from __future__ import annotations

import threading
from typing import TYPE_CHECKING, Any, ContextManager, Dict, List, Optional

from ansible_collections.bcd.devices.plugins.module_utils.domain.busy import claims_on
from ansible_collections.bcd.devices.plugins.module_utils.domain.cdi.hold_spec import SPEC_DIR, LiveHold, read_hold
from ansible_collections.bcd.devices.plugins.module_utils.domain.mig.guard import gpu_claims, op_refusal, planned_vm_claims
from ansible_collections.bcd.devices.plugins.module_utils.domain.mig.wire import WireError, done_to_data, node_to_data, op_from_data
from ansible_collections.bcd.devices.plugins.module_utils.domain.plan.conflicts import beyond_spec
from ansible_collections.bcd.devices.plugins.module_utils.entry.helper.reading import RUN_SPEC_DIR, node_holds
from ansible_collections.bcd.devices.plugins.module_utils.entry.helper.request import Refused
from ansible_collections.bcd.devices.plugins.module_utils.node.state_files import DEFAULT_STATE_DIR, LEDGER_NAME, NODESPEC_NAME, StateFiles
from ansible_collections.bcd.devices.plugins.module_utils.node.writers import node_file_path
from ansible_collections.bcd.devices.plugins.module_utils.state.ledger import parse_ledger
from ansible_collections.bcd.devices.plugins.module_utils.state.nodespec import nodespec_from_data
from ansible_collections.bcd.devices.plugins.module_utils.state.releases import load_releases
from ansible_collections.bcd.devices.plugins.module_utils.support.errors import BcdError

if TYPE_CHECKING:
    from ansible_collections.bcd.devices.plugins.module_utils.domain.input.atoms import Atom
    from ansible_collections.bcd.devices.plugins.module_utils.domain.mig.guard import GpuClaims
    from ansible_collections.bcd.devices.plugins.module_utils.domain.mig.model import MigNode, MigOp
    from ansible_collections.bcd.devices.plugins.module_utils.node.hosts import Host

_MIG = threading.Lock()  # one MIG reading or change at a time: nvidia-smi takes the driver's lock anyway


def checked_change(value: object) -> MigOp:
    """The op of a ``mig.change`` request, or ``Refused`` naming the field (the request is at fault)."""
    try:
        return op_from_data(value)
    except WireError as exc:
        raise Refused(str(exc))


def mig_look(host: Host) -> Dict[str, Any]:
    """``mig.look``'s reply fields: the GPUs' MIG side as root reads it now."""
    with _MIG:
        return {"mig": node_to_data(host.direct_mig_side().read())}


def mig_change(host: Host, op: MigOp, writing: ContextManager[Any], state_dir: str = DEFAULT_STATE_DIR) -> Dict[str, Any]:
    """``mig.change``'s reply fields for ``op`` (``checked_change``'s): carried out once root's own reading of the
    claims allows it, under ``writing`` (``hold.write``'s lock: no hold is written between the check and the op)."""
    with writing, _MIG:
        side = host.direct_mig_side()
        node = side.read()
        if node.gpu(op.gpu) is None:
            if node.error:
                raise Refused("the GPUs' MIG side cannot be read: %s" % node.error, retryable=True)
            raise Refused("%s is not a GPU of this node" % op.gpu)
        why = op_refusal(op, root_claims(host, op.gpu, node, state_dir))
        if why is not None:
            raise Refused(why, retryable=True)
        done = side.apply(op)
    return {"done": done_to_data(done)}


def root_claims(host: Host, uuid: str, node: MigNode, state_dir: str = DEFAULT_STATE_DIR) -> GpuClaims:
    """Who claims GPU ``uuid`` by root's own reading (the module docstring's list), sorted for the guard."""
    files = StateFiles(host.path(state_dir), state_dir)
    try:
        releases = load_releases(files)
        ledger = parse_ledger(files.read(LEDGER_NAME), files.where(LEDGER_NAME))
    except (BcdError, OSError) as exc:
        raise Refused("cannot read the pending releases: %s" % exc, retryable=True)
    try:
        content = files.read(NODESPEC_NAME)
        stored = None if content is None else nodespec_from_data(files.loads(content, NODESPEC_NAME),
                                                                 files.where(NODESPEC_NAME))
        instances: Optional[List[Dict[str, Any]]] = stored[2] if stored is not None else []
    except (BcdError, OSError, ValueError):
        instances = None  # every GPU counts as claimed (guard.planned_vm_claims)
    domains, _error = host.domains()
    claims = claims_on(uuid, live_holds(host), releases, domains, ledger.vfio, {})
    claims += planned_vm_claims(uuid, instances, [domain.instance_id for domain in domains])
    return gpu_claims(uuid, claims, node.processes)


def live_holds(host: Host) -> List[LiveHold]:
    """Every hold on the node as root reads it: the bcd specs of ``/etc/cdi`` and ``/var/run/cdi`` (one that cannot
    be read back is a hold with its ``problem``), and for each env file what its allocation's specs do not name
    (the whole file, for an allocation without one)."""
    holds: List[LiveHold] = []
    for spec_dir in (SPEC_DIR, RUN_SPEC_DIR):
        holds.extend(read_hold(allocation_id, path, content)
                     for allocation_id, (path, content) in sorted(host.hold_files(spec_dir).items()))
    specs: Dict[str, List[Atom]] = {}
    for hold in holds:
        specs.setdefault(hold.allocation_id, []).extend(hold.atoms)
    _specs, env_files = node_holds(host)
    for allocation_id, named in sorted(env_files.items()):
        extra = beyond_spec(named, specs.get(allocation_id))
        if extra:
            holds.append(LiveHold(allocation_id=allocation_id, path=node_file_path("allocation-env", allocation_id),
                                  content=b"", atoms=list(extra)))
    return holds


def change_words(change: object) -> str:
    """What the helper's log line says of an op it carried out: ``GPU-... destroy gi1/ci0``."""
    try:
        op = op_from_data(change)
    except WireError:
        return ""
    if op.kind == "mode":
        what = "mode %s" % ("on" if op.enabled else "off")
    elif op.kind == "destroy":
        what = "destroy gi%d%s" % (op.gi or 0, "/ci%d" % op.ci if op.ci is not None else "")
    elif op.gi is not None:
        what = "create %s in gi%d" % (",".join(op.compute), op.gi)
    else:
        what = "create %s at %s (%s)" % (op.profile, op.placement, ",".join(op.compute))
    return "%s %s" % (op.gpu, what)
