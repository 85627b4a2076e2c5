# -*- coding: utf-8 -*-
# Copyright: contributors to bcd.devices
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""A real systemd makes the MIG layout again at boot, and the kept holds follow (issue 48).

The systemd node of tests/e2e/test_systemd_slices.py boots once more per release, as a fakehw node of two
MIG-capable GPUs (``NVIDIA A100-SXM4-40GB``, MIG off; ``FAKEHW``, with a ``driver`` entry so that NVIDIA's CDI
spec is checked against the node as on a real one). Before the role runs, the node gets a stand-in for NVIDIA's
``nvidia-cdi-refresh.service`` with the real unit's type, ordering and install (container toolkit 1.18 and
later, ``deployments/systemd/nvidia-cdi-refresh.service`` of NVIDIA/nvidia-container-toolkit: a oneshot that
remains active after it ran, ``After=multi-user.target``, ``WantedBy=multi-user.target``), enabled and started
as the toolkit's package does; instead of ``nvidia-ctk cdi generate`` it writes NVIDIA's spec from the fakehw file
(each GPU and each MIG device by UUID, a MIG device with its ``/dev/nvidia-caps`` nodes) and logs each run. The
role ``bcd.devices.bcd_holds`` then converges it over ssh with ``bcd_holds_mig_layout`` (GPU 0: a ``3g.20gb`` at 4
and two ``2g.10gb``) and a kept ``gpu.mig`` hold on GPU 0's gi1/ci0 (``m_kept``). Asking systemd itself:

* the role makes the layout and enables ``bcd-holds-mig-layout.service``, which systemd loads ordered before the
  pass (``bcd-holds-converge.service``) and NVIDIA's refresh, after ``nvidia-persistenced.service``;
* the role has NVIDIA's refresh generate its spec after the layout changed (a restart: the unit remains active
  after its boot run, and a start would do nothing), before the pass binds the hold, which gets the MIG device's
  own nodes from it; a re-run that changes nothing does not refresh;
* a reboot: the fakehw file loses every MIG instance and gets a fresh boot id, which the node then reads as the
  kernel's; ``multi-user.target`` is started again, as a boot starts it, with the boot unit, the pass and the
  refresh stopped. systemd runs the boot unit before the pass, and NVIDIA's refresh after ``multi-user.target``,
  which waits for the pass: the same GI/CI come back at their placements with fresh MIG UUIDs, journaled as
  ``MIGInstanceCreated`` with the reason ``BootLayout`` and the new boot id (none ``ChangedOutside``), the unit
  exits 0 and the state files stay the pass account's. The boot pass sees NVIDIA's spec of before the reboot;
  the drift timer's pass after the refresh renders the kept hold's spec and env file with the new MIG UUID and
  the device's nodes, and ``VendorSpecStale`` is gone.

