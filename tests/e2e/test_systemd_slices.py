# -*- coding: utf-8 -*-
# Copyright: contributors to bcd.devices
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""A real systemd manages the hold slices.

A Debian root filesystem boots under systemd-nspawn with the cgroup v2 hierarchy
(tests/e2e/systemd/bcd_systemd.py, tests/e2e/lib/in_systemd_node.sh), once per release
the role claims (bookworm with systemd 252, trixie with systemd 257; hack/e2e.sh's
``E2E_SYSTEMD_RELEASES``): every test below runs on each, against a node booted for that
release alone. The role ``bcd.devices.bcd_holds`` converges it over ssh, as an operator would: the bcd
account, the node command, the root helper, the units and the timers, and a pass that
binds a hold with limits (``s_sliced``) and one without (``s_plain``). Then, asking
systemd itself (``systemctl show``, the journal, the cgroup files):

* the hold's slice exists with exactly the properties its limits ask for, where systemd
  puts slices, and the unsliced hold has none;
* the helper runs as root, the passes as ``bcd``, the timers are enabled and waiting,
  and the files belong to who they should;
* a slice stopped by hand (its runtime properties reverted) is made again, with its
  properties, by the pass the drift timer runs (``bcd-holds-converge.service``);
* a release leaves a slice that runs a process alone, with its limits, through a role
  run and a timer pass; once the process exits, the next timer pass stops the slice;
* the root units are sandboxed (issue 33, item 4): ``systemd-analyze security`` rates the
  helper and the metrics unit, as this node's systemd loaded them, at most 5.0, and inside
  that sandbox the helper still releases and binds a hold for ``bcd`` over its socket, and
  no helper process of the boot died or failed;
* the node delivers by itself (issue 45): with a gateway URL the role installs
  ``bcd-holds-deliver.service`` (as ``bcd``), its timer and its path unit; a GPU fault that the
  drift timer's pass finds (the stand-in nvidia-smi's pending row remapping) is journaled,
  delivered by those units to ansible-rulebook with no playbook run, and the shipped
  ``gpu_life`` rulebook recovers the GPU over ssh (``nvidia-smi --gpu-reset``, once).

