# -*- coding: utf-8 -*-
# Copyright: contributors to bcd.devices
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""The node as ``bcd-holds doctor`` checks it: its GPUs (``inventory``), NVIDIA's CDI spec and whether it is
fresh (``vendor-spec``), each container runtime, its version, whether CDI is on in its configuration and the
newest ``cdiVersion`` it loads (``cdi-runtimes``), every spec file the runtimes load (``cdi-lint``,
``domain/cdi/lint.py``), the holds and the rule of one GPU, one hold (``holds``, ``one-hold``), the slices, the
state directory, and the role's install as it recorded it (``install``).
"""

from __future__ import annotations

import os
from typing import TYPE_CHECKING, List, Sequence

from ansible_collections.bcd.devices.plugins.module_utils.domain.cdi.hold_spec import SPEC_DIR, read_hold
from ansible_collections.bcd.devices.plugins.module_utils.domain.cdi.lint import lint
from ansible_collections.bcd.devices.plugins.module_utils.domain.cdi.runtimes import ceiling
from ansible_collections.bcd.devices.plugins.module_utils.domain.cdi.staleness import summary
from ansible_collections.bcd.devices.plugins.module_utils.domain.cdi.versions import version_key
from ansible_collections.bcd.devices.plugins.module_utils.domain.input.atoms import CLASS_MIG
from ansible_collections.bcd.devices.plugins.module_utils.domain.plan.conflicts import one_gpu_one_hold
from ansible_collections.bcd.devices.plugins.module_utils.entry.doctor.report import ERROR, OK, RERUN, WARN, Check, Level, check
from ansible_collections.bcd.devices.plugins.module_utils.entry.helper.reading import node_holds
from ansible_collections.bcd.devices.plugins.module_utils.node import library
from ansible_collections.bcd.devices.plugins.module_utils.node.cdi_files import read_spec_dirs
from ansible_collections.bcd.devices.plugins.module_utils.node.runtimes import cdi_enabled
from ansible_collections.bcd.devices.plugins.module_utils.state.store import NodeState
from ansible_collections.bcd.devices.plugins.module_utils.support.errors import BcdError

if TYPE_CHECKING:
    from ansible_collections.bcd.devices.plugins.module_utils.domain.cdi.runtimes import Runtime
    from ansible_collections.bcd.devices.plugins.module_utils.domain.cdi.vendor import VendorSpec
    from ansible_collections.bcd.devices.plugins.module_utils.domain.inventory_model import Inventory
    from ansible_collections.bcd.devices.plugins.module_utils.node.hosts import Host


def check_inventory(inventory: Inventory) -> Check:
    if inventory.error:
        return check("inventory", ERROR, "GPUs cannot be listed: %s" % inventory.error)
    return check("inventory", OK, "%d GPUs from %s" % (len(inventory.gpus), inventory.source))


def check_vendor_spec(vendor: VendorSpec, inventory: Inventory) -> Check:
    if not vendor.path:
        level: Level = WARN if inventory.gpus else OK
        return check("vendor-spec", level, "no NVIDIA CDI spec in /etc/cdi or /var/run/cdi: holds carry only "
                                           "their env (run nvidia-ctk cdi generate)")
    used = vendor.path
    if vendor.shadowed:
        used = "%s (it wins over %s: /var/run/cdi has priority; remove the one not refreshed)" % (
            vendor.path, ", ".join(vendor.shadowed))
    if vendor.stale:
        return check("vendor-spec", WARN, "%s is stale: %s; new holds get only its true edits (regenerate it: "
                                          "nvidia-ctk cdi generate, or restart nvidia-cdi-refresh)"
                     % (used, summary(vendor.stale)))
    if vendor.is_wsl:
        return check("vendor-spec", WARN if vendor.shadowed else OK, "%s (WSL: one device for every GPU)" % used)
    unnamed = [gpu.uuid for gpu in inventory.gpus if vendor.edits_for_gpu(gpu.uuid) is None]
    unnamed += [inst.uuid for gpu in inventory.gpus for inst in gpu.mig if vendor.edits_for_mig(inst.uuid) is None]
    if unnamed:
        return check("vendor-spec", WARN, "%s is stale: it does not name %s (regenerate it after a driver upgrade "
                                          "or MIG change)" % (used, ", ".join(unnamed)))
    problems = list(vendor.warnings)
    if problems:
        return check("vendor-spec", WARN, "%s: %s" % (used, "; ".join(problems)))
    return check("vendor-spec", WARN if vendor.shadowed else OK,
                 "%s names every GPU and MIG device, and what it names is on the node" % used)


def check_cdi_runtimes(host: Host, runtimes: Sequence[Runtime], warnings: Sequence[str], vendor: VendorSpec) -> Check:
    """Each runtime, its version, whether CDI is on, and the version holds are written at."""
    if not runtimes:
        why = ("; ".join(warnings) + "; ") if warnings else ""
        return check("cdi-runtimes", WARN if warnings else OK,
                     "%sno container runtime that loads CDI specs found (containerd, dockerd, podman, crio): holds are "
                     "written at the version their content needs (name them with cdi_runtimes if they live elsewhere)"
                     % why)
    level: Level = OK
    parts: List[str] = []
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
    return check("cdi-runtimes", level, "; ".join(parts))


def check_cdi_lint(host: Host) -> Check:
    """Every spec file the runtimes load, as they would load it (see ``domain/cdi/lint.py``)."""
    findings = lint(read_spec_dirs(host.root))
    if not findings:
        return check("cdi-lint", OK, "every spec in /etc/cdi and /var/run/cdi loads, each bcd.dev/gpu device "
                                     "is defined once, no temporary files are left")
    level: Level = ERROR if any(finding.level == ERROR for finding in findings) else WARN
    shown = "; ".join(finding.summary() for finding in findings[:8])
    more = len(findings) - 8
    return check("cdi-lint", level, shown + (" (and %d more)" % more if more > 0 else ""))


def check_holds(host: Host, inventory: Inventory) -> Check:
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
            elif atom.device_class == CLASS_MIG and (atom.gi is None or atom.ci is None  # a MIG atom has both
                                                     or gpu.mig_instance(atom.gi, atom.ci) is None):
                problems.append("%s holds %s, a MIG instance that no longer exists" % (allocation_id, atom.id))
    try:
        leftovers = [name for name in os.listdir(host.path(SPEC_DIR)) if name.startswith(".bcd-")]
    except OSError:
        leftovers = []
    if leftovers:
        problems.append("temporary files left in %s: %s" % (SPEC_DIR, ", ".join(sorted(leftovers))))
    if problems:
        return check("holds", WARN, "; ".join(problems))
    return check("holds", OK, "%d holds, each on devices the node has" % len(host.hold_files()))


def check_one_hold(host: Host) -> Check:
    """One GPU, one hold: no two allocations' specs (/etc/cdi, /var/run/cdi) or env files name one GPU, or
    one part of it, the rule the planner and the root helper apply (``conflicts.one_gpu_one_hold``)."""
    specs, env_files = node_holds(host)
    found = one_gpu_one_hold(specs, env_files)
    if found:
        more = len(found) - 8
        return check("one-hold", ERROR, "; ".join(found[:8]) + (" (and %d more)" % more if more > 0 else ""))
    return check("one-hold", OK, "each GPU, or part of one, is held once (%d specs, %d env files)"
                 % (len(specs), len(env_files)))


def check_slices(host: Host) -> Check:
    why = host.slices_unavailable()
    if why:
        return check("slices", WARN, "holds with limits are refused: %s" % why)
    return check("slices", OK, "hold slices can be made")


def check_state(host: Host, state_dir: str) -> Check:
    state = NodeState(host.path(state_dir), state_dir)
    try:
        ledger = state.load(write=False).ledger
        pending = len(state.unacked())
        for read in (state.load_nodespec, state.last_pass, state.public_key):  # the other files root reads
            read()
    except (BcdError, OSError) as exc:
        return check("state", ERROR, "a state file cannot be used: %s" % exc)
    problems = state.warnings()
    if problems:
        return check("state", WARN, "; ".join(problems))
    last = ledger.last_state or "never run"
    level: Level = WARN if ledger.last_state == "PROGRESSING" else OK
    return check("state", level, "last pass %s; %d events not yet acknowledged" % (last, pending))


def installed_manifest() -> str:
    """The record of the role's install beside the library this code runs from (``<lib>/installed.json``: this
    file is ``<lib>/ansible_collections/bcd/devices/plugins/module_utils/entry/doctor/node.py``), a real path."""
    here = os.path.dirname(os.path.abspath(__file__))
    for _level in range(7):
        here = os.path.dirname(here)
    return os.path.join(here, "installed.json")


def check_install(manifest: str) -> Check:
    """Whether the node is still as the role's last full install recorded it (``node/library.install_refusal``,
    any digest): what the role's re-run checks before it skips its install tasks. A drift here is put right by the
    role's next run; until then the timers run what is there."""
    if not os.path.lexists(manifest):
        return check("install", OK, "no record of the role's install beside this library (%s): the role's next run "
                     "installs everything and records it" % manifest)
    if not os.access(manifest, os.R_OK):
        return check("install", OK, "the record of the role's install is root's to read (%s)" % manifest)
    why = library.install_refusal(manifest, None)
    if why is None:
        return check("install", OK, "as the role's last install recorded it")
    return check("install", WARN, "not as the role's last install recorded it: %s; %s (its next run installs "
                 "again wherever the record no longer stands)" % (why, RERUN))
