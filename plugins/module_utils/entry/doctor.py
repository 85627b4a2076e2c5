# -*- coding: utf-8 -*-
# Copyright: contributors to bcd.devices
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""``bcd-holds doctor``: what would keep this node from binding holds, checked.

Each check is ``{"name", "level": OK|WARN|ERROR, "message"}``. ``gpu-binding``
warns on a GPU host whose passes would be unprivileged (no root, no reachable
helper): such a node refuses every hold with ``node-unprivileged``.
"""

from __future__ import annotations

import os

from ansible_collections.bcd.devices.plugins.module_utils.domain.atoms import CLASS_MIG
from ansible_collections.bcd.devices.plugins.module_utils.domain.cdi import SPEC_DIR, read_hold
from ansible_collections.bcd.devices.plugins.module_utils.domain.errors import BcdError
from ansible_collections.bcd.devices.plugins.module_utils.node.helper_client import HelperClient
from ansible_collections.bcd.devices.plugins.module_utils.state.store import DEFAULT_STATE_DIR, NodeState

OK, WARN, ERROR = "OK", "WARN", "ERROR"


def _check(name, level, message):
    return {"name": name, "level": level, "message": message}


def check_helper(helper_socket):
    """The root helper the passes are to use answers."""
    if not helper_socket:
        return _check("helper", OK, "no root helper configured (passes must run as root)")
    why = HelperClient(helper_socket, timeout=5).reachable()
    if why is not None:
        return _check("helper", ERROR, "the root helper at %s does not answer: %s" % (helper_socket, why))
    return _check("helper", OK, "the root helper at %s answers" % helper_socket)


def check_privilege(host, inventory, helper_socket):
    if os.geteuid() == 0:
        return _check("gpu-binding", OK, "passes run as root")
    if helper_socket:
        why = HelperClient(helper_socket, timeout=5).reachable()
        if why is None:
            return _check("gpu-binding", OK, "passes run unprivileged through the root helper at %s" % helper_socket)
        if inventory.gpus:
            return _check("gpu-binding", WARN, "passes would be unprivileged: %s; every hold is refused with "
                                               "node-unprivileged" % why)
        return _check("gpu-binding", OK, "no GPUs; the root helper is unreachable: %s" % why)
    if inventory.gpus:
        return _check("gpu-binding", WARN, "this GPU host's passes run without root and without the root helper: "
                                           "every hold is refused with node-unprivileged (run bcd-holds as root, or "
                                           "beside bcd-holds helper)")
    return _check("gpu-binding", OK, "no GPUs; nothing to bind")


def check_inventory(inventory):
    if inventory.error:
        return _check("inventory", ERROR, "GPUs cannot be listed: %s" % inventory.error)
    return _check("inventory", OK, "%d GPUs from %s" % (len(inventory.gpus), inventory.source))


def check_vendor_spec(vendor, inventory):
    if not vendor.path:
        level = WARN if inventory.gpus else OK
        return _check("vendor-spec", level, "no NVIDIA CDI spec in /etc/cdi or /var/run/cdi: holds carry only "
                                            "their env (run nvidia-ctk cdi generate)")
    if vendor.is_wsl:
        return _check("vendor-spec", OK, "%s (WSL: one device for every GPU)" % vendor.path)
    unnamed = [gpu.uuid for gpu in inventory.gpus if vendor.edits_for_gpu(gpu.uuid) is None]
    unnamed += [inst.uuid for gpu in inventory.gpus for inst in gpu.mig if vendor.edits_for_mig(inst.uuid) is None]
    if unnamed:
        return _check("vendor-spec", WARN, "%s is stale: it does not name %s (regenerate it after a driver upgrade "
                                           "or MIG change)" % (vendor.path, ", ".join(unnamed)))
    problems = list(vendor.warnings)
    if problems:
        return _check("vendor-spec", WARN, "%s: %s" % (vendor.path, "; ".join(problems)))
    return _check("vendor-spec", OK, "%s names every GPU and MIG device" % vendor.path)


def check_holds(host, inventory):
    problems = []
    for allocation_id, (path, content) in sorted(host.hold_files().items()):
        hold = read_hold(allocation_id, path, content)
        if hold.problem:
            problems.append(hold.problem)
            continue
        for atom in hold.atoms:
            gpu = inventory.gpu(atom.gpu_uuid)
            if gpu is None:
                problems.append("%s holds %s, which the inventory does not list" % (allocation_id, atom.gpu_uuid))
            elif atom.device_class == CLASS_MIG and gpu.mig_instance(atom.gi, atom.ci) is None:
                problems.append("%s holds %s, a MIG instance that no longer exists" % (allocation_id, atom.id))
    try:
        leftovers = [name for name in os.listdir(host.path(SPEC_DIR)) if name.startswith(".bcd-")]
    except OSError:
        leftovers = []
    if leftovers:
        problems.append("temporary files left in %s: %s" % (SPEC_DIR, ", ".join(sorted(leftovers))))
    if problems:
        return _check("holds", WARN, "; ".join(problems))
    return _check("holds", OK, "%d holds, each on devices the node has" % len(host.hold_files()))


def check_slices(host):
    why = host.slices_unavailable()
    if why:
        return _check("slices", WARN, "holds with limits are refused: %s" % why)
    return _check("slices", OK, "hold slices can be made")


def check_state(host, state_dir):
    state = NodeState(host.path(state_dir), state_dir)
    try:
        ledger = state.load(write=False).ledger
        pending = len(state.unacked())
    except (BcdError, OSError) as exc:
        return _check("state", ERROR, "the event journal cannot be read: %s" % exc)
    problems = state.warnings()
    if problems:
        return _check("state", WARN, "; ".join(problems))
    last = ledger.last_state or "never run"
    level = WARN if ledger.last_state == "PROGRESSING" else OK
    return _check("state", level, "last pass %s; %d events not yet acknowledged" % (last, pending))


def run_checks(host, state_dir=DEFAULT_STATE_DIR, helper_socket=None):
    inventory = host.inventory()
    return [
        check_privilege(host, inventory, helper_socket),
        check_helper(helper_socket),
        check_inventory(inventory),
        check_vendor_spec(host.vendor_spec(), inventory),
        check_holds(host, inventory),
        check_slices(host),
        check_state(host, state_dir),
    ]
