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
checks every spec file the runtimes load (``domain/cdi/lint.py``).
"""

from __future__ import annotations

import errno
import grp
import os
import pwd
import stat
from typing import Dict, List

from ansible_collections.bcd.devices.plugins.module_utils.domain.cdi.hold_spec import SPEC_DIR, read_hold
from ansible_collections.bcd.devices.plugins.module_utils.domain.cdi.lint import lint
from ansible_collections.bcd.devices.plugins.module_utils.domain.cdi.runtimes import ceiling
from ansible_collections.bcd.devices.plugins.module_utils.domain.cdi.staleness import summary
from ansible_collections.bcd.devices.plugins.module_utils.domain.cdi.versions import version_key
from ansible_collections.bcd.devices.plugins.module_utils.domain.input.atoms import CLASS_MIG
from ansible_collections.bcd.devices.plugins.module_utils.domain.plan.conflicts import one_gpu_one_hold
from ansible_collections.bcd.devices.plugins.module_utils.domain.systemd_units import (
    DEFAULT_HELPER_SOCKET,
    HELPER_UNIT,
    PASS_UNITS,
    ROLE_UNITS,
    TIMERS,
    UNIT_DIR,
    helper_command,
    parse_unit,
    pass_account,
    pass_command,
    timer_target,
)
from ansible_collections.bcd.devices.plugins.module_utils.entry.helper.reading import node_holds
from ansible_collections.bcd.devices.plugins.module_utils.node import library
from ansible_collections.bcd.devices.plugins.module_utils.node.cdi_files import read_spec_dirs
from ansible_collections.bcd.devices.plugins.module_utils.node.commands import run_tool
from ansible_collections.bcd.devices.plugins.module_utils.node.helper_client import HelperClient
from ansible_collections.bcd.devices.plugins.module_utils.node.runtimes import cdi_enabled
from ansible_collections.bcd.devices.plugins.module_utils.node.unit_files import (
    FILE,
    MASKED,
    MISSING,
    local_path,
    lstat_node,
    read_unit,
    stat_node,
)
from ansible_collections.bcd.devices.plugins.module_utils.state.store import DEFAULT_STATE_DIR, NodeState
from ansible_collections.bcd.devices.plugins.module_utils.support.errors import BcdError
from ansible_collections.bcd.devices.plugins.module_utils.support.text import printable

OK, WARN, ERROR = "OK", "WARN", "ERROR"


def _check(name, level, message):
    return {"name": name, "level": level, "message": message}


HELPER_TIMEOUT = 5.0  # seconds a probe of the helper may take in all
# what the role's timers are for, in the messages
EVERY = {"bcd-holds-retry.timer": "retry of an unfinished pass every 30 s",
         "bcd-holds-drift.timer": "drift pass every 10 minutes"}
TRIGGERS = ("OnActiveSec", "OnBootSec", "OnStartupSec", "OnUnitActiveSec", "OnUnitInactiveSec", "OnCalendar")
RERUN = "rerun the role bcd.devices.bcd_holds"


class RoleUnits:
    """The role's units under the node's root (``node/unit_files.py``), parsed (``domain/systemd_units.py``):
    ``files`` and ``units`` by name, ``installed`` when any is there, and how the timers' passes run:
    ``commands`` (``{pass unit: Command}`` of those that read as a pass), ``account`` (their ``User=``) and
    ``sockets`` (the ``--helper-socket`` node paths they name)."""

    def __init__(self, root):
        self.root = root
        # a unit directory that leads out of the root (a test node's /etc a link elsewhere) is not read at all
        self.unreadable = local_path(root, "%s/%s" % (UNIT_DIR, HELPER_UNIT))[1]
        self.files = dict((name, read_unit(root, UNIT_DIR, name)) for name in ROLE_UNITS if not self.unreadable)
        self.installed = any(found.state != MISSING for found in self.files.values())
        self.units = {}
        for name, found in self.files.items():
            if found.state == FILE:
                self.units[name] = parse_unit(found.texts, found.names)
        self.commands, self.problems = {}, {}
        for name in PASS_UNITS:
            if name in self.units:
                command, problem = pass_command(self.units[name])
                if command is None:
                    self.problems[name] = problem
                else:
                    self.commands[name] = command
        accounts = [pass_account(self.units[name]) for name in PASS_UNITS if name in self.commands]
        self.account = accounts[0] if accounts else None
        self.sockets = []  # type: List[str]
        for name in PASS_UNITS:
            socket = self.commands[name].last("--helper-socket") if name in self.commands else None
            if socket and socket not in self.sockets:
                self.sockets.append(socket)

    def unit(self, name):
        """A unit by name, read when it is not one of the role's (a timer's ``Unit=`` may name any)."""
        if name not in self.files:
            self.files[name] = read_unit(self.root, UNIT_DIR, name)
            if self.files[name].state == FILE:
                self.units[name] = parse_unit(self.files[name].texts, self.files[name].names)
        return self.files[name], self.units.get(name)


def _account(name):
    """``(uid, gids, shown)`` of a ``User=`` value (a name or a uid), or None when there is no such account."""
    try:
        entry = pwd.getpwuid(int(name)) if name.isdigit() else pwd.getpwnam(name)
    except (KeyError, OverflowError, ValueError):
        return None
    try:
        gids = set(os.getgrouplist(entry.pw_name, entry.pw_gid))
    except OSError:
        gids = {entry.pw_gid}
    return entry.pw_uid, gids, entry.pw_name


def _owner(uid):
    try:
        return "uid %d (%s)" % (uid, pwd.getpwuid(uid).pw_name)
    except KeyError:
        return "uid %d" % uid


def _can_run(info, uid, gids):
    """Whether ``uid`` (in groups ``gids``) may read and execute a file of mode and owner ``info``."""
    mode = stat.S_IMODE(info.st_mode)
    if uid == 0:
        return bool(mode & 0o111)
    if info.st_uid == uid:
        return mode & 0o500 == 0o500
    if info.st_gid in gids:
        return mode & 0o050 == 0o050
    return mode & 0o005 == 0o005


def _systemd_manages(host):
    """Whether systemd runs this node's units: a real host at ``/`` booted with systemd."""
    return host.root == "/" and getattr(host, "runner", None) is not None and os.path.isdir("/run/systemd/system")


