# -*- coding: utf-8 -*-
# Copyright: contributors to bcd.devices
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""Seeing the holds: what a node holds, per GPU, read without writing anything.

``node_status`` is what ``bcd.devices.holds_info`` returns and what
``bcd-holds status`` prints: the holds read back from ``/etc/cdi``, and for
each GPU the allocation holding it whole or holding its MIG instances or slots.
"""

from __future__ import annotations

import json
import time
from typing import TYPE_CHECKING, Any, Dict, Iterable, List, Optional, Sequence, Tuple

from ansible_collections.bcd.devices.plugins.module_utils.domain.busy import busy_entry, claims_on
from ansible_collections.bcd.devices.plugins.module_utils.domain.cdi.hold_spec import read_hold
from ansible_collections.bcd.devices.plugins.module_utils.domain.cdi.staleness import stale_edits
from ansible_collections.bcd.devices.plugins.module_utils.domain.health import gpu_health, unhealthy_condition
from ansible_collections.bcd.devices.plugins.module_utils.domain.input.atoms import Atom, atoms_of, resolve_atom
from ansible_collections.bcd.devices.plugins.module_utils.domain.kube_release import pending_summary, release_conditions
from ansible_collections.bcd.devices.plugins.module_utils.domain.plan.admission import gpu_numa_nodes, locality
from ansible_collections.bcd.devices.plugins.module_utils.domain.plan.claims import UNREADABLE_RELEASES
from ansible_collections.bcd.devices.plugins.module_utils.domain.plan.reports import (
    damaged_condition,
    kept_as_bound_conditions,
    summary_of,
    vendor_conditions,
)
from ansible_collections.bcd.devices.plugins.module_utils.entry.converge import capabilities, node_runtimes
from ansible_collections.bcd.devices.plugins.module_utils.state.store import DEFAULT_STATE_DIR, NodeState
from ansible_collections.bcd.devices.plugins.module_utils.support.text import printable

if TYPE_CHECKING:
    from ansible_collections.bcd.devices.plugins.module_utils.domain.cdi.hold_spec import LiveHold
    from ansible_collections.bcd.devices.plugins.module_utils.domain.inventory_model import Domain, Inventory
    from ansible_collections.bcd.devices.plugins.module_utils.domain.kube_release import Releases
    from ansible_collections.bcd.devices.plugins.module_utils.domain.ledger import Ledger
    from ansible_collections.bcd.devices.plugins.module_utils.node.hosts import Host


def gpu_status(inventory: Inventory, holds: Sequence[LiveHold], domains: Iterable[Domain] = (),
               releases: Optional[Releases] = None) -> List[Dict[str, Any]]:
    """One entry per GPU of the inventory, then one per GPU a hold names that the inventory lacks.
    ``passed_through_to`` names the VM that has the GPU through VFIO. Devices of a pending Kubernetes
    release show as ``<allocation> (release pending)``; while the releases file is unreadable, every
    GPU not otherwise held shows as claimed by those releases."""
    vms = dict((gpu, domain.instance_id) for domain in domains for gpu in domain.gpus)
    whole: Dict[str, str] = {}
    parts: Dict[str, List[Tuple[Atom, str]]] = {}
    owners = [(hold.allocation_id, hold.atoms) for hold in holds]
    for release in (releases.pending.values() if releases is not None else ()):
        owners.append(("%s (release pending)" % release.allocation_id, atoms_of(release.device_ids)))
    for owner, atoms in owners:
        for atom in atoms:
            if atom.whole:
                whole[atom.gpu_uuid] = owner
            else:
                parts.setdefault(atom.gpu_uuid, []).append((atom, owner))
    if releases is not None and (releases.marker or releases.unreadable is not None):
        for gpu in inventory.gpus:
            whole.setdefault(gpu.uuid, UNREADABLE_RELEASES)
    entries: List[Dict[str, Any]] = []
    for gpu in inventory.gpus:
        held_parts = parts.pop(gpu.uuid, [])
        mig_owner = dict(((atom.gi, atom.ci), owner) for atom, owner in held_parts
                         if atom.gi is not None and atom.ci is not None)  # a MIG atom has both
        mig = [{"gi": inst.gi, "ci": inst.ci, "uuid": inst.uuid, "id": "%s/gi%d/ci%d" % (gpu.uuid, inst.gi, inst.ci),
                "held_by": mig_owner.pop((inst.gi, inst.ci), None)} for inst in gpu.mig]
        entries.append({
            "index": gpu.index,
            "uuid": gpu.uuid,
            "present": True,
            "held_by": whole.pop(gpu.uuid, None),
            "passed_through_to": vms.get(gpu.uuid),
            "mig": mig,
            "slots": [{"id": atom.id, "slot": atom.slot, "held_by": owner}
                      for atom, owner in held_parts if atom.slot is not None],
            # MIG instances held but no longer present (deleted after the hold was bound).
            "missing_parts": [{"id": "%s/gi%d/ci%d" % (gpu.uuid, gi, ci), "held_by": owner}
                              for (gi, ci), owner in sorted(mig_owner.items())],
        })
    for uuid in sorted(set(whole) | set(parts)):
        entries.append({"index": None, "uuid": uuid, "present": False, "held_by": whole.get(uuid),
                        "passed_through_to": vms.get(uuid), "mig": [], "slots": [],
                        "missing_parts": [{"id": atom.id, "held_by": owner} for atom, owner in parts.get(uuid, [])]})
    return entries


def _with_service(gpus: List[Dict[str, Any]], holds: Sequence[LiveHold], releases: Releases, domains: Sequence[Domain],
                  state: NodeState, inventory: Inventory) -> List[Dict[str, Any]]:
    """Each GPU entry with ``maintenance`` (its reason, or None), ``busy`` (what ``gpu_busy`` says) and
    ``health`` (what makes it unhealthy, ``domain/health.py``; empty when nothing does)."""
    for entry in gpus:
        gpu = inventory.gpu(entry["uuid"])
        entry["health"] = list(gpu_health(gpu, state.health_cleared)) if gpu is not None else []
        claims = claims_on(entry["uuid"], holds, releases, domains, state.ledger.vfio, state.maintenance)
        record = state.maintenance.get(entry["uuid"])
        entry["maintenance"] = record["reason"] if record else None
        entry["busy"] = busy_entry(entry["uuid"], claims)["busy"]
    return gpus


def hold_staleness(hold: LiveHold, probe: Optional[Host]) -> List[str]:
    """What a hold's spec on disk names that the node does not have now (empty when the host cannot tell)."""
    if probe is None or hold.content is None:
        return []
    try:
        spec = json.loads(hold.content.decode("utf-8"))
    except (ValueError, UnicodeDecodeError):
        return []
    return stale_edits(spec, probe)


