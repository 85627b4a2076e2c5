# -*- coding: utf-8 -*-
# Copyright: contributors to bcd.devices
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""The role's units as ``bcd-holds doctor`` checks them: there, readable, fired by their timers, and running
an existing ``bcd-holds converge --stored`` as an account that can work (``units``, ``timers``, ``passes``).

The units are read under the node's root (``node/unit_files.py``) and parsed (``domain/systemd_units.py``);
where systemd manages the node, what it says of the timers is checked too.
"""

from __future__ import annotations

import os
import pwd
import stat
from typing import TYPE_CHECKING, Dict, List, NamedTuple, Optional, Sequence, Set, Tuple

from ansible_collections.bcd.devices.plugins.module_utils.domain.systemd_units import (
    HELPER_UNIT,
    PASS_UNITS,
    ROLE_UNITS,
    TIMERS,
    UNIT_DIR,
    Command,
    Unit,
    parse_unit,
    pass_account,
    pass_command,
    timer_target,
)
from ansible_collections.bcd.devices.plugins.module_utils.entry.doctor.report import ERROR, OK, RERUN, WARN, Check, Level, check, worse
from ansible_collections.bcd.devices.plugins.module_utils.node.commands import run_tool
from ansible_collections.bcd.devices.plugins.module_utils.node.hosts import Host, RealHost
from ansible_collections.bcd.devices.plugins.module_utils.node.unit_files import (
    FILE,
    MASKED,
    MISSING,
    UnitFile,
    local_path,
    lstat_node,
    read_unit,
    stat_node,
)
from ansible_collections.bcd.devices.plugins.module_utils.state.store import DEFAULT_STATE_DIR

if TYPE_CHECKING:
    from ansible_collections.bcd.devices.plugins.module_utils.node.commands import TextRunCommand

SystemdStates = Dict[str, Dict[str, str]]  # unit -> {LoadState, ActiveState, UnitFileState} as systemd has it
Problem = Tuple[Level, str]  # what a check found, at its level

# what the role's timers are for, in the messages
EVERY: Dict[str, str] = {"bcd-holds-retry.timer": "retry of an unfinished pass every 30 s",
                         "bcd-holds-drift.timer": "drift pass every 10 minutes"}
TRIGGERS = ("OnActiveSec", "OnBootSec", "OnStartupSec", "OnUnitActiveSec", "OnUnitInactiveSec", "OnCalendar")


class RoleUnits:
    """The role's units under the node's root (``node/unit_files.py``), parsed (``domain/systemd_units.py``):
    ``files`` and ``units`` by name, ``installed`` when any is there, and how the timers' passes run:
    ``commands`` (``{pass unit: Command}`` of those that read as a pass), ``account`` (their ``User=``) and
    ``sockets`` (the ``--helper-socket`` node paths they name)."""

    def __init__(self, root: str) -> None:
        self.root = root
        # a unit directory that leads out of the root (a test node's /etc a link elsewhere) is not read at all
        self.unreadable = local_path(root, "%s/%s" % (UNIT_DIR, HELPER_UNIT))[1]
        self.files: Dict[str, UnitFile] = dict((name, read_unit(root, UNIT_DIR, name)) for name in ROLE_UNITS if not self.unreadable)
        self.installed = any(found.state != MISSING for found in self.files.values())
        self.units: Dict[str, Unit] = {}
        for name, found in self.files.items():
            if found.state == FILE:
                self.units[name] = parse_unit(found.texts, found.names)
        self.commands: Dict[str, Command] = {}
        self.problems: Dict[str, str] = {}
        for name in PASS_UNITS:
            if name in self.units:
                command, problem = pass_command(self.units[name])
                if command is not None:
                    self.commands[name] = command
                elif problem is not None:  # pass_command gives a command or why not
                    self.problems[name] = problem
        accounts = [pass_account(self.units[name]) for name in PASS_UNITS if name in self.commands]
        self.account: Optional[str] = accounts[0] if accounts else None
        self.sockets: List[str] = []
        for name in PASS_UNITS:
            socket = self.commands[name].last("--helper-socket") if name in self.commands else None
            if socket and socket not in self.sockets:
                self.sockets.append(socket)

    def unit(self, name: str) -> Tuple[UnitFile, Optional[Unit]]:
        """A unit by name, read when it is not one of the role's (a timer's ``Unit=`` may name any)."""
        if name not in self.files:
            self.files[name] = read_unit(self.root, UNIT_DIR, name)
            if self.files[name].state == FILE:
                self.units[name] = parse_unit(self.files[name].texts, self.files[name].names)
        return self.files[name], self.units.get(name)


class Account(NamedTuple):
    """An account of this machine as a unit's ``User=`` names it: its uid, its groups, and its name."""

    uid: int
    gids: Set[int]
    name: str


def account_of(name: str) -> Optional[Account]:
    """The account a ``User=`` value (a name or a uid) names, or None when there is no such account."""
    try:
        entry = pwd.getpwuid(int(name)) if name.isdigit() else pwd.getpwnam(name)
    except (KeyError, OverflowError, ValueError):
        return None
    try:
        gids = set(os.getgrouplist(entry.pw_name, entry.pw_gid))
    except OSError:
        gids = {entry.pw_gid}
    return Account(entry.pw_uid, gids, entry.pw_name)


