#!/usr/bin/env python
# Copyright: contributors to bcd.devices
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""make bench: how fast a pass is, next to what Ansible itself costs for the same work.

Every figure is measured in this one run, interleaved round by round (so a noisy neighbour slows all of them
alike). A ratio is judged as the median of its rounds' own ratios: each round's numerator over the same round's
denominator, measured minutes apart, never a median over another median (issue 46: a ratio within 0.1 of its
limit was decided by one slow round of three). ``--runs`` rounds, 3 by default, 5 with ``--strict``, which
refuses fewer (an error, not a silent raise). "With the role" is a node with the collection's library installed
as the role installs it (hack/node_library.py) and ``bcd_devices_node_library`` set to its path; "without the
role" is a node with nothing installed and the variable unset, where the action plugins run the module as
Ansible ships it. Every run of the converger is checked for ``[WARNING]`` (with the role, a warning means the
library was refused, so the figures are partly the shipped module's: a miss of its own, not an abort). The run
measures a copy of the collection taken when it starts (``snapshot``: its plugins, meta and the role): the
checkout may be edited meanwhile. It prints how long it expects to take before it starts (``estimate``).

* ``ping``: ``ansible localhost -m ansible.builtin.ping``, Ansible's own floor for a task;
* ``bind``/``noop`` at the small count, N/4 and N holds: ``ansible localhost -m bcd.devices.holds`` on a
  fresh fakehw node with 8 GPUs and one slot per allocation, with the role, then the same input again (its
  result carries the events the bind journaled), then again once they are acknowledged (``noop acked``);
  each run checks which code ran (``ran_from``);
* the same at the small count and N without the role (`` bundled``), each run checked for a warning;
* ``echo``: at the small count and N, a module of the bench's own that does nothing but return, for the
  same ``-a`` options, the very result the acknowledged no-op returned: what Ansible itself costs to send
  those options and show that result (the converger's no-op can come near it, not under it); ``echo bind``
  the same at N for what the bind returned (its plan and its N signed events): ``bind share/floor`` is the
  bind above it, in disk floors;
* ``floor``: two atomic, fsynced writes per hold (what a bind must do at least), through the collection's
  own ``write_atomic`` into a fresh directory on the same file system, each directory fsynced once at the
  end as a pass does; measured in every round just before and just after that round's bind of N, the mean
  of the two its floor (on a shared machine the disk's fsyncs cost three times as much from one minute to
  the next: a floor measured a minute after the bind judged the bind by another disk);
* ``direct``: ``bcd-holds converge`` in a new process, bind and no-op, at N;
* ``fleet``: one playbook over ``--hosts`` fakehw hosts with ``--fleet-holds`` holds each (forks
  ``--forks``), bind then no-op with the role, then bind and no-op over as many hosts without it, next to
  the ping playbook over the same inventory, every round on fresh hosts; the runs without the role are
  checked for ``[WARNING]``; ``fleet echo``: the echo module in the holds task's place over the hosts with
  the role, each host returning what its no-op returned, for the same options (Ansible alone over the fleet);
* ``fleet500`` (``--large-hosts``, 500 by default, 0 skips it): the same with the role over that many hosts,
  to show the fleet stays flat: built and bound once, in the first round (``fleet500 bind``, reported), its
  echo results kept once; every round runs its ping playbook, its no-op and its echo. ``fleet cpu/host`` and
  ``fleet500 cpu/host`` are each no-op's CPU seconds (the process tree's: the controller and, the hosts
  being local, their module runs) over its hosts;
* ``role``: the role ``bcd.devices.bcd_holds`` (its root, fakehw, holds and generation 1; systemd and the
  distribution's packages off; the nodes' Python as its interpreter) over ``--hosts`` fresh fakehw hosts
  without the library, run once untimed in the first round to install and bind, then every round its re-run
  (``role noop``: nothing to change, ``changed=0`` on every host, else the bench stops with the output) next
  to the holds task alone over the same hosts (``role holds``: the fleet's converge playbook, same forks,
  ``bcd_devices_node_library`` set to the library the role said it installed, as the role sets it for
  itself: the bench's plays gather no facts). Only the role's documented variables are set, so a change
  to the role needs no change here;
* ``copy``: the user's alternative, at the small count and N (``--copy-holds``): a playbook of
  ``ansible.builtin.copy`` tasks (one task looped over the files) writing the same CDI specs and env files
  as the converger (its own renderings) on a node like the others, its change then its no-op, against the
  converger's own playbook task (``play bind``/``play noop``: ``bcd.devices.holds`` in a playbook on
  another such node, with the role); the copy playbook at N runs in the first ``--copy-rounds`` rounds only
  (each of its runs is some 500 module runs);
* ``memory``: the peak resident memory of a direct bind over ``--memory-holds`` holds;
* ``worst``: the worst devices section a pass accepts (docs/security.md, "Hostile numbers are
  cheap"): 512 assignments (every one honoured), 4096 slot atoms (the section's atom bound) over
  16 GPUs, each with CPU limits (a slice), a 256-character reservation id and env lines, as many
  and as long as keep the section within its 4 MiB; ``bcd-holds converge`` in a new
  process, bind then no-op, each timed by the CPU time of its process tree (user + system, what
  the pass costs the node; wall, shown beside it, adds the disk's fsyncs and a shared machine's
  waits; the bind's wall less the disk floor of its 512 sliced holds, three fsynced files each,
  is a target too) and by its peak resident memory, against 1 s and 100 MB.

The targets (``TARGETS``) are floors Ansible can meet. A ratio of Ansible runs is judged twice, in wall time
and (as ``<name> cpu``) in CPU time of the process trees, each against the limit, except:

* ``bind share/floor``, wall only: the bind of N above ``echo bind`` (Ansible alone for the bind's options and
  result), over the disk floor, each round's against that round's floor (at least 1: its writes are the
  floor's); the floor is the disk's time (fsync waits), which is wall time, not CPU. It replaced
  ``bind/floor`` (the bind above ping over the floor, retired in issue 46): on a disk whose fsync is nearly
  free Ansible alone returning the bind's result costs 2.3 to 3.5 floors, so no converger could meet it;
* ``fleet500-fleet noop/echo`` and ``fleet500-fleet noop/ping``: each round's 500-host ratio less the same
  round's 50-host one, judged within 0.1 either way (an absolute difference, not a ratio);
* ``fleet500/fleet cpu/host``, CPU only: each round's 500-host no-op CPU per host over the 50-host one's;
* ``worst bind s`` and ``worst noop s`` are CPU seconds (what the pass costs the node, whatever the disk),
  ``worst bind wall-floor s`` is wall less the floor (the disk's share taken out), the memory targets are
  peak resident memory;
* the warning counts are numbers of runs that printed ``[WARNING]`` (with the role: or did not run from the
  library), over every round.

A figure measured in fewer rounds (the copy playbook at N, ``fleet500 bind``) is paired with the rounds it was
measured in. A no-op of N "without the role" is judged with its events acknowledged, as the no-ops with the
role are: the steady state of a node; the first no-op after the bind, its N events in the result, is reported
beside.

It prints the figures (medians, each round's beside), then each ratio against its target, marking what
misses; it exits 0 whatever it measured (``--strict``: 1 when a target is missed).

    hack/bench.py [--holds 256] [--small 16] [--runs 3] [--hosts 50] [--large-hosts 500] [--fleet-holds 16]
                  [--forks 10] [--copy-holds 16 --copy-holds 256] [--copy-rounds 1] [--only worst] [--json FILE]
                  [--strict]
"""

import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time

import node_library

HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.dirname(HERE)
BUILD = os.path.join(REPO, ".build")
GPUS = 8
GENERATION = 1
# The echo module (``echo N``): the options of a holds task, and the result a no-op returned for them, from
# the file beside the node's root; nothing else.
ECHO_MODULE = """#!/usr/bin/python
import json
import os

from ansible.module_utils.basic import AnsibleModule


def main():
    module = AnsibleModule(argument_spec=dict(
        root=dict(type="path", required=True), fakehw=dict(type="path"), generation=dict(type="int"),
        devices=dict(type="list", elements="raw", required=True)), supports_check_mode=True)
    with open(os.path.join(os.path.dirname(module.params["root"]), "echo.json")) as handle:
        module.exit_json(**json.load(handle))


if __name__ == "__main__":
    main()
"""

# The node path of the library hack/node_library.py installs under a root (its default prefix, the role's), and
# the host variable that names it: set, a node "with the role"; unset, with nothing installed, one without.
LIBRARY = "/usr/local/lib/bcd-holds"
VARIABLE = "bcd_devices_node_library"
WARNING = b"[WARNING]"
# The converger's playbook task, over the fleet's hosts and the copy playbook's node alike.
CONVERGE_TASK = ("    - bcd.devices.holds:\n"
                 "        root: \"{{ node_root }}\"\n"
                 "        fakehw: \"{{ node_fakehw }}\"\n"
                 "        generation: %d\n"
                 "        devices: \"{{ node_devices }}\"\n" % GENERATION)

# The role over a fakehw host as a user would apply it there, its documented variables only (roles/bcd_holds/README.md):
# the fleet's holds and generation, the node's Python (whose byte code the role compiles), nothing it would install
# from the distribution, no systemd.
ROLE_PLAY = ("  roles:\n"
             "    - role: bcd.devices.bcd_holds\n"
             "      vars:\n"
             "        bcd_holds_root: \"{{ node_root }}\"\n"
             "        bcd_holds_fakehw: \"{{ node_fakehw }}\"\n"
             "        bcd_holds_devices: \"{{ node_devices }}\"\n"
             "        bcd_holds_generation: %d\n"
             "        bcd_holds_systemd: false\n"
             "        bcd_holds_install_dependencies: false\n"
             "        bcd_holds_python: \"{{ ansible_python_interpreter }}\"\n" % GENERATION)

# How a target's limit is met: the value at most the limit, at least it, or within it either way (a difference).
AT_MOST, AT_LEAST, WITHIN = "<=", ">=", "within"

TARGETS = [
    # (name, what, limit, how: AT_MOST, AT_LEAST or WITHIN; limit None: reported); a ratio of Ansible runs is
    # given in wall time and, as "<name> cpu", in CPU time of the process trees, each against the limit (the
    # module's docstring names the few judged one way only, and why); each is the median of its rounds' own values
    ("noop acked/echo", "no-op of N holds with the role, events acknowledged / echo N: what the converger adds to "
     "Ansible's own cost for the same options and result", 1.10, AT_MOST),
    ("noop small/echo", "the same at the small count", 1.05, AT_MOST),
    ("noop acked bundled/ping", "ad-hoc no-op of N holds without the role (variable unset, nothing installed), "
     "events acknowledged / ping", 1.7, AT_MOST),
    ("noop bundled warnings", "runs without the role (ad-hoc) that printed [WARNING]", 0, AT_MOST),
    ("bind share/floor", "the converger's own share of the bind of N: bind less echo bind (Ansible alone for its "
     "options and result) / the disk floor, each round's (at least 1: its writes are the floor's)", 2.5, AT_MOST),
    ("fleet noop/echo", "fleet playbook no-op with the role / fleet echo: the converger over Ansible alone for the "
     "same options and results", 1.05, AT_MOST),
    ("fleet bind/ping", "fleet playbook bind with the role / the ping playbook", 1.4, AT_MOST),
    ("fleet noop bundled/ping", "fleet playbook no-op without the role / the ping playbook", 1.6, AT_MOST),
    ("fleet bundled warnings", "fleet runs without the role (bind, no-op) that printed [WARNING]", 0, AT_MOST),
    ("fleet500-fleet noop/echo", "fleet500 noop/echo less fleet noop/echo, each round's: the converger's share "
     "stays as it is from 50 hosts to 500", 0.1, WITHIN),
    ("fleet500-fleet noop/ping", "fleet500 noop/ping less fleet noop/ping, each round's", 0.1, WITHIN),
    ("fleet500/fleet cpu/host", "the 500-host no-op's CPU per host / the 50-host one's, each round's: the "
     "controller's cost per host stays flat", 1.1, AT_MOST),
    ("role noop/holds", "the role's re-run over the fleet's hosts (nothing to change) / the holds task alone over "
     "them (the converge playbook, the library the role installed): what running the role costs over its pass",
     1.5, AT_MOST),
    ("warnings with the role", "runs with the role's library that warned or did not run from it (their figures "
     "are then partly the shipped module's)", 0, AT_MOST),
    ("copy noop/noop", "copy playbook no-op / the converger's playbook no-op, small count", 15.0, AT_LEAST),
    ("copy change/bind", "copy playbook writing them / the converger's playbook bind, small count", 15.0, AT_LEAST),
    ("copy noop/noop N", "the same no-ops at N", 150.0, AT_LEAST),
    ("copy change/bind N", "the same changes at N", 150.0, AT_LEAST),
    ("memory MB", "peak resident memory of a pass over the memory holds", 100.0, AT_MOST),
    ("worst bind s", "bind of the worst accepted section, CPU seconds of the process tree", 1.0, AT_MOST),
    ("worst noop s", "no-op pass over the worst accepted section, CPU seconds of the process tree", 1.0, AT_MOST),
    ("worst bind wall-floor s", "its wall time less the disk floor of its sliced holds (3 fsynced files each, "
     "directories once)", 1.0, AT_MOST),
    ("worst MB", "peak resident memory of either pass over the worst accepted section", 100.0, AT_MOST),
    # reported
    ("noop/ping", "no-op of N holds with the role / ping (N events unacknowledged)", None, AT_MOST),
    ("noop acked/ping", "the same, its events acknowledged", None, AT_MOST),
    ("noop small/ping", "the same at the small count", None, AT_MOST),
    ("echo/ping", "Ansible alone: a module returning the acknowledged no-op's result for its options, at N / ping "
     "(the least noop acked/ping can be)", None, AT_MOST),
    ("echo small/ping", "the same at the small count", None, AT_MOST),
    ("noop bundled/ping", "ad-hoc no-op of N without the role, its N events unacknowledged / ping", None, AT_MOST),
    ("noop small bundled/ping", "the same at the small count, acknowledged", None, AT_MOST),
    ("noop acked bundled/echo", "ad-hoc no-op of N without the role, events acknowledged / echo N: what the shipped "
     "module adds to Ansible's own cost for the same options and result", None, AT_MOST),
    ("bind N/bind N/4", "bind of N / bind of N/4, each less ping (4 is linear)", None, AT_MOST),
    ("echo bind/floor", "Ansible alone: the echo module returning the bind's result for its options, above ping / the "
     "disk floor, each round's (why bind/floor, the bind above ping, was retired: this alone is 2.3-3.5 on a fast "
     "disk)", None, AT_MOST),
    ("fleet noop/ping", "fleet playbook no-op with the role / the ping playbook (it moves with Ansible's own run "
     "against ping: fleet echo/ping)", None, AT_MOST),
    ("fleet echo/ping", "Ansible alone over the fleet: the echo module returning each host's no-op result for its "
     "options / the ping playbook (the least fleet noop/ping can be)", None, AT_MOST),
    ("fleet bind bundled/ping", "fleet playbook bind without the role / the ping playbook", None, AT_MOST),
    ("fleet500 noop/echo", "fleet noop/echo over the large fleet's hosts", None, AT_MOST),
    ("fleet500 noop/ping", "fleet noop/ping over the large fleet's hosts", None, AT_MOST),
    ("fleet500 echo/ping", "fleet echo/ping over the large fleet's hosts", None, AT_MOST),
    ("fleet500 bind/ping", "the large fleet's bind (first round only) / that round's ping playbook", None, AT_MOST),
    ("fleet cpu/host", "CPU seconds of the fleet no-op's process tree / its hosts", None, AT_MOST),
    ("fleet500 cpu/host", "the same over the large fleet", None, AT_MOST),
]


WORST_GPUS = 16


def gpu_uuid(node, index):
    return "GPU-5f1c2a90-%04x-4000-8000-%012x" % (node, index + 1)


def tmpfs_parent():
    """Where the fakehw nodes' ``/run`` goes: a tmpfs, as on every node systemd runs (the spec page: "/run is
    tmpfs"), so a pass's env files and slice records cost what they cost there; ``BCD_BENCH_RUN_TMPFS`` names
    another directory, or ``off`` keeps ``/run`` on the scratch directory's file system. None: no tmpfs found."""
    wanted = os.environ.get("BCD_BENCH_RUN_TMPFS", "")
    if wanted:
        return None if wanted == "off" else wanted
    try:
        with open("/proc/mounts") as handle:
            mounts = [line.split() for line in handle]
    except OSError:
        return None
    found = [fields[1] for fields in mounts if len(fields) > 2 and fields[2] == "tmpfs" and fields[1] == "/dev/shm"]
    return found[0] if found and os.access(found[0], os.W_OK) else None


def make_node(base, number, gpus=GPUS, run_parent=None):
    """A fakehw node under ``base``: hardware file, empty root, its ``/run`` in ``run_parent`` when given."""
    root = os.path.join(base, "root")
    os.makedirs(root)
    if run_parent:
        run = tempfile.mkdtemp(prefix="run.", dir=run_parent)
        os.chmod(run, 0o755)  # as /run is on a node
        os.symlink(run, os.path.join(root, "run"))
    hw = {"node_id": "bench-%d" % number, "boot_id": "6f0c1e9e-1c7a-4a43-9a9e-%012x" % number,
          "gpus": [{"uuid": gpu_uuid(number, i), "index": i, "minor": i, "numa_node": 0} for i in range(gpus)],
          "domains": [], "kubelet": {"reachable": True, "pods": []}}
    fakehw = os.path.join(base, "fakehw.json")
    with open(fakehw, "w") as handle:
        json.dump(hw, handle)
    return root, fakehw


def holds(number, count, gpus=GPUS):
    """``count`` allocations, one slot each, spread over the GPUs."""
    return [{"allocation_id": "a%d" % i, "reservation_id": "rsv_%d" % i, "binding": "BINDING_HOLD",
             "devices": [{"id": "%s/s%d" % (gpu_uuid(number, i % gpus), i // gpus), "device_class": "gpu.slot"}]}
            for i in range(count)]


def snapshot(scratch):
    """A copy of the collection as it is now (its plugins, meta, roles and galaxy.yml), which the whole run measures:
    the checkout may be edited while the bench runs, and a node library installed from one tree is refused by a
    controller that reads another. Returns its collections directory (``ansible_collections/bcd/devices``
    under it); the library the nodes get is installed from its ``module_utils`` too."""
    top = os.path.join(scratch, "collections")
    dest = os.path.join(top, "ansible_collections", "bcd", "devices")
    for name in ("plugins", "meta", "roles"):
        shutil.copytree(os.path.join(REPO, name), os.path.join(dest, name),
                        ignore=shutil.ignore_patterns("__pycache__", "*.pyc"))
    shutil.copy2(os.path.join(REPO, "galaxy.yml"), dest)
    # byte-compiled as a controller's collection is after its first run: without it, a shell that sets
    # PYTHONDONTWRITEBYTECODE (the runs' environment drops it too) made every run compile the action plugins
    # again, a cost ping and echo, whose code is Ansible's own and compiled, never paid
    subprocess.run([sys.executable, "-m", "compileall", "-q", os.path.join(dest, "plugins")], check=True)
    node_library.SOURCE = os.path.join(dest, "plugins", "module_utils")
    return top


def checkout():
    """The commit the snapshot was taken from, and whether the checkout had changes besides."""
    try:
        head = subprocess.run(["git", "-C", REPO, "rev-parse", "--short", "HEAD"], capture_output=True, text=True,
                              check=True).stdout.strip()
        dirty = subprocess.run(["git", "-C", REPO, "status", "--porcelain", "--untracked-files=no", "--", "plugins",
                                "meta", "roles"], capture_output=True, text=True, check=True).stdout.strip()
    except (OSError, subprocess.CalledProcessError):
        return "(not a git checkout)"
    return head + (" with uncommitted changes to plugins/, meta/ or roles/" if dirty else "")


class Bench:
    def __init__(self, args, scratch, collections=BUILD):
        self.args = args
        self.scratch = scratch
        self.collections = collections  # ANSIBLE_COLLECTIONS_PATH: the snapshot main takes
        self.counter = 0
        self.run_parent = None  # main sets it: a directory on a tmpfs for the nodes' /run (tmpfs_parent)
        self.checkout = None  # main sets it: the commit measured (checkout())
        self.env = dict(os.environ)
        self.env.pop("PYTHONDONTWRITEBYTECODE", None)  # a controller writes its bytecode (snapshot)
        self.env.update({
            "PATH": os.path.dirname(sys.executable) + os.pathsep + self.env.get("PATH", ""),
            "ANSIBLE_HOME": os.path.join(scratch, "ansible-home"),
            "ANSIBLE_COLLECTIONS_PATH": collections,
            "ANSIBLE_LOCALHOST_WARNING": "false",
            "ANSIBLE_INVENTORY_UNPARSED_WARNING": "false",
            "ANSIBLE_PYTHON_INTERPRETER": sys.executable,
            "ANSIBLE_HOST_KEY_CHECKING": "false",
            "ANSIBLE_RETRY_FILES_ENABLED": "false",
            "ANSIBLE_NOCOLOR": "1",
        })
        self.times = {}
        self.rounds = {}  # name: the round (from 0) of each of its samples in times, for the paired ratios
        self.round = 0  # main sets it: the round being measured
        self.warnings = {}  # target name: the first line of each warning a run without the role printed
        self.last_cpu = 0.0
        self.large = None  # the large fleet (fleet500), built and bound in the first round: its inventory
        self.role_fleet = None  # the role's hosts, the role applied once in the first round: (inventory, library)

    def fresh(self, gpus=GPUS, library=False):
        """A new fakehw node; ``library``: with the node library as the role installs it."""
        self.counter += 1
        base = os.path.join(self.scratch, "node%d" % self.counter)
        os.makedirs(base)
        root, fakehw = make_node(base, self.counter, gpus, self.run_parent)
        if library:
            node_library.install(root)
        return self.counter, root, fakehw

    def record(self, name, seconds):
        self.times.setdefault(name, []).append(seconds)
        self.rounds.setdefault(name, []).append(self.round)

    def timed(self, argv, stdin=None):
        """``(wall seconds, output)`` of one run; its CPU time (the process tree's, user + system) is kept in
        ``self.last_cpu`` for ``record``."""
        started = time.monotonic()
        proc = subprocess.Popen(argv, env=self.env, cwd=self.scratch, stdout=subprocess.PIPE, stderr=subprocess.STDOUT)
        out = proc.stdout.read()
        _pid, status, usage = os.wait4(proc.pid, 0)
        seconds = time.monotonic() - started
        code = os.waitstatus_to_exitcode(status) if hasattr(os, "waitstatus_to_exitcode") else status
        if code != 0:
            sys.stderr.write(out.decode("utf-8", "replace")[-4000:])
            raise SystemExit("bench: %s failed with exit status %d" % (argv[0], code))
        self.last_cpu = usage.ru_utime + usage.ru_stime
        return seconds, out

    def record_run(self, name, seconds):
        """A run's wall time as ``name`` and its process tree's CPU time as ``name cpu``."""
        self.record(name, seconds)
        self.record(name + " cpu", self.last_cpu)

    # -- through ansible ----------------------------------------------------------------------

    def adhoc(self, module, args, role=False):
        argv = ["ansible", "localhost", "-c", "local", "-m", module]
        if role:  # the role's library, by its path; without the role the variable is left unset
            argv += ["-e", "%s=%s" % (VARIABLE, LIBRARY)]
        if args is not None:
            argv += ["-a", json.dumps(args)]
        return self.timed(argv)

    def warned(self, name, out):
        """1 when ``out`` has a warning, kept (its first line) for the report under ``name``; else 0."""
        if WARNING not in out:
            return 0
        line = out[out.index(WARNING):].split(b"\n", 1)[0].decode("utf-8", "replace")
        self.warnings.setdefault(name, []).append(line)
        return 1

    def ping(self):
        self.record_run("ping", self.adhoc("ansible.builtin.ping", None)[0])

    def ran(self, role, out):
        """Whether an ad-hoc run of a node library module ran what it should, as the count of runs that did not
        (0 or 1), kept for the report: with the role, from the library, with no warning (where the library was
        refused, the run's figures are the shipped module's, a miss of its own); without the role, as shipped
        (anything else is the bench's error), with no warning."""
        if not role:
            if b'"ran_from": "bundled"' not in out:
                raise SystemExit("bench: a module without the role did not run as shipped:\n%s" % out[-2000:].decode())
            return self.warned("noop bundled warnings", out)
        if b'"ran_from": "node-library"' not in out and WARNING not in out:
            out = WARNING + b" (none printed) the module did not run from the node library"
        return self.warned("warnings with the role", out)

    def module_pass(self, count, role=True):
        """Bind, no-op and acknowledged no-op of ``count`` holds: on a node with the role's library, run from it,
        or (not ``role``) on a node without the role, nothing installed and the variable unset, as Ansible ships
        the module, with no warning; each run checks which code ran."""
        number, root, fakehw = self.fresh(library=role)
        args = {"root": root, "fakehw": fakehw, "generation": GENERATION, "devices": holds(number, count)}
        suffix = "" if role else " bundled"
        around = role and count == self.args.holds  # the round's disk floor, measured on either side of this bind
        before = self.floor_seconds(count) if around else None
        seconds, out = self.adhoc("bcd.devices.holds", args, role)
        if around:
            self.record("floor %d" % count, (before + self.floor_seconds(count)) / 2)
        if b"CHANGED" not in out:
            raise SystemExit("bench: the bind of %d holds changed nothing:\n%s" % (count, out[-2000:].decode()))
        warned = self.ran(role, out)
        self.record_run("bind %d%s" % (count, suffix), seconds)
        if role and count == self.args.holds:
            self.echo(count, root, args, out, "echo bind %d" % count, b"CHANGED")
        seconds, out = self.adhoc("bcd.devices.holds", args, role)
        if b"CHANGED" in out or b"SUCCESS" not in out:
            raise SystemExit("bench: the no-op pass of %d holds was not a no-op:\n%s" % (count, out[-2000:].decode()))
        warned += self.ran(role, out)
        self.record_run("noop %d%s" % (count, suffix), seconds)
        # the steady state of a node whose events a gateway takes (the role acknowledges them after each
        # delivery): the same pass without the N unacknowledged AllocationBound in its result
        self.timed(self.cli(root, fakehw, "events", "--ack-through", str(2 ** 62)))
        seconds, out = self.adhoc("bcd.devices.holds", args, role)
        if b"CHANGED" in out or b'"events": []' not in out:
            raise SystemExit("bench: the acknowledged no-op pass of %d holds was not a no-op:\n%s"
                             % (count, out[-2000:].decode()))
        warned += self.ran(role, out)
        self.record_run("noop acked %d%s" % (count, suffix), seconds)
        if role and count in (self.args.small, self.args.holds):
            self.echo(count, root, args, out)
        self.record("warnings role" if role else "warnings bundled %d" % count, warned)

    def echo(self, count, root, args, out, name=None, shown_as=b"SUCCESS"):
        """``echo N``: the bench's module returning what the acknowledged no-op just returned (``out``, the
        ad-hoc output ``localhost | SUCCESS => {...}``), for the same options; ``echo bind N`` (``name``) the
        same for what the bind returned (``CHANGED``: its plan, holds and N signed events)."""
        shown = json.loads(out.decode("utf-8").partition(" => ")[2])
        shown.pop("ran_from", None)  # the action plugin's, not the module's
        with open(os.path.join(os.path.dirname(root), "echo.json"), "w") as handle:
            json.dump(shown, handle)
        seconds, echoed = self.timed(["ansible", "localhost", "-c", "local", "-M", self.echo_library(), "-m", "bench_echo",
                                      "-a", json.dumps(args)])
        if shown_as not in echoed or len(echoed) < len(out) * 0.9:
            raise SystemExit("bench: the echo of %d holds did not show the pass's result:\n%s"
                             % (count, echoed[-2000:].decode()))
        self.record_run(name or "echo %d" % count, seconds)

    def echo_library(self):
        """The directory of the bench's echo module (``ECHO_MODULE``), written once."""
        library = os.path.join(self.scratch, "echo-library")
        if not os.path.isdir(library):
            os.makedirs(library)
            with open(os.path.join(library, "bench_echo.py"), "w") as handle:
                handle.write(ECHO_MODULE)
        return library

    # -- what a user would write instead ---------------------------------------------------------

    def copy_play(self, count):
        """The user's alternative: the same holds written by a playbook of ansible.builtin.copy tasks, a CDI spec
        and an env file per hold (the converger's own renderings, so the files are alike), one task looped over
        the files: the change, then the no-op."""
        number, root, fakehw = self.fresh()
        spec = self.spec_file(number, count)
        self.timed(self.cli(root, fakehw, "converge", "--spec", spec))
        files = []

        def copied(directory):  # beside the converger's files: /run's on the same tmpfs
            top, rest = directory.split("/", 1)
            return os.path.join(root, top, "copied", rest)
        for directory in ("etc/cdi", "run/bcd/allocations"):
            for name in sorted(os.listdir(os.path.join(root, directory))):
                with open(os.path.join(root, directory, name)) as handle:
                    files.append({"dest": os.path.join(copied(directory), name), "content": handle.read()})
        for directory in ("etc/cdi", "run/bcd/allocations"):
            os.makedirs(copied(directory))
        if len(files) != 2 * count:
            raise SystemExit("bench: the converger rendered %d files for %d holds, not two each" % (len(files), count))
        path = os.path.join(self.scratch, "copy-%d.json" % number)
        with open(path, "w") as handle:
            json.dump({"copy_files": files}, handle)
        play = self.playbook("copy-loop", (
            "    - ansible.builtin.copy:\n        dest: \"{{ item.dest }}\"\n        content: \"{{ item.content }}\"\n"
            "        mode: \"0644\"\n      loop: \"{{ copy_files }}\"\n      loop_control:\n        label: \"{{ item.dest }}\"\n"),
            hosts="localhost")
        argv = ["ansible-playbook", "-c", "local", "-i", "localhost,", "-e", "@" + path, play]
        seconds, out = self.timed(argv)
        if "changed=1" not in out.decode():
            raise SystemExit("bench: the copy playbook changed nothing:\n" + out[-2000:].decode())
        self.record_run("copy change %d" % count, seconds)
        seconds, out = self.timed(argv)
        if "changed=0" not in out.decode():
            raise SystemExit("bench: the copy playbook's second run changed something:\n" + out[-2000:].decode())
        self.record_run("copy noop %d" % count, seconds)

    def converge_play(self, count):
        """What the copy playbook is measured against: the converger's own playbook task, ``bcd.devices.holds``
        on a node like the copy playbook's, with the role's library, as ``ansible-playbook`` runs it: the bind,
        then the no-op (its events unacknowledged, as right after a bind)."""
        number, root, fakehw = self.fresh(library=True)
        path = os.path.join(self.scratch, "play-%d.json" % number)
        with open(path, "w") as handle:
            json.dump({"node_root": root, "node_fakehw": fakehw, "node_devices": holds(number, count),
                       VARIABLE: LIBRARY}, handle)
        argv = ["ansible-playbook", "-c", "local", "-i", "localhost,", "-e", "@" + path,
                self.playbook("converge-local", CONVERGE_TASK, hosts="localhost")]
        seconds, out = self.timed(argv)
        if "changed=1" not in out.decode():
            raise SystemExit("bench: the converger's playbook changed nothing:\n" + out[-2000:].decode())
        warned = self.warned("warnings with the role", out)
        self.record_run("play bind %d" % count, seconds)
        seconds, out = self.timed(argv)
        if "changed=0" not in out.decode():
            raise SystemExit("bench: the converger's playbook no-op changed something:\n" + out[-2000:].decode())
        warned += self.warned("warnings with the role", out)
        self.record_run("play noop %d" % count, seconds)
        self.record("warnings role", warned)

    # -- what a bind cannot be faster than --------------------------------------------------

    def floor(self, count, name=None, sliced=False):
        self.record(name or "floor %d" % count, self.floor_seconds(count, sliced))

    def floor_seconds(self, count, sliced=False):
        """The wall time of the disk floor of ``count`` holds on a fresh node (``floor``)."""
        sys.path.insert(0, self.collections)
        from ansible_collections.bcd.devices.plugins.module_utils.node.fsutil import (
            directory_syncs_into,
            sync_directories,
            write_atomic,
        )
        _number, root, _fakehw = self.fresh()
        data = b"x" * 1500
        started = time.monotonic()
        unsynced = set()
        # as a pass writes them: every file fsynced before its rename, each directory once at the end
        with directory_syncs_into(unsynced):
            for i in range(count):
                write_atomic(os.path.join(root, "etc", "cdi", "bcd-a%d.json" % i), data, 0o644)
                write_atomic(os.path.join(root, "run", "bcd", "allocations", "a%d.env" % i), data[:200], 0o644)
                if sliced:  # a sliced hold's third file (a fakehw node keeps its slice as a record)
                    write_atomic(os.path.join(root, "run", "bcd", "slices", "a%d.json" % i), data[:300], 0o644)
        sync_directories(unsynced)
        return time.monotonic() - started

    # -- the node command -------------------------------------------------------------------

    def cli(self, root, fakehw, *argv):
        code = ("import sys; sys.path.insert(0, %r); "
                "from ansible_collections.bcd.devices.plugins.module_utils.entry.cli import main; "
                "sys.exit(main(sys.argv[1:]))" % self.collections)
        return [sys.executable, "-c", code] + list(argv) + ["--root", root, "--fakehw", fakehw]

    def spec_file(self, number, count):
        path = os.path.join(self.scratch, "spec-%d.json" % number)
        with open(path, "w") as handle:
            json.dump({"generation": GENERATION, "devices": holds(number, count)}, handle)
        return path

    def direct(self, count):
        number, root, fakehw = self.fresh()
        spec = self.spec_file(number, count)
        self.record("direct bind %d" % count, self.timed(self.cli(root, fakehw, "converge", "--spec", spec))[0])
        self.record("direct noop %d" % count, self.timed(self.cli(root, fakehw, "converge", "--spec", spec))[0])

    def memory(self, count):
        gpus = max(GPUS, (count + 127) // 128)
        number, root, fakehw = self.fresh(gpus)
        path = os.path.join(self.scratch, "spec-%d.json" % number)
        with open(path, "w") as handle:
            json.dump({"generation": GENERATION, "devices": holds(number, count, gpus)}, handle)
        proc = subprocess.Popen(self.cli(root, fakehw, "converge", "--spec", path), env=self.env,
                                stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        _pid, status, usage = os.wait4(proc.pid, 0)
        proc.returncode = os.waitstatus_to_exitcode(status) if hasattr(os, "waitstatus_to_exitcode") else status
        if proc.returncode != 0:
            raise SystemExit("bench: the bind of %d holds failed (exit status %s)" % (count, proc.returncode))
        self.record("memory MB", usage.ru_maxrss / 1024.0)  # ru_maxrss is in KiB on Linux

    # -- the worst section a pass accepts ----------------------------------------------------

    def worst_section(self, number):
        """The largest section within every bound (``domain/input/assignment.py``): all of it honoured."""
        sys.path.insert(0, self.collections)
        from ansible_collections.bcd.devices.plugins.module_utils.domain.input import assignment
        from ansible_collections.bcd.devices.plugins.module_utils.domain.input.section import parse_assignments, section_size
        count = assignment.MAX_ASSIGNMENTS
        per = assignment.MAX_ATOMS // count
        section = []
        for i in range(count):
            atoms = [{"id": "%s/s%d" % (gpu_uuid(number, (i * per + j) % WORST_GPUS), (i * per + j) // WORST_GPUS),
                      "device_class": "gpu.slot"} for j in range(per)]
            section.append({"allocation_id": "w%04d" % i, "reservation_id": ("rsv_%04d_" % i).ljust(256, "r"),
                            "binding": "BINDING_HOLD", "devices": atoms,
                            "limits": {"cpus": "0-%d" % (i % 64), "cpu_millis": 1000 + i},
                            "env": ["RUN_NOTE="]})
        room = assignment.MAX_SECTION_BYTES - section_size(section)
        fill = room // count  # env characters a hold, in lines of at most 4096 (the env bound): the section's 4 MiB
        while True:
            for entry in section:
                lines, left = [], fill
                while left > 0 or not lines:
                    name = "RUN_NOTE%d=" % len(lines)
                    lines.append(name + "n" * max(0, min(4096 - len(name), left)))
                    left -= 4096 - len(name) + 24  # a line also costs its JSON framing in section_size
                entry["env"] = lines
            try:
                section_size(section)
                break
            except assignment.InvalidAssignment:
                fill -= 64
        parsed = parse_assignments(section)
        if parsed.refusals or sum(len(a.devices) for a in parsed.assignments) != assignment.MAX_ATOMS:
            raise SystemExit("bench: the worst section is not accepted whole: %s" % parsed.refusals[:1])
        return section

    def measured(self, argv):
        """``(CPU seconds of the process tree, wall seconds, peak resident MB, its output, user CPU seconds)``
        of one run of ``argv``."""
        started = time.monotonic()
        proc = subprocess.Popen(argv, env=self.env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT)
        out = proc.stdout.read()
        _pid, status, usage = os.wait4(proc.pid, 0)
        wall = time.monotonic() - started
        code = os.waitstatus_to_exitcode(status) if hasattr(os, "waitstatus_to_exitcode") else status
        if code != 0:
            sys.stderr.write(out.decode("utf-8", "replace")[-4000:])
            raise SystemExit("bench: %s failed with exit status %s" % (argv[0], code))
        return usage.ru_utime + usage.ru_stime, wall, usage.ru_maxrss / 1024.0, out, usage.ru_utime

    def worst(self):
        number, root, fakehw = self.fresh(WORST_GPUS)
        path = os.path.join(self.scratch, "worst-%d.json" % number)
        section = self.worst_section(number)
        with open(path, "w") as handle:
            json.dump({"generation": GENERATION, "devices": section}, handle)
        self.record("worst section MB", os.path.getsize(path) / (1024.0 * 1024.0))
        peak = 0.0
        for what in ("bind", "noop"):
            cpu, wall, mb, out, user = self.measured(self.cli(root, fakehw, "converge", "--spec", path))
            if what == "bind" and len(os.listdir(os.path.join(root, "run", "bcd", "allocations"))) != len(section):
                raise SystemExit("bench: the bind of the worst section did not bind every hold:\n%s"
                                 % out[-2000:].decode("utf-8", "replace"))
            self.record("worst %s s" % what, cpu)
            self.record("worst %s wall" % what, wall)
            self.record("worst %s user s" % what, user)  # the rest is the kernel's: writes and fsyncs
            peak = max(peak, mb)
        self.record("worst MB", peak)
        self.floor(len(section), "worst floor", sliced=True)

    # -- a fleet ----------------------------------------------------------------------------

    def fleet_inventory(self, role, hosts=None):
        """``hosts`` (``--hosts`` when not given) fresh nodes: with the role's library and the variable naming it,
        or (not ``role``) with nothing installed and the variable unset."""
        directory = os.path.join(self.scratch, "fleet%d" % self.counter)
        os.makedirs(os.path.join(directory, "host_vars"))
        names = []
        for h in range(hosts or self.args.hosts):
            number, root, fakehw = self.fresh(library=role)
            name = "node%03d" % h
            names.append(name)
            host_vars = {"node_root": root, "node_fakehw": fakehw, "node_devices": holds(number, self.args.fleet_holds)}
            if role:
                host_vars[VARIABLE] = LIBRARY
            with open(os.path.join(directory, "host_vars", name + ".json"), "w") as handle:
                json.dump(host_vars, handle)
        with open(os.path.join(directory, "hosts.ini"), "w") as handle:
            handle.write("[nodes]\n%s\n\n[nodes:vars]\nansible_connection=local\nansible_python_interpreter=%s\n"
                         % ("\n".join(names), sys.executable))
        return os.path.join(directory, "hosts.ini")

    def playbook(self, name, task, hosts="nodes", play=None):
        """A playbook of one play over ``hosts`` without facts: ``task`` its tasks, or ``play`` the rest of the play."""
        path = os.path.join(self.scratch, name + ".yml")
        if not os.path.exists(path):
            with open(path, "w") as handle:
                handle.write("- hosts: %s\n  gather_facts: false\n%s" % (hosts, play or "  tasks:\n" + task))
        return path

    def played(self, what, inventory, playbook, hosts, changed, *extra):
        """``(wall seconds, output)`` of ``playbook`` over ``inventory`` (``--forks``), its recap checked: ``hosts``
        hosts, none failed or unreachable, each changed (``changed`` True) or none (False); else the bench stops
        with the output."""
        seconds, out = self.timed(["ansible-playbook", "-i", inventory, "-f", str(self.args.forks)] + list(extra)
                                  + [playbook])
        wrong = recap_wrong(out.decode("utf-8", "replace"), hosts, changed)
        if wrong:
            raise SystemExit("bench: %s: %s:\n%s" % (what, wrong, out[-3000:].decode("utf-8", "replace")))
        return seconds, out

    def fleet_ping(self, inventory, name, hosts):
        ping = self.playbook("ping", "    - ansible.builtin.ping:\n")
        self.record_run(name, self.played("the ping playbook", inventory, ping, hosts, False)[0])

    def fleet_converge(self, inventory, what, name, hosts, role=True):
        """The holds playbook over ``inventory``: ``what`` "bind" (every host changes) or "noop" (none does), kept
        as ``name``; a warning is counted against its target (with the role, it says the library was refused and the
        figures are partly the shipped module's). Returns 1 when it warned."""
        converge = self.playbook("converge", CONVERGE_TASK)
        seconds, out = self.played("the %s %s" % (name, what), inventory, converge, hosts, what == "bind")
        warned = self.warned("warnings with the role" if role else "fleet bundled warnings", out)
        self.record_run(name, seconds)
        return warned

    def fleet_pass(self, inventory, role):
        """The bind, then the no-op, over the ``--hosts`` of ``inventory``, with the role or without it."""
        suffix = "" if role else " bundled"
        warned = sum(self.fleet_converge(inventory, what, "fleet %s%s" % (what, suffix), self.args.hosts, role)
                     for what in ("bind", "noop"))
        self.record("warnings role" if role else "warnings fleet bundled", warned)

    def fleet(self):
        """The fleet of ``--hosts``, fresh every round: its ping playbook, bind and no-op with the role, its echo;
        then bind and no-op over as many hosts without the role."""
        with_role = self.fleet_inventory(role=True)
        self.fleet_ping(with_role, "fleet ping", self.args.hosts)
        self.fleet_pass(with_role, role=True)
        self.fleet_keep(with_role, self.args.hosts)
        self.fleet_echo(with_role, "fleet echo", self.args.hosts)
        self.fleet_pass(self.fleet_inventory(role=False), role=False)

    def large_fleet(self):
        """``fleet500``: ``--large-hosts`` hosts with the role, built and bound (``fleet500 bind``) and their no-op
        results kept for the echo in the first round only, as a round over them costs minutes; every round its ping
        playbook, its no-op and its echo, as the fleet of ``--hosts`` has."""
        hosts = self.args.large_hosts
        first = self.large is None
        if first:
            self.large = self.fleet_inventory(role=True, hosts=hosts)
        self.fleet_ping(self.large, "fleet500 ping", hosts)
        warned = self.fleet_converge(self.large, "bind", "fleet500 bind", hosts) if first else 0
        warned += self.fleet_converge(self.large, "noop", "fleet500 noop", hosts)
        self.record("warnings role", warned)
        if first:
            self.fleet_keep(self.large, hosts)
        self.fleet_echo(self.large, "fleet500 echo", hosts)

    def fleet_keep(self, inventory, hosts):
        """Each host's no-op result, kept beside its root for the echo module (``fleet_echo``): an untimed run of
        the holds playbook that registers it."""
        keep = self.playbook("converge-keep", CONVERGE_TASK + (
            "      register: converged\n"
            "    - ansible.builtin.copy:\n"
            "        dest: \"{{ node_root | dirname }}/echo.json\"\n"
            "        content: \"{{ converged | dict2items | rejectattr('key', 'in', ['ran_from', 'failed', 'invocation'])"
            " | items2dict | to_json }}\"\n"
            "        mode: \"0644\"\n"))
        self.played("the fleet's echo results were not kept", inventory, keep, hosts, True)  # each host's copy
        with open(os.path.join(os.path.dirname(inventory), "host_vars", "node000.json")) as handle:
            with open(os.path.join(os.path.dirname(json.load(handle)["node_root"]), "echo.json")) as kept:
                shown = json.load(kept)
        if len(shown.get("holds", ())) != self.args.fleet_holds or shown.get("changed") is not False:
            raise SystemExit("bench: the fleet's kept no-op result is not the no-op's: %.2000s" % json.dumps(shown))

    def fleet_echo(self, inventory, name, hosts):
        """``fleet echo``: Ansible alone over the fleet, as ``echo`` is for one node: the bench's echo module in
        the holds playbook's place, on every host returning what that host's no-op returned (``fleet_keep``), for
        the same options: the least the fleet's no-op can be."""
        echo = self.playbook("echo", CONVERGE_TASK.replace("bcd.devices.holds", "bench_echo"))
        seconds, _out = self.played("the fleet's echo did not return the no-op's results", inventory, echo, hosts,
                                    False, "-M", self.echo_library())
        self.record_run(name, seconds)

    # -- the role ---------------------------------------------------------------------------

    def role(self):
        """``role noop``: the role's re-run over ``--hosts`` fakehw hosts (nothing to change), next to the holds
        task alone over the same hosts (``role holds``). The hosts start with nothing installed; the role's first
        run, untimed, in the first round, installs its library and binds the holds, and says where the library is
        (the collection's variable it sets for the rest of its run), which the holds task is then given."""
        hosts = self.args.hosts
        if self.role_fleet is None:
            inventory = self.fleet_inventory(role=False)
            first = self.playbook("role-first", None, play=ROLE_PLAY + (
                "  tasks:\n"
                "    - ansible.builtin.copy:\n"
                "        dest: \"{{ node_root | dirname }}/node_library\"\n"
                "        content: \"{{ %s }}\"\n"
                "        mode: \"0644\"\n" % VARIABLE))
            self.played("the role's first run (install and bind) did not change every host", inventory, first, hosts,
                        True)
            with open(os.path.join(os.path.dirname(inventory), "host_vars", "node000.json")) as handle:
                with open(os.path.join(os.path.dirname(json.load(handle)["node_root"]), "node_library")) as said:
                    library = said.read().strip()
            self.role_fleet = (inventory, library)
        inventory, library = self.role_fleet
        warned = 0
        seconds, out = self.played("the holds task alone after the role changed a host", inventory,
                                   self.playbook("converge", CONVERGE_TASK), hosts, False,
                                   "-e", json.dumps({VARIABLE: library}))
        warned += self.warned("warnings with the role", out)
        self.record_run("role holds", seconds)
        seconds, out = self.played("the role's re-run changed a host", inventory, self.playbook("role", None, play=ROLE_PLAY),
                                   hosts, False)
        warned += self.warned("warnings with the role", out)
        self.record_run("role noop", seconds)
        self.record("warnings role", warned)


def recap_wrong(text, hosts, changed):
    """What is wrong with ansible-playbook's PLAY RECAP in ``text`` for ``hosts`` hosts that should each have
    changed (``changed`` True) or not (False): "" when nothing is."""
    found = {}
    if "PLAY RECAP" in text:
        for line in text.rsplit("PLAY RECAP", 1)[1].splitlines()[1:]:
            fields = line.split()
            if len(fields) > 2 and fields[1] == ":":
                found[fields[0]] = dict((key, int(value)) for key, _eq, value in (field.partition("=") for field in fields[2:])
                                        if value.isdigit())
    if len(found) != hosts:
        return "%d hosts in its recap, not %d" % (len(found), hosts)
    for host in sorted(found):
        counts = found[host]
        if counts.get("failed", 1) or counts.get("unreachable", 1):
            return "%s failed or was unreachable" % host
        if (counts.get("changed", 0) > 0) != changed:
            return "%s %s" % (host, "changed nothing" if changed else "changed")
    return ""


def median(values):
    return statistics.median(values) if values else float("nan")


def paired(bench, function, *names):
    """The median, over the rounds that measured every one of ``names``, of ``function`` of that round's samples of
    them (each round's numerator over the same round's denominator: the runs of one round are minutes apart, the
    rounds may be far apart); None where one was never measured."""
    if not all(name in bench.times for name in names):
        return None
    rounds = getattr(bench, "rounds", {})
    series = [dict(zip(rounds.get(name) or range(len(bench.times[name])), bench.times[name])) for name in names]
    common = sorted(set(series[0]).intersection(*series[1:]))
    return median([function(*(samples[number] for samples in series)) for number in common]) if common else None


def judge(value, limit, how):
    """Whether ``value`` meets ``limit`` as ``how`` says (AT_MOST, AT_LEAST, WITHIN: its size, either sign)."""
    if how == AT_LEAST:
        return value >= limit
    return (abs(value) if how == WITHIN else value) <= limit


def report(bench, args):
    n, quarter, small = args.holds, max(1, args.holds // 4), args.small
    m = dict((name, median(values)) for name, values in bench.times.items())
    print("figures (median of %d rounds, seconds; \"cpu\": CPU seconds of the process tree; memory in MB; each "
          "round's in brackets):" % args.runs)
    for name in sorted(m):
        spread = bench.times[name]
        print("  %-26s %8.3f   [%s]" % (name, m[name], ", ".join("%.3f" % v for v in spread)))
    ratios = {}

    def put(name, function, *names):
        value = paired(bench, function, *names)
        if value is not None:
            ratios[name] = value

    def ratio(name, over, under):
        """``name`` in wall time and ``name cpu`` in CPU time, each round's ``over`` / ``under``, where measured."""
        for suffix in ("", " cpu"):
            put(name + suffix, lambda top, bottom: top / bottom, over + suffix, under + suffix)

    ratio("noop/ping", "noop %d" % n, "ping")
    ratio("noop acked/ping", "noop acked %d" % n, "ping")
    ratio("noop small/ping", "noop acked %d" % small, "ping")
    ratio("noop bundled/ping", "noop %d bundled" % n, "ping")
    ratio("noop acked bundled/ping", "noop acked %d bundled" % n, "ping")
    ratio("noop small bundled/ping", "noop acked %d bundled" % small, "ping")
    ratio("echo/ping", "echo %d" % n, "ping")
    ratio("echo small/ping", "echo %d" % small, "ping")
    # wall only, each round's run against that round's floor: the disk varies from round to round
    put("echo bind/floor", lambda echo, ping, floor: (echo - ping) / floor, "echo bind %d" % n, "ping", "floor %d" % n)
    put("bind share/floor", lambda bind, echo, floor: (bind - echo) / floor, "bind %d" % n, "echo bind %d" % n,
        "floor %d" % n)
    put("bind N/bind N/4", lambda bind, bind4, ping: (bind - ping) / (bind4 - ping), "bind %d" % n, "bind %d" % quarter,
        "ping")
    ratio("noop acked/echo", "noop acked %d" % n, "echo %d" % n)
    ratio("noop small/echo", "noop acked %d" % small, "echo %d" % small)
    ratio("noop acked bundled/echo", "noop acked %d bundled" % n, "echo %d" % n)
    for name, figures in (("noop bundled warnings", ("warnings bundled %d" % small, "warnings bundled %d" % n)),
                          ("fleet bundled warnings", ("warnings fleet bundled",)),
                          ("warnings with the role", ("warnings role",))):
        if any(figure in bench.times for figure in figures):  # every run that warned, in any round
            ratios[name] = sum(sum(bench.times.get(figure, [])) for figure in figures)
    for fleet in ("fleet", "fleet500"):
        ratio(fleet + " noop/ping", fleet + " noop", fleet + " ping")
        ratio(fleet + " bind/ping", fleet + " bind", fleet + " ping")
        ratio(fleet + " echo/ping", fleet + " echo", fleet + " ping")
        ratio(fleet + " noop/echo", fleet + " noop", fleet + " echo")
    ratio("fleet noop bundled/ping", "fleet noop bundled", "fleet ping")
    ratio("fleet bind bundled/ping", "fleet bind bundled", "fleet ping")
    for suffix in ("", " cpu"):  # each round's 500-host ratio less the same round's 50-host one
        for under in ("echo", "ping"):
            put("fleet500-fleet noop/%s%s" % (under, suffix), lambda noop500, under500, noop, under_: noop500 / under500 - noop / under_,
                "fleet500 noop" + suffix, "fleet500 %s%s" % (under, suffix), "fleet noop" + suffix, "fleet %s%s" % (under, suffix))
    hosts, large = args.hosts, args.large_hosts
    if hosts > 0:
        put("fleet cpu/host", lambda cpu: cpu / hosts, "fleet noop cpu")
    if large > 0:
        put("fleet500 cpu/host", lambda cpu: cpu / large, "fleet500 noop cpu")
    if hosts > 0 and large > 0:
        put("fleet500/fleet cpu/host", lambda cpu500, cpu: (cpu500 / large) / (cpu / hosts), "fleet500 noop cpu",
            "fleet noop cpu")
    ratio("role noop/holds", "role noop", "role holds")
    ratio("copy noop/noop", "copy noop %d" % small, "play noop %d" % small)
    ratio("copy change/bind", "copy change %d" % small, "play bind %d" % small)
    ratio("copy noop/noop N", "copy noop %d" % n, "play noop %d" % n)
    ratio("copy change/bind N", "copy change %d" % n, "play bind %d" % n)
    for name in ("memory MB", "worst bind s", "worst noop s", "worst MB"):
        if name in m:
            ratios[name] = m[name]
    put("worst bind wall-floor s", lambda wall, floor: wall - floor, "worst bind wall", "worst floor")
    print("\nratios, each the median of its rounds' own (N=%d, small %d; fleet: %d hosts x %d holds, fleet500: %d hosts, "
          "forks %d; memory: %d holds):" % (n, small, hosts, args.fleet_holds, large, args.forks, args.memory_holds))
    missed = []
    for name, what, limit, how in TARGETS:
        for key in (name, name + " cpu"):
            if key not in ratios:
                continue
            value = ratios[key]
            if limit is None:
                print("  %-28s %7.2f  %-17s %s  %s" % (key, value, "(reported)", "    ", what))
                continue
            ok = judge(value, limit, how)
            if not ok:
                missed.append(key)
            print("  %-28s %7.2f  target %-3s %-6g %s  %s" % (key, value, "+/-" if how == WITHIN else how, limit,
                                                              "ok  " if ok else "MISS", what))
    if "worst bind s" in m:
        print("\n  worst accepted section (%.2f MB as JSON): bind %.3f s CPU (%.3f s user, %.3f s wall), no-op %.3f s "
              "CPU (%.3f s wall), peak %.1f MB" % (
                  m["worst section MB"], m["worst bind s"], m["worst bind user s"], m["worst bind wall"],
                  m["worst noop s"], m["worst noop wall"], m["worst MB"]))
    if "direct noop %d" % n in m:
        print("\n  direct bcd-holds converge at N: bind %.3f s, no-op %.3f s"
              % (m["direct bind %d" % n], m["direct noop %d" % n]))
    for name in sorted(bench.warnings):
        lines = bench.warnings[name]
        plural = "" if len(lines) == 1 else "s"
        print("\n  %s: %d run%s printed a warning, the first: %s" % (name, len(lines), plural, lines[0]))
    if missed:
        print("\nmissed: %s" % ", ".join(missed))
    return m, ratios, missed


# What a run costs on the project's shared 2-core machines, for ``estimate`` (seconds): an ad-hoc run (ping 0.8 s,
# a no-op of 256 holds 1 s, as shipped 1.6 s), ansible-playbook's own start, a one-task playbook's time per host
# at forks 10 (the 500-host ping playbook: about 85 s), the node library installed under a root, the role's first
# run per host (its install: 13 s of CPU a host), its re-run in runs of the holds task alone (issue 46: 24 to 28
# before the re-run was made cheap; set it to what a run measures), and the copy playbook per hold.
COSTS = {"adhoc": 1.0, "playbook": 1.5, "host": 0.17, "install": 0.2, "role": 7.0, "rerun": 26.0, "copy": 1.3}
STRICT_ROUNDS = 5
PARTS = ["node", "fleet", "role", "copy", "memory", "worst"]


def estimate(args, parts, copy_holds, costs=None):
    """``(seconds, {part: seconds})``: about how long the run will take here (``COSTS``), from the runs each part
    makes (ad-hoc runs, playbook runs over so many hosts, library installs)."""
    cost = dict(COSTS, **(costs or {}))
    rounds = args.runs

    def playbooks(count, hosts):  # ``count`` one-task playbook runs over ``hosts`` hosts
        return count * (cost["playbook"] + cost["host"] * hosts)

    parts_cost = {}
    if "node" in parts:  # 15 ad-hoc runs with the role (the bundled ones 1.6 times that), 6 bcd-holds commands
        parts_cost["node"] = rounds * cost["adhoc"] * (1 + 15 + 2 * 3 * 1.6 + 6 * 0.4) * max(1.0, args.holds / 256.0)
    if "fleet" in parts:  # fresh every round: its ping, bind, no-op, kept results (two tasks), echo; bind, no-op bundled
        runs = 1 + 1.25 + 1.15 + 2.1 + 1.05 + 1.7 + 1.6
        parts_cost["fleet"] = rounds * (args.hosts * cost["install"] + playbooks(runs, args.hosts))
        if args.large_hosts > 0:  # built, bound and kept once; every round its ping, no-op and echo
            parts_cost["fleet500"] = (args.large_hosts * cost["install"] + playbooks(1.25 + 2.1, args.large_hosts)
                                      + rounds * playbooks(1 + 1.15 + 1.05, args.large_hosts))
    if "role" in parts:  # the role's first run once, then every round its re-run and the holds task alone
        parts_cost["role"] = (cost["playbook"] + cost["role"] * args.hosts
                              + rounds * playbooks(cost["rerun"] + 1.15, args.hosts))
    if "copy" in parts:  # the converger's playbook twice, the copy playbook twice (at N in --copy-rounds rounds)
        parts_cost["copy"] = (rounds * len(copy_holds) * playbooks(2, 1)
                              + sum((min(rounds, args.copy_rounds) if count > args.small else rounds)
                                    * 2 * (cost["playbook"] + cost["copy"] * count) for count in copy_holds))
    if "memory" in parts or "worst" in parts:
        parts_cost["memory and worst"] = rounds * ((2.0 if "memory" in parts else 0) + (6.0 if "worst" in parts else 0))
    return sum(parts_cost.values()), parts_cost


def arguments():
    """The command line's parser."""
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n", maxsplit=1)[0])
    parser.add_argument("--holds", type=int, default=256, help="N, the holds of one node (default 256)")
    parser.add_argument("--runs", "--rounds", dest="runs", type=int,
                        help="rounds, interleaved; a ratio is the median of its rounds' own (default 3, and 5 with "
                             "--strict, which refuses fewer: an error, not raised to 5)")
    parser.add_argument("--small", type=int, default=16, help="the small count of holds (default 16)")
    parser.add_argument("--copy-holds", type=int, action="append",
                        help="holds of the copy playbook alternative (repeatable; default the small count and N)")
    parser.add_argument("--copy-rounds", type=int, default=1,
                        help="rounds in which the copy playbook runs at more than the small count (default 1: "
                             "at N each of its runs is some 2N module runs)")
    parser.add_argument("--hosts", type=int, default=50,
                        help="hosts of the fleet and of the role's fleet (default 50; 0 skips both)")
    parser.add_argument("--large-hosts", type=int, default=500,
                        help="hosts of the large fleet, fleet500, built and bound once and measured every round with "
                             "the fleet (default 500, about 85 s a playbook run; 0 skips it)")
    parser.add_argument("--fleet-holds", type=int, default=16, help="holds per fleet host (default 16)")
    parser.add_argument("--forks", type=int, default=10, help="ansible-playbook forks (default 10)")
    parser.add_argument("--memory-holds", type=int, default=1024,
                        help="assignments in the memory pass's section (default 1024: 512 bound, the rest refused one by one)")
    parser.add_argument("--only", choices=PARTS, action="append",
                        help="measure only this part (repeatable; fleet: both fleets; role: the role's re-run)")
    parser.add_argument("--json", help="also write the figures and ratios to this file")
    parser.add_argument("--strict", action="store_true",
                        help="exit 1 when a target is missed; implies at least %d rounds" % STRICT_ROUNDS)
    return parser


def options(argv=None):
    """The command line, its rounds resolved: 3, or 5 with ``--strict``, which refuses fewer (a ratio within 0.1 of
    its limit was decided by one slow round of three)."""
    parser = arguments()
    args = parser.parse_args(argv)
    if args.runs is None:
        args.runs = STRICT_ROUNDS if args.strict else 3
    if args.runs < 1:
        parser.error("--runs must be 1 or more, not %d" % args.runs)
    if args.strict and args.runs < STRICT_ROUNDS:
        parser.error("--strict judges the median of at least %d rounds, not %d: leave --runs out or give %d or more"
                     % (STRICT_ROUNDS, args.runs, STRICT_ROUNDS))
    return args


def main(argv=None):
    args = options(argv)
    if not os.path.isdir(os.path.join(BUILD, "ansible_collections", "bcd", "devices")):
        raise SystemExit("bench: %s/ansible_collections/bcd/devices is missing; run it through make bench" % BUILD)
    parts = set(args.only or PARTS)
    copy_holds = args.copy_holds or [args.small, args.holds]
    if args.hosts <= 0:
        parts -= {"fleet", "role"}
    seconds, each = estimate(args, parts, copy_holds)
    shown = ", ".join("%s %d" % (part, round(spent / 60.0)) for part, spent in each.items())
    sys.stderr.write("bench: %d rounds, expected to take about %d minutes on a shared 2-core machine (%s)\n"
                     % (args.runs, round(seconds / 60.0), shown))
    scratch = tempfile.mkdtemp(prefix="bcd-bench.")
    parent = tmpfs_parent()
    run_parent = tempfile.mkdtemp(prefix="bcd-bench-run.", dir=parent) if parent else None
    for directory in (scratch, run_parent):  # the nodes' roots under them: a pass does its state work as bcd
        if directory:
            os.chmod(directory, 0o755)
    sys.stderr.write("bench: the nodes' /run is %s\n" % ("a tmpfs (%s)" % run_parent if run_parent
                                                         else "on the scratch directory's file system"))
    started = time.monotonic()
    try:
        bench = Bench(args, scratch, snapshot(scratch))
        bench.run_parent = run_parent
        bench.checkout = checkout()
        sys.stderr.write("bench: measuring a copy of the checkout at %s\n" % bench.checkout)
        quarter = max(1, args.holds // 4)
        for round_number in range(args.runs):
            bench.round = round_number
            minutes = (time.monotonic() - started) // 60
            sys.stderr.write("bench: round %d of %d (%d minutes in)\n" % (round_number + 1, args.runs, minutes))
            if "node" in parts:
                bench.ping()
                bench.module_pass(args.small)
                bench.module_pass(args.small, role=False)
                if quarter != args.small:  # else the small count's pass is N/4's too
                    bench.module_pass(quarter)
                bench.module_pass(args.holds)
                bench.module_pass(args.holds, role=False)
                bench.direct(args.holds)
            if "fleet" in parts:
                bench.fleet()
                if args.large_hosts > 0:
                    bench.large_fleet()
            if "role" in parts:
                bench.role()
            if "copy" in parts:
                for count in copy_holds:
                    bench.converge_play(count)
                    if count <= args.small or round_number < args.copy_rounds:
                        bench.copy_play(count)
            if "memory" in parts:
                bench.memory(args.memory_holds)
            if "worst" in parts:
                bench.worst()
        figures, ratios, missed = report(bench, args)
        sys.stderr.write("bench: took %d minutes\n" % round((time.monotonic() - started) / 60.0))
        if args.json:
            with open(args.json, "w") as handle:
                json.dump({"figures": figures, "samples": bench.times, "rounds": bench.rounds, "ratios": ratios,
                           "missed": missed, "warnings": bench.warnings, "checkout": bench.checkout, "args": vars(args)},
                          handle, indent=2, sort_keys=True)
    finally:
        shutil.rmtree(scratch, ignore_errors=True)
        if run_parent:
            shutil.rmtree(run_parent, ignore_errors=True)
    return 1 if (args.strict and missed) else 0


if __name__ == "__main__":
    sys.exit(main())