SHOWN = ("Id", "LoadState", "ActiveState", "UnitFileState")


def systemd_states(host, names):
    """``({unit: {LoadState, ActiveState, UnitFileState}}, problem)`` as systemd has them now; ``({}, None)``
    where systemd does not manage the node's root (a test node, a container without it)."""
    if not _systemd_manages(host):
        return {}, None
    argv = ["systemctl", "show", "--property=" + ",".join(SHOWN), "--"] + list(names)
    rc, out, err = run_tool(host.runner, argv)
    if rc != 0:
        return {}, "systemctl show failed (rc %d): %s" % (rc, (err or out).strip()[:200])
    states: Dict[str, Dict[str, str]] = {}
    current: Dict[str, str] = {}
    for line in out[:65536].splitlines() + [""]:
        if not line.strip():
            if current.get("Id"):
                states[current["Id"]] = current
            current = {}
            continue
        key, _equals, value = line.partition("=")
        current[key.strip()] = value.strip()
    return states, None


def _helper_remedy(role, restart=False):
    if role.installed and role.files[HELPER_UNIT].state != MISSING:
        return ("systemctl %s %s (journalctl -u %s says why it stopped)"
                % ("restart" if restart else "start", HELPER_UNIT, HELPER_UNIT))
    return "start the root helper (bcd-holds helper, as root)"


def _probe(path, role, whose):
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


