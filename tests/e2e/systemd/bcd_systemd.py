# -*- coding: utf-8 -*-
# Copyright: contributors to bcd.devices
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""A node whose PID 1 is a real systemd, for tests/e2e/test_systemd_slices.py.

A cached Debian rootfs (systemd, dbus, sshd, python3 with cryptography and PyYAML), one
per release: hack/e2e.sh builds them and names them in ``BCD_E2E_SYSTEMD_TARBALLS``
(``bookworm=PATH trixie=PATH``, see ``systemd_tarballs``). Each is booted
with systemd-nspawn by tests/e2e/lib/in_systemd_node.sh, in a private mount namespace
of its own, with the cgroup v2 (unified) hierarchy. The node is then driven the way an
operator drives one:

* ``ansible-playbook`` runs the role ``bcd.devices.bcd_holds`` (tests/e2e/systemd/site.yml)
  over ssh to the container's sshd on a loopback port, as root with a key made for the run;
* ``nsenter`` into the container's namespaces runs ``systemctl``, ``journalctl`` and
  ``systemd-run`` to look at what systemd made and to play the operator and the workload.

The node has no GPU: ``/usr/local/bin/nvidia-smi`` is a stand-in that prints ``-L`` and
``-q -x`` for two fake H100s, so ``bcd.devices`` reads it as a real host (``RealHost``:
slices through systemd, not the JSON records of a fakehw host). What this part checks is
systemd's side of a hold; the CDI side is parts 1 and 2 of the suite.
"""

from __future__ import annotations

import contextlib
import ctypes
import json
import os
import re
import shlex
import shutil
import signal
import socket
import subprocess
import tempfile
import time
from typing import Dict

import yaml

HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.dirname(os.path.dirname(os.path.dirname(HERE)))

# A Unix socket's path may be at most 107 bytes (sun_path is 108 with its NUL). ssh's
# ControlMaster socket is Ansible's 10-character hash plus ssh's own 17-character
# temporary suffix in ANSIBLE_SSH_CONTROL_PATH_DIR; under the scratch directory that is
# as long as the checkout's path is deep, and a CI checkout six characters deeper than
# ours once made it 108. So the sockets go in a short directory of their own in /tmp.
SUN_PATH_MAX = 107
CONTROL_SOCKET_NAME = len("bcc504b2d8.nKJD8VULuWJZK7kl")


def control_path_dir():
    """A new, private, short directory for ssh's control sockets (see SUN_PATH_MAX)."""
    path = tempfile.mkdtemp(prefix="bcd-ssh.", dir="/tmp")
    if len(path) + 1 + CONTROL_SOCKET_NAME > SUN_PATH_MAX:
        raise NodeError("%s is too long a directory for ssh's control sockets" % path)
    return path


def systemd_tarballs(value):
    """``{release: tarball}`` out of ``BCD_E2E_SYSTEMD_TARBALLS`` (``bookworm=PATH trixie=PATH``), in order."""
    tarballs = {}  # type: Dict[str, str]
    for entry in value.split():
        release, sep, path = entry.partition("=")
        if not sep or not release or not path:
            raise ValueError("BCD_E2E_SYSTEMD_TARBALLS: %r is not RELEASE=PATH" % entry)
        tarballs[release] = path
    return tarballs


TARBALLS = systemd_tarballs(os.environ.get("BCD_E2E_SYSTEMD_TARBALLS", ""))
WORK = os.environ.get("BCD_E2E_WORK", "")
BOOT_SCRIPT = os.path.join(REPO, "tests", "e2e", "lib", "in_systemd_node.sh")
PLAYBOOK = os.path.join(HERE, "site.yml")
ANSIBLE_PLAYBOOK = os.path.join(REPO, ".venv", "bin", "ansible-playbook")
HOSTNAME = "bcd-e2e-node"
BOOT_TIMEOUT_S = 90

# The units the role installs, and what a failure prints the journal of.
UNITS = ("bcd-holds-helper.service", "bcd-holds-converge.service", "bcd-holds-retry.service",
         "bcd-holds-retry.timer", "bcd-holds-drift.timer")