Each failure prints what systemd and the journal of the units said.
Run with `bash hack/e2e.sh -k mig`; see docs/verified-consumers.md.
"""

from __future__ import annotations

import json
import os
import re
import sys
import time

import pytest

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "systemd"))

import bcd_systemd  # noqa: E402  pylint: disable=wrong-import-position,import-error
from bcd_systemd import GPUS  # noqa: E402  pylint: disable=import-error

pytestmark = pytest.mark.skipif(
    not (bcd_systemd.TARBALLS and bcd_systemd.WORK and all(map(os.path.isfile, bcd_systemd.TARBALLS.values()))),
    reason="the systemd part of the end-to-end suite: run it with `bash hack/e2e.sh -k mig` (or `make e2e`)")
RELEASES = list(bcd_systemd.TARBALLS) or ["(none)"]

G0, G1 = GPUS[0]["uuid"], GPUS[1]["uuid"]
A100 = "NVIDIA A100-SXM4-40GB"
LAYOUT = [{"devices": [0], "mig_enabled": True,
           "instances": [{"profile": "3g.20gb", "placement": 4}, {"profile": "2g.10gb", "count": 2}]}]
# (gi, ci, GPU instance profile, placement) of GPU 0 once LAYOUT is made: the lowest free GI id each, in order.
MADE = [(1, 0, "3g.20gb", 4), (2, 0, "2g.10gb", 0), (3, 0, "2g.10gb", 2)]
KEPT = "m_kept"
KEPT_DEVICE = "%s/gi1/ci0" % G0
UNIT = "bcd-holds-mig-layout.service"
PASS = "bcd-holds-converge.service"
REFRESH = "nvidia-cdi-refresh.service"
FAKEHW = "/etc/bcd-e2e/fakehw.json"
VENDOR_SPEC = "/var/run/cdi/nvidia.yaml"
REFRESH_LOG = "/var/log/bcd-e2e-cdi-refresh.log"
REFRESH_PROGRAM = "/usr/local/lib/bcd-e2e/cdi-refresh.py"
BOOT_ID = "/proc/sys/kernel/random/boot_id"
STATE_DIR = "/var/lib/bcd"
KEPT_ENV = "/run/bcd/allocations/%s.env" % KEPT
KEPT_SPEC = "/etc/cdi/bcd-%s.json" % KEPT
NODE_ARGS = ("--state-dir", STATE_DIR, "--fakehw", FAKEHW)


def caps(index, gi):
    """The two /dev/nvidia-caps minors the stand-in's spec gives GPU ``index``'s GPU instance ``gi`` (as
    hack/fakehw_node.py numbers them)."""
    first = 3 + index * 20 + gi * 2
    return first, first + 1


def fakehw():
    """Two A100 40GB, MIG off, and the node's /dev as the vendor spec checks see it (every node the stand-in's spec
    may name: so the spec is judged on its MIG devices alone)."""
    nodes = {"/dev/nvidiactl": "195:255", "/dev/nvidia-uvm": "510:0"}
    for gpu in GPUS:
        nodes["/dev/nvidia%d" % gpu["minor"]] = "195:%d" % gpu["minor"]
        for gi in range(1, 8):
            for minor in caps(gpu["index"], gi):
                nodes["/dev/nvidia-caps/nvidia-cap%d" % minor] = "511:%d" % minor
    return {"node_id": bcd_systemd.HOSTNAME, "boot_id": "6f0c1e9e-1c7a-4a43-9a9e-0000000000e2",
            "gpus": [{"uuid": gpu["uuid"], "index": gpu["index"], "minor": gpu["minor"], "numa_node": 0,
                      "pci_bus_id": gpu["pci"][4:].lower(), "name": A100, "mig_mode": False} for gpu in GPUS],
            "kubelet": {"reachable": True, "pods": []},
            "driver": {"version": "575.64.03", "device_nodes": nodes}}


# The stand-in for `nvidia-ctk cdi generate`: NVIDIA's spec for what the fakehw file has now (GPU 1 of 2 by index and
# UUID, each MIG device by "<gpu>:<n>" and UUID with its parent's node and two nvidia-caps nodes, "all"), written
# atomically; each run appends "refresh <MIG UUIDs named>" to the log.
REFRESH_SCRIPT = r'''
import json, os, sys
import yaml
fakehw, out, log = sys.argv[1:4]
with open(fakehw) as handle:
    hw = yaml.safe_load(handle)
devices, named = [], []
for gpu in hw["gpus"]:
    node = {"path": "/dev/nvidia%d" % gpu["minor"]}
    for name in (str(gpu["index"]), gpu["uuid"]):
        devices.append({"name": name, "containerEdits": {"deviceNodes": [dict(node)]}})
    made = sorted((m for m in gpu.get("mig") or [] if m.get("uuid")), key=lambda m: (m["gi"], m["ci"]))
    for number, inst in enumerate(made):
        first = 3 + gpu["index"] * 20 + inst["gi"] * 2
        for name in ("%d:%d" % (gpu["index"], number), inst["uuid"]):
            devices.append({"name": name, "containerEdits": {"deviceNodes": [
                dict(node), {"path": "/dev/nvidia-caps/nvidia-cap%d" % first},
                {"path": "/dev/nvidia-caps/nvidia-cap%d" % (first + 1)}]}})
        named.append(inst["uuid"])
devices.append({"name": "all", "containerEdits": {"deviceNodes": [
    {"path": "/dev/nvidia%d" % gpu["minor"]} for gpu in hw["gpus"]]}})
spec = {"cdiVersion": "0.5.0", "kind": "nvidia.com/gpu", "devices": devices,
        "containerEdits": {"deviceNodes": [{"path": "/dev/nvidiactl"}, {"path": "/dev/nvidia-uvm"}]}}
os.makedirs(os.path.dirname(out), exist_ok=True)
with open(out + ".tmp", "w") as handle:
    yaml.safe_dump(spec, handle)
os.chmod(out + ".tmp", 0o644)
os.rename(out + ".tmp", out)
with open(log, "a") as handle:
    handle.write(" ".join(["refresh"] + named) + "\n")
'''

# NVIDIA's unit as the toolkit ships it (the conditions on nvidia-smi, nvidia-ctk and the kernel module left out,
# and ExecStart the stand-in's).
REFRESH_UNIT = """# bcd e2e: a stand-in for NVIDIA's nvidia-cdi-refresh.service (container toolkit 1.18 and later), with its
# type, ordering and install; it writes %(spec)s from the fakehw file instead of nvidia-ctk cdi generate.
[Unit]
Description=Refresh NVIDIA CDI specification file (bcd e2e stand-in)
After=multi-user.target