def _helper_unit_problems(role, node_socket):
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
        known = _account(account)
        users = command.options.get("--allow-user", [])
        groups = command.options.get("--allow-group", [])
        allowed = account in users or (known is not None and (str(known[0]) in users or known[2] in users))
        if not allowed and known is not None:
            for group in groups:
                try:
                    gid = int(group) if group.isdigit() else grp.getgrnam(group).gr_gid
                except (KeyError, ValueError):
                    continue
                allowed = allowed or gid in known[1]
        if not allowed:
            problems.append("%s serves root%s, not %s, the account the timers' passes run as (%s: --allow-user %s)"
                            % (HELPER_UNIT, "".join(", " + who for who in users + ["group " + g for g in groups]),
                               account, RERUN, account))
    return problems


def check_helper(host, helper_socket, role, states=None):
    """The root helper the passes use answers: the one given (``--helper-socket``, a real path) and the one
    the role's units name (a node path, under the node's root); and the helper unit serves the latter."""
    states = states or {}
    checked = []  # (real path, whose)
    if helper_socket:
        checked.append((helper_socket, ""))
    node_socket = role.sockets[0] if role.sockets else None
    for socket in role.sockets:
        path, problem = local_path(host.root, socket)
        if problem:
            return _check("helper", ERROR, "the timers' passes use the root helper at %s: %s" % (socket, problem))
        if all(os.path.abspath(path) != os.path.abspath(given) for given, _whose in checked):
            checked.append((path, " (the units' --helper-socket)"))
    if not checked:
        if role.installed and role.commands and role.account == "root":
            return _check("helper", OK, "the timers' passes run as root (no --helper-socket): no root helper needed")
        return _check("helper", OK, "no root helper configured (passes must run as root)")
    level, messages = OK, []
    for path, whose in checked:
        found_level, message = _probe(path, role, whose)
        level = _worse(level, found_level)
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
    return _check("helper", level, "; ".join(messages))


def _worse(one, other):
    order = (OK, WARN, ERROR)
    return one if order.index(one) >= order.index(other) else other


def check_privilege(host, inventory, helper_socket):
    if os.geteuid() == 0:
        return _check("gpu-binding", OK, "passes run as root")
    if helper_socket:
        why = HelperClient(helper_socket, timeout=HELPER_TIMEOUT).reachable()
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


def check_units(role):
    """Whether the role's units are there, and how the timers' passes run; what of them cannot be read."""
    if role.unreadable:
        return _check("units", WARN, "the units in %s cannot be read: %s" % (UNIT_DIR, role.unreadable))
    if not role.installed:
        return _check("units", OK, "no units installed in %s (the role bcd.devices.bcd_holds installs them): no "
                                   "timer runs passes; they run when a playbook or bcd-holds converge does" % UNIT_DIR)
    there = [name for name in ROLE_UNITS if role.files[name].state != MISSING]
    problems = []
    for name in there:
        found = role.files[name]
        if found.state not in (FILE, MASKED) and name not in PASS_UNITS and name not in TIMERS and name != HELPER_UNIT:
            problems.append("%s %s" % (found.node_path, found.problem))
        elif found.state == MASKED and name not in PASS_UNITS and name not in TIMERS and name != HELPER_UNIT:
            problems.append("%s is masked (systemctl unmask %s)" % (name, name))
        problems.extend(found.problems)
        if name in role.units:
            problems.extend(role.units[name].problems[:4])
    if role.commands:
        how = "as %s" % role.account + (" through the root helper at %s" % ", ".join(role.sockets) if role.sockets
                                        else "")
        summary = "%s in %s: the timers' passes run %s" % (", ".join(there), UNIT_DIR, how)
    else:
        summary = "%s in %s: how the timers' passes run cannot be read (see passes)" % (", ".join(there), UNIT_DIR)
    if problems:
        return _check("units", WARN, "%s; %s" % (summary, "; ".join(problems)))
    return _check("units", OK, summary)