# Two fake GPUs, as nvidia-smi prints them (the shapes of tests/data/nvidia-smi's real samples).
GPUS = (
    {"index": 0, "uuid": "GPU-5f1c2a90-00e2-4000-8000-000000000001", "minor": 0, "pci": "00000000:3B:00.0"},
    {"index": 1, "uuid": "GPU-5f1c2a90-00e2-4000-8000-000000000002", "minor": 1, "pci": "00000000:86:00.0"},
)
GPU_NAME = "NVIDIA H100 80GB HBM3"

# The stand-in's faults and resets (tests/e2e/test_systemd_slices.py, the node's own delivery to the rulebook): a GPU
# whose file FAULTS_DIR/<uuid> exists prints a pending row remapping in ``-q -x`` (what NVIDIA's driver prints for a
# GPU whose memory needs a reset), and ``--gpu-reset -i <uuid>`` removes that file, as a reset clears the fault; each
# reset is logged in RESET_LOG.
FAULTS_DIR = "/run/bcd-e2e/faults"
RESET_LOG = "/run/bcd-e2e/resets.log"
NVIDIA_SMI = r"""#!/bin/sh
# bcd e2e stand-in for nvidia-smi: two fake GPUs, for bcd.devices' nvidia-smi reader; a GPU with a file in
# %(faults)s reads a pending row remapping until --gpu-reset -i <its uuid> clears it.
remap() { if [ -e "%(faults)s/$1" ]; then echo Yes; else echo No; fi; }
case "$*" in
  "-L")
    cat <<'EOF'
%(listing)s
EOF
    ;;
  "-q -x")
    cat <<EOF
%(query)s
EOF
    ;;
  "--gpu-reset -i "*)
    uuid=$3
    case " %(uuids)s " in
      *" $uuid "*) ;;
      *) echo "No devices were found" >&2; exit 6 ;;
    esac
    mkdir -p "$(dirname %(log)s)"
    echo "$uuid" >> %(log)s
    rm -f "%(faults)s/$uuid"
    echo "GPU 00000000:00:00.0 was successfully reset."
    ;;
  *)
    echo "bcd e2e stand-in nvidia-smi: $* is not supported" >&2
    exit 2
    ;;
esac
"""


def nvidia_smi_script():
    listing = "\n".join("GPU %d: %s (UUID: %s)" % (g["index"], GPU_NAME, g["uuid"]) for g in GPUS)
    query = ['<?xml version="1.0" ?>', '<!DOCTYPE nvidia_smi_log SYSTEM "nvsmi_device_v12.dtd">', "<nvidia_smi_log>",
             "\t<driver_version>575.64.03</driver_version>", "\t<attached_gpus>%d</attached_gpus>" % len(GPUS)]
    for gpu in GPUS:
        query += ['\t<gpu id="%s">' % gpu["pci"], "\t\t<product_name>%s</product_name>" % GPU_NAME,
                  "\t\t<uuid>%s</uuid>" % gpu["uuid"], "\t\t<minor_number>%d</minor_number>" % gpu["minor"],
                  "\t\t<pci>", "\t\t\t<pci_bus_id>%s</pci_bus_id>" % gpu["pci"], "\t\t</pci>",
                  "\t\t<remapped_rows>", "\t\t\t<remapped_row_corr>0</remapped_row_corr>",
                  "\t\t\t<remapped_row_unc>0</remapped_row_unc>",
                  "\t\t\t<remapped_row_pending>$(remap %s)</remapped_row_pending>" % gpu["uuid"],
                  "\t\t\t<remapped_row_failure>No</remapped_row_failure>", "\t\t</remapped_rows>", "\t</gpu>"]
    query.append("</nvidia_smi_log>")
    return NVIDIA_SMI % {"listing": listing, "query": "\n".join(query), "faults": FAULTS_DIR, "log": RESET_LOG,
                         "uuids": " ".join(g["uuid"] for g in GPUS)}


def free_loopback_port():
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