[Service]
Type=oneshot
ExecStart=/usr/bin/python3 -I %(program)s %(fakehw)s %(spec)s %(log)s
RemainAfterExit=yes

[Install]
WantedBy=multi-user.target
""" % {"program": REFRESH_PROGRAM, "fakehw": FAKEHW, "spec": VENDOR_SPEC, "log": REFRESH_LOG}

# fakehw_reboot from the library the role installed on the node: every MIG instance gone, a fresh boot id (printed).
REBOOT = r'''
import sys
sys.path.insert(0, "/usr/local/lib/bcd-holds")
from ansible_collections.bcd.devices.plugins.module_utils.node.fakehw_mig import fakehw_reboot
print(fakehw_reboot(sys.argv[1]))
'''

# systemd's catalog ids of a job's start and its end (in every release this suite boots).
JOB_STARTING = "7d4958e842da4a758f6c1cdc7b36dcc5"
JOB_DONE = "39f53479d3a045ac8e11786248231fbf"


def kept_hold():
    return {"allocation_id": KEPT, "reservation_id": "r_kept", "binding": "BINDING_HOLD",
            "devices": [{"id": KEPT_DEVICE, "device_class": "gpu.mig"}]}


ROLE_VARS = {"bcd_holds_fakehw": FAKEHW, "bcd_holds_mig_layout": LAYOUT}


def layout_of(node, uuid=G0):
    """``[(gi, ci, profile, placement, MIG uuid)]`` of a GPU, as the fakehw file has it now."""
    data = json.loads(node.read(FAKEHW) or "{}")
    gpu = next(g for g in data["gpus"] if g["uuid"] == uuid)
    return sorted((m["gi"], m.get("ci"), m.get("profile"), m.get("placement"), m.get("uuid")) for m in gpu.get("mig") or [])


def refreshes(node):
    """The stand-in's runs: the MIG UUIDs NVIDIA's spec named after each."""
    return [line.split()[1:] for line in (node.read(REFRESH_LOG) or "").splitlines()]


def node_events(node):
    """The node's unacknowledged events (``bcd-holds events``, as the pass account)."""
    out = node.nsenter("runuser", "-u", "bcd", "--", "/usr/local/bin/bcd-holds", "events", *NODE_ARGS).stdout
    return [json.loads(line) for line in out.splitlines() if line.startswith("{")]