def check_timers(role, states=None):
    """Each of the role's timers is there, fires, and starts a pass unit; under systemd, it is active and enabled."""
    states = states or {}
    level, problems, fine = OK, [], []
    for timer in sorted(TIMERS, reverse=True):  # the retry timer, then the drift timer
        found = role.files[timer]
        if found.state == MISSING:
            problems.append((ERROR, "%s is missing: no %s (%s)" % (timer, EVERY[timer], RERUN)))
            continue
        if found.state == MASKED:
            problems.append((ERROR, "%s is masked: no %s (systemctl unmask %s; systemctl start %s)"
                             % (timer, EVERY[timer], timer, timer)))
            continue
        if found.state != FILE:
            problems.append((ERROR, "%s %s" % (found.node_path, found.problem)))
            continue
        unit = role.units[timer]
        if not any(unit.values("Timer", key) for key in TRIGGERS):
            problems.append((ERROR, "%s has no %s setting: it never fires (%s)" % (timer, "/".join(TRIGGERS), RERUN)))
            continue
        target = timer_target(timer, unit)
        target_file, target_unit = role.unit(target)
        if target_file.state == MISSING:
            problems.append((ERROR, "%s starts %s, which does not exist (%s)" % (timer, target, RERUN)))
            continue
        if target_file.state == MASKED:
            problems.append((ERROR, "%s starts %s, which is masked (systemctl unmask %s)" % (timer, target, target)))
            continue
        if target_unit is None:
            problems.append((ERROR, "%s starts %s, which cannot be read: %s" % (timer, target, target_file.problem)))
            continue
        if target not in PASS_UNITS:
            command, problem = pass_command(target_unit)
            if command is None:
                problems.append((ERROR, "%s starts %s, which is no pass: it %s (%s)" % (timer, target, problem, RERUN)))
                continue
        if target != TIMERS[timer]:
            problems.append((WARN, "%s starts %s; the role's starts %s (%s)" % (timer, target, TIMERS[timer], RERUN)))
        state = states.get(timer)
        if state:
            if state.get("LoadState") not in (None, "loaded"):
                problems.append((ERROR, "systemd has %s %s (systemctl daemon-reload)" % (
                    timer, "not loaded" if state.get("LoadState") == "not-found" else state.get("LoadState"))))
                continue
            if state.get("ActiveState") != "active":
                problems.append((ERROR, "%s is %s: no %s (systemctl enable --now %s)"
                                 % (timer, state.get("ActiveState") or "inactive", EVERY[timer], timer)))
                continue
            if state.get("UnitFileState") not in ("enabled", "enabled-runtime", "static"):
                problems.append((WARN, "%s is %s: it stops at the next reboot (systemctl enable %s)"
                                 % (timer, state.get("UnitFileState") or "not enabled", timer)))
        fine.append("%s starts %s" % (timer, target))
    if problems:
        for found_level, _text in problems:
            level = _worse(level, found_level)
        return _check("timers", level, "; ".join(text for _level, text in problems))
    how = "active and enabled" if states else "systemd does not manage this root: whether they run is not checked"
    return _check("timers", OK, "%s (%s)" % (", ".join(fine), how))