def _die_with_parent():
    """In the child before exec: SIGTERM (nspawn then powers the container off) when pytest dies."""
    libc = ctypes.CDLL(None, use_errno=True)
    libc.prctl(1, signal.SIGTERM)  # PR_SET_PDEATHSIG


# Where the role has root write the metrics (bcd-holds-metrics.service after every timer pass).
METRICS_TEXTFILE = "/run/bcd-holds-e2e.prom"

# The account's end of the root helper's socket, run in the container as that account
# (``SystemdNode.helper_request``): one JSON request per connection, one reply line, as
# plugins/module_utils/node/helper_client.py speaks it, with nothing of bcd.devices imported.
HELPER_PEER = r"""
import socket, sys
with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as peer:
    peer.settimeout(30)
    peer.connect(sys.argv[1])
    peer.sendall(sys.argv[2].encode("utf-8") + b"\n")
    reply = b""
    while b"\n" not in reply:
        chunk = peer.recv(65536)
        if not chunk:
            break
        reply += chunk
sys.stdout.write(reply.decode("utf-8", "replace"))
"""


class NodeError(AssertionError):
    """The node could not be booted or driven; the message carries what the runtime said."""


class SystemdNode(object):
    """The booted container; see the module docstring."""

    def __init__(self, release, tarball, work, name=None, files=None):
        """``name`` names the node's scratch directory (the release by default); ``files``, more files
        for the overlay (``{path in the tree: (content, mode)}``, as ``prepare_overlay`` writes its own)."""
        self.release = release
        self.tarball = tarball
        self.dir = os.path.join(work, "systemd-node-" + (name or release))
        self.extra_files = dict(files or {})
        self.overlay = os.path.join(self.dir, "overlay")
        self.key = os.path.join(self.dir, "id_ed25519")
        self.console = os.path.join(self.dir, "console.log")
        self.port = 0
        self.proc = None  # the systemd-nspawn process
        self.leader = 0  # the container's PID 1, as this machine numbers it
        self.last_playbook = ""  # the output of the last ansible-playbook run, for failures
        self.versions = {}  # type: Dict[str, str]
        self.exposures = {}  # type: Dict[str, float]  # systemd-analyze security's rating of a unit, for the summary
        self.boot_seconds = 0.0
        self.control_dir = ""  # ssh's control sockets, made at boot (see control_path_dir)

    # -- boot and shut down ---------------------------------------------------------
    def prepare_overlay(self):
        os.makedirs(self.dir, exist_ok=True)
        self.control_dir = control_path_dir()
        subprocess.run(["ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-C", "bcd-e2e", "-f", self.key],
                       check=True, capture_output=True)
        with open(self.key + ".pub") as handle:
            public = handle.read()
        self.port = free_loopback_port()
        files = {
            "etc/ssh/sshd_config.d/bcd-e2e.conf": ("# bcd e2e: loopback only, keys only\nPort %d\n"
                                                   "ListenAddress 127.0.0.1\nPasswordAuthentication no\n"
                                                   "PermitRootLogin prohibit-password\n" % self.port, 0o644),
            "root/.ssh/authorized_keys": (public, 0o600),
            "usr/local/bin/nvidia-smi": (nvidia_smi_script(), 0o755),
            "etc/hostname": (HOSTNAME + "\n", 0o644),
            # Trixie's tree has Slurm (tests/e2e/test_slurm.py): Debian's slurmd.service lacks upstream's
            # condition, so without it slurmd fails on a node with no slurm.conf (as slurmctld does not).
            "etc/systemd/system/slurmd.service.d/bcd-e2e.conf": ("[Unit]\nConditionPathExists=/etc/slurm/slurm.conf\n",
                                                                 0o644),
        }
        files.update(self.extra_files)
        for path, (content, mode) in files.items():
            target = os.path.join(self.overlay, path)
            os.makedirs(os.path.dirname(target), exist_ok=True)
            with open(target, "w") as handle:
                handle.write(content)
            os.chmod(target, mode)
        os.chmod(os.path.join(self.overlay, "root"), 0o700)
        os.chmod(os.path.join(self.overlay, "root", ".ssh"), 0o700)

    def boot(self):
        self.prepare_overlay()
        started = time.monotonic()
        with open(self.console, "wb") as console:
            # pylint: disable-next=subprocess-popen-preexec-fn
            self.proc = subprocess.Popen(
                ["unshare", "-m", "--propagation", "private", "--", "bash", BOOT_SCRIPT, self.tarball, self.dir,
                 self.overlay], stdin=subprocess.DEVNULL, stdout=console, stderr=subprocess.STDOUT,
                preexec_fn=_die_with_parent)
        deadline = started + BOOT_TIMEOUT_S
        while not self.leader:
            if self.proc.poll() is not None:
                raise NodeError("systemd-nspawn exited (%d) before the container started:\n%s"
                                % (self.proc.returncode, self.console_tail()))
            if time.monotonic() > deadline:
                raise NodeError("no container init after %d s:\n%s" % (BOOT_TIMEOUT_S, self.console_tail()))
            self.leader = self._init_pid()
            time.sleep(0.2)
        state = ""
        while time.monotonic() < deadline:
            try:
                proc = self.nsenter("systemctl", "is-system-running", "--wait", check=False,
                                    timeout=max(1, deadline - time.monotonic()))
            except subprocess.TimeoutExpired:
                state = "still starting"
                break
            state = proc.stdout.strip()
            if state in ("running", "degraded"):
                break
            time.sleep(0.5)  # systemd's socket is not there yet
        if state != "running":
            raise NodeError("the container's systemd is %r, not running, after %d s:\n%s\n%s\n%s" % (
                state, BOOT_TIMEOUT_S, self.nsenter("systemctl", "--failed", "--no-pager", check=False).stdout,
                self.nsenter("journalctl", "-b", "--no-pager", "-n", "80", check=False).stdout, self.console_tail()))
        self._wait_for_sshd(deadline)
        self.boot_seconds = time.monotonic() - started
        self.collect_versions()

    def _init_pid(self):
        """The container's PID 1: the child of nspawn that runs systemd."""
        for entry in os.listdir("/proc"):
            if not entry.isdigit():
                continue
            try:
                with open("/proc/%s/stat" % entry) as handle:
                    stat = handle.read()
            except OSError:
                continue
            fields = stat[stat.rindex(")") + 2:].split()
            comm = stat[stat.index("(") + 1:stat.rindex(")")]
            if int(fields[1]) == self.proc.pid and comm == "systemd":
                return int(entry)
        return 0

    def _wait_for_sshd(self, deadline):
        while time.monotonic() < deadline:
            if self.nsenter("systemctl", "is-active", "ssh.service", check=False).stdout.strip() == "active":
                try:
                    with socket.create_connection(("127.0.0.1", self.port), timeout=2):
                        return
                except OSError:
                    pass
            time.sleep(0.3)
        raise NodeError("sshd in the container does not answer on 127.0.0.1:%d:\n%s" % (
            self.port, self.journal(["ssh.service"])))

    def shutdown(self):
        try:
            if self.proc is not None and self.proc.poll() is None:
                self.proc.terminate()  # nspawn asks the container's systemd to power off
                try:
                    self.proc.wait(timeout=60)
                except subprocess.TimeoutExpired:
                    self.proc.kill()
                    self.proc.wait(timeout=30)
        finally:
            if self.control_dir:  # the ssh masters end with the container's sshd
                shutil.rmtree(self.control_dir, ignore_errors=True)

    def console_tail(self, lines=40):
        try:
            with open(self.console, "rb") as handle:
                text = handle.read().decode("utf-8", "replace")
        except OSError:
            return "(no console log)"
        return "console (%s):\n%s" % (self.console, "\n".join(text.splitlines()[-lines:]))

    # -- inside the container ---------------------------------------------------------
    def nsenter(self, *args, check=True, timeout=120):
        """Run a command in the container's namespaces and root; a failure with check raises NodeError."""
        argv = ["nsenter", "-t", str(self.leader), "-a", "-r", "-w", "/usr/bin/env", "-i",
                "PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin", "LANG=C.UTF-8",
                "SYSTEMD_PAGER=", "SYSTEMD_COLORS=0"] + list(args)
        proc = subprocess.run(argv, capture_output=True, text=True, timeout=timeout, check=False)
        if check and proc.returncode != 0:
            raise NodeError("in the container, `%s` failed (%d):\n%s%s" % (
                " ".join(shlex.quote(a) for a in args), proc.returncode, proc.stdout[-3000:], proc.stderr[-3000:]))
        return proc

    def show(self, unit, *properties):
        """``systemctl show UNIT -p ...`` as a dict (every property asked for is in it). A property
        printed on several lines (``TimersMonotonic``: one line per timer setting) is joined with newlines."""
        argv = ["systemctl", "show", unit]
        for name in properties:
            argv += ["-p", name]
        out = self.nsenter(*argv).stdout
        values = {}
        for line in out.splitlines():
            key, sep, value = line.partition("=")
            if sep:
                values[key] = values[key] + "\n" + value if key in values else value
        missing = [name for name in properties if name not in values]
        if missing:
            raise NodeError("systemctl show %s printed no %s:\n%s" % (unit, ", ".join(missing), out))
        return values

    def read(self, path):
        """A file of the container, or None."""
        proc = self.nsenter("cat", path, check=False)
        return proc.stdout if proc.returncode == 0 else None

    def exists(self, path):
        return self.nsenter("test", "-e", path, check=False).returncode == 0

    def owners(self, *paths):
        """``{path: "user:group mode"}``."""
        out = self.nsenter("stat", "-c", "%n\t%U:%G %a", *paths).stdout
        return dict(line.split("\t", 1) for line in out.splitlines())

    def os_release(self):
        """The container's /etc/os-release (``VERSION_CODENAME``: bookworm, trixie) as a dict."""
        values = {}
        for line in (self.read("/etc/os-release") or "").splitlines():
            key, sep, value = line.partition("=")
            if sep:
                values[key] = value.strip('"')
        return values

    def security(self, unit):
        """``systemd-analyze security UNIT`` as the node's systemd has the unit loaded (online, over its
        D-Bus): ``(overall exposure or None, the whole output)``."""
        proc = self.nsenter("systemd-analyze", "security", "--no-pager", unit, check=False)
        text = proc.stdout + proc.stderr
        return exposure_level(text, unit), text

    def helper_request(self, message, user="bcd", socket_path="/run/bcd/helper.sock"):
        """One request to the root helper's socket from a process of ``user``'s (``runuser``), as a
        pass of that account sends it; the helper's reply, a dict."""
        proc = self.nsenter("runuser", "-u", user, "--", "python3", "-I", "-c", HELPER_PEER, socket_path,
                            json.dumps(message))
        try:
            return json.loads(proc.stdout.splitlines()[0])
        except (IndexError, ValueError):
            raise NodeError("the helper gave no reply to %s: %r %r" % (message.get("op"), proc.stdout, proc.stderr))

    def uid_of(self, user):
        return int(self.nsenter("id", "-u", user).stdout.strip())

    def cursor(self):
        """The journal's position now: ``journal_records(unit, cursor)`` shows what came after it."""
        out = self.nsenter("journalctl", "-n", "0", "--show-cursor", "--no-pager", "-q").stdout
        for line in out.splitlines():
            if line.startswith("-- cursor: "):
                return line[len("-- cursor: "):].strip()
        return None

    def journal(self, units, lines=150):
        argv = ["journalctl", "--no-pager", "-o", "short-precise", "-n", str(lines)]
        for unit in units:
            argv += ["-u", unit]
        proc = self.nsenter(*argv, check=False)
        return "journalctl %s:\n%s%s" % (" ".join("-u " + u for u in units), proc.stdout, proc.stderr)

    def journal_records(self, unit, since=None):
        """The journal of a unit after a cursor (or all of it: the node boots once), as JSON records
        (``_UID``, ``_PID``, ``MESSAGE``, ...): the unit's own lines and systemd's about it. The journal is
        filtered here: journalctl 252 finds no entries for ``-u UNIT --after-cursor C`` when the cursor's
        entry is another unit's."""
        records = []
        after = ["--after-cursor", since] if since else []
        for line in self.nsenter("journalctl", "--no-pager", "-o", "json", *after).stdout.splitlines():
            record = json.loads(line)
            if unit not in (record.get("_SYSTEMD_UNIT"), record.get("UNIT")):
                continue
            if isinstance(record.get("MESSAGE"), list):  # journald's form of a non-UTF-8 message
                record["MESSAGE"] = bytes(record["MESSAGE"]).decode("utf-8", "replace")
            records.append(record)
        return records

    def journal_text(self, unit, since, wanted, timeout=15):
        """The messages a unit logged after ``since``, once they include ``wanted`` (journald takes a
        service's output asynchronously, so a line may land after the service ended); as they are at
        the timeout otherwise."""
        deadline = time.monotonic() + timeout
        while True:
            records = self.journal_records(unit, since=since)
            text = "\n".join(str(record.get("MESSAGE", "")) for record in records)
            if wanted in text or time.monotonic() > deadline:
                return records, text
            time.sleep(0.2)

    def explain(self, extra_units=()):
        """What the runtime said: units, slices, the journal of bcd's units and of the slices."""
        parts = [self.nsenter("systemctl", "status", "--no-pager", "--lines=0", "--all", "bcd-holds-*",
                              "bcd*.slice", *extra_units, check=False).stdout,
                 self.journal(list(UNITS) + list(extra_units))]
        if self.last_playbook:
            parts.append("last ansible-playbook run (tail):\n" + self.last_playbook[-4000:])
        return "\n".join(parts)

    @contextlib.contextmanager
    def explained(self, *extra_units):
        """Any failure inside the block is re-raised with what systemd and the journal say."""
        try:
            yield
        except Exception as exc:  # an AssertionError from a check, or a NodeError
            try:
                context = self.explain(extra_units)
            except Exception as again:  # the node itself is gone
                context = "(could not ask the container: %s)\n%s" % (again, self.console_tail())
            raise AssertionError("%s\n\n--- what the container says ---\n%s" % (exc, context)) from exc

    # -- the role ----------------------------------------------------------------------
    def ssh_host(self):
        """The inventory entry that reaches the node over its loopback sshd, as root."""
        return {"ansible_host": "127.0.0.1", "ansible_port": self.port, "ansible_user": "root",
                "ansible_ssh_private_key_file": self.key, "ansible_python_interpreter": "/usr/bin/python3",
                "ansible_ssh_common_args": "-o StrictHostKeyChecking=no -o UserKnownHostsFile=/dev/null "
                                           "-o IdentitiesOnly=yes -o LogLevel=ERROR"}

    def ansible_env(self):
        """The environment of an Ansible run against the node (the collection, a private home, ssh's sockets)."""
        return dict(os.environ, ANSIBLE_COLLECTIONS_PATH=os.path.join(REPO, ".build"),
                    ANSIBLE_HOME=os.path.join(self.dir, "ansible-home"), ANSIBLE_NOCOLOR="1",
                    ANSIBLE_RETRY_FILES_ENABLED="0", ANSIBLE_PIPELINING="1",
                    ANSIBLE_SSH_CONTROL_PATH_DIR=self.control_dir, ANSIBLE_STDOUT_CALLBACK="default",
                    ANSIBLE_HOST_KEY_CHECKING="0")

    def run_role(self, generation, devices, name, extra_vars=None):
        """One ``ansible-playbook`` run of the role (``extra_vars``: more of the role's variables); returns
        ``{"pass": bcd_holds_pass, "service_mgr": ...}``."""
        inventory = os.path.join(self.dir, "inventory.yml")
        with open(inventory, "w") as handle:
            yaml.safe_dump({"systemd_nodes": {"hosts": {HOSTNAME: self.ssh_host()}}}, handle)
        result = os.path.join(self.dir, "result-%s.json" % name)
        extra = os.path.join(self.dir, "vars-%s.json" % name)
        with open(extra, "w") as handle:
            json.dump(dict({"bcd_holds_generation": generation, "bcd_holds_devices": devices,
                            "bcd_holds_fail_on_refusal": True, "bcd_holds_metrics_textfile": METRICS_TEXTFILE,
                            "e2e_result": result}, **(extra_vars or {})), handle)
        env = self.ansible_env()
        proc = subprocess.run([ANSIBLE_PLAYBOOK, "-i", inventory, PLAYBOOK, "-e", "@" + extra], env=env,
                              capture_output=True, text=True, check=False, timeout=600)
        self.last_playbook = proc.stdout + proc.stderr
        if proc.returncode != 0:
            raise NodeError("ansible-playbook (%s) failed (%d):\n%s\n%s" % (
                name, proc.returncode, proc.stdout[-8000:], proc.stderr[-3000:]))
        with open(result) as handle:
            return json.load(handle)

    # -- versions, for the summary ------------------------------------------------------
    def collect_versions(self):
        manifest = {}
        for line in (self.read("/etc/bcd-e2e/manifest") or "").splitlines():
            parts = line.split()
            if len(parts) == 2:
                manifest[parts[0]] = parts[1]
        systemd = self.nsenter("systemctl", "--version", check=False).stdout.splitlines()
        self.versions = {
            "Debian (node)": self.os_release().get("PRETTY_NAME", "?"),
            "systemd (container PID 1)": systemd[0] if systemd else "?",
            "systemd-nspawn": manifest.get("systemd-container", "?"),
            "python3 (node)": manifest.get("python3", "?"),
            "openssh-server": manifest.get("openssh-server", "?"),
            "container cgroup": self.nsenter("stat", "-f", "-c", "%T", "/sys/fs/cgroup", check=False).stdout.strip(),
        }