def job_order(node, cursor, units):
    """``[(unit, "starting" | "done")]``: systemd's own messages on the jobs of ``units`` after ``cursor``, in the
    order it logged them (filtered here: see ``SystemdNode.journal_records``)."""
    order = []
    out = node.nsenter("journalctl", "--no-pager", "-o", "json", "--after-cursor", cursor).stdout
    for line in out.splitlines():
        record = json.loads(line)
        if record.get("_PID") != "1" or record.get("UNIT") not in units:
            continue
        kind = {JOB_STARTING: "starting", JOB_DONE: "done"}.get(record.get("MESSAGE_ID"))
        if kind:
            order.append((record["UNIT"], kind))
    return order


def wait_for(predicate, timeout, what):
    deadline = time.monotonic() + timeout
    while True:
        found = predicate()
        if found or time.monotonic() > deadline:
            assert found, "%s: not after %d s" % (what, timeout)
            return found
        time.sleep(0.5)


class MigSummary(object):
    """What the MIG part took on each node, in the terminal summary."""

    def __init__(self):
        self.lines = []

    def pytest_terminal_summary(self, terminalreporter):
        if self.lines:
            terminalreporter.section("bcd.devices e2e: MIG layout on systemd")
            for line in self.lines:
                terminalreporter.write_line(line)


SUMMARY_PLUGIN = "bcd-e2e-mig-summary"


@pytest.fixture(scope="module", params=RELEASES)
def node(request, pytestconfig):
    """A systemd node of one release booted as the fakehw node of two A100s, NVIDIA's refresh (the stand-in)
    installed, enabled and started as the toolkit's package does; powered off after its tests."""
    release = request.param
    files = {FAKEHW.lstrip("/"): (json.dumps(fakehw(), indent=1) + "\n", 0o644),
             REFRESH_PROGRAM.lstrip("/"): (REFRESH_SCRIPT, 0o644),
             "etc/systemd/system/" + REFRESH: (REFRESH_UNIT, 0o644)}
    booted = bcd_systemd.SystemdNode(release, bcd_systemd.TARBALLS[release], bcd_systemd.WORK, name="mig-" + release,
                                     files=files)
    summary = pytestconfig.pluginmanager.get_plugin(SUMMARY_PLUGIN)
    if summary is None:
        summary = MigSummary()
        pytestconfig.pluginmanager.register(summary, SUMMARY_PLUGIN)
    booted.timings, booted.notes = {}, []
    try:
        booted.boot()
        with booted.explained(REFRESH):
            booted.nsenter("systemctl", "enable", "--now", REFRESH)
        yield booted
    finally:
        booted.shutdown()
        if booted.timings:
            summary.lines.append("%-10s container boot %.1f s; %s" % (release, booted.boot_seconds, ", ".join(
                "%s %.1f s" % item for item in booted.timings.items())))
            summary.lines.extend("%-10s %s" % (release, note) for note in booted.notes)


@pytest.fixture(scope="module")
def first(node):  # pylint: disable=redefined-outer-name
    """The role's first run with the layout and the kept hold: what it made, and NVIDIA's spec after it."""
    with node.explained(UNIT, REFRESH):
        before = refreshes(node)
        started = time.monotonic()
        result = node.run_role(1, [kept_hold()], "mig-1", ROLE_VARS)
        node.timings["role with the layout"] = time.monotonic() - started
        return {"result": result, "refreshes_before": before, "refreshes": refreshes(node), "layout": layout_of(node),
                "spec": node.read(KEPT_SPEC), "env": node.read(KEPT_ENV)}


@pytest.fixture(scope="module")
def second(node, first):  # pylint: disable=redefined-outer-name
    """The same run again: nothing to change."""
    del first
    with node.explained(UNIT, REFRESH):
        started = time.monotonic()
        result = node.run_role(1, [kept_hold()], "mig-2", ROLE_VARS)
        node.timings["re-run"] = time.monotonic() - started
        return {"result": result, "refreshes": refreshes(node), "layout": layout_of(node), "output": node.last_playbook}


