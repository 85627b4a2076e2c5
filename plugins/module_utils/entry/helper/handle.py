# -*- coding: utf-8 -*-
# Copyright: contributors to bcd.devices
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""What the root helper does for a request it accepted: root's own work, built from root's own data.

``handle_request`` carries out one operation of ``request.OPS`` through a host whose writer does root's
work here: a hold's spec or env file rendered by root from the node's inventory and vendor spec (never
the peer's bytes) once no other claim has its devices and the quotas allow it (``reading``); a slice's
properties built from the limits, never below what its workload uses; a slice stopped only once empty; a MIG
op carried out only once the claims root reads itself allow it (``mig``). A request that cannot be carried out
raises ``Refused`` with the reason (``retryable`` where the node may change, not the request).
"""

from __future__ import annotations

import threading
import time
from typing import TYPE_CHECKING, Any, Dict, List, Optional, Sequence, Union

from ansible_collections.bcd.devices.plugins.module_utils.domain.cdi.hold_spec import (
    MPS_PIPE_DIRECTORY,
    RenderError,
    cdi_spec_path,
    env_atoms,
    read_hold,
    render_hold,
)
from ansible_collections.bcd.devices.plugins.module_utils.domain.cdi.runtimes import parse_runtimes_option
from ansible_collections.bcd.devices.plugins.module_utils.domain.input.assignment import (
    BINDING_HOLD,
    BINDING_KUBERNETES,
    InvalidAssignment,
    parse_hold_request,
    parse_limits,
)
from ansible_collections.bcd.devices.plugins.module_utils.domain.input.atoms import AtomRefused, resolve_atom, resolve_devices
from ansible_collections.bcd.devices.plugins.module_utils.domain.input.refusals import Reason
from ansible_collections.bcd.devices.plugins.module_utils.domain.plan.actions import SliceApply
from ansible_collections.bcd.devices.plugins.module_utils.domain.plan.conflicts import LISTED_TWICE, conflicts
from ansible_collections.bcd.devices.plugins.module_utils.domain.slices import SliceError, check_slice_change, slice_name, wanted_slice
from ansible_collections.bcd.devices.plugins.module_utils.entry.helper.mig import checked_change, mig_change, mig_look
from ansible_collections.bcd.devices.plugins.module_utils.entry.helper.reading import (
    NodeView,
    Sizes,
    check_atoms,
    check_env_bytes,
    check_quota,
    claims_on_node,
    node_holds,
)
from ansible_collections.bcd.devices.plugins.module_utils.entry.helper.request import (
    Refused,
    checked_allocation_id,
    checked_kind,
    checked_request,
)
from ansible_collections.bcd.devices.plugins.module_utils.node.hosts import MAX_HOLD_SPEC_BYTES, Host
from ansible_collections.bcd.devices.plugins.module_utils.node.writers import node_file_path
from ansible_collections.bcd.devices.plugins.module_utils.support.errors import BcdError, RetryableError

if TYPE_CHECKING:
    from ansible_collections.bcd.devices.plugins.module_utils.domain.cdi.runtimes import Runtime
    from ansible_collections.bcd.devices.plugins.module_utils.domain.input.assignment import Assignment
    from ansible_collections.bcd.devices.plugins.module_utils.domain.input.atoms import Atom
    from ansible_collections.bcd.devices.plugins.module_utils.domain.plan.seams import NodeFileKind

_CREATING = threading.Lock()  # one counted creation at a time: two fresh holds never both take the last place


def handle_request(host: Union[Host, NodeView], request: object) -> Optional[Dict[str, Any]]:
    """Carry out one request through ``host`` (whose writer does root's work here): a ``NodeView`` (what a
    served helper passes), or a host whose hardware is then read for this request alone.
    Returns extra reply fields, or None; raises ``Refused`` with the reason."""
    op, fields = checked_request(request)
    change = checked_change(fields.get("change")) if op == "mig.change" else None  # before the node is read
    view = host if isinstance(host, NodeView) else NodeView(host, seconds=0)
    host = view.fresh()  # the node as it is now, or as this interval's reading saw it (NodeView)
    if op == "kube.look":
        return {"view": view.kube_view(host)}
    if op == "mig.look":
        return mig_look(host)
    if change is not None:  # one MIG op, checked against the claims root reads itself, no hold written meanwhile
        return mig_change(host, change, _CREATING)
    if op == "hold.write":
        _write_hold(host, checked_kind(fields.get("kind")), fields.get("hold"))
    elif op == "hold.remove":
        host.writer.remove_node_file(checked_kind(fields.get("kind")), checked_allocation_id(fields.get("allocation_id")))
    elif op == "hold.set_aside":  # a damaged spec: renamed aside in /etc/cdi by root's clock, oldest copies pruned
        allocation_id = checked_allocation_id(fields.get("allocation_id"))
        with _CREATING:
            host.writer.set_aside_spec(allocation_id, time.time())
    elif op == "slice.apply":
        _apply_slice(host, checked_allocation_id(fields.get("allocation_id")), fields.get("limits"))
    else:
        _stop_slice(host, checked_allocation_id(fields.get("allocation_id")))
    return None


def _write_hold(host: Host, kind: NodeFileKind, data: object) -> None:
    """Root renders the file from the hold's data, as a pass would: the node's own atoms and vendor spec."""
    try:
        assignment, generation = parse_hold_request(data)  # data is a JSON object once it parses
        if assignment.binding not in (BINDING_HOLD, BINDING_KUBERNETES):
            raise Refused("binding %s is not supported" % assignment.binding)
        try:
            atoms = resolve_devices(assignment.devices, host.inventory())
        except AtomRefused as exc:
            if kind != "allocation-env" or exc.reason != Reason.DEVICE_MISSING:
                raise
            atoms = _atoms_on_disk(host, assignment, exc)
        try:  # the node's runtimes by name and version; what each loads is root's own table's word
            runtimes = parse_runtimes_option((data.get("runtimes") if isinstance(data, dict) else None) or [],
                                             where="hold.runtimes")
        except ValueError as exc:
            raise Refused(str(exc))
        if runtimes == "auto":
            raise Refused("hold.runtimes: must list the runtimes, not auto")
    except InvalidAssignment as exc:
        raise Refused(str(exc))
    except AtomRefused as exc:  # a device not there (yet) may come; anything else of the request not
        raise Refused(str(exc), retryable=_node_may_change(exc))
    # One write at a time: two peers never both take the last place, or one GPU. The node's holds are read
    # once, and what they refuse is refused before a render (a wide hold's costs root 0.1 s).
    with _CREATING:
        sizes: Sizes = {}
        holds = node_holds(host, sizes=sizes)
        found = conflicts(atoms, claims_on_node(host, holds=holds), assignment.allocation_id)
        if found:  # another allocation's hold, pending release or VM has them: the planner's refusal, word for word;
            # retryable when another's claim may go, never for a request that lists one device twice
            raise Refused("%s: %s" % (Reason.OVERLAP, "; ".join(found)), retryable=LISTED_TWICE not in found)
        check_quota(host, kind, assignment.allocation_id)
        check_atoms(kind, assignment.allocation_id, atoms, holds)
        content = _render(host, kind, assignment, atoms, generation, runtimes)
        check_env_bytes(kind, assignment.allocation_id, content, sizes)
        host.writer.write_node_file(kind, assignment.allocation_id, content)


def _render(host: Host, kind: NodeFileKind, assignment: Assignment, atoms: List[Atom], generation: int,
            runtimes: Sequence[Runtime]) -> bytes:
    """The bytes of the hold's file of ``kind``, rendered from the node's own vendor spec; a spec larger than a
    pass reads back (``MAX_HOLD_SPEC_BYTES``: the vendor's edits on each of its atoms) is refused."""
    try:
        spec, env = render_hold(assignment, atoms, generation, host.vendor_spec(), host.exists(MPS_PIPE_DIRECTORY),
                                runtimes=runtimes)
    except (AtomRefused, RenderError) as exc:
        # the vendor spec root reads now may change; anything else of the request not
        raise Refused(str(exc), retryable=_node_may_change(exc))
    if kind == "cdi" and len(spec) > MAX_HOLD_SPEC_BYTES:
        raise Refused("quota: the spec of %s would be %d bytes for its %d atoms, past the %d bytes a pass reads "
                      "back; %s is not written" % (assignment.allocation_id, len(spec), len(atoms),
                                                   MAX_HOLD_SPEC_BYTES, node_file_path(kind, assignment.allocation_id)),
                      retryable=True)
    return spec if kind == "cdi" else env


def _node_may_change(exc: BcdError) -> bool:
    """Whether a refusal to render a hold comes from what the node has now (a device missing, a vendor spec
    that names no device node for it or would make invalid CDI), not from the request."""
    reason = getattr(exc, "reason", None)
    return reason == Reason.DEVICE_MISSING or (isinstance(exc, RenderError) and reason is None)


def _atoms_on_disk(host: Host, assignment: Assignment, missing: AtomRefused) -> List[Atom]:
    """The env file of a kept hold whose devices are not back yet (after a reboot, before mig-layout):
    root takes what they are from the hold's own spec in /etc/cdi, which root wrote, and only for the
    very devices the request names."""
    path = cdi_spec_path(assignment.allocation_id)
    content = host.read(path)
    if content is None:
        raise missing
    hold = read_hold(assignment.allocation_id, path, content)
    if hold.problem or sorted(hold.device_ids) != sorted(ref.id for ref in assignment.devices):
        raise missing
    atoms = env_atoms(hold, [resolve_atom(atom, host.inventory())[0] for atom in hold.atoms])
    if atoms is None:
        raise missing
    return atoms


def _apply_slice(host: Host, allocation_id: str, raw_limits: object) -> None:
    """Root builds the slice's properties from the limits, never below what its workload uses now."""
    try:
        limits = parse_limits(raw_limits)
    except InvalidAssignment as exc:
        raise Refused(str(exc))
    wanted = wanted_slice(limits)
    if wanted is None:
        raise Refused("the limits book nothing a slice enforces (cpus, mems, cpu_millis, memory_bytes, "
                      "hugepages_2mi or hugepages_1gi)")
    properties, huge = wanted
    name = slice_name(allocation_id)
    try:  # root's own check (headroom over use, the CPUQuota floor, cpus and mems the host has and that never
        # narrow under a workload); the backend's apply runs it again
        check_slice_change(host.slices.state(name), properties, huge, name, host=host.cpus()[0])
    except SliceError as exc:
        raise Refused(str(exc), retryable=isinstance(exc, RetryableError))
    host.writer.apply_slice(SliceApply(name, properties, huge))


def _stop_slice(host: Host, allocation_id: str) -> None:
    """A slice is stopped only once empty: a release never kills a workload. The backend closes and freezes
    the slice and reads ``populated`` again before it stops it (``node.slices.stop_when_empty``)."""
    name = slice_name(allocation_id)
    current = host.slices.state(name)
    if current is None:
        return
    if current.populated:
        raise Refused("%s still runs a workload; it is stopped once empty" % name, retryable=True)
    try:
        host.writer.stop_slice(name)
    except SliceError as exc:
        raise Refused(str(exc), retryable=isinstance(exc, RetryableError))
