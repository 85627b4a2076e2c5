# -*- coding: utf-8 -*-
# Copyright: contributors to bcd.devices
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""The console sessions of docs/user-guide.md, docs/events.md, docs/kubernetes.md and
docs/slices-and-admission.md, run as a reader runs them on fakehw nodes: a changed message, plan line
or file fails make units.

One test per page tells the page's story (events.md's in the user guide's: it runs "right after the
first playbook of the user guide") in its order of events (a page may show a file after the
pass that made it), running the blocks marked ``doc-test: NAME`` (tests/unit/docs/quoted.py; ``MARKS``
below). In a console block each ``$ command`` (``> `` lines right after it continue it) runs in bash,
in a working directory standing for the page's checkout (``hack``, ``.build`` and ``.venv`` link to
this one), with ``ansible-playbook``, ``ansible`` and ``python`` of the venv running the tests, a
private ``ANSIBLE_HOME``, ``ANSIBLE_COLLECTIONS_PATH`` at ``.build``, and ``bcd-holds`` as the pages
run it from the checkout. Variables a command sets (``K=...``, ``export``) hold for the commands after
it. ``/tmp/bcd-nodes`` is the test's own directory everywhere: in commands, files and quotes; nothing
is written to the real one. What the command prints (stdout and stderr, as a terminal shows them)
must be the quote, as quoted.py compares (``…`` for what the page trims); a command the page quotes
no output for must print nothing and succeed. A file the page shows (``$ cat inventory.yml`` in a
working directory that has none yet, or a yaml block whose first line is ``# first.yml``) is written
from the page before it is used; a marked block that is part of a file (a kubelet section, the holds
a generation adds) or a node file as a page shows it is used as the test says. What a page says in
words was done between its commands (a hold bound, ``since`` set back, a pod gone, ``k3.yml`` is
``k2.yml`` with ``gen: 3``) the test does, and nothing else. Only what differs from run to run is
normalized: ``NORMALIZED``. To fix a page, ``BCD_DOC_OUTPUT=DIR`` writes what each command printed.

What the pages show but this does not run, and why:

- user-guide.md: ``ansible-galaxy collection build/install`` and ``ansible-doc -l`` (installing is
  tests/unit/install's, the documentation tests/unit/docs/test_ansible_doc.py's; ``ansible-doc -l``
  scans every collection, slow); ``ansible-doc bcd.devices.holds`` (its header names the checkout);
  ``real.yml`` and the run on a node without a GPU driver (not a fakehw node: the output depends on
  the machine's GPU tools); ``retry.yml`` (needs a full tmpfs mounted on ``/etc/cdi``, freed during
  the play); the CDI spec quoted with its lists folded onto one line; ``node-k``'s releasing.json
  (kubernetes.md runs that story in full); podman (needs podman and a rootfs); the root helper with
  ``bcdop`` (needs a second account); text blocks of plan lines and messages quoted without their
  command.
- events.md: ``bcd.devices.events ... ack_through=3 --check`` (the journal it ran on is not shown); text
  blocks (a torn line's warning, the filter's answers on node-b).
- kubernetes.md: the real gRPC kubelet stand-in, ``ask.py`` against a helper, ``runuser`` (not a fakehw
  node, or a helper process and an ``ask.py`` the page describes but does not show); text blocks of
  plan lines quoted without their command (taken back, old devices pods still hold, the unreachable
  kubelet, the marker clearing, crash safety).
- slices-and-admission.md: the systemd side (``/tmp/bcd-nodes/real`` with stand-in ``systemctl`` and
  ``nvidia-smi``, ``nosd``: not fakehw nodes, and their stand-ins and spec files are not shown);
  ``node-p`` and sourcing its env file (its assignment is not shown; tests/unit/docs/test_wrapper.py
  runs the page's wrapper); podman; ``ask.py`` against a helper; text blocks of plan lines.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import time
from pathlib import Path

import pytest
import yaml

from ansible_collections.bcd.devices.plugins.module_utils.entry.converge import run_pass
from ansible_collections.bcd.devices.plugins.module_utils.node.hosts import FakeHwHost
from ansible_collections.bcd.devices.tests.unit.docs.quoted import REPO, assert_quoted, blocks_marked

VENV_BIN = Path(sys.executable).parent
SCRATCH = "/tmp/bcd-nodes"

pytestmark = pytest.mark.skipif(not (VENV_BIN / "ansible-playbook").exists(), reason="the pages run ansible-playbook of a venv")

# doc-test marks of this module: name -> (page, what the blocks are)
MARKS = {
    "guide-node": ("user-guide.md", "the fakehw node node-a"),
    "guide-files": ("user-guide.md", "inventory.yml and first.yml"),
    "guide-check": ("user-guide.md", "first.yml --check --diff on the fresh node"),
    "guide-apply": ("user-guide.md", "first.yml applied, then run again"),
    "guide-env": ("user-guide.md", "the env files of first.yml's holds"),
    "guide-rerender": ("user-guide.md", "first.yml with another reservation id, --diff"),
    "guide-node-b": ("user-guide.md", "the fakehw node node-b"),
    "guide-info": ("user-guide.md", "holds_info on node-b"),
    "events-playbook": ("events.md", "events.yml, run right after the user guide's first playbook"),
    "events-info": ("events.md", "holds_info's node_public_key on node-a"),
    "kube-node": ("kubernetes.md", "the fakehw node node-k"),
    "kube-bind": ("kubernetes.md", "generation 1: a Kubernetes hold and a plain one"),
    "kube-kubelet": ("kubernetes.md", "the pods of the hardware file's kubelet section, from generation 2 on"),
    "kube-release": ("kubernetes.md", "generation 2: the release recorded and withdrawn"),
    "kube-releasing": ("kubernetes.md", "releasing.json after generation 2"),
    "kube-waits": ("kubernetes.md", "passes while the release waits"),
    "kube-retry": ("kubernetes.md", "the retry timer's pass while the release waits"),
    "kube-stuck": ("kubernetes.md", "KubernetesReleaseStuck, since set back"),
    "kube-partial": ("kubernetes.md", "generation 3: one pod left"),
    "kube-reported": ("kubernetes.md", "generation 4: the release reported, GPU 3 moved"),
    "kube-unreadable": ("kubernetes.md", "a truncated releasing.json"),
    "slices-setup": ("slices-and-admission.md", "the environment, inventory.yml and pass.yml"),
    "slices-memory": ("slices-and-admission.md", "node-s's memory and huge page files"),
    "slices-bind": ("slices-and-admission.md", "generation 1: a sliced hold and a Kubernetes hold"),
    "slices-record": ("slices-and-admission.md", "alloc_train's slice record after generation 1"),
    "slices-names": ("slices-and-admission.md", "what names the slice"),
    "slices-gen2": ("slices-and-admission.md", "the four holds generation 2 adds"),
    "slices-admission": ("slices-and-admission.md", "generation 2 admitted"),
    "slices-unreadable": ("slices-and-admission.md", "node-w: no proc/meminfo"),
}

# What differs from run to run, and nothing else: (pattern, replacement, why). Applied to the quote
# and to what ran alike. The one other difference, the scratch directory, is Console.local's: the
# test's own directory stands for /tmp/bcd-nodes in commands, files and quotes, so no node is shared.
NORMALIZED = (
    (re.compile(r"^([-dlcbps][-rwxsStT]{9}[.+]?) +(\d+) +\S+ +\S+ +(\d+) +\w{3} +\d+ +[\d:]+ +", re.M),
     r"\1 \2 <owner> <group> \3 <mtime> ",
     "ls -l: the owner and group are whoever runs the tests, the time is when; the spacing follows them"),
    (re.compile(r"\b\d{4}-\d\d-\d\dT\d\d:\d\d:\d\dZ"), "<utc>", "a release's since: when the pass ran"),
    (re.compile(r"\b\d{8}T\d{6}Z\b"), "<utc>", "a set-aside file's name: when the pass ran"),
    (re.compile(r"\b\d+s ago\b"), "<n>s ago", "a pending release's age in a condition: seconds since it was recorded"),
    (re.compile(r"(\w+) \(\d+s\)"), r"\1 (<n>s)", "a pending release's age in bcd-holds status"),
    (re.compile(r'"node_public_key": "[A-Za-z0-9+/]+=*"'), '"node_public_key": "<key>"', "each node makes its own key"),
)

BCD_HOLDS = """#!/bin/sh
# bcd-holds as the pages run it from the checkout
PYTHONPATH=$PWD/.build exec python -c \\
  'import sys; from ansible_collections.bcd.devices.plugins.module_utils.entry.cli import main; sys.exit(main(sys.argv[1:]))' "$@"
"""


def normalized(text):
    for pattern, replacement, _why in NORMALIZED:
        text = pattern.sub(replacement, text)
    return text


def commands(text):
    """``[(command, quoted output)]`` of a console block: ``$ `` starts a command, ``> `` lines right after it continue it."""
    runs = []
    for line in text.splitlines():
        if line.startswith("$ "):
            runs.append([line[2:], []])
        elif line.startswith("> ") and runs and not runs[-1][1]:
            runs[-1][0] += "\n" + line[2:]
        else:
            assert runs, "a console block starts with a command: %r" % line
            runs[-1][1].append(line)
    return [(command, "\n".join(lines)) for command, lines in runs]


class Console:
    """A reader at a checkout with ``pages`` open, running their marked blocks under ``tmp_path``."""

    def __init__(self, tmp_path, *pages):
        self.pages = pages
        self.nodes = tmp_path / "bcd-nodes"
        self.work = tmp_path / "checkout"
        self.work.mkdir()
        for name, target in (("hack", REPO / "hack"), (".build", REPO / ".build"), (".venv", VENV_BIN.parent)):
            (self.work / name).symlink_to(target)
        tools = tmp_path / "bin"
        tools.mkdir()
        (tools / "bcd-holds").write_text(BCD_HOLDS)
        (tools / "bcd-holds").chmod(0o755)
        (tmp_path / "ansible.cfg").write_text("[defaults]\n")
        self.env_file = tmp_path / "env"
        self.env = {key: value for key, value in os.environ.items() if not key.startswith("ANSIBLE_")}
        self.env.update(
            PATH="%s:%s:%s" % (tools, VENV_BIN, os.environ.get("PATH", "/usr/bin:/bin")),
            LC_ALL="C.UTF-8", LANG="C.UTF-8",
            ANSIBLE_COLLECTIONS_PATH=str(self.work / ".build"),
            ANSIBLE_HOME=str(tmp_path / "ansible-home"),
            ANSIBLE_LOCAL_TEMP=str(tmp_path / "ansible-home" / "tmp"),
            ANSIBLE_REMOTE_TEMP=str(tmp_path / "ansible-home" / "remote-tmp"),
            ANSIBLE_CONFIG=str(tmp_path / "ansible.cfg"),
            ANSIBLE_NOCOLOR="1", ANSIBLE_FORCE_COLOR="0")
        self.problems = []
        self.ran = set()
        self.printed = 0

    def local(self, text):
        """The page's text with the test's directory for /tmp/bcd-nodes."""
        return text.replace(SCRATCH, str(self.nodes))

    @staticmethod
    def where(name):
        return "%s (%s)" % (MARKS[name][0], name)

    def blocks(self, name):
        assert MARKS[name][0] in self.pages, name
        found = blocks_marked(name, [REPO / "docs" / MARKS[name][0]])
        assert found, "no block marked %s" % self.where(name)
        self.ran.add(name)
        return [(language, self.local(text)) for _page, language, text in found]

    def text(self, name):
        """The one block marked ``name``, for the test to use as the page says."""
        [(_language, text)] = self.blocks(name)
        return text

    def run(self, name):
        """Run the blocks marked ``name`` in page order: a console block's commands; a yaml block that
        starts ``# FILE`` is written as FILE."""
        for language, text in self.blocks(name):
            if language == "console":
                for command, quoted in commands(text):
                    self.command(name, command, quoted)
            else:
                shown = re.match(r"# ([\w.-]+)\n", text)
                assert language == "yaml" and shown, "%s is neither a session nor a file" % self.where(name)
                (self.work / shown.group(1)).write_text(text)

    def command(self, name, command, quoted):
        assert SCRATCH not in command
        shown = re.match(r"cat ([\w.-]+)$", command)
        if shown and not (self.work / shown.group(1)).exists():
            (self.work / shown.group(1)).write_text(quoted + "\n")  # the page shows this file
        out, code = self.shell(command)
        if os.environ.get("BCD_DOC_OUTPUT"):  # to fix a page: what each command printed, one file per command
            self.printed += 1
            Path(os.environ["BCD_DOC_OUTPUT"], "%02d-%s.txt" % (self.printed, name)).write_text(
                "$ %s\n%s" % (command, out.replace(str(self.nodes), SCRATCH)))
        where = "%s: $ %s" % (self.where(name), command.splitlines()[0])
        if not quoted.strip():
            if out or code:
                self.problems.append("%s: the page quotes no output, but it printed (exit %d):\n%s" % (where, code, out))
            return
        try:
            assert_quoted(normalized(quoted), normalized(out), where)
        except AssertionError as error:
            self.problems.append(str(error))

    def shell(self, command):
        """Run one command in bash, with the usual umask (the modes ls -l shows); the variables it sets
        (exported, with set -a) hold for the next."""
        script = "set -a\numask 022\n%s\n__rc=$?\nenv -0 > %s\nexit $__rc\n" % (command, self.env_file)
        done = subprocess.run(["bash", "--noprofile", "--norc", "-c", script], cwd=str(self.work), env=self.env,
                              stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                              timeout=300, check=False)
        if self.env_file.exists():
            pairs = (item.split("=", 1) for item in self.env_file.read_bytes().decode().split("\0") if "=" in item)
            self.env = {key: value for key, value in pairs if key not in ("_", "SHLVL", "PWD", "OLDPWD")}
            self.env_file.unlink()
        return done.stdout.decode("utf-8", "replace"), done.returncode

    def compare_file(self, name, path):
        """The one block marked ``name`` is the content of the node file ``path``, as quoted."""
        try:
            assert_quoted(normalized(self.text(name)), normalized(path.read_text()), self.where(name))
        except AssertionError as error:
            self.problems.append(str(error))

    def hw(self, node, change):
        """Change a node's hardware file as the page says it was changed."""
        path = self.nodes / node / "fakehw.yml"
        hw = yaml.safe_load(path.read_text())
        change(hw)
        path.write_text(yaml.safe_dump(hw, sort_keys=False))

    def done(self):
        """Every mark of the pages ran, and every quote matched."""
        if self.problems:
            pytest.fail("\n\n".join(self.problems), pytrace=False)
        assert self.ran == {name for name, (page, _what) in MARKS.items() if page in self.pages}


def test_user_guide(tmp_path):
    guide = Console(tmp_path, "user-guide.md", "events.md")
    guide.run("guide-node")
    guide.run("guide-files")
    guide.run("guide-check")  # on the fresh node, before anything is applied
    guide.run("guide-apply")
    guide.run("guide-env")
    guide.run("events-playbook")  # "Run right after the first playbook of the user guide"
    guide.run("events-info")
    # "Here the reservation id changed": first.yml with rsv_train2, at generation 2
    first = (guide.work / "first.yml").read_text()
    assert "reservation_id: rsv_train\n" in first and "generation: 1\n" in first
    (guide.work / "first.yml").write_text(first.replace("reservation_id: rsv_train\n", "reservation_id: rsv_train2\n")
                                          .replace("generation: 1\n", "generation: 2\n"))
    guide.run("guide-rerender")
    guide.run("guide-node-b")
    # "where a pass has bound alloc_whole (GPU 0) and alloc_mig (GPU 1's gi1/ci0)"
    node_b = guide.nodes / "node-b"
    gpu = "GPU-5f1c2a90-0002-4000-8000-%012d"
    bound = run_pass(FakeHwHost(str(node_b), str(node_b / "fakehw.yml")), 1, [
        {"allocation_id": "alloc_whole", "binding": "BINDING_HOLD", "devices": [{"id": gpu % 1}]},
        {"allocation_id": "alloc_mig", "binding": "BINDING_HOLD",
         "devices": [{"id": gpu % 2 + "/gi1/ci0", "device_class": "gpu.mig"}]}], lock_timeout=10)
    assert bound.section["state"] == "CONVERGED", bound.section
    guide.run("guide-info")
    guide.done()


def test_slices_and_admission(tmp_path):
    page = Console(tmp_path, "slices-and-admission.md")
    page.run("slices-setup")
    page.run("slices-memory")  # "These files were in place before generation 1"
    page.run("slices-bind")
    page.compare_file("slices-record", page.nodes / "node-s" / "run" / "bcd" / "slices" / "bcd-alloc-alloc_train.slice.json")
    page.run("slices-names")
    # "Generation 2 keeps alloc_train and alloc_kube and adds four holds"
    gen1 = (page.work / "gen1.yml").read_text()
    assert "\ngen: 1\n" in gen1 and gen1.rstrip().endswith("memory_bytes: 17179869184}")
    (page.work / "gen2.yml").write_text(gen1.replace("\ngen: 1\n", "\ngen: 2\n") + page.text("slices-gen2"))
    page.run("slices-admission")
    page.run("slices-unreadable")
    page.done()


def test_kubernetes(tmp_path):
    page = Console(tmp_path, "kubernetes.md")
    page.run("kube-node")
    # "The inventory, pass.yml and the bcd-holds command are those of slices-and-admission.md: setup,
    # with the host named node-k"
    for _page, _language, text in blocks_marked("slices-setup", [REPO / "docs" / "slices-and-admission.md"]):
        for command, quoted in commands(text):
            if re.match(r"cat [\w.-]+$", command):
                (page.work / command[4:]).write_text(quoted.replace("node-s", "node-k") + "\n")
    page.run("kube-bind")
    kubelet = yaml.safe_load(page.text("kube-kubelet"))["kubelet"]
    page.hw("k/node-k", lambda hw: hw.update(kubelet=kubelet))  # "Two pods then hold alloc_kube's devices"
    page.run("kube-release")
    page.run("kube-releasing")
    page.run("kube-waits")
    page.run("kube-retry")
    # "To see it without waiting, since was set back by hand"
    releasing = page.nodes / "k" / "node-k" / "var" / "lib" / "bcd" / "releasing.json"
    records = json.loads(releasing.read_text())
    records["releases"]["alloc_kube"]["since"] = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(time.time() - 1463))
    releasing.write_text(json.dumps(records, indent=2, sort_keys=True) + "\n")
    page.run("kube-stuck")
    k2 = (page.work / "k2.yml").read_text()
    assert "\ngen: 2\n" in k2
    # "Generation 3 (k3.yml is k2.yml with gen: 3), train-0 gone, infer-1 still running"
    page.hw("k/node-k", lambda hw: hw["kubelet"].update(pods=[pod for pod in kubelet["pods"] if pod["name"] != "train-0"]))
    (page.work / "k3.yml").write_text(k2.replace("\ngen: 2\n", "\ngen: 3\n"))
    page.run("kube-partial")
    # "Generation 4, no pod left (k4.yml is k2.yml with gen: 4)"
    page.hw("k/node-k", lambda hw: hw["kubelet"].update(pods=[]))
    (page.work / "k4.yml").write_text(k2.replace("\ngen: 2\n", "\ngen: 4\n"))
    page.run("kube-reported")
    # "a pod batch/ghost-0 on GPU 1's gi2/ci0"
    ghost = {"namespace": "batch", "name": "ghost-0", "container": "main", "device_ids": ["MIG-7089d0f3-0007-58c9-8f8c-000000010002"]}
    page.hw("k/node-k", lambda hw: hw["kubelet"].update(pods=[ghost]))
    page.run("kube-unreadable")
    page.done()