@pytest.fixture(scope="module")
def rebooted(node, second):  # pylint: disable=redefined-outer-name
    """A reboot, as far as MIG and systemd see one: the fakehw file's reboot (every instance gone, a fresh boot id,
    which the node then reads as the kernel's), then multi-user.target started again with the boot unit, the pass
    and NVIDIA's refresh stopped, as a boot starts them; then the drift timer's pass."""
    del second
    with node.explained(UNIT, PASS, REFRESH):
        found = {"layout_before": layout_of(node), "refreshes_before": refreshes(node)}
        cursor = node.cursor()
        started = time.monotonic()
        boot_id = node.nsenter("python3", "-I", "-c", REBOOT, FAKEHW).stdout.strip()
        # systemd-nspawn gave the container a boot id of its own, a file bound over the kernel's and then unlinked
        # (nothing can be mounted on it): the new one takes its place.
        node.nsenter("sh", "-c", 'mkdir -p /run/bcd-e2e && echo "$1" > /run/bcd-e2e/boot_id && '
                     '{ ! mountpoint -q "$2" || umount "$2"; } && mount --bind /run/bcd-e2e/boot_id "$2"',
                     "reboot", boot_id, BOOT_ID)
        found["boot_id"], found["node_boot_id"] = boot_id, (node.read(BOOT_ID) or "").strip()
        found["layout_gone"] = layout_of(node)
        node.nsenter("systemctl", "stop", UNIT, REFRESH, "multi-user.target")
        node.nsenter("systemctl", "start", "multi-user.target")
        node.nsenter("systemctl", "start", REFRESH)  # waits for its job, queued after multi-user.target
        node.timings["boot (the unit, the pass, the refresh)"] = time.monotonic() - started
        found["layout"] = layout_of(node)
        found["unit"] = node.show(UNIT, "ActiveState", "Result", "ExecMainStatus", "UnitFileState")
        found["order"] = job_order(node, cursor, (UNIT, PASS, REFRESH, "multi-user.target"))
        found["refreshes"] = refreshes(node)
        found["boot_env"] = node.read(KEPT_ENV)
        _records, found["boot_pass"] = node.journal_text(PASS, cursor, "")

        # what bcd-holds-drift.timer starts (every 10 minutes)
        node.nsenter("systemctl", "reset-failed", PASS)
        node.nsenter("systemctl", "start", PASS)
        found["pass"] = node.show(PASS, "Result", "ExecMainStatus")
        found["events"] = node_events(node)
        found["spec"], found["env"] = node.read(KEPT_SPEC), node.read(KEPT_ENV)
        found["status"] = json.loads(node.nsenter("runuser", "-u", "bcd", "--", "/usr/local/bin/bcd-holds", "status",
                                                  "--json", *NODE_ARGS).stdout)
        state_files = node.nsenter("find", STATE_DIR, "-mindepth", "1").stdout.split()
        found["owners"] = node.owners(*state_files) if state_files else {}
        new = next((row[4] for row in found["layout"] if row[:2] == (1, 0)), "?")
        node.notes = ["the boot pass, before NVIDIA's refresh, left %s's env file naming %s (gi1/ci0 is now %s)" % (
            KEPT, " ".join(line for line in (found["boot_env"] or "").splitlines()
                           if line.startswith("NVIDIA_VISIBLE_DEVICES=")), new)]
        return found


# ---------------------------------------------------------------------------------------


