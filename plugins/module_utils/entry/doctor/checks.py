# -*- coding: utf-8 -*-
# Copyright: contributors to bcd.devices
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""``bcd-holds doctor``: what would keep this node from binding holds, checked, in the order it prints them:
the root helper (``root_helper``), the role's units and the passes they run (``units``), then the node itself
(``node``). Each check is a ``report.Check``.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, List, Optional, Tuple

from ansible_collections.bcd.devices.plugins.module_utils.domain.systemd_units import HELPER_UNIT, TIMERS
from ansible_collections.bcd.devices.plugins.module_utils.entry.doctor.node import (
    check_cdi_lint,
    check_cdi_runtimes,
    check_holds,
    check_install,
    check_inventory,
    check_one_hold,
    check_slices,
    check_state,
    check_vendor_spec,
    installed_manifest,
)
from ansible_collections.bcd.devices.plugins.module_utils.entry.doctor.report import WARN, Check, check, worse
from ansible_collections.bcd.devices.plugins.module_utils.entry.doctor.root_helper import check_helper, check_privilege
from ansible_collections.bcd.devices.plugins.module_utils.entry.doctor.units import RoleUnits, check_passes, check_timers, check_units, systemd_states
from ansible_collections.bcd.devices.plugins.module_utils.node.unit_files import local_path
from ansible_collections.bcd.devices.plugins.module_utils.state.store import DEFAULT_STATE_DIR

if TYPE_CHECKING:
    from ansible_collections.bcd.devices.plugins.module_utils.domain.cdi.runtimes import Runtime
    from ansible_collections.bcd.devices.plugins.module_utils.node.hosts import Host


def run_checks(host: Host, state_dir: str = DEFAULT_STATE_DIR, helper_socket: Optional[str] = None,
               runtimes: Optional[Tuple[List[Runtime], List[str]]] = None) -> List[Check]:
    """Every check, in order. ``runtimes``: ``(runtimes, warnings)`` as a pass sees them (found when None)."""
    inventory = host.inventory()
    vendor = host.vendor_spec()
    found, runtime_warnings = runtimes if runtimes is not None else host.cdi_runtimes()
    role = RoleUnits(host.root)
    states, systemd_problem = systemd_states(host, sorted(TIMERS) + [HELPER_UNIT]) if role.installed else ({}, None)
    passes_socket = helper_socket
    if not passes_socket and role.sockets:  # an ordinary user's passes would use the helper the units use
        passes_socket = local_path(host.root, role.sockets[0])[0]
    checks = [check_privilege(host, inventory, passes_socket), check_helper(host, helper_socket, role, states),
              check_units(role)]
    if role.installed:
        timers = check_timers(role, states)
        if systemd_problem:
            timers = check("timers", worse(timers["level"], WARN), "%s; %s" % (timers["message"], systemd_problem))
        checks += [timers, check_passes(host, role, state_dir), check_install(installed_manifest())]
    return checks + [
        check_inventory(inventory),
        check_vendor_spec(vendor, inventory),
        check_cdi_runtimes(host, found, runtime_warnings, vendor),
        check_cdi_lint(host),
        check_holds(host, inventory),
        check_one_hold(host),
        check_slices(host),
        check_state(host, state_dir),
    ]