def hold_localities(host: Host, holds: Sequence[LiveHold], ledger: Ledger,
                    inventory: Inventory) -> Dict[str, Optional[Dict[str, Any]]]:
    """``{allocation_id: note}`` of each hold whose cpus or mems (as the ledger recorded them at its bind) lie
    outside its GPUs' NUMA nodes (``admission.locality``); None for a hold that is local, books neither, or
    whose locality is not known. The host's CPUs are read only when some hold books cpus or mems."""
    limits = dict((hold.allocation_id, ledger.limits_of(hold.allocation_id)) for hold in holds)
    found: Dict[str, Optional[Dict[str, Any]]] = dict.fromkeys(limits)
    if not any(booked is not None and (booked.cpus or booked.mems) for booked in limits.values()):
        return found
    cpus = host.cpus()[0]
    for hold in holds:
        booked = limits[hold.allocation_id]
        if cpus is not None and booked is not None and (booked.cpus or booked.mems):
            found[hold.allocation_id] = locality(booked, gpu_numa_nodes(hold.atoms, inventory), cpus)
    return found


def node_status(host: Host, state_dir: str = DEFAULT_STATE_DIR, cdi_runtimes: object = "auto") -> Dict[str, Any]:
    """Everything ``holds_info`` reports, read-only."""
    runtimes, runtime_warnings = node_runtimes(host, cdi_runtimes)
    vendor = host.vendor_spec()
    probe = host.driver_probe()
    holds = [read_hold(allocation_id, path, content)
             for allocation_id, (path, content) in sorted(host.hold_files().items())]
    inventory = host.inventory()
    state = NodeState(host.path(state_dir), state_dir)
    releases = state.load(write=False).releases
    warnings_of_state = [state.maintenance_problem] if state.maintenance_problem else []
    now = time.time()
    domains, domains_error = host.domains()
    warnings = [hold.problem for hold in holds if hold.problem] + runtime_warnings + warnings_of_state
    damaged = host.damaged_specs()
    if domains_error:
        warnings.append("VMs: %s" % domains_error)
    if releases.unreadable:
        warnings.append("%s/releasing.json is unreadable (%s); the next pass sets it aside"
                        % (state_dir, releases.unreadable))
    if inventory.error:
        warnings.append("GPU inventory: %s" % inventory.error)
    conditions = release_conditions(releases.pending.values(), releases.marker or releases.unreadable is not None,
                                    now, state_dir)
    if damaged:
        conditions.append(damaged_condition(damaged))
    conditions.extend(vendor_conditions(vendor, runtimes))
    conditions.extend(kept_as_bound_conditions(state.ledger))
    holders: Dict[str, List[str]] = {}
    for hold in holds:
        for atom in hold.atoms:
            holders.setdefault(atom.gpu_uuid, [])
            if hold.allocation_id not in holders[atom.gpu_uuid]:
                holders[atom.gpu_uuid].append(hold.allocation_id)
    sick = unhealthy_condition(inventory, holders, state.health_cleared)
    if sick is not None:
        conditions.append(sick)
    localities = hold_localities(host, holds, state.ledger, inventory)
    return {
        "holds": [dict(summary_of(hold), missing_devices=[atom.id for atom in hold.atoms
                                                          if resolve_atom(atom, inventory)[0] is None],
                       stale_edits=hold_staleness(hold, probe), locality=localities[hold.allocation_id])
                  for hold in holds],
        "gpus": _with_service(gpu_status(inventory, holds, domains, releases), holds, releases, domains, state,
                              inventory),
        "inventory_source": inventory.source,
        "capabilities": capabilities(host, inventory),
        "conditions": conditions,
        "runtimes": [runtime.to_dict() for runtime in runtimes],
        "pending_releases": pending_summary(releases.pending.values(), now),
        "node_public_key": state.public_key(),
        "warnings": warnings,
    }


