# -*- coding: utf-8 -*-
# Copyright: contributors to bcd.devices
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""The role's systemd units as ``bcd-holds doctor`` reads them: which passes the timers start, as
which account, with which command line. Parsing only; ``node/unit_files.py`` reads the files.

The role (``roles/bcd_holds``) writes ``ROLE_UNITS`` into ``/etc/systemd/system``: the pass units
(``PASS_UNITS``) run ``bcd-holds converge --stored`` as ``User=`` (the ``bcd`` account beside the
root helper, else root), with ``--helper-socket`` when they go through the helper; each timer of
``TIMERS`` starts one of them (``Unit=``).

The syntax is systemd's, as far as these units and an operator's drop-in (``systemctl edit``) use
it: ``[Section]`` headers, ``Key=Value`` lines, ``#`` and ``;`` comments, a trailing backslash
continuing a line, a later assignment overriding an earlier one (drop-ins after the unit), and an
empty assignment clearing a list setting (``ExecStart=``). An ``ExecStart`` line's prefixes
(``-@:+!``) are dropped and its words split as systemd splits them (quotes, backslash escapes);
specifiers (``%i``) and variables (``$X``) are left as written. Everything here is bounded by what
``node/unit_files.py`` reads (a few KiB a unit).
"""

from __future__ import annotations

import shlex
from typing import Dict, Iterator, List, Optional, Sequence, Tuple, Union, overload

UNIT_DIR = "/etc/systemd/system"
HELPER_UNIT = "bcd-holds-helper.service"
CONVERGE_UNIT = "bcd-holds-converge.service"
RETRY_UNIT = "bcd-holds-retry.service"
RETRY_TIMER = "bcd-holds-retry.timer"
DRIFT_TIMER = "bcd-holds-drift.timer"
PASS_UNITS = (CONVERGE_UNIT, RETRY_UNIT)
# timer -> the pass unit the role's timer starts
TIMERS = {RETRY_TIMER: RETRY_UNIT, DRIFT_TIMER: CONVERGE_UNIT}
# every unit the role may write (roles/bcd_holds/vars/main.yml, __bcd_holds_units): any of them there
# means the role installed the node side
# the node's own delivery (bcd-holds deliver) is installed only with bcd_holds_gateway_url, so its three may be missing
DELIVER_UNITS = ("bcd-holds-deliver.service", "bcd-holds-deliver.timer", "bcd-holds-deliver.path")
ROLE_UNITS = (HELPER_UNIT, CONVERGE_UNIT, RETRY_UNIT, RETRY_TIMER, DRIFT_TIMER, "bcd-holds-vendor-spec.path",
              "bcd-holds-metrics.service", "bcd-holds-mig-layout.service") + DELIVER_UNITS
PROGRAM = "bcd-holds"
DEFAULT_HELPER_SOCKET = "/run/bcd/helper.sock"  # bcd-holds helper's --socket default (entry/cli.py's)
# the options of bcd-holds that take a value (the rest are flags)
VALUED = ("--root", "--fakehw", "--state-dir", "--spec", "--helper-socket", "--lock-timeout", "--textfile",
          "--ack-through", "--socket", "--allow-user", "--allow-group", "--config")
EXEC_PREFIXES = "-@:+!|"
MAX_LINE = 4096  # characters of one setting kept (a unit line past it is not the role's)


class Unit:
    """One unit's settings, its file and then its drop-ins: ``{section: [(key, value), ...]}`` in order,
    and the lines that are not settings (``problems``)."""

    def __init__(self) -> None:
        self.settings: Dict[str, List[Tuple[str, str]]] = {}
        self.problems: List[str] = []

    def values(self, section: str, key: str) -> List[str]:
        """Every value of ``key`` in ``section``, an empty assignment clearing those before it."""
        found: List[str] = []
        for name, value in self.settings.get(section, []):
            if name == key:
                found = [] if value == "" else found + [value]
        return found

    @overload
    def last(self, section: str, key: str) -> Optional[str]: ...

    @overload
    def last(self, section: str, key: str, default: str) -> str: ...

    def last(self, section: str, key: str, default: Optional[str] = None) -> Optional[str]:
        """The value ``key`` has in ``section`` (the last assignment wins), or ``default``."""
        found = self.values(section, key)
        return found[-1] if found else default


def parse_unit(texts: Sequence[str], where: Sequence[str] = ()) -> Unit:
    """A ``Unit`` from the unit file's text and its drop-ins' (``texts``, in the order systemd reads them;
    ``where``: their names, for the problems)."""
    unit = Unit()
    for index, text in enumerate(texts):
        name = where[index] if index < len(where) else "unit"
        section: Optional[str] = None
        for number, line in _logical_lines(text):
            if line.startswith("[") and line.endswith("]"):
                section = line[1:-1].strip()
                continue
            if "=" not in line or section is None:
                unit.problems.append("%s line %d is not a setting: %s" % (name, number, line[:80]))
                continue
            key, value = line.split("=", 1)
            unit.settings.setdefault(section, []).append((key.strip(), value.strip()[:MAX_LINE]))
    return unit


def _logical_lines(text: str) -> Iterator[Tuple[int, str]]:
    """``(first line number, line)`` of each non-empty, non-comment line, continuations joined."""
    pending: Optional[str] = None
    start = 0
    for number, raw in enumerate(text.splitlines(), 1):
        line = raw.strip()
        if pending is None:
            if not line or line[0] in "#;":
                continue
            start = number
        elif line and line[0] in "#;":  # a comment inside a continued line is skipped (systemd 230 on)
            continue
        if line.endswith("\\"):
            pending = (pending or "") + line[:-1] + " "
            continue
        line = (pending or "") + line
        pending = None
        yield start, line.strip()
    if pending is not None and pending.strip():
        yield start, pending.strip()


def exec_words(value: str) -> List[str]:
    """The words of an ``ExecStart=`` value, its prefixes dropped; ``ValueError`` when they cannot be
    split (an unclosed quote)."""
    command = value.lstrip(EXEC_PREFIXES)
    return shlex.split(command, comments=False, posix=True)


class Command:
    """A ``bcd-holds`` command line: the program as written (an absolute node path, or not), its
    subcommand, and its options (``{"--state-dir": [value, ...]}``; flags map to ``[""]``)."""

    def __init__(self, program: str, subcommand: Optional[str], options: Dict[str, List[str]], words: List[str]) -> None:
        self.program = program
        self.subcommand = subcommand
        self.options = options
        self.words = words

    @overload
    def last(self, option: str) -> Optional[str]: ...

    @overload
    def last(self, option: str, default: str) -> str: ...

    def last(self, option: str, default: Optional[str] = None) -> Optional[str]:
        values = self.options.get(option)
        return values[-1] if values else default

    def has(self, option: str) -> bool:
        return option in self.options


def bcd_command(words: List[str]) -> Optional[Command]:
    """The ``Command`` of ``words`` when one of them runs ``bcd-holds`` (the program itself, or the script
    an interpreter such as ``python3 -I`` is given), else None."""
    found = [index for index, word in enumerate(words) if word.rsplit("/", 1)[-1] == PROGRAM]
    if not found:
        return None
    index = found[0]
    subcommand: Optional[str] = None
    options: Dict[str, List[str]] = {}
    rest: List[str] = words[index + 1:]
    position = 0
    while position < len(rest):
        word = rest[position]
        position += 1
        if word.startswith("--"):
            name, equals, value = word.partition("=")
            if name in VALUED and not equals:
                value = rest[position] if position < len(rest) else ""
                position += 1
            options.setdefault(name, []).append(value)
        elif subcommand is None:
            subcommand = word
    return Command(words[index], subcommand, options, words)


def pass_command(unit: Unit) -> Union[Tuple[Command, None], Tuple[None, str]]:
    """``(Command, problem)`` of a pass unit: its one ``ExecStart`` that runs ``bcd-holds converge``."""
    lines = unit.values("Service", "ExecStart")
    if not lines:
        return None, "has no ExecStart"
    commands: List[Command] = []
    for line in lines:
        try:
            command = bcd_command(exec_words(line))
        except ValueError as exc:
            return None, "ExecStart cannot be read (%s): %s" % (exc, line[:120])
        if command is not None:
            commands.append(command)
    if not commands:
        return None, "ExecStart does not run %s: %s" % (PROGRAM, lines[0][:120])
    if len(commands) > 1:
        return None, "has %d ExecStart lines that run %s; the role writes one" % (len(commands), PROGRAM)
    command = commands[0]
    if command.subcommand != "converge":
        return None, "ExecStart runs %s %s, not %s converge" % (PROGRAM, command.subcommand or "(no command)", PROGRAM)
    if not command.has("--stored"):
        return None, "ExecStart's %s converge has no --stored: it converges no stored input" % PROGRAM
    return command, None


def helper_command(unit: Unit) -> Union[Tuple[Command, None], Tuple[None, str]]:
    """``(Command, problem)`` of the helper unit: its ``ExecStart`` that runs ``bcd-holds helper``."""
    for line in unit.values("Service", "ExecStart"):
        try:
            command = bcd_command(exec_words(line))
        except ValueError as exc:
            return None, "ExecStart cannot be read (%s): %s" % (exc, line[:120])
        if command is not None and command.subcommand == "helper":
            return command, None
    return None, "has no ExecStart that runs %s helper" % PROGRAM


def timer_target(name: str, unit: Unit) -> str:
    """The unit a timer starts: its ``Unit=``, else the service of its own name (systemd's default)."""
    return unit.last("Timer", "Unit", name.rsplit(".", 1)[0] + ".service")


def pass_account(unit: Unit) -> str:
    """The account a unit's ``ExecStart`` runs as: ``User=``, root when it has none."""
    return unit.last("Service", "User", "root") or "root"
