# -*- coding: utf-8 -*-
# Copyright: contributors to bcd.devices
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""The root helper as ``bcd-holds doctor`` checks it: whether the passes run with root's rights (``gpu-binding``:
a GPU host whose passes would be unprivileged refuses every hold with ``node-unprivileged``), and whether the
helper they use answers and its unit serves them (``helper``).
"""

from __future__ import annotations

import errno
import grp
import os
from typing import TYPE_CHECKING, List, Optional, Tuple

from ansible_collections.bcd.devices.plugins.module_utils.domain.systemd_units import DEFAULT_HELPER_SOCKET, HELPER_UNIT, helper_command
from ansible_collections.bcd.devices.plugins.module_utils.entry.doctor.report import ERROR, OK, RERUN, WARN, Check, Level, check, worse
from ansible_collections.bcd.devices.plugins.module_utils.entry.doctor.units import RoleUnits, SystemdStates, account_of
from ansible_collections.bcd.devices.plugins.module_utils.node.helper_client import HelperClient
from ansible_collections.bcd.devices.plugins.module_utils.node.unit_files import FILE, MASKED, MISSING, local_path

if TYPE_CHECKING:
    from ansible_collections.bcd.devices.plugins.module_utils.domain.inventory_model import Inventory
    from ansible_collections.bcd.devices.plugins.module_utils.node.hosts import Host

HELPER_TIMEOUT = 5.0  # seconds a probe of the helper may take in all


def _helper_remedy(role: RoleUnits, restart: bool = False) -> str:
    if role.installed and role.files[HELPER_UNIT].state != MISSING:
        return ("systemctl %s %s (journalctl -u %s says why it stopped)"
                % ("restart" if restart else "start", HELPER_UNIT, HELPER_UNIT))
    return "start the root helper (bcd-holds helper, as root)"


def _probe(path: str, role: RoleUnits, whose: str) -> Tuple[Level, str]:
    """``(level, message)`` of the helper at the real path ``path`` (``whose``: which passes use it)."""
    found = HelperClient(path, timeout=HELPER_TIMEOUT).probe()
    at = "the root helper at %s%s" % (path, whose)
    if found.answer is not None:
        error = str(found.answer.get("error") or "")
        if "may not use this helper" in error:
            return OK, "%s answers (it does not serve uid %d, which ran doctor)" % (at, os.geteuid())
        if error.startswith("busy"):
            return OK, "%s answers (busy now: %s)" % (at, error)
        return OK, "%s answers" % at
    if found.timed_out:
        return ERROR, "%s does not answer (nothing within %gs: stuck or overloaded): %s" % (
            at, HELPER_TIMEOUT, _helper_remedy(role, restart=True))
    if found.errno in (errno.EACCES, errno.EPERM):
        return WARN, ("%s cannot be opened by uid %d (permission denied), so whether it answers is not known: run "
                      "doctor as root, or as the account the passes run as" % (at, os.geteuid()))
    if found.errno == errno.ENOENT:
        reason = "no such socket: no helper listens there"
    elif found.errno == errno.ECONNREFUSED:
        reason = "connection refused: the socket is left, no helper listens on it"
    elif found.error is not None:
        reason = str(found.error)
    else:
        reason = "it hung up without an answer"
    return ERROR, "%s does not answer (%s): %s" % (at, reason, _helper_remedy(role))


def _helper_unit_problems(role: RoleUnits, node_socket: str) -> List[str]:
    """What keeps ``bcd-holds-helper.service`` from serving the passes at ``node_socket``."""
    found = role.files[HELPER_UNIT]
    if found.state == MISSING:
        return ["the timers' passes use the root helper at %s but %s is missing: nothing starts it at boot (%s)"
                % (node_socket, HELPER_UNIT, RERUN)]
    if found.state == MASKED:
        return ["%s is masked: systemd will not start it (systemctl unmask %s)" % (HELPER_UNIT, HELPER_UNIT)]
    if found.state != FILE:
        return ["%s %s" % (found.node_path, found.problem)]
    command, problem = helper_command(role.units[HELPER_UNIT])
    if command is None:
        return ["%s %s (%s)" % (HELPER_UNIT, problem, RERUN)]
    problems = []
    listens = command.last("--socket", DEFAULT_HELPER_SOCKET)
    if os.path.normpath(listens) != os.path.normpath(node_socket):
        problems.append("%s listens on %s, the timers' passes use %s (%s)" % (HELPER_UNIT, listens, node_socket, RERUN))
    account = role.account
    if account and account != "root":
        known = account_of(account)
        users = command.options.get("--allow-user", [])
        groups = command.options.get("--allow-group", [])
        allowed = account in users or (known is not None and (str(known.uid) in users or known.name in users))
        if not allowed and known is not None:
            for group in groups:
                try:
                    gid = int(group) if group.isdigit() else grp.getgrnam(group).gr_gid
                except (KeyError, ValueError):
                    continue
                allowed = allowed or gid in known.gids
        if not allowed:
            problems.append("%s serves root%s, not %s, the account the timers' passes run as (%s: --allow-user %s)"
                            % (HELPER_UNIT, "".join(", " + who for who in users + ["group " + g for g in groups]),
                               account, RERUN, account))
    return problems


def check_helper(host: Host, helper_socket: Optional[str], role: RoleUnits,
                 states: Optional[SystemdStates] = None) -> Check:
    """The root helper the passes use answers: the one given (``--helper-socket``, a real path) and the one
    the role's units name (a node path, under the node's root); and the helper unit serves the latter."""
    states = states or {}
    checked: List[Tuple[str, str]] = []  # (real path, whose)
    if helper_socket:
        checked.append((helper_socket, ""))
    node_socket = role.sockets[0] if role.sockets else None
    for socket in role.sockets:
        path, problem = local_path(host.root, socket)
        if path is None:  # local_path gives a path or a problem
            return check("helper", ERROR, "the timers' passes use the root helper at %s: %s" % (socket, problem))
        if all(os.path.abspath(path) != os.path.abspath(given) for given, _whose in checked):
            checked.append((path, " (the units' --helper-socket)"))
    if not checked:
        if role.installed and role.commands and role.account == "root":
            return check("helper", OK, "the timers' passes run as root (no --helper-socket): no root helper needed")
        return check("helper", OK, "no root helper configured (passes must run as root)")
    level: Level = OK
    messages: List[str] = []
    for path, whose in checked:
        found_level, message = _probe(path, role, whose)
        level = worse(level, found_level)
        messages.append(message)
    if node_socket:
        problems = _helper_unit_problems(role, node_socket)
        state = states.get(HELPER_UNIT)
        if state and not problems and state.get("UnitFileState") not in ("enabled", "static", "enabled-runtime"):
            problems.append("%s is %s: it is not started at boot (systemctl enable %s)"
                            % (HELPER_UNIT, state.get("UnitFileState") or "not enabled", HELPER_UNIT))
        if problems:
            level = ERROR
            messages.extend(problems)
    return check("helper", level, "; ".join(messages))


def check_privilege(host: Host, inventory: Inventory, helper_socket: Optional[str]) -> Check:
    if os.geteuid() == 0:
        return check("gpu-binding", OK, "passes run as root")
    if helper_socket:
        why = HelperClient(helper_socket, timeout=HELPER_TIMEOUT).reachable()
        if why is None:
            return check("gpu-binding", OK, "passes run unprivileged through the root helper at %s" % helper_socket)
        if inventory.gpus:
            return check("gpu-binding", WARN, "passes would be unprivileged: %s; every hold is refused with "
                                              "node-unprivileged" % why)
        return check("gpu-binding", OK, "no GPUs; the root helper is unreachable: %s" % why)
    if inventory.gpus:
        return check("gpu-binding", WARN, "this GPU host's passes run without root and without the root helper: "
                                          "every hold is refused with node-unprivileged (run bcd-holds as root, or "
                                          "beside bcd-holds helper)")
    return check("gpu-binding", OK, "no GPUs; nothing to bind")
