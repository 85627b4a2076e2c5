# -*- coding: utf-8 -*-
# Copyright: contributors to bcd.devices
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""The end-to-end suite's library: fakehw nodes converged through ansible-playbook,
podman 5 chrooted in a Debian trixie rootfs, and the reference CDI library's checker.

hack/e2e.sh runs the suite inside a private mount namespace prepared by
tests/e2e/lib/in_podman_rootfs.sh, with the environment:

    BCD_E2E_ROOTFS   the unpacked trixie rootfs (podman, runc, busybox-static, cdicheck)
    BCD_E2E_WORK     a scratch directory: the fakehw nodes (nodes/), the inventory, results

How the converged nodes reach podman (podman 5.4 ignores ``cdi_spec_dirs`` in
containers.conf, containers/podman#25691, and reads only /etc/cdi and /var/run/cdi):
each node's root is ``WORK/nodes/<node>`` (``/srv/nodes/<node>`` in the rootfs); for the
node under test its ``etc/cdi`` is bind-mounted on the rootfs's /etc/cdi and its
``var/run/cdi`` (the vendor spec) on the rootfs's /run/cdi (/var/run links to /run). Podman reads the very
files the converger wrote, live: a release is seen without copying anything.

NVIDIA's vendor spec names host paths. In this namespace they are made to exist inside
the rootfs, which is the host as podman sees it: every device node becomes a character
device with a distinct major:minor (``device_number``), every mount source a small stub
file whose content names its path, and every hook program (``/usr/bin/nvidia-cdi-hook``)
a stub that logs its arguments, so that a container can prove which node, file and hook reached it. Nothing
is left out of NVIDIA's spec (all 48 library mounts and 4 hooks of the 1.17.8 example).
"""

from __future__ import annotations

import importlib.util
import json
import os
import re
import shlex
import shutil
import subprocess
from dataclasses import dataclass, field
from typing import Dict, List, Optional, Tuple

import yaml

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
ROOTFS = os.environ.get("BCD_E2E_ROOTFS", "")
WORK = os.environ.get("BCD_E2E_WORK", "")
PYTHON = os.path.join(REPO, ".venv", "bin", "python")
CDICHECK = "/usr/local/bin/cdicheck"  # inside the rootfs
CONTAINER_ROOTFS = "/srv/bb"  # busybox-static, inside the rootfs
HOOK_LOG = "/run/bcd-e2e/hooks.log"  # inside the rootfs
REFRESH_ERROR = "The following error was triggered when refreshing the CDI registry"
KIND = "bcd.dev/gpu"
WSL_FIXTURE = os.path.join(REPO, "tests", "data", "nvidia-cdi", "crazymax-buildx_wsl_nvidia-gpu.yaml")

# additionalGids: toolkits from 1.19 write them, NVIDIA's 1.17.8 example has none, so
# node-a's vendor spec gets one in its common edits (44, Debian's video group) and one on
# each GPU device (993, where a render group typically lands) to prove both reach a container.
VIDEO_GID = 44
RENDER_GID = 993


# ---------------------------------------------------------------------------------------
# Device numbers of the fake GPU nodes: real majors where NVIDIA's are fixed (195 for
# /dev/nvidia*, 226 for DRM), the dynamic ones as a typical host has them.

def device_number(path, fallback):
    """(major, minor) for a device node path a vendor spec names; distinct per path."""
    patterns = (
        (r"/dev/nvidia(\d+)$", lambda m: (195, int(m.group(1)))),
        (r"/dev/nvidiactl$", lambda m: (195, 255)),
        (r"/dev/nvidia-modeset$", lambda m: (195, 254)),
        (r"/dev/nvidia-uvm$", lambda m: (510, 0)),
        (r"/dev/nvidia-uvm-tools$", lambda m: (510, 1)),
        (r"/dev/dri/card(\d+)$", lambda m: (226, int(m.group(1)))),
        (r"/dev/dri/renderD(\d+)$", lambda m: (226, int(m.group(1)))),
        (r"/dev/nvidia-caps/nvidia-cap(\d+)$", lambda m: (511, int(m.group(1)))),
    )
    for pattern, number in patterns:
        match = re.match(pattern, path)
        if match:
            return number(match)
    return fallback  # e.g. WSL's /dev/dxg: a local/experimental major


# ---------------------------------------------------------------------------------------
# The nodes and their holds.

def gpu_uuid(node_number, index):
    return "GPU-5f1c2a90-%04x-4000-8000-%012x" % (node_number, index + 1)


@dataclass
class Node:
    name: str
    number: int
    gpus: int
    mig_gpus: List[int]
    vendor: str  # "yaml-gids", "json", "none" or "wsl"
    root: str = ""
    hw: dict = field(default_factory=dict)
    vendor_spec: Optional[dict] = None

    def uuid(self, index):
        return gpu_uuid(self.number, index)

    def gpu(self, index):
        return self.hw["gpus"][index]

    def mig_uuid(self, index, gi):
        return next(m["uuid"] for m in self.gpu(index)["mig"] if m["gi"] == gi)

    @property
    def etc_cdi(self):
        return os.path.join(self.root, "etc", "cdi")

    @property
    def run_cdi(self):
        return os.path.join(self.root, "var", "run", "cdi")


NODES = (
    # NVIDIA's 1.17.8 YAML example adapted to 6 fake GPUs, GPU 1 split into two MIG
    # instances, plus the additionalGids a current toolkit writes (cdiVersion 0.7.0).
    Node("node-a", 1, 6, [1], "yaml-gids"),
    # The same example as JSON, as fakehw_node.py writes it (cdiVersion 0.5.0, no GIDs).
    Node("node-j", 2, 2, [1], "json"),
    # No vendor spec: holds carry only their environment.
    Node("node-b", 3, 2, [], "none"),
    # A WSL2 spec (one `all` device on /dev/dxg), NVIDIA's real file.
    Node("node-w", 4, 2, [], "wsl"),
)


def atom(node, index, part=""):
    return node.uuid(index) + part


def holds_generation_1(nodes):
    a, j, b, w = (nodes[name] for name in ("node-a", "node-j", "node-b", "node-w"))
    return {
        "node-a": [
            {"allocation_id": "h_whole", "reservation_id": "rsv_whole", "binding": "BINDING_HOLD",
             "devices": [{"id": atom(a, 0), "device_class": "gpu"}], "env": ["TEAM=vision"]},
            {"allocation_id": "h_mig", "reservation_id": "rsv_mig", "binding": "BINDING_HOLD",
             "devices": [{"id": atom(a, 1, "/gi1/ci0"), "device_class": "gpu.mig"}]},
            {"allocation_id": "h_slots", "reservation_id": "rsv_slots", "binding": "BINDING_HOLD",
             "devices": [{"id": atom(a, 2, "/s0"), "device_class": "gpu.slot"},
                         {"id": atom(a, 2, "/s1"), "device_class": "gpu.slot"}]},
            {"allocation_id": "h_kube", "reservation_id": "rsv_kube", "binding": "BINDING_KUBERNETES",
             "devices": [{"id": atom(a, 3), "device_class": "gpu"}]},
            {"allocation_id": "h_pair", "reservation_id": "rsv_pair", "binding": "BINDING_HOLD",
             "devices": [{"id": atom(a, 4), "device_class": "gpu"}, {"id": atom(a, 5), "device_class": ""}],
             "limits": {"cpus": "0-1", "cpu_millis": 1500, "memory_bytes": 1 << 30}},
        ],
        "node-j": [
            {"allocation_id": "j_whole", "reservation_id": "rsv_j1", "binding": "BINDING_HOLD",
             "devices": [{"id": atom(j, 0), "device_class": "gpu"}]},
            {"allocation_id": "j_mig", "reservation_id": "rsv_j2", "binding": "BINDING_HOLD",
             "devices": [{"id": atom(j, 1, "/gi2/ci0"), "device_class": "gpu.mig"}]},
        ],
        "node-b": [
            {"allocation_id": "b_whole", "reservation_id": "rsv_b1", "binding": "BINDING_HOLD",
             "devices": [{"id": atom(b, 0), "device_class": "gpu"}]},
        ],
        "node-w": [
            {"allocation_id": "w_whole", "reservation_id": "rsv_w1", "binding": "BINDING_HOLD",
             "devices": [{"id": atom(w, 1), "device_class": "gpu"}]},
        ],
    }


def holds_generation_2(nodes):
    """node-a, generation 2: h_whole, h_mig and h_kube go; GPU 0 moves to h_new."""
    a = nodes["node-a"]
    kept = [h for h in holds_generation_1(nodes)["node-a"] if h["allocation_id"] in ("h_slots", "h_pair")]
    return {"node-a": kept + [{"allocation_id": "h_new", "reservation_id": "rsv_new", "binding": "BINDING_HOLD",
                               "devices": [{"id": atom(a, 0), "device_class": "gpu"}]}]}


def cdi_name(atom_id):
    return atom_id.replace("/", "_")


# ---------------------------------------------------------------------------------------
# What podman showed inside a container.

@dataclass
class Observation:
    cmd: List[str]
    rc: int
    stdout: str
    stderr: str
    env: Dict[str, str] = field(default_factory=dict)
    groups: List[int] = field(default_factory=list)
    nodes: Dict[str, Tuple[str, int, int]] = field(default_factory=dict)
    opens: Dict[str, str] = field(default_factory=dict)
    probes: Dict[Tuple[int, int], str] = field(default_factory=dict)  # open() of a node made in the container
    present: List[str] = field(default_factory=list)
    mounts: Dict[str, str] = field(default_factory=dict)
    hooks: List[str] = field(default_factory=list)

    def runtime_said(self, lines=40):
        """What the runtime printed, for an assertion message: its errors, warnings and
        CDI lines (debug lines that only echo the command are left out)."""
        said = []
        for line in self.stderr.splitlines():
            if line.startswith('time="') and not re.search(r"level=(info|warning|error|fatal)|CDI|cdi", line):
                continue
            if "PersistentP" in line or "with command [" in line or "running conmon" in line:
                continue
            said.append(line if len(line) < 600 else line[:600] + " ...")
        return "\n$ %s\nexit status %d\n--- stdout\n%s\n--- stderr (errors, warnings, CDI; last %d lines)\n%s\n" % (
            " ".join(shlex.quote(c) for c in self.cmd[:-1]) + " <probe script>", self.rc,
            shown_stdout(self.stdout), lines, "\n".join(said[-lines:]))

    def refresh_errors(self):
        return [line for line in self.stderr.splitlines() if REFRESH_ERROR in line]


def shown_stdout(stdout):
    """The probe's report without its many MOUNT lines (the failed check names the one)."""
    lines = stdout.splitlines()
    kept = [line for line in lines if not line.startswith("MOUNT\t")]
    return "\n".join(kept + ["(%d MOUNT lines left out)" % (len(lines) - len(kept))])


def parse_probe(obs):
    for line in obs.stdout.splitlines():
        tag, _sep, rest = line.partition("\t")
        if tag == "ENV":
            key, _sep, value = rest.partition("=")
            obs.env[key] = value
        elif tag == "GROUPS":
            obs.groups = [int(g) for g in rest.split()]
        elif tag == "NODE":
            path, _sep, stat = rest.partition("\t")
            kind, _sep, numbers = stat.rpartition(" ")
            major, _sep, minor = numbers.partition(":")
            obs.nodes[path] = (kind, int(major, 16), int(minor, 16))
        elif tag == "OPEN":
            path, _sep, message = rest.partition("\t")
            obs.opens[path] = message
        elif tag == "PROBE":
            numbers, _sep, result = rest.partition("\t")
            major, _sep, minor = numbers.partition(":")
            obs.probes[(int(major), int(minor))] = result
        elif tag == "PRESENT":
            obs.present.append(rest)
        elif tag == "MOUNT":
            path, _sep, content = rest.partition("\t")
            obs.mounts[path] = content
    return obs


def probe_script(node_paths, numbers, mount_paths):
    """A busybox sh script that reports, one tagged line each, what the container has."""
    q = shlex.quote
    lines = [
        "env | while IFS= read -r l; do printf 'ENV\\t%s\\n' \"$l\"; done",
        "printf 'GROUPS\\t%s\\n' \"$(sed -n 's/^Groups:[[:space:]]*//p' /proc/self/status)\"",
        "for p in /dev/nvidia* /dev/dri/* /dev/nvidia-caps/* /dev/dxg; do"
        " [ -c \"$p\" ] && printf 'PRESENT\\t%s\\n' \"$p\"; done",
    ]
    for path in node_paths:
        lines.append(
            "if [ -e {p} ]; then printf 'NODE\\t%s\\t%s\\n' {p} \"$(stat -c '%F %t:%T' {p})\";"
            " printf 'OPEN\\t%s\\t%s\\n' {p} \"$(cat {p} 2>&1 >/dev/null | sed 's/.*: //')\"; fi".format(p=q(path)))
    for major, minor in numbers:
        # The device cgroup lets anyone mknod (runc's default "c *:* m") but allows read and
        # write only for the devices granted: opening the probe node tells which it is.
        lines.append(
            "if r=$(mknod /dev/bcd-probe c {ma} {mi} 2>&1); then r=$(cat /dev/bcd-probe 2>&1 >/dev/null);"
            " rm -f /dev/bcd-probe; fi; printf 'PROBE\\t%s\\t%s\\n' {ma}:{mi} \"${{r##*: }}\"".format(ma=major, mi=minor))
    for path in mount_paths:
        lines.append("printf 'MOUNT\\t%s\\t%s\\n' {p} \"$(head -n 1 {p} 2>&1)\"".format(p=q(path)))
    lines.append("true")
    return "\n".join(lines)


# ---------------------------------------------------------------------------------------
# The environment: rootfs, podman, checker, converge.

class E2E:
    def __init__(self, rootfs, work):
        self.rootfs = rootfs
        self.work = work
        self.nodes = {node.name: node for node in NODES}
        self.numbers = {}  # device path -> (major, minor), for every node of every vendor spec
        self.stubs = set()  # mount sources
        self.hook_paths = set()
        self.mounted = None
        self.containers = 0
        self.notes = []
        self.versions = {}

    @staticmethod
    def cdicheck_path(rootfs):
        return os.path.join(rootfs, CDICHECK.lstrip("/"))

    # paths -------------------------------------------------------------------------
    def inside(self, path):
        """A path inside the rootfs, as the host (this process) sees it."""
        return os.path.join(self.rootfs, path.lstrip("/"))

    def as_seen_by_podman(self, host_path):
        """The path of a host path inside the rootfs (WORK/nodes is bound on /srv/nodes)."""
        nodes = os.path.join(self.work, "nodes")
        if host_path.startswith(nodes + "/"):
            return "/srv/nodes" + host_path[len(nodes):]
        assert host_path.startswith(self.rootfs + "/"), host_path
        return host_path[len(self.rootfs):]

    # nodes -------------------------------------------------------------------------
    def build_nodes(self):
        for node in NODES:
            self.build_node(node)

    def build_node(self, node):
        """A fakehw node under WORK/nodes, its vendor spec's paths noted for prepare_rootfs."""
        node.root = os.path.join(self.work, "nodes", node.name)
        vendor = {"yaml-gids": "yaml", "json": "json"}.get(node.vendor, "none")
        args = [PYTHON, os.path.join(REPO, "hack", "fakehw_node.py"), "--root", node.root,
                "--node-id", node.name, "--node-number", str(node.number), "--gpus", str(node.gpus),
                "--vendor", vendor]
        for index in node.mig_gpus:
            args += ["--mig-gpu", str(index)]
        if not node.mig_gpus:
            args += ["--mig-gpu", "-1"]
        run(args)
        with open(os.path.join(node.root, "fakehw.yml")) as handle:
            node.hw = yaml.safe_load(handle)
        if node.vendor == "yaml-gids":
            self.write_vendor_with_gids(node)
        elif node.vendor == "wsl":
            os.makedirs(node.run_cdi, exist_ok=True)
            shutil.copy(WSL_FIXTURE, os.path.join(node.run_cdi, "nvidia.yaml"))
        for name in ("nvidia.yaml", "nvidia.json"):
            path = os.path.join(node.run_cdi, name)
            if os.path.exists(path):
                with open(path) as handle:
                    node.vendor_spec = yaml.load(handle, Loader=yaml.BaseLoader)  # names stay text
        if node.vendor_spec:
            self.materialize_vendor_paths(node.vendor_spec)

    @staticmethod
    def write_vendor_with_gids(node):
        spec_path = os.path.join(REPO, "hack", "fakehw_node.py")
        loader = importlib.util.spec_from_file_location("bcd_e2e_fakehw_node", spec_path)
        module = importlib.util.module_from_spec(loader)
        loader.loader.exec_module(module)
        spec = module.build_vendor_spec(node.hw)
        spec["cdiVersion"] = "0.7.0"  # additionalGids need it
        spec["containerEdits"]["additionalGids"] = [VIDEO_GID]
        for device in spec["devices"]:
            if device["name"].startswith("GPU-"):
                device["containerEdits"]["additionalGids"] = [RENDER_GID]
        with open(os.path.join(node.run_cdi, "nvidia.yaml"), "w") as handle:
            yaml.dump(spec, handle, Dumper=module.QuotedNames, sort_keys=False)

    def materialize_vendor_paths(self, spec):
        edits = [spec.get("containerEdits") or {}] + [d.get("containerEdits") or {} for d in spec["devices"]]
        for edit in edits:
            for dev in edit.get("deviceNodes") or []:
                path = dev["path"]
                if path not in self.numbers:
                    number = device_number(path, (240, len(self.numbers)))
                    assert number not in self.numbers.values(), (path, number)
                    self.numbers[path] = number
            for mount in edit.get("mounts") or []:
                self.stubs.add(mount["hostPath"])
            for hook in edit.get("hooks") or []:
                self.hook_paths.add(hook["path"])

    def prepare_rootfs(self):
        """Device nodes, mount stubs and the hook stub, inside this namespace's rootfs."""
        for path, (major, minor) in sorted(self.numbers.items()):
            target = self.inside(path)
            os.makedirs(os.path.dirname(target), exist_ok=True)
            os.mknod(target, 0o20666, os.makedev(major, minor))
        for path in sorted(self.stubs):
            target = self.inside(path)
            if os.path.lexists(target):
                raise AssertionError("the rootfs already has %s; a stub would hide it" % path)
            os.makedirs(os.path.dirname(target), exist_ok=True)
            with open(target, "w") as handle:
                handle.write(stub_content(path) + "\n")
        for path in sorted(self.hook_paths):
            hook = self.inside(path)
            if os.path.lexists(hook):
                raise AssertionError("the rootfs already has %s; a stub would hide it" % path)
            os.makedirs(os.path.dirname(hook), exist_ok=True)
            with open(hook, "w") as handle:
                handle.write("#!/bin/sh\n# bcd e2e stand-in for NVIDIA's hook: log and succeed\n"
                             "printf '%%s\\n' \"$*\" >> %s\n" % HOOK_LOG)
            os.chmod(hook, 0o755)
        os.makedirs(os.path.dirname(self.inside(HOOK_LOG)), exist_ok=True)
        for sub in ("etc/cdi", "run/cdi"):
            os.makedirs(self.inside(sub), exist_ok=True)

    # converge ----------------------------------------------------------------------
    def converge(self, generation, devices, limit=None, nodes=NODES, tag=""):
        """One ansible-playbook run over ``nodes`` (an inventory of their own, named by ``tag``)."""
        results = os.path.join(self.work, "results%s-gen%d" % (tag, generation))
        os.makedirs(results, exist_ok=True)
        inventory = os.path.join(self.work, "inventory%s.yml" % tag)
        hosts = {node.name: {"ansible_connection": "local", "ansible_python_interpreter": PYTHON,
                             "bcd_root": node.root} for node in nodes}
        with open(inventory, "w") as handle:
            yaml.safe_dump({"e2e_nodes": {"hosts": hosts}}, handle)
        extra = os.path.join(self.work, "vars%s-gen%d.json" % (tag, generation))
        with open(extra, "w") as handle:
            json.dump({"e2e_generation": generation, "e2e_devices": devices, "e2e_results": results}, handle)
        env = dict(os.environ, ANSIBLE_COLLECTIONS_PATH=os.path.join(REPO, ".build"),
                   ANSIBLE_HOME=os.path.join(self.work, "ansible-home"), ANSIBLE_NOCOLOR="1",
                   ANSIBLE_RETRY_FILES_ENABLED="0", ANSIBLE_LOCALHOST_WARNING="0", ANSIBLE_FORKS="4",
                   ANSIBLE_STDOUT_CALLBACK="default")
        args = [os.path.join(REPO, ".venv", "bin", "ansible-playbook"), "-i", inventory,
                os.path.join(REPO, "tests", "e2e", "converge.yml"), "-e", "@" + extra]
        if limit:
            args += ["--limit", limit]
        proc = subprocess.run(args, env=env, capture_output=True, text=True, check=False)
        if proc.returncode != 0:
            raise AssertionError("ansible-playbook failed (%d):\n%s\n%s" % (
                proc.returncode, proc.stdout[-6000:], proc.stderr[-3000:]))
        out = {}
        for name in os.listdir(results):
            with open(os.path.join(results, name)) as handle:
                out[name[:-len(".json")]] = json.load(handle)
        return out

    # podman ------------------------------------------------------------------------
    def use_node(self, node):
        """Show podman this node's etc/cdi as /etc/cdi and its var/run/cdi as /run/cdi."""
        self.mount_cdi(node.etc_cdi, node.run_cdi if os.path.isdir(node.run_cdi) else None)

    def mount_cdi(self, etc_cdi, run_cdi=None):
        self.unmount_cdi()
        run(["mount", "--bind", etc_cdi, self.inside("/etc/cdi")])
        if run_cdi:
            run(["mount", "--bind", run_cdi, self.inside("/run/cdi")])
        self.mounted = (etc_cdi, run_cdi)

    def unmount_cdi(self):
        if self.mounted:
            run(["umount", self.inside("/etc/cdi")])
            if self.mounted[1]:
                run(["umount", self.inside("/run/cdi")])
        self.mounted = None

    def chroot(self, *args, check=True, timeout=120):
        env = {"PATH": "/usr/sbin:/usr/bin:/sbin:/bin", "HOME": "/root", "LANG": "C.UTF-8",
               "PODMAN_IGNORE_CGROUPSV1_WARNING": "1"}
        proc = subprocess.run(["chroot", self.rootfs] + list(args), env=env, capture_output=True,
                              text=True, timeout=timeout, check=False)
        if check and proc.returncode != 0:
            raise AssertionError("%s failed (%d):\n%s\n%s" % (" ".join(args), proc.returncode,
                                                              proc.stdout[-3000:], proc.stderr[-3000:]))
        return proc

    def podman_run(self, devices, node_paths=(), numbers=(), mount_paths=()):
        """Start one container with these CDI devices; return what it saw."""
        with open(self.inside(HOOK_LOG), "w"):
            pass
        # CAP_MKNOD (not in podman's defaults) lets the probe make a node for every fake
        # device number and ask the device cgroup, by opening it, which ones it allows.
        cmd = ["podman", "--log-level=debug", "run", "--rm", "--network=none", "--cap-add=MKNOD"]
        for device in devices:
            cmd += ["--device", device]
        # --rootfs is a switch: the first argument is then a root directory, not an image.
        # Each container gets a fresh copy: runc leaves mount points behind in a rootfs.
        self.containers += 1
        container_root = "%s.%d" % (CONTAINER_ROOTFS, self.containers)
        shutil.copytree(self.inside(CONTAINER_ROOTFS), self.inside(container_root), symlinks=True)
        cmd += ["--rootfs", container_root, "/bin/sh", "-c", probe_script(node_paths, numbers, mount_paths)]
        try:
            proc = self.chroot(*cmd, check=False)
        finally:
            shutil.rmtree(self.inside(container_root), ignore_errors=True)
        obs = parse_probe(Observation(cmd=cmd, rc=proc.returncode, stdout=proc.stdout, stderr=proc.stderr))
        with open(self.inside(HOOK_LOG)) as handle:
            obs.hooks = [line.rstrip("\n") for line in handle]
        self.save(obs)
        return obs

    def save(self, obs):
        """Keep what each container saw under WORK/containers (E2E_KEEP=1 keeps WORK)."""
        directory = os.path.join(self.work, "containers")
        os.makedirs(directory, exist_ok=True)
        devices = [obs.cmd[i + 1] for i, arg in enumerate(obs.cmd) if arg == "--device"]
        record = {"devices": devices,
                  "rc": obs.rc, "env": obs.env, "groups": obs.groups, "nodes": obs.nodes, "opens": obs.opens,
                  "probes": {"%d:%d" % k: v for k, v in obs.probes.items()}, "present": obs.present,
                  "mounts": obs.mounts, "hooks": obs.hooks, "stderr": obs.stderr}
        with open(os.path.join(directory, "%03d.json" % self.containers), "w") as handle:
            json.dump(record, handle, indent=1, sort_keys=True)

    # the reference library's checker ----------------------------------------------
    def cdicheck(self, dirs, *flags):
        """Run the checker on directories (host paths inside the rootfs); return (proc, report)."""
        report = "/tmp/cdicheck-report.json"
        args = [CDICHECK] + list(flags) + ["-json", report] + [self.as_seen_by_podman(d) for d in dirs]
        proc = self.chroot(*args, check=False)
        data = None
        if os.path.exists(self.inside(report)):
            with open(self.inside(report)) as handle:
                data = json.load(handle)
            os.unlink(self.inside(report))
        return proc, data

    def collect_versions(self):
        manifest = {}
        with open(self.inside("/etc/bcd-e2e/manifest")) as handle:
            for line in handle:
                parts = line.split()
                if len(parts) == 2:
                    manifest[parts[0]] = parts[1]
        self.versions = {
            "podman": self.chroot("podman", "--version").stdout.strip(),
            "runc": self.chroot("runc", "--version").stdout.splitlines()[0].strip(),
            "conmon": manifest.get("conmon", "?"),
            "CDI Go library (Debian package)": manifest.get(
                "golang-tags.cncf-container-device-interface-dev", "?"),
            "golang-go": manifest.get("golang-go", "?"),
            "busybox-static": manifest.get("busybox-static", "?"),
            "ansible-core": subprocess.run([PYTHON, "-c", "import ansible; print(ansible.__version__)"],
                                           capture_output=True, text=True, check=False).stdout.strip(),
        }


def stub_content(host_path):
    return "bcd-e2e stub of " + host_path


def run(args):
    proc = subprocess.run(args, capture_output=True, text=True, check=False)
    if proc.returncode != 0:
        raise AssertionError("%s failed (%d):\n%s%s" % (" ".join(args), proc.returncode, proc.stdout, proc.stderr))
    return proc


# ---------------------------------------------------------------------------------------
# What a container started with a hold's devices must see, worked out from the fakehw
# file and NVIDIA's vendor spec alone (not from the spec the converger wrote).

@dataclass
class Expected:
    allocation_id: str
    kubernetes: bool
    devices: List[str]  # the CDI names to request
    visible: Optional[List[str]]  # NVIDIA_VISIBLE_DEVICES names; None: must be unset
    node_paths: List[str] = field(default_factory=list)
    gids: List[int] = field(default_factory=list)
    mounts: Dict[str, str] = field(default_factory=dict)  # containerPath -> hostPath
    hooks: List[str] = field(default_factory=list)  # each hook's arguments after argv[0]
    limits: bool = False


def expected_for(node, hold):
    kubernetes = hold.get("binding") == "BINDING_KUBERNETES"
    visible = []
    for dev in hold["devices"]:
        atom_id = dev["id"]
        gpu_id = atom_id.split("/")[0]
        index = next(g["index"] for g in node.hw["gpus"] if g["uuid"] == gpu_id)
        if (dev.get("device_class") or "gpu") == "gpu.mig":
            name = node.mig_uuid(index, int(re.search(r"/gi(\d+)/", atom_id).group(1)))
        else:
            name = gpu_id
        if name not in visible:
            visible.append(name)
    exp = Expected(allocation_id=hold["allocation_id"], kubernetes=kubernetes,
                   devices=["%s=%s" % (KIND, cdi_name(d["id"])) for d in hold["devices"]],
                   visible=None if kubernetes else visible, limits=bool(hold.get("limits")))
    if kubernetes or not node.vendor_spec:
        return exp
    by_name = {d["name"]: d for d in node.vendor_spec["devices"]}
    wsl = not any(name.startswith("GPU-") for name in by_name)
    edits = [node.vendor_spec.get("containerEdits") or {}]
    for name in visible:
        device = by_name.get("all") if wsl else by_name.get(name)
        if device is not None and device["containerEdits"] not in edits:
            edits.append(device["containerEdits"])
    for edit in edits:
        for dev in edit.get("deviceNodes") or []:
            if dev["path"] not in exp.node_paths:
                exp.node_paths.append(dev["path"])
        exp.gids += [int(g) for g in edit.get("additionalGids") or []]
        for mount in edit.get("mounts") or []:
            exp.mounts[mount["containerPath"]] = mount["hostPath"]
        exp.hooks += [" ".join(hook["args"][1:]) for hook in edit.get("hooks") or []]
    return exp


def vendor_mount_paths(nodes):
    paths = set()
    for node in nodes:
        spec = node.vendor_spec or {"devices": []}
        for edit in [spec.get("containerEdits") or {}] + [d["containerEdits"] for d in spec["devices"]]:
            paths.update(m["containerPath"] for m in edit.get("mounts") or [])
    return sorted(paths)