WIDTH = 100  # a terminal's width the table keeps to
# The most characters a cell shows, escaped (``support/text.py``): an allocation id (80) with " (release
# pending)"; a maintenance reason's start. Text from the state directory, the specs' annotations or the
# kubelet may be anything, and escaped it grows (``\u202e`` is six characters for one); cut, it keeps the
# columns where they are. The lines after the table are escaped whole; ``--json`` has every value as it is.
HOLDER_CELL = 100
SERVICE_CELL = 32  # with a short holder the first five columns stay within 75, and the table within WIDTH
PART_CELL = 100  # one MIG instance or slot and its holder, in the last column


def _cell(value: object, limit: Optional[int] = None) -> str:
    """A cell of the table: escaped, so that nothing in it moves the cursor or reorders the line."""
    return printable(value, limit)


def _wrapped(head: str, parts: str, lead: int) -> List[str]:
    """``head`` then ``parts`` (comma-separated), continued on indented lines past ``WIDTH``."""
    room = max(20, WIDTH - lead)
    lines: List[str] = []
    line = ""
    for part in parts.split(", "):
        candidate = part if not line else line + ", " + part
        if line and len(candidate) > room:
            lines.append(line + ",")
            line = part
        else:
            line = candidate
    lines.append(line)
    return [head + lines[0]] + [" " * lead + rest for rest in lines[1:]]


def short_uuid(uuid: str) -> str:
    """``GPU-5f1c2a90…000001``: enough of a UUID to tell a node's GPUs apart in a table."""
    return uuid if len(uuid) <= 20 else "%s…%s" % (uuid[:12], uuid[-6:])


def status_table(status: Dict[str, Any]) -> str:
    """``bcd-holds status``: one line per GPU (index, short UUID, who holds it whole, whether a reset must
    wait, maintenance, its MIG instances and slots, wrapped to ``WIDTH``), then releases and conditions.
    Every value is escaped into its cell (``_cell``): the table is data, never terminal control."""
    rows: List[Tuple[str, ...]] = [("GPU", "UUID", "HELD BY", "RESET", "SERVICE", "MIG INSTANCES AND SLOTS")]
    for gpu in status["gpus"]:
        if gpu["held_by"]:
            holder = gpu["held_by"]
        elif gpu.get("passed_through_to"):
            holder = "VM %s" % gpu["passed_through_to"]
        else:
            holder = "-"
        parts = [_cell("gi%d/ci%d %s" % (m["gi"], m["ci"], m["held_by"] or "free"), PART_CELL) for m in gpu["mig"]]
        parts.extend(_cell("s%s %s" % (slot["slot"], slot["held_by"]), PART_CELL) for slot in gpu["slots"])
        parts.extend(_cell("%s %s (gone)" % (part["id"].split("/", 1)[-1], part["held_by"]), PART_CELL)
                     for part in gpu["missing_parts"])
        index = "-" if gpu["index"] is None else _cell(gpu["index"], 12)
        if not gpu["present"]:
            index += " (missing)"
        reset = "wait" if gpu.get("busy") else "ok"
        service_parts = []
        if gpu.get("health"):
            service_parts.append("unhealthy")
        if gpu.get("maintenance"):
            service_parts.append("maintenance: %s" % gpu["maintenance"])
        service = _cell(", ".join(service_parts) or "-", SERVICE_CELL)
        rows.append((index, short_uuid(_cell(gpu["uuid"])), _cell(holder, HOLDER_CELL), reset, service,
                     ", ".join(parts) or "-"))
    widths = [max(len(row[column]) for row in rows) for column in range(5)]
    lead = sum(widths) + 2 * 5
    lines = []
    for row in rows:
        head = "  ".join("%-*s" % (widths[column], row[column]) for column in range(5)) + "  "
        lines.extend(_wrapped(head, row[5], lead))
    if not status["gpus"]:
        lines.append("no GPUs (inventory: %s)" % _cell(status["inventory_source"]))
    pending = status.get("pending_releases") or []
    lines.append("pending Kubernetes releases: %s" % (", ".join(
        _cell("%s (%ss)" % (p["allocation_id"], p.get("age_seconds", "?"))) for p in pending) or "none"))
    conditions = status.get("conditions") or []
    lines.append("conditions: %s" % ("; ".join(
        _cell("%s (%s): %s" % (c["type"], c["reason"], c.get("message", ""))) for c in conditions)
        or "none"))
    lines.append("capabilities: %s" % (", ".join(_cell(name) for name in status["capabilities"]) or "none"))
    return "\n".join(lines)
