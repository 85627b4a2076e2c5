# -*- coding: utf-8 -*-
# Copyright: contributors to bcd.devices
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""``bcd-holds doctor`` on a node the role installed (issue 32): it reads the units the role wrote under the
node's root, checks that the timers start the pass units, that those run an existing bcd-holds as an account
owning the state directory, and exits 1 when the timers' passes cannot work. A node without the units keeps its
result."""

from __future__ import annotations

import json
import os

import pytest

from ansible_collections.bcd.devices.plugins.module_utils.entry.cli import EX_CHECK, EX_OK, main
from ansible_collections.bcd.devices.plugins.module_utils.entry.doctor import units
from ansible_collections.bcd.devices.tests.unit.plugins.module_utils.entry.doctor.conftest import UNITS, doctor_run


# -- a node without the role's units: as before ----------------------------------------------------

def test_a_node_without_units_says_so_and_keeps_its_result(capsys, healthy):
    code, checks, lines = doctor_run(capsys, healthy)
    assert code == EX_OK
    assert checks["units"][0] == "OK" and checks["units"][1].startswith("no units installed in /etc/systemd/system")
    assert checks["helper"] == ("OK", "no root helper configured (passes must run as root)")
    assert "timers" not in checks and "passes" not in checks
    assert [line.split()[1] for line in lines][:3] == ["gpu-binding", "helper", "units"]


# -- the timers ------------------------------------------------------------------------------------

def test_a_missing_timer_fails(capsys, installed):
    installed.serve()
    os.unlink(installed.unit("bcd-holds-drift.timer"))
    code, checks, _lines = doctor_run(capsys, installed.node)
    assert code == EX_CHECK
    assert checks["timers"] == ("ERROR", "bcd-holds-drift.timer is missing: no drift pass every 10 minutes (rerun the "
                                         "role bcd.devices.bcd_holds)")


def test_a_timer_that_starts_no_pass_unit_fails(capsys, installed):
    installed.serve()
    installed.edit("bcd-holds-retry.timer", "Unit=bcd-holds-retry.service", "Unit=bcd-holds-retyr.service")
    os.symlink("/dev/null", installed.unit("bcd-holds-drift.timer") + ".new")
    os.replace(installed.unit("bcd-holds-drift.timer") + ".new", installed.unit("bcd-holds-drift.timer"))
    code, checks, _lines = doctor_run(capsys, installed.node)
    assert code == EX_CHECK
    level, message = checks["timers"]
    assert level == "ERROR"
    assert "bcd-holds-retry.timer starts bcd-holds-retry.service" not in message
    assert "bcd-holds-retry.timer starts bcd-holds-retyr.service, which does not exist" in message
    assert ("bcd-holds-drift.timer is masked: no drift pass every 10 minutes (systemctl unmask bcd-holds-drift.timer; "
            "systemctl start bcd-holds-drift.timer)") in message


def test_a_timer_that_is_a_fifo_or_too_large_is_named_not_waited_on(capsys, installed):
    installed.serve()
    os.unlink(installed.unit("bcd-holds-retry.timer"))
    os.mkfifo(installed.unit("bcd-holds-retry.timer"))
    installed.node.write("%s/bcd-holds-drift.timer" % UNITS, "#" * (1 << 20))
    code, checks, _lines = doctor_run(capsys, installed.node)
    assert code == EX_CHECK
    level, message = checks["timers"]
    assert level == "ERROR"
    assert "/etc/systemd/system/bcd-holds-retry.timer is not a regular file" in message
    assert "/etc/systemd/system/bcd-holds-drift.timer is 1048576 bytes, more than the 65536" in message


def test_systemd_s_view_of_the_timers_is_checked_where_it_manages_the_node(capsys, installed, monkeypatch):
    installed.serve()
    asked = []

    def systemctl(argv):
        asked.append(argv)
        return 0, ("Id=bcd-holds-drift.timer\nLoadState=loaded\nActiveState=active\nUnitFileState=disabled\n\n"
                   "Id=bcd-holds-retry.timer\nLoadState=loaded\nActiveState=inactive\nUnitFileState=enabled\n\n"
                   "Id=bcd-holds-helper.service\nLoadState=loaded\nActiveState=active\nUnitFileState=enabled\n"), ""
    monkeypatch.setattr(units, "systemd_runner", lambda host: systemctl)  # systemd manages the node
    code, checks, _lines = doctor_run(capsys, installed.node)
    assert asked == [["systemctl", "show", "--property=Id,LoadState,ActiveState,UnitFileState", "--",
                      "bcd-holds-drift.timer", "bcd-holds-retry.timer", "bcd-holds-helper.service"]]
    assert code == EX_CHECK
    assert checks["timers"] == ("ERROR", "bcd-holds-retry.timer is inactive: no retry of an unfinished pass every 30 s "
                                         "(systemctl enable --now bcd-holds-retry.timer); bcd-holds-drift.timer is "
                                         "disabled: it stops at the next reboot (systemctl enable bcd-holds-drift.timer)")
    assert checks["helper"][0] == "OK"


# -- the pass units --------------------------------------------------------------------------------

def test_a_pass_unit_without_its_program_or_state_directory_fails(capsys, installed):
    installed.serve()
    os.unlink(installed.node.path("/usr/local/bin/bcd-holds"))
    for name in os.listdir(installed.node.state()):
        os.unlink(installed.node.state(name))
    os.rmdir(installed.node.state())
    code, checks, _lines = doctor_run(capsys, installed.node)
    assert code == EX_CHECK
    level, message = checks["passes"]
    assert level == "ERROR"
    assert ("ExecStart runs /usr/local/bin/bcd-holds, which does not exist (rerun the role bcd.devices.bcd_holds)"
            in message)
    assert ("the state directory /var/lib/bcd does not exist (rerun the role bcd.devices.bcd_holds: it makes it %s's, "
            "0700)" % installed.account) in message
    assert message.count("/usr/local/bin/bcd-holds, which does not exist") == 1  # said once for both units


@pytest.mark.skipif(os.geteuid() != 0, reason="only root can hand the state directory to another account")
def test_a_state_directory_the_account_does_not_own_fails(capsys, installed):
    installed.serve()
    os.chown(installed.node.state(), 0, 0)
    code, checks, _lines = doctor_run(capsys, installed.node)
    assert code == EX_CHECK
    assert checks["passes"] == ("ERROR", "the state directory /var/lib/bcd belongs to uid 0 (root), not %s, the account "
                                         "the timers' passes run as: they cannot write it (chown %s: /var/lib/bcd, or "
                                         "rerun the role bcd.devices.bcd_holds)" % (installed.account, installed.account))


def test_a_pass_unit_as_an_unknown_account_fails(capsys, installed):
    installed.serve()
    installed.edit("bcd-holds-converge.service", "User=%s" % installed.account, "User=no-such-account-here")
    installed.edit("bcd-holds-retry.service", "User=%s" % installed.account, "User=no-such-account-here")
    code, checks, _lines = doctor_run(capsys, installed.node)
    assert code == EX_CHECK
    assert ("the timers' passes run as User=no-such-account-here, an account this machine does not have (rerun the "
            "role bcd.devices.bcd_holds: it creates it)") in checks["passes"][1]


@pytest.mark.skipif(os.geteuid() != 0, reason="the units' account must be another one than root")
def test_a_pass_unit_as_an_account_without_the_helper_fails(capsys, installed):
    installed.edit("bcd-holds-retry.service", " --helper-socket /run/bcd/helper.sock", "")
    installed.serve()
    code, checks, _lines = doctor_run(capsys, installed.node)
    assert code == EX_CHECK
    assert ("bcd-holds-retry.service runs as %s without --helper-socket: it cannot write /etc/cdi, so every new hold "
            "is refused with node-unprivileged" % installed.account) in checks["passes"][1]


def test_a_drop_in_s_exec_start_is_the_one_checked(capsys, installed):
    installed.serve()
    override = ("[Service]\nExecStart=\nExecStart=/usr/local/bin/bcd-holds converge --stored --state-dir /var/lib/bcd \\\n"
                "    --helper-socket /run/bcd/elsewhere.sock\n")
    installed.node.write("%s/bcd-holds-converge.service.d/override.conf" % UNITS, override)
    code, checks, _lines = doctor_run(capsys, installed.node)
    assert code == EX_CHECK
    assert ("the pass units use different helper sockets (/run/bcd/elsewhere.sock, /run/bcd/helper.sock)"
            in checks["passes"][1])
    assert "the root helper at %s (the units' --helper-socket) does not answer" % installed.node.path(
        "/run/bcd/elsewhere.sock") in checks["helper"][1]


def test_units_are_not_read_through_a_link_out_of_the_root(capsys, healthy, tmp_path):
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    (elsewhere / "bcd-holds-retry.timer").write_text("[Timer]\nOnActiveSec=1\n")
    os.makedirs(healthy.path("/etc"), exist_ok=True)
    os.symlink(str(elsewhere), healthy.path("/etc/systemd"))
    code, checks, _lines = doctor_run(capsys, healthy)
    assert code == EX_CHECK
    assert checks["units"][0] == "WARN"
    assert checks["units"][1] == ("the units in /etc/systemd/system cannot be read: /etc/systemd/system leads out "
                                  "of the node's root %s (a link to %s/system); not followed" % (healthy.root, elsewhere))
    assert "timers" not in checks


def test_doctor_json_has_the_new_checks(capsys, installed):
    main(["doctor", "--json", "--root", installed.node.root, "--fakehw", installed.node.fakehw])
    checks = json.loads(capsys.readouterr().out)
    names = [check["name"] for check in checks]
    assert names[:5] == ["gpu-binding", "helper", "units", "timers", "passes"]
