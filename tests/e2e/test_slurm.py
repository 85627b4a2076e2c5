# -*- coding: utf-8 -*-
# Copyright: contributors to bcd.devices
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""Slurm runs jobs with the hold's env file, through the TaskProlog the docs give (issue 34, item 2).

The trixie systemd node of tests/e2e/test_systemd_slices.py (hack/e2e.sh adds Debian's
``munge``, ``slurmctld``, ``slurmd`` and ``slurm-client`` to its rootfs) boots once more, with
``/etc/slurm/slurm.conf`` for a one-node cluster and, as its ``TaskProlog``, the recipe of
docs/slices-and-admission.md, read out of the page (the block marked ``doc-test:
slurm-task-prolog``), word for word. The role ``bcd.devices.bcd_holds`` binds a hold with
limits and env lines (``j_train``) and one without (``j_gone``), then releases ``j_gone``.
Then, as an ordinary user (``alice``), with ``srun`` and ``sbatch``:

* a job naming its hold gets every line of the hold's env file, byte for byte, in order;
* a job naming no hold (or an empty id) runs as if the prolog were not there;
* a job naming a released hold, or a value that is no allocation id (``../x`` with a file
  there, 81 characters with a file of that name, a ``-``, a newline), does not run, and its
  user sees why;
* the task is not in the hold's slice (the page says so, and why).