def cgroup_dir(slice_unit):
    """The slice's cgroup directory in the container (systemd nests bcd-alloc-x.slice in bcd.slice/bcd-alloc.slice)."""
    return "/sys/fs/cgroup/bcd.slice/bcd-alloc.slice/" + slice_unit


def parse_cgroup_events(text):
    return dict(line.split(" ", 1) for line in (text or "").splitlines() if " " in line)


EXPOSURE_LINE = re.compile(r"Overall exposure level for (\S+): (\d+\.\d+)")
EXPOSURE_ITEM = re.compile(r"^\u2717 (\S+)\s+(.*?)\s+(\d+\.\d+)\s*$")


def exposure_level(text, unit):
    """The overall exposure ``systemd-analyze security`` printed for ``unit`` (a float), or None."""
    for name, level in EXPOSURE_LINE.findall(text):
        if name == unit:
            return float(level)
    return None


def worst_exposures(text, count=12):
    """The settings ``systemd-analyze security`` marked \u2717, the highest exposure first:
    ``["0.4 User=/DynamicUser= (Service runs as root user)", ...]``."""
    items = []
    for line in text.splitlines():
        found = EXPOSURE_ITEM.match(line.strip())
        if found:
            items.append((float(found.group(3)), "%s %s (%s)" % (found.group(3), found.group(1), found.group(2))))
    items.sort(key=lambda item: -item[0])
    return [shown for _level, shown in items[:count]]


def timer_setting(value, name):
    """A setting (``OnUnitInactiveUSec``) out of ``systemctl show -p TimersMonotonic``, which prints one
    ``{ OnUnitInactiveUSec=10min ; next_elapse=... }`` per setting; None when the timer has none."""
    for key, setting in re.findall(r"\{\s*(\w+)=([^;\s]+)\s*;", value):
        if key == name:
            return setting
    return None


__all__ = ["SystemdNode", "NodeError", "GPUS", "UNITS", "TARBALLS", "WORK", "systemd_tarballs", "cgroup_dir", "parse_cgroup_events",
           "timer_setting", "exposure_level", "worst_exposures"]