Each failure prints what systemd and the journal of the units said.
Run with `bash hack/e2e.sh`; see docs/verified-consumers.md.
"""

from __future__ import annotations

import json
import os
import re
import socket
import subprocess
import sys
import time

import pytest

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "systemd"))

import bcd_systemd  # noqa: E402  pylint: disable=wrong-import-position,import-error
from bcd_systemd import GPUS, METRICS_TEXTFILE, cgroup_dir, parse_cgroup_events, timer_setting, worst_exposures  # noqa: E402  pylint: disable=import-error

pytestmark = pytest.mark.skipif(
    not (bcd_systemd.TARBALLS and bcd_systemd.WORK and all(map(os.path.isfile, bcd_systemd.TARBALLS.values()))),
    reason="the systemd part of the end-to-end suite: run it with `bash hack/e2e.sh` (or `make e2e`)")
# One node per release, each booted once for all the tests (a module-scoped parameter:
# pytest runs every test on bookworm, then every test on trixie). Outside hack/e2e.sh the
# one placeholder is skipped above.
RELEASES = list(bcd_systemd.TARBALLS) or ["(none)"]

SLICED = "s_sliced"
PLAIN = "s_plain"
SLICE = "bcd-alloc-%s.slice" % SLICED
WORKLOAD = "bcd-e2e-workload.service"
LIMITS = {"cpus": "0", "mems": "0", "cpu_millis": 1250, "memory_bytes": 768 << 20}
# What systemd must show for LIMITS, worked out by hand: 1250 millicores are 125 % of one
# CPU, 1.25 s of CPU time per second; MemoryHigh is 90 % of MemoryMax (805306368 * 9 // 10).
EXPECTED = {
    "AllowedCPUs": "0",
    "AllowedMemoryNodes": "0",
    "CPUQuotaPerSecUSec": "1.250000s",
    "MemoryMax": "805306368",
    "MemoryHigh": "724775731",
}
HELPER_SOCKET = "/run/bcd/helper.sock"
HELPER = "bcd-holds-helper.service"
# The root units the role sandboxes, and the most systemd-analyze security may rate each (issue 33, item 4;
# tests/unit/roles/test_units_sandbox.py holds the rendered units to it offline, this suite the loaded ones).
SANDBOXED = (HELPER, "bcd-holds-metrics.service")
MAX_EXPOSURE = 5.0
HELPER_OPS = ("hold.write", "hold.remove", "hold.set_aside", "slice.apply", "slice.stop", "kube.look")


def sliced_hold():
    return {"allocation_id": SLICED, "reservation_id": "r_sliced", "binding": "BINDING_HOLD",
            "devices": [{"id": GPUS[0]["uuid"], "device_class": "gpu"}], "limits": dict(LIMITS)}


def plain_hold():
    return {"allocation_id": PLAIN, "reservation_id": "r_plain", "binding": "BINDING_HOLD",
            "devices": [{"id": GPUS[1]["uuid"], "device_class": "gpu"}]}


class SummaryPlugin(object):
    """What ran on each node, in the terminal summary, in the order the nodes booted."""

    def __init__(self):
        self.nodes = []

    def pytest_terminal_summary(self, terminalreporter):
        for node in self.nodes:  # pylint: disable=redefined-outer-name
            terminalreporter.section("bcd.devices e2e: systemd part, %s" % node.release)
            for name, version in node.versions.items():
                terminalreporter.write_line("%-34s %s" % (name, version))
            terminalreporter.write_line("%-34s %.1f s (unpack, boot to multi-user, sshd)" % (
                "container boot", node.boot_seconds))
            for unit, level in sorted(node.exposures.items()):
                terminalreporter.write_line("%-34s %.1f (systemd-analyze security)" % (unit, level))


SUMMARY_PLUGIN = "bcd-e2e-systemd-summary"


@pytest.fixture(scope="module", params=RELEASES)
def node(request, pytestconfig):
    """The booted systemd node of one Debian release (under systemd-nspawn); powered off after its tests."""
    release = request.param
    booted = bcd_systemd.SystemdNode(release, bcd_systemd.TARBALLS[release], bcd_systemd.WORK)
    summary = pytestconfig.pluginmanager.get_plugin(SUMMARY_PLUGIN)
    if summary is None:
        summary = SummaryPlugin()
        pytestconfig.pluginmanager.register(summary, SUMMARY_PLUGIN)
    summary.nodes.append(booted)
    try:
        booted.boot()
        yield booted
    finally:
        booted.shutdown()


@pytest.fixture(scope="module")
def generation_1(node):  # pylint: disable=redefined-outer-name
    """The role run at generation 1: the sliced and the plain hold bound."""
    return node.run_role(1, [sliced_hold(), plain_hold()], "gen1")


def holds_by_id(result):
    return {hold["allocation_id"]: hold for hold in result["pass"]["holds"]}


def actions_of(result, allocation_id):
    return [action for action in result["pass"]["plan"] if action["allocation_id"] == allocation_id]


def assert_slice(node):  # pylint: disable=redefined-outer-name
    """The slice is active, where systemd puts it, with exactly the properties of LIMITS."""
    shown = node.show(SLICE, "ActiveState", "ControlGroup", *sorted(EXPECTED))
    assert shown["ActiveState"] == "active", "%s is %s, not active" % (SLICE, shown["ActiveState"])
    wrong = {name: (shown[name], value) for name, value in EXPECTED.items() if shown[name] != value}
    assert not wrong, "%s: these properties differ from the hold's limits (shown, expected): %s" % (SLICE, wrong)
    assert shown["ControlGroup"] == "/bcd.slice/bcd-alloc.slice/" + SLICE
    assert node.exists(cgroup_dir(SLICE)), "systemd shows %s active but its cgroup %s is missing" % (
        SLICE, cgroup_dir(SLICE))
    return shown


def assert_slice_gone(node):  # pylint: disable=redefined-outer-name
    shown = node.show(SLICE, "ActiveState")
    assert shown["ActiveState"] == "inactive", "%s is still %s" % (SLICE, shown["ActiveState"])
    assert not node.exists(cgroup_dir(SLICE)), "%s is inactive but its cgroup is still there" % SLICE


def run_timer_pass(node):  # pylint: disable=redefined-outer-name
    """Start what bcd-holds-drift.timer starts and wait for it (a oneshot); return the journal's cursor before."""
    cursor = node.cursor()
    # The timer starts it every 10 minutes; this suite, some seconds apart: now that a role re-run takes seconds,
    # five starts can fall in systemd's default start-limit window (10 s), which the timer never reaches.
    node.nsenter("systemctl", "reset-failed", "bcd-holds-converge.service")
    node.nsenter("systemctl", "start", "bcd-holds-converge.service")
    shown = node.show("bcd-holds-converge.service", "Result", "ExecMainStatus", "ActiveState")
    assert shown["Result"] == "success" and shown["ExecMainStatus"] == "0", (
        "the drift pass failed: %s" % shown)
    return cursor


# ---------------------------------------------------------------------------------------


