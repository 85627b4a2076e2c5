# -*- coding: utf-8 -*-
# Copyright: contributors to bcd.devices
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""``bcd-holds doctor`` on a node the role installed (issue 32): it reads the units the role wrote
under the node's root (rendered here from the role's own templates, as tests/unit/roles does), checks
the root helper they name answers (served in-process, tests/unit/served_helper.py), that the timers
start the pass units, that those run an existing bcd-holds as an account owning the state directory,
and exits 1 when the timers' passes cannot work. A node without the units keeps its result."""

from __future__ import annotations

import json
import os
import pwd
import socket
import threading
import time

import pytest

from ansible_collections.bcd.devices.plugins.module_utils.entry import doctor
from ansible_collections.bcd.devices.plugins.module_utils.entry.cli import EX_CHECK, EX_OK, main
from ansible_collections.bcd.devices.plugins.module_utils.node.hosts import FakeHwHost
from ansible_collections.bcd.devices.tests.unit.builders import hold
from ansible_collections.bcd.devices.tests.unit.conftest import DEFAULT_GPUS, GPU_B, open_to_all
from ansible_collections.bcd.devices.tests.unit.roles.test_root_isolation import RoleVars, written_units
from ansible_collections.bcd.devices.tests.unit.served_helper import ServedHelper

UNITS = "/etc/systemd/system"
SOCKET = "/run/bcd/helper.sock"
START_HELPER = "systemctl start bcd-holds-helper.service (journalctl -u bcd-holds-helper.service says why it stopped)"


def doctor_run(capsys, node, *argv):
    """``bcd-holds doctor ARGV --root … --fakehw …``: (exit code, {check: (level, message)}, the lines)."""
    code = main(["doctor"] + list(argv) + ["--root", node.root, "--fakehw", node.fakehw])
    out, err = capsys.readouterr()
    assert "Traceback" not in out + err
    lines = out.splitlines()
    checks = dict((line.split(None, 2)[1], (line.split(None, 2)[0], line.split(None, 2)[2])) for line in lines)
    return code, checks, lines


def the_account():
    """The account the units run as: another one than root where the test can hand it the state directory."""
    if os.geteuid() == 0:
        try:
            return pwd.getpwuid(65534).pw_name
        except KeyError:
            pass
    return pwd.getpwuid(os.geteuid()).pw_name


class Installed(object):
    """A fakehw node as the role leaves it: its units, bcd-holds and the state directory, the account's."""

    def __init__(self, node, helper=True):
        self.node = node
        self.account = the_account()
        self.role_vars = RoleVars({"bcd_holds_user": self.account, "bcd_holds_helper": helper,
                                   "bcd_holds_fakehw": node.fakehw})
        self.units = written_units(self.role_vars)
        for name, text in self.units.items():
            node.write("%s/%s" % (UNITS, name), text)
        node.write("/usr/local/bin/bcd-holds", self.role_vars.render("bcd-holds.j2"))
        os.chmod(node.path("/usr/local/bin/bcd-holds"), 0o755)
        os.makedirs(node.state(), mode=0o700, exist_ok=True)
        open_to_all(os.path.dirname(node.state()))  # the account reaches its state directory
        entry = pwd.getpwnam(self.account) if helper else pwd.getpwuid(0)
        if os.geteuid() == 0:
            os.chown(node.state(), entry.pw_uid, entry.pw_gid)
        self.helper = None

    def unit(self, name):
        return self.node.path("%s/%s" % (UNITS, name))

    def edit(self, name, old, new):
        text = self.node.read("%s/%s" % (UNITS, name)).decode()
        assert old in text
        self.node.write("%s/%s" % (UNITS, name), text.replace(old, new))

    def serve(self):
        self.helper = ServedHelper(FakeHwHost(self.node.root, self.node.fakehw), self.node.path(SOCKET))
        return self.helper

    def close(self):
        if self.helper is not None:
            self.helper.close()


@pytest.fixture
def healthy(make_node, capsys):
    """A node every check passes on: two GPUs NVIDIA's spec names, a hold converged."""
    node = make_node(gpus=DEFAULT_GPUS[:2], vendor="mig")
    assert main(["converge", "--spec", write_spec(node), "--root", node.root, "--fakehw", node.fakehw]) == EX_OK
    capsys.readouterr()
    return node


def write_spec(node):
    path = os.path.join(node.base, "spec.json")
    with open(path, "w") as handle:
        json.dump({"generation": 1, "devices": [hold("a1", GPU_B)]}, handle)
    return path