def _path_problems(host, role, account):
    """What keeps the pass units' program and state directory from working for ``account``."""
    problems = []  # (level, text)
    uid, gids, shown = account
    programs, state_dirs = [], []
    for name in PASS_UNITS:
        command = role.commands.get(name)
        if command is None:
            continue
        if command.program not in programs:
            programs.append(command.program)
        state_dir = command.last("--state-dir", DEFAULT_STATE_DIR)
        if state_dir not in state_dirs:
            state_dirs.append(state_dir)
    for program in programs:
        if not program.startswith("/"):
            problems.append((ERROR, "ExecStart runs %s, not an absolute path (%s)" % (program, RERUN)))
            continue
        info, problem = stat_node(host.root, program)
        if problem:
            problems.append((ERROR, problem))
        elif info is None:
            problems.append((ERROR, "ExecStart runs %s, which does not exist (%s)" % (program, RERUN)))
        elif not stat.S_ISREG(info.st_mode):
            problems.append((ERROR, "ExecStart runs %s, which is not a regular file (%s)" % (program, RERUN)))
        elif not _can_run(info, uid, gids):
            problems.append((ERROR, "%s cannot run %s (mode %04o, owned by %s): chmod 0755 %s" % (
                shown, program, stat.S_IMODE(info.st_mode), _owner(info.st_uid), program)))
    for state_dir in state_dirs:
        info, _path, problem = lstat_node(host.root, state_dir)
        if problem:
            problems.append((ERROR, "the state directory %s" % problem))
        elif info is None:
            problems.append((ERROR, "the state directory %s does not exist (%s: it makes it %s's, 0700)"
                             % (state_dir, RERUN, shown)))
        elif stat.S_ISLNK(info.st_mode):
            problems.append((ERROR, "the state directory %s is a symbolic link: bcd-holds refuses it (make it a "
                                    "directory, or %s)" % (state_dir, RERUN)))
        elif not stat.S_ISDIR(info.st_mode):
            problems.append((ERROR, "the state directory %s is not a directory (%s)" % (state_dir, RERUN)))
        elif info.st_uid != uid:
            problems.append((ERROR, "the state directory %s belongs to %s, not %s, the account the timers' passes "
                                    "run as: they cannot write it (chown %s: %s, or %s)"
                             % (state_dir, _owner(info.st_uid), shown, shown, state_dir, RERUN)))
        elif stat.S_IMODE(info.st_mode) & 0o700 != 0o700:
            problems.append((ERROR, "the state directory %s is mode %04o: %s cannot write it (chmod 0700 %s)"
                             % (state_dir, stat.S_IMODE(info.st_mode), shown, state_dir)))
        elif stat.S_IMODE(info.st_mode) & 0o022:
            problems.append((WARN, "the state directory %s is mode %04o: others can write it (chmod 0700 %s)"
                             % (state_dir, stat.S_IMODE(info.st_mode), state_dir)))
    return problems, programs, state_dirs


def check_passes(host, role, state_dir):
    """The pass units run an existing bcd-holds converge --stored as an account that can work: through the
    helper when it is not root, on a state directory it owns."""
    problems = []  # (level, text)
    for name in PASS_UNITS:
        found = role.files[name]
        if found.state == MISSING:
            problems.append((ERROR, "%s is missing: %s (%s)" % (
                name, "nothing runs a pass at boot or from the drift timer" if name == PASS_UNITS[0]
                else "nothing retries an unfinished pass", RERUN)))
        elif found.state == MASKED:
            problems.append((ERROR, "%s is masked: its passes never run (systemctl unmask %s)" % (name, name)))
        elif found.state != FILE:
            problems.append((ERROR, "%s %s" % (found.node_path, found.problem)))
        elif name in role.problems:
            problems.append((ERROR, "%s %s (%s)" % (name, role.problems[name], RERUN)))
    accounts = sorted(set(pass_account(role.units[name]) for name in role.commands))
    if len(accounts) > 1:
        problems.append((WARN, "the pass units run as different accounts (%s); the role runs both as one"
                         % ", ".join(accounts)))
    if len(role.sockets) > 1:
        problems.append((ERROR, "the pass units use different helper sockets (%s) (%s)"
                         % (", ".join(role.sockets), RERUN)))
    programs, state_dirs, shown = [], [], role.account
    if role.account is not None:
        account = _account(role.account)
        if account is None:
            problems.append((ERROR, "the timers' passes run as User=%s, an account this machine does not have (%s: "
                                    "it creates it)" % (role.account, RERUN)))
        else:
            shown = account[2]
            if account[0] != 0:
                for name in PASS_UNITS:
                    command = role.commands.get(name)
                    if command is not None and not command.last("--helper-socket"):
                        problems.append((ERROR, "%s runs as %s without --helper-socket: it cannot write /etc/cdi, so "
                                                "every new hold is refused with node-unprivileged (%s)"
                                         % (name, shown, RERUN)))
            found, programs, state_dirs = _path_problems(host, role, account)
            problems.extend(found)
    for used in state_dirs:
        if os.path.normpath(used) != os.path.normpath(state_dir):
            problems.append((WARN, "the timers' passes use --state-dir %s; this doctor read %s (give it "
                                   "--state-dir %s)" % (used, state_dir, used)))
    if problems:
        level = OK
        for found_level, _text in problems:
            level = _worse(level, found_level)
        texts = []
        for _level, text in problems:
            if text not in texts:
                texts.append(text)
        return _check("passes", level, "; ".join(texts))
    return _check("passes", OK, "%s run %s converge --stored as %s, in %s (%s's)"
                  % (" and ".join(PASS_UNITS), ", ".join(programs), shown, ", ".join(state_dirs), shown))


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
    """Every spec file the runtimes load, as they would load it (see ``domain/cdi/lint.py``)."""
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