Run with `bash hack/e2e.sh -k slurm`; see docs/verified-consumers.md.
"""

from __future__ import annotations

import os
import re
import shlex
import sys
import time

import pytest

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "systemd"))

import bcd_systemd  # noqa: E402  pylint: disable=wrong-import-position,import-error
from bcd_systemd import GPUS, free_loopback_port  # noqa: E402  pylint: disable=import-error

RELEASE = "trixie"
pytestmark = pytest.mark.skipif(
    not (bcd_systemd.WORK and os.path.isfile(bcd_systemd.TARBALLS.get(RELEASE, ""))),
    reason="the Slurm part of the end-to-end suite needs the trixie systemd node: run it with `bash hack/e2e.sh`")

REPO = bcd_systemd.REPO
PAGE = os.path.join(REPO, "docs", "slices-and-admission.md")
MARK_RE = re.compile(r"^<!-- doc-test: slurm-task-prolog -->\n```sh\n(.*?)^```$", re.M | re.S)
PROLOG = "/etc/slurm/bcd-task-prolog"
USER = "alice"
TRAIN = "j_train"
GONE = "j_gone"
SLICE = "bcd-alloc-%s.slice" % TRAIN
LIMITS = {"cpus": "0", "cpu_millis": 500, "memory_bytes": 256 << 20}
# The hold's own env lines, in order: what Slurm must hand the task literally (spaces, '=', quotes,
# a '$', a backslash, non-ASCII, a trailing space), one of them as long as a hold's line may be.
ENV = ["TEAM=vision research", "RUN_NOTE=a=b \"quoted\" 'single' $HOME \\n ünïcode ", "OMP_NUM_THREADS=4",
       "WANDB_PROJECT=" + "p" * (4096 - len("WANDB_PROJECT="))]
SLURM_CONF = """# bcd e2e: one node, Slurm's own logs in the journal, no cgroup plugin (no controllers here)
ClusterName=bcde2e
SlurmctldHost=%(host)s(127.0.0.1)
SlurmctldPort=%(ctld)d
SlurmdPort=%(slurmd)d
AuthType=auth/munge
CredType=cred/munge
SlurmUser=slurm
StateSaveLocation=/var/lib/slurm/slurmctld
SlurmdSpoolDir=/var/lib/slurm/slurmd
ProctrackType=proctrack/linuxproc
TaskPlugin=task/none
JobAcctGatherType=jobacct_gather/none
AccountingStorageType=accounting_storage/none
SelectType=select/cons_tres
ReturnToService=2
TaskProlog=%(prolog)s
NodeName=%(host)s NodeAddr=127.0.0.1 CPUs=1 RealMemory=200 State=UNKNOWN
PartitionName=e2e Nodes=ALL Default=YES MaxTime=10 State=UP
"""
CGROUP_CONF = "CgroupPlugin=disabled\n"
SLURM_UNITS = ("munge.service", "slurmctld.service", "slurmd.service")


def prolog_from_the_page():
    with open(PAGE, encoding="utf-8") as handle:
        found = MARK_RE.findall(handle.read())
    assert len(found) == 1, "%s: expected one block marked doc-test: slurm-task-prolog, found %d" % (PAGE, len(found))
    return found[0]


def train_hold():
    return {"allocation_id": TRAIN, "reservation_id": "r_train", "binding": "BINDING_HOLD",
            "devices": [{"id": GPUS[0]["uuid"], "device_class": "gpu"}], "limits": dict(LIMITS), "env": list(ENV)}


def gone_hold():
    return {"allocation_id": GONE, "reservation_id": "r_gone", "binding": "BINDING_HOLD",
            "devices": [{"id": GPUS[1]["uuid"], "device_class": "gpu"}]}


class SlurmNode:
    """The booted node, Slurm's daemons up, the holds bound; a job runs as ``USER``."""

    def __init__(self, node):
        self.node = node
        self.generation_1 = self.generation_2 = None  # the role's results
        self.gone_env = None  # j_gone's env file before its release

    def wait_for_slurm(self, timeout=60):
        deadline = time.monotonic() + timeout
        state = ""
        while time.monotonic() < deadline:
            active = [self.node.nsenter("systemctl", "is-active", unit, check=False).stdout.strip()
                      for unit in SLURM_UNITS]
            if active == ["active"] * len(SLURM_UNITS):
                state = self.node.nsenter("sinfo", "-h", "-N", "-o", "%T", check=False).stdout.strip()
                if state == "idle":
                    return
            time.sleep(0.5)
        raise bcd_systemd.NodeError("Slurm is not up after %d s (node %r):\n%s" % (
            timeout, state, self.node.journal(list(SLURM_UNITS), lines=60)))

    def as_user(self, argv, env=None, timeout=60):
        """``argv`` as USER in their home, with ``env`` ({NAME: value}) added; the CompletedProcess."""
        extra = ["%s=%s" % item for item in (env or {}).items()]
        return self.node.nsenter("runuser", "-u", USER, "--", "env", "-C", "/home/" + USER, *extra, *argv,
                                 check=False, timeout=timeout)

    def srun(self, command, env=None):
        return self.as_user(["srun", "-N1", "-n1", "--quit-on-interrupt", "--"] + command, env)

    def sbatch(self, script, env=None, timeout=60):
        """A batch job of ``script``, waited for; (sbatch's CompletedProcess, the job's state and exit code as
        ``scontrol`` shows them, its output file). Polled here: ``sbatch --wait`` sleeps up to 10 s a poll."""
        name = "job-%d" % int(time.monotonic() * 1000)
        path = "/home/%s/%s" % (USER, name)
        write = self.as_user(["sh", "-c", "printf '%%s' \"$1\" > %s.sh" % path, "sh", script])
        assert write.returncode == 0, write.stderr
        proc = self.as_user(["sbatch", "--parsable", "--output=%s.out" % path, path + ".sh"], env)
        assert proc.returncode == 0 and proc.stdout.strip().isdigit(), "sbatch refused the job: %s" % shown(proc)
        job = proc.stdout.strip()
        deadline = time.monotonic() + timeout
        while True:
            shown_job = self.node.nsenter("scontrol", "show", "job", "-o", job, check=False).stdout
            state = re.search(r"\bJobState=(\S+)", shown_job)
            if state and state.group(1) not in ("PENDING", "CONFIGURING", "RUNNING", "COMPLETING"):
                break
            if time.monotonic() > deadline:
                raise bcd_systemd.NodeError("job %s did not end in %d s: %s" % (job, timeout, shown_job))
            time.sleep(0.2)
        exit_code = re.search(r"\bExitCode=(\S+)", shown_job)
        return proc, (state.group(1), exit_code.group(1) if exit_code else "?"), self.node.read(path + ".out") or ""