@pytest.fixture
def installed(healthy):
    done = Installed(healthy)
    yield done
    done.close()


# -- a node without the role's units: as before ----------------------------------------------------

def test_a_node_without_units_says_so_and_keeps_its_result(capsys, healthy):
    code, checks, lines = doctor_run(capsys, healthy)
    assert code == EX_OK
    assert checks["units"][0] == "OK" and checks["units"][1].startswith("no units installed in /etc/systemd/system")
    assert checks["helper"] == ("OK", "no root helper configured (passes must run as root)")
    assert "timers" not in checks and "passes" not in checks
    assert [line.split()[1] for line in lines][:3] == ["gpu-binding", "helper", "units"]


# -- the helper the units use ----------------------------------------------------------------------

def test_root_s_doctor_checks_the_helper_the_units_use_and_passes_while_it_answers(capsys, installed):
    installed.serve()
    code, checks, _lines = doctor_run(capsys, installed.node)
    assert code == EX_OK, checks
    socket_path = installed.node.path(SOCKET)
    assert checks["helper"] == ("OK", "the root helper at %s (the units' --helper-socket) answers" % socket_path)
    assert checks["units"] == ("OK", "bcd-holds-helper.service, bcd-holds-converge.service, bcd-holds-retry.service, "
                                     "bcd-holds-retry.timer, bcd-holds-drift.timer in /etc/systemd/system: the timers' "
                                     "passes run as %s through the root helper at %s" % (installed.account, SOCKET))
    assert checks["timers"][0] == "OK"
    assert checks["timers"][1].startswith("bcd-holds-retry.timer starts bcd-holds-retry.service, bcd-holds-drift.timer "
                                          "starts bcd-holds-converge.service (systemd does not manage this root")
    assert checks["passes"] == ("OK", "bcd-holds-converge.service and bcd-holds-retry.service run "
                                      "/usr/local/bin/bcd-holds converge --stored as %s, in /var/lib/bcd (%s's)"
                                % (installed.account, installed.account))
    # the probe is answered without touching the node, and the helper logs nothing of it
    assert installed.helper.log == []


def test_a_helper_socket_that_is_not_there_fails_doctor_as_root(capsys, installed):
    """The issue: root's doctor said "OK helper no root helper configured" and exited 0."""
    code, checks, _lines = doctor_run(capsys, installed.node)
    assert code == EX_CHECK
    assert checks["helper"] == ("ERROR", "the root helper at %s (the units' --helper-socket) does not answer (no such "
                                         "socket: no helper listens there): %s"
                                % (installed.node.path(SOCKET), START_HELPER))
    assert checks["gpu-binding"] == ("OK", "passes run as root")


def test_a_socket_nothing_listens_on_fails_doctor(capsys, installed):
    os.makedirs(os.path.dirname(installed.node.path(SOCKET)), exist_ok=True)
    with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as left:  # a helper that died: its socket stays
        left.bind(installed.node.path(SOCKET))
    code, checks, _lines = doctor_run(capsys, installed.node)
    assert code == EX_CHECK
    assert checks["helper"][0] == "ERROR"
    assert "does not answer (connection refused: the socket is left, no helper listens on it): " + START_HELPER \
        in checks["helper"][1]


def test_a_helper_that_never_answers_fails_doctor_within_its_timeout(capsys, installed, monkeypatch):
    monkeypatch.setattr(doctor, "HELPER_TIMEOUT", 0.5)
    os.makedirs(os.path.dirname(installed.node.path(SOCKET)), exist_ok=True)
    server = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    server.bind(installed.node.path(SOCKET))
    server.listen(4)
    held, stop = [], threading.Event()

    def accept_and_say_nothing():
        server.settimeout(0.1)
        while not stop.is_set():
            try:
                held.append(server.accept()[0])
            except socket.timeout:
                continue
    thread = threading.Thread(target=accept_and_say_nothing)
    thread.daemon = True
    thread.start()
    try:
        started = time.monotonic()
        code, checks, _lines = doctor_run(capsys, installed.node)
        took = time.monotonic() - started
    finally:
        stop.set()
        thread.join(5)
        for connection in held:
            connection.close()
        server.close()
    assert code == EX_CHECK
    assert checks["helper"][0] == "ERROR"
    assert ("does not answer (nothing within 0.5s: stuck or overloaded): systemctl restart bcd-holds-helper.service"
            in checks["helper"][1])
    assert took < 10