def test_the_container_runs_systemd_on_cgroup_v2(node):  # pylint: disable=redefined-outer-name
    """The ground the rest stands on: what bcd.devices checks before it makes a slice."""
    with node.explained():
        # The tree booted is the release this parameter names.
        assert node.os_release().get("VERSION_CODENAME") == node.release, node.os_release()
        assert node.nsenter("cat", "/proc/1/comm").stdout.strip() == "systemd"
        assert node.nsenter("stat", "-f", "-c", "%T", "/sys/fs/cgroup").stdout.strip() == "cgroup2fs"
        assert node.exists("/sys/fs/cgroup/cgroup.controllers")
        assert node.nsenter("test", "-d", "/run/systemd/system", check=False).returncode == 0


def test_the_role_binds_a_sliced_hold_through_systemd(node, generation_1):  # pylint: disable=redefined-outer-name
    with node.explained():
        assert generation_1["service_mgr"] == "systemd", "the role did not see systemd: %s" % generation_1
        result = generation_1["pass"]
        assert result["section"]["state"] == "CONVERGED", result["section"]
        assert "devices.limits" in result["capabilities"], (
            "the node does not offer limits, so no slice can be made: %s" % result["capabilities"])
        holds = holds_by_id(generation_1)
        assert sorted(holds) == [PLAIN, SLICED]
        bind = [a for a in actions_of(generation_1, SLICED) if a["action"] == "bind"]
        assert bind and SLICE in bind[0]["text"], actions_of(generation_1, SLICED)

        assert_slice(node)
        # The spec and the env file name the slice the workload manager must place the workload in.
        spec = json.loads(node.read("/etc/cdi/bcd-%s.json" % SLICED))
        assert spec["annotations"]["bcd.dev/cgroup-parent"] == SLICE, spec.get("annotations")
        env = node.read("/run/bcd/allocations/%s.env" % SLICED) or ""
        assert "BCD_CGROUP_PARENT=%s" % SLICE in env.splitlines(), env
        # The slice is systemd's, not a fakehw host's record.
        assert not node.exists("/run/bcd/slices"), "a fakehw slice record directory exists on a real host"


def test_a_hold_without_limits_gets_no_slice(node, generation_1):  # pylint: disable=redefined-outer-name
    with node.explained():
        assert PLAIN in holds_by_id(generation_1)
        shown = node.show("bcd-alloc-%s.slice" % PLAIN, "LoadState", "ActiveState")
        assert shown["ActiveState"] == "inactive", shown
        listed = node.nsenter("ls", "/sys/fs/cgroup/bcd.slice/bcd-alloc.slice").stdout.split()
        assert [name for name in listed if name.startswith("bcd-alloc-")] == [SLICE], listed
        spec = json.loads(node.read("/etc/cdi/bcd-%s.json" % PLAIN))
        assert "bcd.dev/cgroup-parent" not in (spec.get("annotations") or {}), spec.get("annotations")


def test_the_helper_runs_as_root_and_the_passes_as_bcd(node, generation_1):  # pylint: disable=redefined-outer-name
    del generation_1
    with node.explained():
        helper = node.show("bcd-holds-helper.service", "ActiveState", "SubState", "User", "MainPID", "UnitFileState")
        assert (helper["ActiveState"], helper["SubState"], helper["UnitFileState"]) == (
            "active", "running", "enabled"), helper
        assert helper["User"] in ("", "root"), helper  # no User=: root
        status = node.read("/proc/%s/status" % helper["MainPID"]) or ""
        uids = [line.split()[1:] for line in status.splitlines() if line.startswith("Uid:")]
        assert uids == [["0", "0", "0", "0"]], "the helper's process runs as %s" % uids
        # Only bcd (and root) may connect: the socket is bcd's, mode 0600.
        assert node.owners(HELPER_SOCKET)[HELPER_SOCKET] == "bcd:root 600", node.owners(HELPER_SOCKET)

        for unit in ("bcd-holds-converge.service", "bcd-holds-retry.service"):
            shown = node.show(unit, "User", "ExecStart")
            assert shown["User"] == "bcd", (unit, shown)
            assert "--helper-socket %s" % HELPER_SOCKET in shown["ExecStart"], (unit, shown["ExecStart"])
        assert node.show("bcd-holds-converge.service", "UnitFileState")["UnitFileState"] == "enabled"

        for timer, service, every in (("bcd-holds-drift.timer", "bcd-holds-converge.service", "10min"),
                                      ("bcd-holds-retry.timer", "bcd-holds-retry.service", "30s")):
            shown = node.show(timer, "ActiveState", "SubState", "UnitFileState", "Triggers", "TimersMonotonic")
            assert (shown["ActiveState"], shown["SubState"], shown["UnitFileState"], shown["Triggers"]) == (
                "active", "waiting", "enabled", service), (timer, shown)
            assert timer_setting(shown["TimersMonotonic"], "OnActiveUSec") == every, (timer, shown)
            assert timer_setting(shown["TimersMonotonic"], "OnUnitInactiveUSec") == every, (timer, shown)

        owners = node.owners("/usr/local/bin/bcd-holds", "/var/lib/bcd", "/etc/cdi/bcd-%s.json" % SLICED,
                             "/etc/systemd/system/bcd-holds-converge.service")
        assert owners["/usr/local/bin/bcd-holds"] == "root:root 755", owners
        assert owners["/var/lib/bcd"] == "bcd:bcd 700", owners
        assert owners["/etc/cdi/bcd-%s.json" % SLICED] == "root:root 644", owners
        assert owners["/etc/systemd/system/bcd-holds-converge.service"] == "root:root 644", owners
        state_files = node.nsenter("find", "/var/lib/bcd", "-mindepth", "1").stdout.split()
        assert state_files, "the pass left nothing in /var/lib/bcd"
        wrong = {path: who for path, who in node.owners(*state_files).items() if not who.startswith("bcd:bcd ")}
        assert not wrong, "state files the timers' passes (as bcd) could not replace: %s" % wrong