def task_env(output):
    """``{NAME: value}`` and the names in order, from ``env`` output (no value holds a newline)."""
    values, order = {}, []
    for line in output.splitlines():
        name, sep, value = line.partition("=")
        if sep and re.match(r"^[A-Za-z_][A-Za-z0-9_]*$", name):
            values[name] = value
            order.append(name)
    return values, order


def shown(proc):
    return "exit %d\n--- stdout ---\n%s\n--- stderr ---\n%s" % (proc.returncode, proc.stdout[-3000:], proc.stderr[-3000:])


class SlurmSummary:
    """A line for Slurm in the terminal summary: what ran, with which versions."""

    def __init__(self):
        self.lines = []

    def pytest_terminal_summary(self, terminalreporter):
        if self.lines:
            terminalreporter.section("bcd.devices e2e: Slurm")
            for line in self.lines:
                terminalreporter.write_line(line)


@pytest.fixture(scope="module")
def slurm(pytestconfig):
    """The trixie node with Slurm running, the holds bound (gen 1) and j_gone released (gen 2)."""
    ports = {"host": bcd_systemd.HOSTNAME, "ctld": free_loopback_port(), "slurmd": free_loopback_port(),
             "prolog": PROLOG}
    files = {
        "etc/slurm/slurm.conf": (SLURM_CONF % ports, 0o644),
        "etc/slurm/cgroup.conf": (CGROUP_CONF, 0o644),
        PROLOG.lstrip("/"): (prolog_from_the_page(), 0o755),
    }
    node = bcd_systemd.SystemdNode(RELEASE, bcd_systemd.TARBALLS[RELEASE], bcd_systemd.WORK, name="slurm",
                                   files=files)
    try:
        started = time.monotonic()
        node.boot()
        here = SlurmNode(node)
        with node.explained(*SLURM_UNITS):
            node.nsenter("useradd", "-m", "-s", "/bin/sh", USER)
            here.wait_for_slurm()
            slurm_up = time.monotonic()
            here.generation_1 = node.run_role(1, [train_hold(), gone_hold()], "slurm-gen1")
            here.gone_env = node.read("/run/bcd/allocations/%s.env" % GONE)
            here.generation_2 = node.run_role(2, [train_hold()], "slurm-gen2")
        setup = "%.1f s to boot with Slurm up, %.1f s for the two role runs" % (
            slurm_up - started, time.monotonic() - slurm_up)
        summary = SlurmSummary()
        pytestconfig.pluginmanager.register(summary, "bcd-e2e-slurm-summary")
        manifest = dict(line.split(" ", 1) for line in (node.read("/etc/bcd-e2e/manifest") or "").splitlines()
                        if line.count(" ") == 1)
        summary.lines.append("%-34s slurmctld, slurmd %s, munge %s (Debian %s), one node" % (
            "Slurm", manifest.get("slurmd", "?"), manifest.get("munge", "?"), RELEASE))
        summary.lines.append("%-34s docs/slices-and-admission.md's, as TaskProlog; jobs with srun and sbatch" % (
            "bcd's TaskProlog"))
        summary.lines.append("%-34s %s" % ("Slurm node setup", setup))
        yield here
    finally:
        node.shutdown()


# ---------------------------------------------------------------------------------------


def test_the_prolog_on_the_node_is_the_page_s(slurm):  # pylint: disable=redefined-outer-name
    with slurm.node.explained(*SLURM_UNITS):
        assert slurm.node.read(PROLOG) == prolog_from_the_page()
        assert slurm.node.owners(PROLOG) == {PROLOG: "root:root 755"}
        conf = slurm.node.nsenter("scontrol", "show", "config").stdout
        assert re.search(r"^TaskProlog\s*=\s*%s$" % re.escape(PROLOG), conf, re.M), conf