def test_an_ordinary_user_s_doctor_uses_the_units_helper_for_gpu_binding(capsys, installed, monkeypatch):
    installed.serve()
    monkeypatch.setattr(os, "geteuid", lambda: 1000)
    code, checks, _lines = doctor_run(capsys, installed.node)
    assert checks["gpu-binding"] == ("OK", "passes run unprivileged through the root helper at %s"
                                     % installed.node.path(SOCKET))


def test_the_helper_given_and_the_units_are_both_checked(capsys, installed):
    installed.serve()
    other = os.path.join(installed.node.base, "other.sock")
    code, checks, _lines = doctor_run(capsys, installed.node, "--helper-socket", other)
    assert code == EX_CHECK
    level, message = checks["helper"]
    assert level == "ERROR"
    assert "the root helper at %s does not answer (no such socket" % other in message
    assert "the root helper at %s (the units' --helper-socket) answers" % installed.node.path(SOCKET) in message


def test_a_helper_unit_on_another_socket_or_for_another_account_fails(capsys, installed):
    installed.serve()
    installed.edit("bcd-holds-helper.service", "--socket /run/bcd/helper.sock --allow-user %s" % installed.account,
                   "--socket /run/bcd/other.sock --allow-user someone")
    code, checks, _lines = doctor_run(capsys, installed.node)
    assert code == EX_CHECK
    level, message = checks["helper"]
    assert level == "ERROR"
    assert ("bcd-holds-helper.service listens on /run/bcd/other.sock, the timers' passes use /run/bcd/helper.sock "
            "(rerun the role bcd.devices.bcd_holds)") in message
    assert ("bcd-holds-helper.service serves root, someone, not %s, the account the timers' passes run as "
            "(rerun the role bcd.devices.bcd_holds: --allow-user %s)" % (installed.account, installed.account)) in message


def test_no_helper_unit_while_the_passes_use_one_fails(capsys, installed):
    installed.serve()
    os.unlink(installed.unit("bcd-holds-helper.service"))
    code, checks, _lines = doctor_run(capsys, installed.node)
    assert code == EX_CHECK
    assert ("the timers' passes use the root helper at /run/bcd/helper.sock but bcd-holds-helper.service is "
            "missing: nothing starts it at boot") in checks["helper"][1]


def test_units_without_the_helper_run_their_passes_as_root(capsys, healthy):
    Installed(healthy, helper=False)
    code, checks, _lines = doctor_run(capsys, healthy)
    assert code == EX_OK, checks
    assert checks["helper"] == ("OK", "the timers' passes run as root (no --helper-socket): no root helper needed")
    assert checks["passes"][1].endswith("as root, in /var/lib/bcd (root's)")


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
    monkeypatch.setattr(doctor, "_systemd_manages", lambda host: True)
    monkeypatch.setattr(FakeHwHost, "runner", staticmethod(systemctl), raising=False)
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


# -- install: the node as the role's last install recorded it -------------------------------------------------------

def test_doctor_says_whether_the_node_is_as_the_role_s_install_recorded_it(tmp_path):
    from ansible_collections.bcd.devices.plugins.module_utils.entry.doctor import check_install, installed_manifest
    from ansible_collections.bcd.devices.plugins.module_utils.node import library as node_library

    # beside the library this code runs from: <lib>/installed.json, <lib> six directories above entry/doctor.py
    assert installed_manifest().endswith(os.sep + "installed.json")
    assert os.path.isdir(os.path.join(os.path.dirname(installed_manifest()), "ansible_collections"))
    manifest = str(tmp_path / "installed.json")
    missing = check_install(manifest)
    assert (missing["level"], missing["name"]) == ("OK", "install") and "no record" in missing["message"]
    unit = tmp_path / "bcd-holds-drift.timer"
    unit.write_text("[Timer]\n")
    with open(manifest, "w") as handle:
        json.dump(node_library.install_manifest({"digest": "d" * 64, "files": [str(unit)]}), handle)
    os.chmod(manifest, 0o600)
    if os.geteuid() != 0:  # the record is root's: only root's reads it
        return
    assert check_install(manifest)["level"] == "OK"
    unit.unlink()
    drifted = check_install(manifest)
    assert drifted["level"] == "WARN"
    assert "%s is missing" % unit in drifted["message"] and "rerun the role bcd.devices.bcd_holds" in drifted["message"]
