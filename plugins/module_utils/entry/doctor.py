# -*- coding: utf-8 -*-
# Copyright: contributors to bcd.devices
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""``bcd-holds doctor``: what would keep this node from binding holds, checked.

Each check is ``{"name", "level": OK|WARN|ERROR, "message"}``, its message ending in
what to do when the level is not OK. ``gpu-binding`` warns on a GPU host whose passes
would be unprivileged (no root, no reachable helper): such a node refuses every hold
with ``node-unprivileged``. ``cdi-runtimes`` names each container runtime, its version,
whether CDI is on in its configuration and the newest ``cdiVersion`` it loads;
``vendor-spec`` says which NVIDIA spec is used, and whether it is fresh; ``cdi-lint``
checks every spec file the runtimes load (``domain/cdi_lint.py``).
"""

from __future__ import annotations

import os

from ansible_collections.bcd.devices.plugins.module_utils.domain.atoms import CLASS_MIG
from ansible_collections.bcd.devices.plugins.module_utils.domain.cdi import SPEC_DIR, read_hold
from ansible_collections.bcd.devices.plugins.module_utils.domain.cdi_lint import lint
from ansible_collections.bcd.devices.plugins.module_utils.domain.cdi_runtimes import ceiling
from ansible_collections.bcd.devices.plugins.module_utils.domain.cdi_staleness import summary
from ansible_collections.bcd.devices.plugins.module_utils.domain.cdi_validate import version_key
from ansible_collections.bcd.devices.plugins.module_utils.domain.errors import BcdError
from ansible_collections.bcd.devices.plugins.module_utils.domain.text import printable
from ansible_collections.bcd.devices.plugins.module_utils.node.cdi_files import read_spec_dirs
from ansible_collections.bcd.devices.plugins.module_utils.node.helper_client import HelperClient
from ansible_collections.bcd.devices.plugins.module_utils.node.runtimes import cdi_enabled
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
    used = vendor.path
    if vendor.shadowed:
        used = "%s (it wins over %s: /var/run/cdi has priority; remove the one not refreshed)" % (
            vendor.path, ", ".join(vendor.shadowed))
    if vendor.stale:
        return _check("vendor-spec", WARN, "%s is stale: %s; new holds get only its true edits (regenerate it: "
                                           "nvidia-ctk cdi generate, or restart nvidia-cdi-refresh)"
                      % (used, summary(vendor.stale)))
    if vendor.is_wsl:
        return _check("vendor-spec", WARN if vendor.shadowed else OK, "%s (WSL: one device for every GPU)" % used)
    unnamed = [gpu.uuid for gpu in inventory.gpus if vendor.edits_for_gpu(gpu.uuid) is None]
    unnamed += [inst.uuid for gpu in inventory.gpus for inst in gpu.mig if vendor.edits_for_mig(inst.uuid) is None]
    if unnamed:
        return _check("vendor-spec", WARN, "%s is stale: it does not name %s (regenerate it after a driver upgrade "
                                           "or MIG change)" % (used, ", ".join(unnamed)))
    problems = list(vendor.warnings)
    if problems:
        return _check("vendor-spec", WARN, "%s: %s" % (used, "; ".join(problems)))
    return _check("vendor-spec", WARN if vendor.shadowed else OK,
                  "%s names every GPU and MIG device, and what it names is on the node" % used)


def check_cdi_runtimes(host, runtimes, warnings, vendor):
    """Each runtime, its version, whether CDI is on, and the version holds are written at."""
    if not runtimes:
        why = ("; ".join(warnings) + "; ") if warnings else ""
        return _check("cdi-runtimes", WARN if warnings else OK,
                      "%sno container runtime that loads CDI specs found (containerd, dockerd, podman, crio): holds are "
                      "written at the version their content needs (name them with cdi_runtimes if they live elsewhere)"
                      % why)
    level, parts = OK, []
    for runtime in runtimes:
        if runtime.max_cdi_version is None:
            parts.append("%s %s has no CDI support (upgrade it to load holds)" % (runtime.name, runtime.version))
            level = WARN
            continue
        enabled, why = cdi_enabled(host.root, runtime)
        text = "%s %s loads cdiVersion up to %s" % (runtime.name, runtime.version, runtime.max_cdi_version)
        if enabled is False:
            text += ", but CDI is off: %s" % why
            level = WARN
        elif enabled is None:
            text += " (CDI on? %s)" % why
        elif runtime.name in ("containerd", "docker"):  # where CDI is a setting, say what turned it on
            text += " (%s)" % why
        parts.append(text)
    oldest = ceiling(runtimes)
    if oldest is not None:
        parts.append("holds are written at cdiVersion %s at most" % oldest.max_cdi_version)
        if vendor.path and vendor.cdi_version and version_key(vendor.cdi_version) > version_key(oldest.max_cdi_version):
            parts.append("%s %s cannot load %s (cdiVersion %s): regenerate it with nvidia-ctk cdi generate "
                         "--spec-version %s or upgrade the runtime"
                         % (oldest.name, oldest.version, vendor.path, vendor.cdi_version, oldest.max_cdi_version))
            level = WARN
    parts.extend(warnings)
    if warnings:
        level = WARN
    return _check("cdi-runtimes", level, "; ".join(parts))


def check_cdi_lint(host):
    """Every spec file the runtimes load, as they would load it (see ``domain/cdi_lint.py``)."""
    findings = lint(read_spec_dirs(host.root))
    if not findings:
        return _check("cdi-lint", OK, "every spec in /etc/cdi and /var/run/cdi loads, each bcd.dev/gpu device "
                                      "is defined once, no temporary files are left")
    level = ERROR if any(finding.level == ERROR for finding in findings) else WARN
    shown = "; ".join(finding.summary() for finding in findings[:8])
    more = len(findings) - 8
    return _check("cdi-lint", level, shown + (" (and %d more)" % more if more > 0 else ""))


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
        for read in (state.load_nodespec, state.last_pass, state.public_key):  # the other files root reads
            read()
    except (BcdError, OSError) as exc:
        return _check("state", ERROR, "a state file cannot be used: %s" % exc)
    problems = state.warnings()
    if problems:
        return _check("state", WARN, "; ".join(problems))
    last = ledger.last_state or "never run"
    level = WARN if ledger.last_state == "PROGRESSING" else OK
    return _check("state", level, "last pass %s; %d events not yet acknowledged" % (last, pending))


def run_checks(host, state_dir=DEFAULT_STATE_DIR, helper_socket=None, runtimes=None):
    """Every check, in order. ``runtimes``: ``(runtimes, warnings)`` as a pass sees them (found when None)."""
    inventory = host.inventory()
    vendor = host.vendor_spec()
    runtimes, runtime_warnings = runtimes if runtimes is not None else host.cdi_runtimes()
    return [
        check_privilege(host, inventory, helper_socket),
        check_helper(helper_socket),
        check_inventory(inventory),
        check_vendor_spec(vendor, inventory),
        check_cdi_runtimes(host, runtimes, runtime_warnings, vendor),
        check_cdi_lint(host),
        check_holds(host, inventory),
        check_slices(host),
        check_state(host, state_dir),
    ]


def doctor_lines(checks):
    """What ``bcd-holds doctor`` prints: one line per check, its level, name and message. A message quotes
    what the node has (spec files and their annotations, runtimes' versions, state files, hold ids):
    escaped (``domain/text.py``), one line each, never terminal control."""
    return ["%-7s %-14s %s" % (printable(check["level"]), printable(check["name"]), printable(check["message"]))
            for check in checks]