def test_root_writes_the_metrics_in_a_unit_of_its_own_after_a_timer_pass(node, generation_1):  # pylint: disable=redefined-outer-name
    """Issue 22: no root (+) line in the bcd account's pass units; the pass starts bcd-holds-metrics.service
    (OnSuccess=), which runs as root in /, with no environment of the account's, and writes the textfile."""
    del generation_1
    metrics = "bcd-holds-metrics.service"
    with node.explained(metrics):
        for unit in ("bcd-holds-converge.service", "bcd-holds-retry.service"):
            shown = node.show(unit, "User", "OnSuccess", "OnFailure")
            assert shown["User"] == "bcd", (unit, shown)
            stop_post = node.nsenter("systemctl", "show", "--property=ExecStopPost", unit).stdout.strip()
            assert stop_post in ("", "ExecStopPost="), (unit, stop_post)
            assert shown["OnSuccess"] == metrics and shown["OnFailure"] == metrics, (unit, shown)
        node.nsenter("rm", "-f", METRICS_TEXTFILE)
        run_timer_pass(node)
        deadline = time.monotonic() + 30
        while not node.exists(METRICS_TEXTFILE) and time.monotonic() < deadline:
            time.sleep(0.5)
        assert node.exists(METRICS_TEXTFILE), "no metrics textfile after a timer pass"
        shown = node.show(metrics, "Result", "ExecMainStatus", "User", "WorkingDirectory", "Environment")
        assert (shown["Result"], shown["ExecMainStatus"]) == ("success", "0"), shown
        assert shown["User"] in ("", "root") and shown["WorkingDirectory"] == "/", shown
        assert not shown["Environment"], shown
        env_files = node.nsenter("systemctl", "show", "--property=EnvironmentFiles", metrics).stdout.strip()
        assert env_files in ("", "EnvironmentFiles="), env_files
        assert node.owners(METRICS_TEXTFILE)[METRICS_TEXTFILE] == "root:root 644", node.owners(METRICS_TEXTFILE)
        text = node.read(METRICS_TEXTFILE) or ""
        assert 'bcd_holds{' in text and 'bcd_last_pass_timestamp_seconds' in text, text[:2000]


def test_the_drift_pass_makes_a_stopped_slice_again(node, generation_1):  # pylint: disable=redefined-outer-name
    del generation_1
    with node.explained(SLICE):
        # By hand: stop the slice and drop its runtime properties (what a reboot also does).
        node.nsenter("systemctl", "stop", SLICE)
        node.nsenter("systemctl", "revert", SLICE)
        assert_slice_gone(node)
        assert node.show(SLICE, "MemoryMax")["MemoryMax"] == "infinity", "revert left the slice's properties"

        cursor = run_timer_pass(node)
        assert_slice(node)
        records, text = node.journal_text("bcd-holds-converge.service", cursor, "section:")
        assert "create %s" % SLICE in text and "again" in text, "the pass did not say it made the slice again:\n" + text
        # The pass ran as bcd (every line it logged came from a process of bcd's), and the
        # root helper made the slice for it.
        bcd = node.uid_of("bcd")
        own = [r for r in records if r.get("_PID") != "1"]
        assert own and all(r.get("_UID") == str(bcd) for r in own), sorted({r.get("_UID") for r in own})
        wanted = "uid %d: slice.apply %s" % (bcd, SLICE)
        _records, helper = node.journal_text("bcd-holds-helper.service", cursor, wanted)
        assert wanted in helper, "the helper did not make the slice:\n" + helper


