# -*- coding: utf-8 -*-
# Copyright: contributors to bcd.devices
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""The root units are sandboxed (issue 33, item 4; docs/security.md, "The root units' sandbox").

The helper and metrics units are rendered with the role's defaults and vars (as
``test_root_isolation`` renders them) and rated by ``systemd-analyze security --offline=true``: each
must rate at most ``MAX_EXPOSURE`` (0.2.0's rated 9.3 and 9.4, "UNSAFE"). Where the tool is missing
(or older than systemd 252, which has no ``--offline``) that test is skipped, saying so; the checks
of what the sandbox must keep open for the helper to work (the paths it writes, AF_UNIX for
systemctl's D-Bus, the cgroup files slices need) run everywhere. ``molecule/role`` runs
``systemd-analyze verify`` on the units the role installs; ``make e2e``
(tests/e2e/test_systemd_slices.py) rates the units online, as a booted systemd 252 and 257 loaded
them, against the same limit, and shows the helper binding, releasing and managing slices inside
this sandbox.
"""

from __future__ import annotations

import re
import shutil
import subprocess

import pytest

from ansible_collections.bcd.devices.tests.unit.roles.test_root_isolation import RoleVars, written_units

MAX_EXPOSURE = 5.0
TEXTFILE = "/var/lib/prometheus/node-exporter/bcd-holds.prom"
SANDBOXED = ("bcd-holds-helper.service", "bcd-holds-metrics.service")
ROOTS = ("/", "/srv/node")


def rendered(root="/", **overrides):
    overrides.setdefault("bcd_holds_metrics_textfile", TEXTFILE)
    units = written_units(RoleVars(dict(bcd_holds_root=root, **overrides)))
    return dict((name, units[name]) for name in SANDBOXED)


def settings(text):
    """{key: [value, ...]} of a unit's [Service] section."""
    found = {}
    section = None
    for line in text.splitlines():
        line = line.strip()
        if line.startswith("["):
            section = line
        elif section == "[Service]" and "=" in line and not line.startswith("#"):
            key, _sep, value = line.partition("=")
            found.setdefault(key, []).append(value)
    return found


def words(values):
    return [word for value in values for word in value.split()]


def _analyze_offline():
    tool = shutil.which("systemd-analyze")
    if tool is None:
        return None, "systemd-analyze is not installed here (apt-get install systemd gives it; nothing is started)"
    probe = subprocess.run([tool, "security", "--help"], capture_output=True, text=True, check=False)
    if "--offline" not in probe.stdout + probe.stderr:
        return None, "this systemd-analyze has no --offline (systemd 252 or later has it)"
    return tool, None


@pytest.mark.parametrize("root", sorted(ROOTS))
@pytest.mark.parametrize("name", SANDBOXED)
def test_each_root_unit_rates_at_most_5_0(tmp_path, name, root):
    tool, why = _analyze_offline()
    if tool is None:
        pytest.skip(why)
    path = tmp_path / name
    path.write_text(rendered(root)[name], encoding="utf-8")
    result = subprocess.run([tool, "security", "--offline=true", "--no-pager", str(path)],
                            capture_output=True, text=True, check=False, timeout=120)
    found = re.search(r"Overall exposure level for %s: (\d+\.\d+)" % re.escape(name), result.stdout + result.stderr)
    assert found, result.stdout + result.stderr
    assert float(found.group(1)) <= MAX_EXPOSURE, result.stdout


@pytest.mark.parametrize("root", sorted(ROOTS))
def test_the_helper_can_still_write_what_it_writes(root):
    # under another root the units still name node paths: they are what that root's systemd would run
    helper = settings(rendered(root)["bcd-holds-helper.service"])
    assert helper["ProtectSystem"] == ["strict"]
    writable = words(helper["ReadWritePaths"])
    for path in ("/etc/cdi", "/run/cdi", "/var/run/cdi", "/run/bcd"):
        assert "-" + path in writable, path
    assert "-/run/bcd" in writable  # the helper socket's directory (bcd_holds_helper_socket)
    assert "-/sys/fs/cgroup" in writable  # the slices' hugetlb controller, cgroup.freeze
    assert "ProtectControlGroups" not in helper  # it would make those read-only
    assert "PrivateDevices" not in helper and "ProtectKernelLogs" not in helper  # the GPUs, /dev/kmsg
    assert helper["RestrictAddressFamilies"] == ["AF_UNIX"]  # systemctl over D-Bus, virsh, the kubelet
    assert set(words(helper["CapabilityBoundingSet"])) == {
        "CAP_CHOWN", "CAP_FOWNER", "CAP_DAC_OVERRIDE", "CAP_DAC_READ_SEARCH", "CAP_SYSLOG", "CAP_SYS_ADMIN"}
    for key in ("ProtectHome", "PrivateTmp", "NoNewPrivileges", "ProtectKernelTunables", "ProtectKernelModules",
                "RestrictNamespaces", "LockPersonality", "RestrictSUIDSGID", "RestrictRealtime"):
        assert helper[key] == ["yes"], key
    assert helper["SystemCallFilter"] == ["@system-service"]
    assert helper["MemoryMax"] and helper["TasksMax"]
    # systemd makes the directories it writes (read-only otherwise, the helper could not), and keeps them
    assert words(helper["RuntimeDirectory"]) == ["bcd", "cdi"] and helper["RuntimeDirectoryPreserve"] == ["yes"]
    assert helper["ConfigurationDirectory"] == ["cdi"]


def test_the_helper_socket_elsewhere_is_writable_there():
    helper = settings(rendered(bcd_holds_helper_socket="/run/bcd-helper/socket")["bcd-holds-helper.service"])
    assert "-/run/bcd-helper" in words(helper["ReadWritePaths"])


@pytest.mark.parametrize("root", sorted(ROOTS))
def test_the_metrics_unit_writes_only_the_textfile_s_directory(root):
    metrics = settings(rendered(root)["bcd-holds-metrics.service"])
    assert metrics["ProtectSystem"] == ["strict"]
    assert words(metrics["ReadWritePaths"]) == ["/var/lib/prometheus/node-exporter"]
    assert metrics["RestrictAddressFamilies"] == ["AF_UNIX"]
    # CAP_SETUID/CAP_SETGID: root reads the account's state directory as its owner (NodeState.as_owner's seteuid)
    assert set(words(metrics["CapabilityBoundingSet"])) == {
        "CAP_DAC_READ_SEARCH", "CAP_SETUID", "CAP_SETGID", "CAP_SYSLOG", "CAP_SYS_ADMIN"}
    assert metrics["SystemCallFilter"] == ["@system-service"]