def check_one_hold(host):
    """One GPU, one hold: no two allocations' specs (/etc/cdi, /var/run/cdi) or env files name one GPU, or
    one part of it, the rule the planner and the root helper apply (``conflicts.one_gpu_one_hold``)."""
    specs, env_files = node_holds(host)
    found = one_gpu_one_hold(specs, env_files)
    if found:
        more = len(found) - 8
        return _check("one-hold", ERROR, "; ".join(found[:8]) + (" (and %d more)" % more if more > 0 else ""))
    return _check("one-hold", OK, "each GPU, or part of one, is held once (%d specs, %d env files)"
                  % (len(specs), len(env_files)))


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


def installed_manifest():
    """The record of the role's install beside the library this code runs from (``<lib>/installed.json``: this
    file is ``<lib>/ansible_collections/bcd/devices/plugins/module_utils/entry/doctor.py``), a real path."""
    here = os.path.dirname(os.path.abspath(__file__))
    for _level in range(6):
        here = os.path.dirname(here)
    return os.path.join(here, "installed.json")


def check_install(manifest):
    """Whether the node is still as the role's last full install recorded it (``node/library.install_refusal``,
    any digest): what the role's re-run checks before it skips its install tasks. A drift here is put right by the
    role's next run; until then the timers run what is there."""
    if not os.path.lexists(manifest):
        return _check("install", OK, "no record of the role's install beside this library (%s): the role's next run "
                      "installs everything and records it" % manifest)
    if not os.access(manifest, os.R_OK):
        return _check("install", OK, "the record of the role's install is root's to read (%s)" % manifest)
    why = library.install_refusal(manifest, None)
    if why is None:
        return _check("install", OK, "as the role's last install recorded it")
    return _check("install", WARN, "not as the role's last install recorded it: %s; %s (its next run installs "
                  "again wherever the record no longer stands)" % (why, RERUN))


def run_checks(host, state_dir=DEFAULT_STATE_DIR, helper_socket=None, runtimes=None):
    """Every check, in order. ``runtimes``: ``(runtimes, warnings)`` as a pass sees them (found when None)."""
    inventory = host.inventory()
    vendor = host.vendor_spec()
    runtimes, runtime_warnings = runtimes if runtimes is not None else host.cdi_runtimes()
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
            timers = _check("timers", _worse(timers["level"], WARN), "%s; %s" % (timers["message"], systemd_problem))
        checks += [timers, check_passes(host, role, state_dir), check_install(installed_manifest())]
    return checks + [
        check_inventory(inventory),
        check_vendor_spec(vendor, inventory),
        check_cdi_runtimes(host, runtimes, runtime_warnings, vendor),
        check_cdi_lint(host),
        check_holds(host, inventory),
        check_one_hold(host),
        check_slices(host),
        check_state(host, state_dir),
    ]


def doctor_lines(checks):
    """What ``bcd-holds doctor`` prints: one line per check, its level, name and message. A message quotes
    what the node has (spec files and their annotations, runtimes' versions, state files, hold ids):
    escaped (``support/text.py``), one line each, never terminal control."""
    return ["%-7s %-14s %s" % (printable(check["level"]), printable(check["name"]), printable(check["message"]))
            for check in checks]