def test_a_job_naming_its_hold_gets_the_env_file(slurm):  # pylint: disable=redefined-outer-name
    node = slurm.node
    with node.explained(*SLURM_UNITS):
        env_file = node.read("/run/bcd/allocations/%s.env" % TRAIN)
        assert env_file is not None, "the role bound no env file for %s" % TRAIN
        lines = env_file.splitlines()
        # The file: the GPU, the BCD_* lines, the hold's own lines last, in the order given.
        assert "NVIDIA_VISIBLE_DEVICES=%s" % GPUS[0]["uuid"] in lines, lines
        assert "BCD_ALLOCATION_ID=%s" % TRAIN in lines, lines
        assert "BCD_CGROUP_PARENT=%s" % SLICE in lines, lines
        assert lines[-len(ENV):] == ENV, lines
        assert node.owners("/run/bcd/allocations/%s.env" % TRAIN)[
            "/run/bcd/allocations/%s.env" % TRAIN] == "root:root 644"

        for how in ("srun", "sbatch"):
            if how == "srun":
                proc = slurm.srun(["/usr/bin/env"], {"BCD_ALLOCATION_ID": TRAIN})
                output = proc.stdout
            else:
                proc, ended, output = slurm.sbatch("#!/bin/sh\n/usr/bin/env\n", {"BCD_ALLOCATION_ID": TRAIN})
                assert ended == ("COMPLETED", "0:0"), "%s: %s\n%s" % (ended, shown(proc), output)
            assert proc.returncode == 0, "%s: %s\n%s" % (how, shown(proc), output)
            values, order = task_env(output)
            for line in lines:
                name, _sep, value = line.partition("=")
                assert values.get(name) == value, "%s: the task has %s=%r, the env file %r" % (
                    how, name, values.get(name), value)
            if how == "srun":
                # The hold's own lines are new to the task: srun's task has them in the env file's order
                # (a batch step's environment comes in an order of Slurm's own; no name is twice in it).
                names = [line.partition("=")[0] for line in ENV]
                assert [name for name in order if name in names] == names, (how, order)
            assert len(order) == len(set(order)), "%s: a name twice in the task's environment: %s" % (how, order)
            assert values.get("SLURM_JOB_ID"), "%s: no SLURM_JOB_ID in the task: %s" % (how, output)


def test_a_job_naming_no_hold_runs_as_without_the_prolog(slurm):  # pylint: disable=redefined-outer-name
    node = slurm.node
    with node.explained(*SLURM_UNITS):
        # The prolog itself, as the user, with no id and with an empty one: nothing printed, exit 0.
        for env in ({}, {"BCD_ALLOCATION_ID": ""}):
            proc = slurm.as_user(["env", "-u", "BCD_ALLOCATION_ID", PROLOG] if not env else [PROLOG], env)
            assert (proc.returncode, proc.stdout, proc.stderr) == (0, "", ""), (env, shown(proc))
        for env in ({}, {"BCD_ALLOCATION_ID": ""}):
            proc = slurm.srun(["/usr/bin/env"], env)
            assert proc.returncode == 0, shown(proc)
            values, _order = task_env(proc.stdout)
            leaked = sorted(name for name in values if name.startswith("BCD_") and values[name]
                            or name == "NVIDIA_VISIBLE_DEVICES" or name in ("TEAM", "RUN_NOTE", "WANDB_PROJECT"))
            assert not leaked, "a job naming no hold got %s" % leaked
            assert "bcd-task-prolog" not in proc.stdout + proc.stderr, shown(proc)
        proc, ended, output = slurm.sbatch("#!/bin/sh\necho ran as $(id -un)\n")
        assert ended == ("COMPLETED", "0:0") and output == "ran as %s\n" % USER, "%s %s\n%r" % (
            ended, shown(proc), output)