def test_the_drift_pass_sets_a_property_changed_by_hand_again_and_otherwise_does_nothing(node, generation_1):  # pylint: disable=redefined-outer-name
    del generation_1
    with node.explained(SLICE):
        cursor = run_timer_pass(node)  # on a converged node a drift pass changes nothing
        _records, text = node.journal_text("bcd-holds-converge.service", cursor, "section:")
        assert "nothing to do" in text, "a drift pass on a converged node planned work:\n" + text
        node.nsenter("systemctl", "set-property", "--runtime", SLICE, "MemoryMax=1073741824")
        assert node.show(SLICE, "MemoryMax")["MemoryMax"] == "1073741824"
        cursor = run_timer_pass(node)
        assert_slice(node)  # every property as the hold's limits say again
        _records, text = node.journal_text("bcd-holds-converge.service", cursor, "section:")
        assert "set %s" % SLICE in text and "differ" in text, "the pass did not say it set the slice again:\n" + text


def test_a_release_leaves_a_busy_slice_until_its_process_exits(node, generation_1):  # pylint: disable=redefined-outer-name
    del generation_1
    with node.explained(SLICE, WORKLOAD):
        assert_slice(node)
        node.nsenter("systemd-run", "--quiet", "--slice=%s" % SLICE, "--unit=%s" % WORKLOAD, "sleep", "300")
        workload = node.show(WORKLOAD, "ActiveState", "MainPID", "ControlGroup")
        assert workload["ActiveState"] == "active", workload
        assert workload["ControlGroup"] == "/bcd.slice/bcd-alloc.slice/%s/%s" % (SLICE, WORKLOAD), workload
        assert parse_cgroup_events(node.read(cgroup_dir(SLICE) + "/cgroup.events")).get("populated") == "1"

        # The release: a new input without the sliced hold, through the role (its pass runs as root).
        released = node.run_role(2, [plain_hold()], "gen2-release")
        after = node.show(WORKLOAD, "ActiveState", "MainPID")
        assert after == {"ActiveState": "active", "MainPID": workload["MainPID"]}, "the release stopped the workload"
        assert_slice(node)  # kept, with its limits
        assert released["pass"]["section"]["state"] == "CONVERGED", released["pass"]["section"]
        assert SLICED not in holds_by_id(released)
        assert not node.exists("/etc/cdi/bcd-%s.json" % SLICED), "the released hold's spec is still there"
        release = [a for a in actions_of(released, SLICED) if a["action"] == "release"]
        assert release and "still runs a workload and is kept" in release[0]["text"], actions_of(released, SLICED)

        # The timer's pass (as bcd, through the helper) leaves it alone too while the process runs.
        cursor = run_timer_pass(node)
        assert_slice(node)
        assert node.show(WORKLOAD, "ActiveState")["ActiveState"] == "active"
        _records, text = node.journal_text("bcd-holds-converge.service", cursor, "keep %s" % SLICE)
        assert "keep %s" % SLICE in text, text

        # The process exits; the slice is empty but systemd keeps it until someone stops it.
        node.nsenter("systemctl", "kill", "--signal=SIGKILL", WORKLOAD)
        deadline = time.monotonic() + 30
        while node.show(WORKLOAD, "ActiveState")["ActiveState"] not in ("inactive", "failed"):
            assert time.monotonic() < deadline, "the workload did not exit after SIGKILL"
            time.sleep(0.2)
        assert parse_cgroup_events(node.read(cgroup_dir(SLICE) + "/cgroup.events")).get("populated") == "0"
        assert node.show(SLICE, "ActiveState")["ActiveState"] == "active"

        cursor = run_timer_pass(node)
        assert_slice_gone(node)
        _records, text = node.journal_text("bcd-holds-converge.service", cursor, "stop %s" % SLICE)
        assert "stop %s" % SLICE in text, text
        wanted = "uid %d: slice.stop %s" % (node.uid_of("bcd"), SLICE)
        _records, helper = node.journal_text("bcd-holds-helper.service", cursor, wanted)
        assert wanted in helper, "the helper did not stop the slice:\n" + helper
        assert node.exists("/etc/cdi/bcd-%s.json" % PLAIN), "the plain hold went with the slice"


def test_the_root_units_rate_at_most_5_0_as_this_node_s_systemd_loaded_them(node, generation_1):  # pylint: disable=redefined-outer-name
    """Issue 33, item 4: ``systemd-analyze security`` online, over the node's own D-Bus: the units as its
    systemd loaded them (drop-ins, its defaults, what this version knows of each setting), not the files."""
    del generation_1
    with node.explained(*SANDBOXED):
        too_exposed = []
        for unit in SANDBOXED:
            assert node.show(unit, "LoadState")["LoadState"] == "loaded", unit
            level, text = node.security(unit)
            assert level is not None, "systemd-analyze security printed no overall exposure for %s:\n%s" % (
                unit, text[-3000:])
            node.exposures[unit] = level
            if level > MAX_EXPOSURE:
                too_exposed.append("%s rates %.1f, above %.1f; its worst settings:\n  %s" % (
                    unit, level, MAX_EXPOSURE, "\n  ".join(worst_exposures(text))))
        assert not too_exposed, "on %s (%s):\n%s" % (
            node.release, node.versions.get("systemd (container PID 1)"), "\n".join(too_exposed))