def _owner(uid: int) -> str:
    try:
        return "uid %d (%s)" % (uid, pwd.getpwuid(uid).pw_name)
    except KeyError:
        return "uid %d" % uid


def _can_run(info: os.stat_result, uid: int, gids: Set[int]) -> bool:
    """Whether ``uid`` (in groups ``gids``) may read and execute a file of mode and owner ``info``."""
    mode = stat.S_IMODE(info.st_mode)
    if uid == 0:
        return bool(mode & 0o111)
    if info.st_uid == uid:
        return mode & 0o500 == 0o500
    if info.st_gid in gids:
        return mode & 0o050 == 0o050
    return mode & 0o005 == 0o005


def systemd_runner(host: Host) -> Optional[TextRunCommand]:
    """What runs ``systemctl`` where systemd runs this node's units (a real host at ``/`` booted with systemd),
    else None."""
    if isinstance(host, RealHost) and host.root == "/" and os.path.isdir("/run/systemd/system"):
        return host.runner
    return None


SHOWN = ("Id", "LoadState", "ActiveState", "UnitFileState")


def systemd_states(host: Host, names: Sequence[str]) -> Tuple[SystemdStates, Optional[str]]:
    """``({unit: {LoadState, ActiveState, UnitFileState}}, problem)`` as systemd has them now; ``({}, None)``
    where systemd does not manage the node's root (a test node, a container without it)."""
    runner = systemd_runner(host)
    if runner is None:
        return {}, None
    argv = ["systemctl", "show", "--property=" + ",".join(SHOWN), "--"] + list(names)
    rc, out, err = run_tool(runner, argv)
    if rc != 0:
        return {}, "systemctl show failed (rc %d): %s" % (rc, (err or out).strip()[:200])
    states: SystemdStates = {}
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


def check_units(role: RoleUnits) -> Check:
    """Whether the role's units are there, and how the timers' passes run; what of them cannot be read."""
    if role.unreadable:
        return check("units", WARN, "the units in %s cannot be read: %s" % (UNIT_DIR, role.unreadable))
    if not role.installed:
        return check("units", OK, "no units installed in %s (the role bcd.devices.bcd_holds installs them): no "
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
        return check("units", WARN, "%s; %s" % (summary, "; ".join(problems)))
    return check("units", OK, summary)


def check_timers(role: RoleUnits, states: Optional[SystemdStates] = None) -> Check:
    """Each of the role's timers is there, fires, and starts a pass unit; under systemd, it is active and enabled."""
    states = states or {}
    level: Level = OK
    problems: List[Problem] = []
    fine: List[str] = []
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
            level = worse(level, found_level)
        return check("timers", level, "; ".join(text for _level, text in problems))
    how = "active and enabled" if states else "systemd does not manage this root: whether they run is not checked"
    return check("timers", OK, "%s (%s)" % (", ".join(fine), how))


def _path_problems(host: Host, role: RoleUnits, account: Account) -> Tuple[List[Problem], List[str], List[str]]:
    """What keeps the pass units' program and state directory from working for ``account``."""
    problems: List[Problem] = []
    uid, gids, shown = account
    programs: List[str] = []
    state_dirs: List[str] = []
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


def check_passes(host: Host, role: RoleUnits, state_dir: str) -> Check:
    """The pass units run an existing bcd-holds converge --stored as an account that can work: through the
    helper when it is not root, on a state directory it owns."""
    problems: List[Problem] = []
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
    programs: List[str] = []
    state_dirs: List[str] = []
    shown = role.account
    if role.account is not None:
        account = account_of(role.account)
        if account is None:
            problems.append((ERROR, "the timers' passes run as User=%s, an account this machine does not have (%s: "
                                    "it creates it)" % (role.account, RERUN)))
        else:
            shown = account.name
            if account.uid != 0:
                for name in PASS_UNITS:
                    command = role.commands.get(name)
                    if command is not None and not command.last("--helper-socket"):
                        problems.append((ERROR, "%s runs as %s without --helper-socket: it cannot write /etc/cdi, so "
                                                "every new hold is refused with node-unprivileged (%s)"
                                         % (name, shown, RERUN)))
            path_problems, programs, state_dirs = _path_problems(host, role, account)
            problems.extend(path_problems)
    for used in state_dirs:
        if os.path.normpath(used) != os.path.normpath(state_dir):
            problems.append((WARN, "the timers' passes use --state-dir %s; this doctor read %s (give it "
                                   "--state-dir %s)" % (used, state_dir, used)))
    if problems:
        level: Level = OK
        for found_level, _text in problems:
            level = worse(level, found_level)
        texts = []
        for _level, text in problems:
            if text not in texts:
                texts.append(text)
        return check("passes", level, "; ".join(texts))
    return check("passes", OK, "%s run %s converge --stored as %s, in %s (%s's)"
                 % (" and ".join(PASS_UNITS), ", ".join(programs), shown, ", ".join(state_dirs), shown))
