# -*- coding: utf-8 -*-
# Copyright: contributors to bcd.devices
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""What the tests of ``bcd-holds doctor`` share: a node every check passes on (``healthy``), the same node as the
role installed it (``installed``: the units the role wrote under the node's root, rendered here from the role's
own templates as tests/unit/roles does, and the root helper they name, served in-process by
tests/unit/served_helper.py), and ``doctor_run``, the command run on it."""

from __future__ import annotations

import json
import os
import pwd

import pytest

from ansible_collections.bcd.devices.plugins.module_utils.entry.cli import EX_OK, main
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