# The capabilities by number (linux/capability.h), to read a bounding set in /proc/PID/status.
CAPABILITIES = (
    "chown", "dac_override", "dac_read_search", "fowner", "fsetid", "kill", "setgid", "setuid", "setpcap",
    "linux_immutable", "net_bind_service", "net_broadcast", "net_admin", "net_raw", "ipc_lock", "ipc_owner",
    "sys_module", "sys_rawio", "sys_chroot", "sys_ptrace", "sys_pacct", "sys_admin", "sys_boot", "sys_nice",
    "sys_resource", "sys_time", "sys_tty_config", "mknod", "lease", "audit_write", "audit_control", "setfcap",
    "mac_override", "mac_admin", "syslog", "wake_alarm", "block_suspend", "audit_read", "perfmon", "bpf",
    "checkpoint_restore")
ANSWERED = re.compile(r"\buid \d+: (%s) " % "|".join(re.escape(op) for op in HELPER_OPS))
# What systemd logs when a service's process dies or the service fails (not on a stop it was asked for).
HELPER_FAILED = ("Main process exited", "Failed with result", "Scheduled restart job")


def helper_history(node):  # pylint: disable=redefined-outer-name
    """The helper's life since the node booted, out of the journal: the PIDs of its processes (each logs
    "helper listening on" once it serves), the ``(PID, op)`` of every request it logged as answered
    ("INFO: uid N: OP ..."), and what systemd said of a process that died or failed."""
    started, answered, failed = [], [], []
    for record in node.journal_records(HELPER):
        message = str(record.get("MESSAGE") or "")
        if record.get("_PID") == "1":
            if any(words in message for words in HELPER_FAILED):
                failed.append(message)
        elif "helper listening on" in message:
            started.append(record.get("_PID"))
        else:
            found = ANSWERED.search(message)
            if found:
                answered.append((record.get("_PID"), found.group(1)))
    return started, answered, failed


def test_the_sandboxed_helper_releases_and_binds_for_bcd_and_never_failed(node, generation_1):  # pylint: disable=redefined-outer-name
    """Issue 33, item 4: the sandbox leaves the helper its work. As ``bcd``, over the socket, the plain
    hold's spec and env file are removed (a release) and written again (a bind): the files go, then come
    back as the role's pass left them, ``root:root 0644``, and the running helper answered each. Every
    request it answered this boot (the timer passes' ``slice.apply`` and ``slice.stop`` of the tests above
    included) came from a helper process systemd started for the unit, and none of them died or failed
    (the role restarts the helper, by a stop, when the library it runs changed). The process running now
    is sandboxed: no new privileges, a seccomp filter, the unit's capabilities only, a mount namespace of
    its own."""
    del generation_1
    spec_path = "/etc/cdi/bcd-%s.json" % PLAIN
    env_path = "/run/bcd/allocations/%s.env" % PLAIN
    with node.explained():
        spec_before, env_before = node.read(spec_path), node.read(env_path)
        assert spec_before and env_before is not None, "the plain hold is not bound: %r %r" % (spec_before, env_before)
        generation = int(json.loads(spec_before)["annotations"]["bcd.dev/generation"])
        bcd = node.uid_of("bcd")
        cursor = node.cursor()

        for kind in ("cdi", "allocation-env"):  # a release: the spec first
            reply = node.helper_request({"op": "hold.remove", "kind": kind, "allocation_id": PLAIN})
            assert reply == {"ok": True}, ("hold.remove", kind, reply)
        assert not node.exists(spec_path) and not node.exists(env_path), "the helper removed nothing"
        hold = dict(plain_hold(), generation=generation)
        for kind in ("allocation-env", "cdi"):  # a bind: the env file first
            reply = node.helper_request({"op": "hold.write", "kind": kind, "hold": hold})
            assert reply == {"ok": True}, ("hold.write", kind, reply)
        assert node.read(spec_path) == spec_before, "the spec the helper wrote differs from the pass's"
        assert node.read(env_path) == env_before, "the env file the helper wrote differs from the pass's"
        owners = node.owners(spec_path, env_path)
        assert owners == {spec_path: "root:root 644", env_path: "root:root 644"}, owners

        helper = node.show(HELPER, "ActiveState", "MainPID", "NRestarts", "CapabilityBoundingSet")
        assert helper["ActiveState"] == "active" and helper["NRestarts"] == "0", helper
        wanted = "uid %d: hold.write cdi %s" % (bcd, PLAIN)
        records, text = node.journal_text(HELPER, cursor, wanted)
        for line in ("uid %d: hold.remove cdi %s" % (bcd, PLAIN), "uid %d: hold.remove allocation-env %s" % (bcd, PLAIN),
                     "uid %d: hold.write allocation-env %s" % (bcd, PLAIN), wanted):
            mine = [r for r in records if line in str(r.get("MESSAGE"))]
            assert mine, "the helper did not log %r:\n%s" % (line, text)
            assert mine[0].get("_PID") == helper["MainPID"], "%r came from %s, not the helper's process %s" % (
                line, mine[0].get("_PID"), helper["MainPID"])
        started, answered, failed = helper_history(node)
        assert not failed, "a helper process died or failed this boot: %s" % failed
        assert started and started[-1] == helper["MainPID"], (started, helper["MainPID"])
        strays = [(pid, op) for pid, op in answered if pid not in started]
        assert not strays, "answered by no helper process systemd started: %s (started: %s)" % (strays, started)

        status = dict(line.split(":", 1) for line in (node.read("/proc/%s/status" % helper["MainPID"]) or "").splitlines()
                      if ":" in line)
        assert status.get("NoNewPrivs", "").strip() == "1", status.get("NoNewPrivs")
        assert status.get("Seccomp", "").strip() == "2", "no seccomp filter on the helper: %s" % status.get("Seccomp")
        # The unit's bounding set, within the container's own (systemd-nspawn keeps no CAP_SYSLOG, for one).
        container = dict(line.split(":", 1) for line in (node.read("/proc/1/status") or "").splitlines() if ":" in line)
        unit_mask = sum(1 << CAPABILITIES.index(name[len("cap_"):]) for name in helper["CapabilityBoundingSet"].split())
        assert int(status["CapBnd"], 16) == unit_mask & int(container["CapBnd"], 16), (
            "the helper's bounding set is %s, the unit's %s (%#x) within the container's %s" % (
                status["CapBnd"].strip(), helper["CapabilityBoundingSet"], unit_mask, container["CapBnd"].strip()))
        own_ns = node.nsenter("readlink", "/proc/%s/ns/mnt" % helper["MainPID"], "/proc/1/ns/mnt").stdout.split()
        assert len(own_ns) == 2 and own_ns[0] != own_ns[1], "the helper shares systemd's mount namespace: %s" % own_ns


