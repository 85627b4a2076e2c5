# -*- coding: utf-8 -*-
# Copyright: contributors to bcd.devices
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""``bcd-holds doctor``'s root helper (issue 32): the helper the role's units name answers (served in-process),
the one given with --helper-socket too, and the helper unit serves the timers' passes; ``gpu-binding`` says
how an ordinary user's passes would run."""

from __future__ import annotations

import os
import socket
import threading
import time

from ansible_collections.bcd.devices.plugins.module_utils.entry.cli import EX_CHECK, EX_OK
from ansible_collections.bcd.devices.plugins.module_utils.entry.doctor import root_helper
from ansible_collections.bcd.devices.tests.unit.plugins.module_utils.entry.doctor.conftest import SOCKET, START_HELPER, Installed, doctor_run


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
    monkeypatch.setattr(root_helper, "HELPER_TIMEOUT", 0.5)
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