def test_the_role_makes_the_layout_and_systemd_orders_the_boot_unit_as_declared(node, first):  # pylint: disable=redefined-outer-name
    with node.explained(UNIT):
        assert first["result"]["service_mgr"] == "systemd", first["result"]
        assert [row[:4] for row in first["layout"]] == MADE, first["layout"]
        assert all(row[4] and row[4].startswith("MIG-") for row in first["layout"]), first["layout"]
        assert layout_of(node, G1) == [], "GPU 1 is not in the layout, and was changed"
        record = json.loads(node.read(STATE_DIR + "/mig-layout.json"))
        assert [inst["gi"] for inst in record["gpus"][G0]["instances"]] == [1, 2, 3], record

        shown = node.show(UNIT, "LoadState", "UnitFileState", "ActiveState", "Before", "After", "ExecStart", "User")
        assert (shown["LoadState"], shown["UnitFileState"]) == ("loaded", "enabled"), shown
        # Enabled for the next boot, never started by the role: the layout is the module's to make now.
        assert shown["ActiveState"] == "inactive", shown
        before, after = shown["Before"].split(), shown["After"].split()
        for unit in (PASS, "bcd-holds-retry.service", REFRESH):
            assert unit in before, "systemd does not order %s before %s: Before=%s" % (UNIT, unit, shown["Before"])
        for unit in ("nvidia-persistenced.service", "bcd-holds-helper.service"):
            assert unit in after, "systemd does not order %s after %s: After=%s" % (UNIT, unit, shown["After"])
        # the other side, as systemd loaded it: the pass after the boot unit
        assert UNIT in node.show(PASS, "After")["After"].split()
        assert "mig-layout --boot --state-dir %s --fakehw %s" % (STATE_DIR, FAKEHW) in shown["ExecStart"], shown
        assert shown["User"] in ("", "root"), shown
        wants = node.nsenter("ls", "/etc/systemd/system/multi-user.target.wants").stdout.split()
        assert UNIT in wants, wants


def test_nvidia_s_refresh_runs_after_a_layout_change_and_not_after_a_re_run(node, first, second):  # pylint: disable=redefined-outer-name
    with node.explained(REFRESH):
        # installed and started as the toolkit's package does: one run, before any MIG instance
        assert first["refreshes_before"] == [[]], first["refreshes_before"]
        # the role's run after the layout changed: NVIDIA's spec names the three new MIG devices ...
        assert first["refreshes"] == [[], [row[4] for row in first["layout"]]], first["refreshes"]
        # ... before the pass bound the hold, which got gi1/ci0's own nodes from it
        mig = first["layout"][0][4]
        assert "NVIDIA_VISIBLE_DEVICES=%s" % mig in (first["env"] or "").splitlines(), first["env"]
        spec = json.loads(first["spec"])
        nodes = [n["path"] for device in spec["devices"] for n in device["containerEdits"].get("deviceNodes", [])]
        assert ["/dev/nvidia-caps/nvidia-cap%d" % minor for minor in caps(0, 1)] == [
            n for n in nodes if n.startswith("/dev/nvidia-caps/")], nodes
        assert "VendorSpecStale" not in [c["type"] for c in first["result"]["pass"]["conditions"]], first["result"]

        # the re-run: nothing changed, so nothing refreshed (and nothing installed again: the role's short re-run)
        assert second["layout"] == first["layout"]
        assert "TASK [bcd.devices.bcd_holds : Record the install]" not in second["output"], second["output"][-3000:]
        assert second["refreshes"] == first["refreshes"], second["refreshes"]
        for task, outcome in (("Apply the MIG layout", "ok"),
                              ("Have NVIDIA's CDI refresh generate its spec for the new MIG devices", "skipping")):
            assert re.search(r"^TASK \[bcd\.devices\.bcd_holds : %s\] \**\n%s: " % (re.escape(task), outcome),
                             second["output"], re.M), (task, outcome, second["output"][-3000:])
        assert node.show(REFRESH, "ActiveState")["ActiveState"] == "active"
        # a node without NVIDIA's unit (an older toolkit): the exit status the role's task takes for "no such unit"
        absent = node.nsenter("systemctl", "restart", "bcd-e2e-absent.service", check=False)
        assert absent.returncode == 5, (absent.returncode, absent.stderr)