# --- the node delivers by itself, and a fault reaches the rulebook with no playbook run (issue 45) ----------------

ENGINE = (os.environ.get("BCD_E2E_RULEBOOKS", "").split() or ["="])[-1].partition("=")[2]  # the newest engine
EDA_TOKEN = "eda-systemd-4f0a9c2e71b3"
DELIVER_UNITS = ("bcd-holds-deliver.service", "bcd-holds-deliver.timer", "bcd-holds-deliver.path")
FAULTY = GPUS[1]["uuid"]


class Engine(object):
    """ansible-rulebook with the shipped bcd.devices.gpu_life, on the machine, reaching the node over ssh."""

    def __init__(self, node):  # pylint: disable=redefined-outer-name
        self.dir = os.path.join(node.dir, "eda")
        self.keys = os.path.join(self.dir, "keys")
        os.makedirs(self.keys)
        os.makedirs(os.path.join(self.dir, "state"))
        self.port = bcd_systemd.free_loopback_port()
        self.url = "http://127.0.0.1:%d/v1/events" % self.port
        self.log = os.path.join(self.dir, "rulebook.log")
        inventory = os.path.join(self.dir, "inventory.yml")
        with open(inventory, "w") as handle:  # the node named by its node_id, its host name
            json.dump({"all": {"hosts": {bcd_systemd.HOSTNAME: dict(node.ssh_host(), bcd_wait_delay=2)}}}, handle)
        env = dict(node.ansible_env(), BCD_GATEWAY_PORT=str(self.port), BCD_GATEWAY_TOKEN=EDA_TOKEN,
                   BCD_NODE_KEYS_DIR=self.keys, BCD_GATEWAY_STATE_DIR=os.path.join(self.dir, "state"),
                   PATH=os.pathsep.join((os.path.dirname(bcd_systemd.ANSIBLE_PLAYBOOK), os.path.dirname(ENGINE),
                                         os.environ["PATH"])))
        with open(self.log, "wb") as log:
            self.proc = subprocess.Popen(  # pylint: disable=consider-using-with
                [ENGINE, "--rulebook", "bcd.devices.gpu_life", "--inventory", inventory, "--env-vars",
                 "BCD_GATEWAY_PORT,BCD_GATEWAY_TOKEN,BCD_NODE_KEYS_DIR,BCD_GATEWAY_STATE_DIR"],
                env=env, cwd=self.dir, stdout=log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
                start_new_session=True)

    def output(self):
        with open(self.log, encoding="utf-8", errors="replace") as handle:
            return handle.read()

    def wait_for(self, pattern, timeout):
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if re.search(pattern, self.output(), re.MULTILINE):
                return
            assert self.proc.poll() is None, "ansible-rulebook stopped:\n" + self.output()[-6000:]
            time.sleep(0.5)
        pytest.fail("ansible-rulebook did not print %r in %d s:\n%s" % (pattern, timeout, self.output()[-8000:]))

    def wait_until_listening(self, timeout):
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            assert self.proc.poll() is None, "ansible-rulebook stopped:\n" + self.output()[-6000:]
            try:
                socket.create_connection(("127.0.0.1", self.port), timeout=1).close()
                return
            except OSError:
                time.sleep(0.2)
        pytest.fail("the source did not listen on %d in %d s:\n%s" % (self.port, timeout, self.output()[-6000:]))

    def stop(self):
        if self.proc.poll() is None:
            os.killpg(self.proc.pid, 15)
            try:
                self.proc.wait(30)
            except subprocess.TimeoutExpired:
                os.killpg(self.proc.pid, 9)
                self.proc.wait(10)


