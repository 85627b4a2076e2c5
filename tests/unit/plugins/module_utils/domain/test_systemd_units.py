# -*- coding: utf-8 -*-
# Copyright: contributors to bcd.devices
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""The role's units as doctor reads them (``domain/systemd_units.py``): systemd's syntax as far as the
role's units and an operator's drop-in use it, and the bcd-holds command line of a pass unit."""

from __future__ import annotations

import pytest

from ansible_collections.bcd.devices.plugins.module_utils.domain.systemd_units import (
    bcd_command,
    exec_words,
    parse_unit,
    pass_account,
    pass_command,
    timer_target,
)

UNIT = """# Ansible managed
[Unit]
Description=bcd-holds pass

[Service]
Type=oneshot
User=bcd
; a comment
ExecStart=/usr/local/bin/bcd-holds converge --stored \\
    # a comment inside a continued line is skipped
    --state-dir /var/lib/bcd --helper-socket=/run/bcd/helper.sock
"""


def test_a_pass_unit_s_command_account_and_options():
    unit = parse_unit([UNIT], ["bcd-holds-converge.service"])
    assert unit.problems == []
    command, problem = pass_command(unit)
    assert problem is None
    assert command.program == "/usr/local/bin/bcd-holds" and command.subcommand == "converge"
    assert command.last("--state-dir") == "/var/lib/bcd"
    assert command.last("--helper-socket") == "/run/bcd/helper.sock"
    assert pass_account(unit) == "bcd"


def test_a_drop_in_clears_exec_start_and_sets_another_and_the_last_user_wins():
    dropin = "[Service]\nUser=root\nExecStart=\nExecStart=-/usr/bin/python3 -I /opt/bcd-holds converge --stored\n"
    unit = parse_unit([UNIT, dropin])
    command, problem = pass_command(unit)
    assert problem is None
    assert command.program == "/opt/bcd-holds" and not command.has("--helper-socket")
    assert pass_account(unit) == "root"


@pytest.mark.parametrize("exec_start, problem", [
    ("", "has no ExecStart"),
    ("/usr/bin/true", "ExecStart does not run bcd-holds: /usr/bin/true"),
    ("/usr/local/bin/bcd-holds status", "ExecStart runs bcd-holds status, not bcd-holds converge"),
    ("/usr/local/bin/bcd-holds converge --spec x.json",
     "ExecStart's bcd-holds converge has no --stored: it converges no stored input"),
    ("/usr/local/bin/bcd-holds 'converge", "ExecStart cannot be read (No closing quotation): "
                                           "/usr/local/bin/bcd-holds 'converge"),
])
def test_a_unit_that_runs_no_pass_says_why(exec_start, problem):
    unit = parse_unit(["[Service]\nExecStart=%s\n" % exec_start])
    assert pass_command(unit) == (None, problem)


def test_exec_prefixes_and_quotes():
    assert exec_words("+-/usr/local/bin/bcd-holds \"a b\" c\\ d") == ["/usr/local/bin/bcd-holds", "a b", "c d"]
    assert bcd_command(["/usr/bin/env"]) is None


def test_a_timer_starts_its_unit_or_the_service_of_its_name():
    assert timer_target("x.timer", parse_unit(["[Timer]\nUnit=y.service\n"])) == "y.service"
    assert timer_target("x.timer", parse_unit(["[Timer]\nOnActiveSec=1\n"])) == "x.service"


def test_lines_that_are_no_settings_are_named():
    unit = parse_unit(["Orphan=1\n[Service]\ngarbage\n"], ["u.service"])
    assert unit.problems == ["u.service line 1 is not a setting: Orphan=1", "u.service line 3 is not a setting: garbage"]