def test_a_reboot_makes_the_same_gi_ci_again_before_the_pass(node, rebooted):  # pylint: disable=redefined-outer-name
    with node.explained(UNIT, PASS, REFRESH):
        assert rebooted["node_boot_id"] == rebooted["boot_id"], "the node does not read the new boot id"
        assert rebooted["layout_gone"] == [], rebooted["layout_gone"]
        old, new = rebooted["layout_before"], rebooted["layout"]
        assert [row[:4] for row in new] == [row[:4] for row in old] == MADE, (old, new)
        assert not set(row[4] for row in old) & set(row[4] for row in new), "a MIG UUID survived the reboot"
        assert (rebooted["unit"]["Result"], rebooted["unit"]["ExecMainStatus"], rebooted["unit"]["ActiveState"]) == (
            "success", "0", "active"), rebooted["unit"]

        # as systemd ran them: the boot unit, then the pass; NVIDIA's refresh after multi-user.target, which waits
        # for the pass (a target is ordered after what it wants)
        order = rebooted["order"]

        def at(unit, kind):
            assert (unit, kind) in order, "systemd logged no %s of %s: %s" % (kind, unit, order)
            return order.index((unit, kind))
        assert at(UNIT, "done") < at(PASS, "starting"), order
        assert at(PASS, "done") < at("multi-user.target", "done") < at(REFRESH, "starting"), order

        created = [e for e in rebooted["events"] if e["type"] == "MIGInstanceCreated"
                   and e["body"]["reason"] == "BootLayout"]
        assert sorted(d for e in created for d in e["body"]["device_ids"]) == [
            "%s/gi%d/ci%d" % (G0, gi, ci) for gi, ci, _p, _s in MADE], created
        assert all(e["body"]["boot_id"] == rebooted["boot_id"] for e in created), created
        for row in new:
            assert any(row[4] in e["body"]["message"] for e in created), (row, created)
        assert not [e for e in rebooted["events"] if e["body"].get("reason") == "ChangedOutside"], rebooted["events"]
        wrong = dict((path, who) for path, who in rebooted["owners"].items() if not who.startswith("bcd:bcd "))
        assert not wrong, "state files the pass account could not replace after the root boot unit: %s" % wrong


def test_the_kept_hold_follows_with_the_new_mig_uuid_at_the_pass_after_nvidia_s_refresh(node, rebooted):  # pylint: disable=redefined-outer-name
    with node.explained(PASS, REFRESH):
        old = next(row[4] for row in rebooted["layout_before"] if row[:2] == (1, 0))
        new = next(row[4] for row in rebooted["layout"] if row[:2] == (1, 0))
        # NVIDIA's refresh ran once more, after the boot unit: its spec names the new devices
        assert rebooted["refreshes"] == rebooted["refreshes_before"] + [[row[4] for row in rebooted["layout"]]], (
            rebooted["refreshes"])
        # the boot pass ran before it (above): the kept hold's files name gi1/ci0 as NVIDIA's spec did then, or
        # already the new UUID, never a third
        boot_visible = [line for line in (rebooted["boot_env"] or "").splitlines() if line.startswith("NVIDIA_VISIBLE")]
        assert boot_visible in (["NVIDIA_VISIBLE_DEVICES=%s" % old], ["NVIDIA_VISIBLE_DEVICES=%s" % new]), boot_visible
        # the drift timer's pass after the refresh: the new UUID, with the MIG device's own nodes from NVIDIA's spec
        assert (rebooted["pass"]["Result"], rebooted["pass"]["ExecMainStatus"]) == ("success", "0"), rebooted["pass"]
        assert "NVIDIA_VISIBLE_DEVICES=%s" % new in rebooted["env"].splitlines(), rebooted["env"]
        assert new in rebooted["spec"] and old not in rebooted["spec"], rebooted["spec"]
        nodes = [n["path"] for device in json.loads(rebooted["spec"])["devices"]
                 for n in device["containerEdits"].get("deviceNodes", [])]
        assert ["/dev/nvidia-caps/nvidia-cap%d" % minor for minor in caps(0, 1)] == [
            n for n in nodes if n.startswith("/dev/nvidia-caps/")], nodes
        conditions = [c["type"] for c in rebooted["status"].get("conditions", []) if c.get("status") == "True"]
        assert "VendorSpecStale" not in conditions, rebooted["status"].get("conditions")