def node_status(node):  # pylint: disable=redefined-outer-name
    return json.loads(node.nsenter("bcd-holds", "status", "--json").stdout)


@pytest.fixture(scope="module")
def recovered(node, generation_1):  # pylint: disable=redefined-outer-name
    """The role installs the node's own delivery; a GPU faults; the drift timer's pass (started as the timer starts
    it) journals its GPUUnhealthy, the delivery units post it, and the rulebook recovers the GPU over ssh."""
    del generation_1
    if not ENGINE or not os.access(ENGINE, os.X_OK):
        pytest.skip("needs ansible-rulebook: hack/e2e.sh builds it and sets BCD_E2E_RULEBOOKS")
    engine = Engine(node)
    found = {}
    try:
        with open(os.path.join(engine.keys, bcd_systemd.HOSTNAME + ".pub"), "w") as handle:
            handle.write(node_status(node)["node_public_key"] + "\n")  # enrolment
        engine.wait_until_listening(120)
        found["role"] = node.run_role(20, [], "eda", {
            "bcd_holds_gateway_url": engine.url, "bcd_holds_gateway_token": EDA_TOKEN,
            "bcd_holds_deliver_interval": 5})
        found["units"] = {unit: node.show(unit, "ActiveState", "UnitFileState") for unit in DELIVER_UNITS}
        found["units"]["bcd-holds-deliver.service"].update(node.show("bcd-holds-deliver.service", "User"))
        cursor = node.cursor()
        node.nsenter("mkdir", "-p", bcd_systemd.FAULTS_DIR)
        node.nsenter("touch", "%s/%s" % (bcd_systemd.FAULTS_DIR, FAULTY))
        started = time.monotonic()
        node.nsenter("systemctl", "start", "bcd-holds-converge.service")  # what bcd-holds-drift.timer starts
        engine.wait_for(r"^%s\s+: ok=\d+\s+changed=\d+\s+unreachable=0\s+failed=0" % re.escape(bcd_systemd.HOSTNAME),
                        240)
        found["seconds"] = time.monotonic() - started
        node.nsenter("systemctl", "start", "bcd-holds-converge.service")  # the next pass finds it healthy
        found["status"] = node_status(node)
        found["resets"] = node.read(bcd_systemd.RESET_LOG)
        found["deliver"] = node.show("bcd-holds-deliver.service", "ExecMainStatus", "User")
        found["deliveries"], _text = node.journal_text("bcd-holds-deliver.service", cursor, "accepted")
        found["output"] = engine.output()
    finally:
        engine.stop()
    return found


def test_the_role_installs_the_node_s_own_delivery_as_bcd(node, recovered):  # pylint: disable=redefined-outer-name
    del node
    units = recovered["units"]
    assert units["bcd-holds-deliver.service"]["User"] == "bcd", units
    assert units["bcd-holds-deliver.timer"]["ActiveState"] == "active", units
    assert units["bcd-holds-deliver.path"]["ActiveState"] == "active", units
    assert recovered["deliver"]["ExecMainStatus"] == "0", recovered["deliver"]


def test_a_fault_reaches_the_rulebook_with_no_playbook_run_and_the_gpu_is_recovered(node, recovered):  # pylint: disable=redefined-outer-name
    del node
    assert recovered["deliveries"], "bcd-holds-deliver.service logged no delivery after the fault"
    assert recovered["resets"] == FAULTY + "\n", recovered["resets"]  # nvidia-smi --gpu-reset -i, once
    gpu = next(g for g in recovered["status"]["gpus"] if g["uuid"] == FAULTY)
    assert gpu["health"] == [] and gpu["maintenance"] is None, gpu
    assert "GPUUnhealthy" not in [c["type"] for c in recovered["status"]["conditions"]]
    print("\nfault to recovery on the systemd node: %.1f s" % recovered["seconds"])