REFUSED = [
    # (what the job names, a file that would be read without the check, what the user must see)
    (GONE, None, "BCD_ALLOCATION_ID %s: no such hold on this node (released, or never bound here)" % GONE),
    ("../x", "/run/bcd/x.env", "BCD_ALLOCATION_ID is not an allocation id (A-Z, a-z, 0-9, _)"),
    ("a" * 81, "/run/bcd/allocations/%s.env" % ("a" * 81),
     "BCD_ALLOCATION_ID is longer than 80 characters, no allocation id is"),
    ("j-train", None, "BCD_ALLOCATION_ID is not an allocation id (A-Z, a-z, 0-9, _)"),
    ("x\nexport EVIL=1", None, "BCD_ALLOCATION_ID is not an allocation id (A-Z, a-z, 0-9, _)"),
]


@pytest.mark.parametrize("name,planted,message", REFUSED, ids=["released", "dotdot", "too-long", "dash", "newline"])
def test_a_job_naming_no_hold_of_this_node_is_refused(slurm, name, planted, message):  # pylint: disable=redefined-outer-name
    node = slurm.node
    with node.explained(*SLURM_UNITS):
        if name == GONE:
            assert slurm.gone_env and "BCD_ALLOCATION_ID=%s" % GONE in slurm.gone_env, (
                "generation 1 bound no env file for %s: %r" % (GONE, slurm.gone_env))
            assert not node.exists("/run/bcd/allocations/%s.env" % GONE), "generation 2 did not release %s" % GONE
        if planted:  # a file the unchecked path would reach: without the check its line would be exported
            node.nsenter("sh", "-c", "printf 'EVIL=1\\n' > %s && chmod 0644 %s" % (shlex.quote(planted),
                                                                                   shlex.quote(planted)))
        try:
            proc = slurm.srun(["/bin/echo", "the task ran"], {"BCD_ALLOCATION_ID": name})
            assert proc.returncode != 0, "srun ran the task: %s" % shown(proc)
            assert "the task ran" not in proc.stdout, shown(proc)
            assert "EVIL" not in proc.stdout + proc.stderr, shown(proc)
            assert proc.stdout.splitlines()[:1] == ["bcd-task-prolog: " + message], (
                "the user does not see why (%r):\n%s" % (message, shown(proc)))
            assert "TaskProlog failed status=1" in proc.stderr, shown(proc)
            proc, ended, output = slurm.sbatch("#!/bin/sh\necho the task ran\n", {"BCD_ALLOCATION_ID": name})
            assert ended[0] == "FAILED", "the batch job did not fail: %s %s\n%s" % (ended, shown(proc), output)
            assert "the task ran" not in output and "bcd-task-prolog: " + message in output.splitlines(), (
                "the job's output does not say why (%r):\n%s\n%r" % (message, shown(proc), output))
        finally:
            if planted:
                node.nsenter("rm", "-f", planted)


def test_the_task_is_not_in_the_hold_s_slice(slurm):  # pylint: disable=redefined-outer-name
    """What the page says: Slurm keeps its tasks where slurmstepd puts them; the slice's limits do not apply."""
    node = slurm.node
    with node.explained(SLICE, *SLURM_UNITS):
        assert node.show(SLICE, "ActiveState")["ActiveState"] == "active"
        proc = slurm.srun(["/bin/cat", "/proc/self/cgroup"], {"BCD_ALLOCATION_ID": TRAIN})
        assert proc.returncode == 0, shown(proc)
        # Its cgroup v2 line (the host's v1 hierarchies are listed too, at /): where slurmd runs, as slurmd
        # has no cgroup plugin here (no controllers, see SLURM_CONF), not the slice.
        unified = [line for line in proc.stdout.splitlines() if line.startswith("0::")]
        assert unified == ["0::/system.slice/slurmd.service"], proc.stdout
        proc = slurm.srun(["/bin/sh", "-c", "echo $BCD_CGROUP_PARENT"], {"BCD_ALLOCATION_ID": TRAIN})
        assert proc.stdout.strip() == SLICE, shown(proc)
