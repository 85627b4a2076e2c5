#!/usr/bin/env python
# Copyright: contributors to bcd.devices
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""Each speed trick of ``plugins/module_utils/support/speed.py`` (and records instead of dataclasses), measured with
and without it, on every Python a node may have; the payload build's on the controller's Pythons.

The figures of docs/performance.md, "Speed tricks, measured (issue 47)". Every figure is CPU time
(``time.process_time``, which a busy neighbour on a shared machine disturbs less than the wall clock) of a fresh
process, the median of ``--runs``, the variants of a round run one after the other (a slow minute slows all of
them). Before the runs, one run of each variant leaves the byte code compiled under a scratch
``PYTHONPYCACHEPREFIX`` (a node runs the role's byte code; the checkout gets none). A trick is switched off by
putting its plain way back in the child before the collection is imported, nothing else:

* ``noop``: a module run's work on the node, from files (the node library): Ansible's ``basic`` imported first
  (its ``module_utils``, as a payload ships them; not counted), then the converger imported as
  ``entry.modules.holds`` does (``import``), and the module's own ``main`` (``pass``: its options parsed, a
  16-hold no-op pass, its result) on a fakehw node the script bound once before. The module's isolation check
  is skipped (it refuses the byte code prefix set here), and on a Python without cryptography the module is
  told it has it (a no-op signs nothing). Variants: everything on; ``records`` off (``record``, ``field``,
  ``fields``, ``replace``, ``asdict``, ``is_record`` those of ``dataclasses``); ``first_call`` off (a record's
  ``__init__`` compiled when its class is declared); ``lazy`` off (``lazy_pattern`` is ``re.compile``). The
  collector's runs during the import are what the node library's module saves by keeping it off then;
* ``zip``: importing the converger from a zip of ``module_utils`` laid out as AnsiballZ lays it out (a module run
  without the role), with and without ``compile_once()``;
* ``bind``: the bind of the largest section a pass takes (512 holds of 8 slots, 4 096 atoms, over 16 GPUs) in
  check mode (the input parsed and the bind planned, nothing written: no event signed, so a node Python without
  cryptography runs it) on a fresh fakehw node, from files, with and without ``fewer_collections`` around the
  pass;
* ``build`` (the controller's Pythons: each ``.build/venvs/ansible-core-*`` and ``.venv``): ansible-core's
  ``recursive_finder`` building ``bcd.devices.holds``'s payload, after importing what a playbook's worker has
  imported, with and without ``fewer_collections(freeze=True)``.

Usage: python hack/measure_speed.py [--runs N] [--python PATH]... [--only noop|zip|bind|build]... [--json FILE]
Prints one table per part (milliseconds).
"""

import argparse
import glob
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import zipfile

HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.dirname(HERE)
BUILD = os.path.join(REPO, ".build")
NODE_PYTHONS = ("3.8", "3.9", "3.10", "3.11", "3.12", "3.13")
NOOP_VARIANTS = ("on", "records", "first_call", "lazy")
PARTS = ("noop", "zip", "bind", "build")

# What every child watches, from its start: the cyclic collector's runs and their CPU (gc.callbacks), and
# re.compile's calls and their CPU. Python 3.8's syntax and standard library only.
WATCH = r'''
import gc, json, re, sys, time
collector = {"runs": 0, "ms": 0.0, "began": 0.0}
def watch(phase, info):
    if phase == "start":
        collector["began"] = time.process_time()
    else:
        collector["runs"] += 1
        collector["ms"] += (time.process_time() - collector["began"]) * 1000
gc.callbacks.append(watch)
regex = {"runs": 0, "ms": 0.0}
real_compile = re.compile
def timed_compile(pattern, flags=0):
    began = time.process_time()
    try:
        return real_compile(pattern, flags)
    finally:
        regex["runs"] += 1
        regex["ms"] += (time.process_time() - began) * 1000
def seen(what):
    return [what["runs"], what["ms"]]
'''

# The child on the node: argv is a JSON file of its job (see measure_node).
NODE_CHILD = WATCH + r'''
with open(sys.argv[1]) as handle:
    job = json.load(handle)
off = set(job["off"])
if job.get("ansible"):
    sys.path.insert(0, job["ansible"])
    from ansible.module_utils import basic  # a module run imports it first: part of the heap the collector walks
re.compile = timed_compile  # the collection's patterns from here on (Ansible's own compiled at its import)
started, collected = time.process_time(), seen(collector)
sys.path.insert(0, job["source"])
from ansible_collections.bcd.devices.plugins.module_utils.support import records, speed
if "zip" not in off:
    speed.compile_once()
inits = {"runs": 0, "ms": 0.0}
real_init = records._compiled
def timed_init(*args):
    began = time.process_time()
    try:
        return real_init(*args)
    finally:
        inits["runs"] += 1
        inits["ms"] += (time.process_time() - began) * 1000
records._compiled = timed_init
if "records" in off:
    import dataclasses
    records.record, records.field = dataclasses.dataclass, dataclasses.field
    records.fields, records.replace, records.asdict = dataclasses.fields, dataclasses.replace, dataclasses.asdict
    records.is_record = dataclasses.is_dataclass
if "first_call" in off:
    speed.on_first_call = lambda cls, name, make: make()
if "lazy" in off:
    speed.lazy_pattern = lambda pattern, flags=0: re.compile(pattern, flags)
if "fewer" in off:
    import contextlib
    speed.fewer_collections = lambda *args, **kwargs: contextlib.nullcontext()
from ansible_collections.bcd.devices.plugins.module_utils.entry.modules import holds
from ansible_collections.bcd.devices.plugins.module_utils.entry.converge import run_pass
from ansible_collections.bcd.devices.plugins.module_utils.node.hosts import make_host
imported, at_import = time.process_time(), {"gc": seen(collector), "init": seen(inits), "re": seen(regex)}
state = None
if job.get("module"):  # the module's own main, as Ansible runs it: its options parsed, the pass, its result
    import io
    if not holds.HAS_CRYPTOGRAPHY:  # a node Python here without it: a no-op signs nothing (module docstring)
        holds.HAS_CRYPTOGRAPHY = True
    holds.refuse_unless_isolated = lambda module: None  # it refuses the byte code prefix this script sets
    basic._ANSIBLE_ARGS = json.dumps({"ANSIBLE_MODULE_ARGS": job["module"]}).encode()
    basic._ANSIBLE_PROFILE = "legacy"  # as the controller sends a module's options
    shown, sys.stdout = sys.stdout, io.StringIO()
    try:
        holds.main(basic)
    except SystemExit:
        pass
    answered, sys.stdout = sys.stdout.getvalue(), shown
    answer = json.loads(answered.strip().splitlines()[-1])
    state = answer["section"]["state"] if "section" in answer else answer.get("msg", answered[:2000])
elif job.get("devices") is not None:
    result = run_pass(make_host(job["root"], job["fakehw"]), 1, job["devices"], [], check_mode=job.get("check", False))
    state = result.section["state"]
done, at_end = time.process_time(), {"gc": seen(collector), "init": seen(inits), "re": seen(regex)}
declared = [value for module in list(sys.modules.values()) for value in list(vars(module).values())
            if isinstance(value, type) and "__record_fields__" in value.__dict__ and value.__module__ == module.__name__]
compiled = [cls for cls in declared if getattr(cls.__dict__.get("__init__"), "__module__", "") is None]
figures = {"import": (imported - started) * 1000, "pass": (done - imported) * 1000, "total": (done - started) * 1000,
           "state": state, "classes": [len(declared), len(compiled)]}
for name in ("gc", "init", "re"):
    base = collected if name == "gc" else [0, 0.0]
    figures[name + " import"] = [at_import[name][0] - base[0], at_import[name][1] - base[1]]
    figures[name + " pass"] = [at_end[name][0] - at_import[name][0], at_end[name][1] - at_import[name][1]]
print(json.dumps(figures))
'''

# The child on the controller: argv is the collections directory and "on" or "off".
BUILD_CHILD = WATCH + r'''
import contextlib, datetime, io, zipfile
build, variant = sys.argv[1], sys.argv[2]
from ansible.utils.collection_loader._collection_finder import _AnsibleCollectionFinder
_AnsibleCollectionFinder(paths=[build])._install()
# what a playbook's worker has imported when it builds a payload: the collector walks it all
import ansible.cli.playbook, ansible.executor.task_executor, ansible.executor.process.worker
import ansible.plugins.action, ansible.plugins.loader, ansible.template, ansible.vars.manager
from ansible.executor import module_common
from ansible._internal._ansiballz import _builder
from ansible_collections.bcd.devices.plugins.module_utils.support.speed import fewer_collections
fqn = "ansible_collections.bcd.devices.plugins.modules.holds"
with open(build + "/ansible_collections/bcd/devices/plugins/modules/holds.py", "rb") as handle:
    data = handle.read()
archive = zipfile.ZipFile(io.BytesIO(), "w", zipfile.ZIP_DEFLATED)
around = fewer_collections(freeze=True) if variant == "on" else contextlib.nullcontext()
started, collected = time.process_time(), seen(collector)
with around:
    module_common.recursive_finder("holds", fqn, data, archive, datetime.datetime(1980, 1, 1), _builder.ExtensionManager())
done, after = time.process_time(), seen(collector)
print(json.dumps({"build": (done - started) * 1000, "files": len(archive.namelist()),
                  "gc": [after[0] - collected[0], after[1] - collected[1]]}))
'''


def find_python(version):
    """hack/find_python.sh's interpreter of ``version``, or None where the machine has none."""
    found = subprocess.run(["bash", os.path.join(HERE, "find_python.sh"), version], capture_output=True, text=True,
                           check=False)
    return found.stdout.strip() if found.returncode == 0 else None


def controller_pythons():
    """``[(python, ansible-core version)]``: .venv's and each .build/venvs/ansible-core-X.Y's, one per Python
    (the newest ansible-core of each)."""
    found = {}
    candidates = [os.path.join(REPO, ".venv")] + sorted(glob.glob(os.path.join(BUILD, "venvs", "ansible-core-*")))
    for venv in candidates:
        python = os.path.join(venv, "bin", "python")
        if not os.path.exists(python):
            continue
        asked = subprocess.run([python, "-c", "import sys, ansible.release as r; print('%d.%d' % sys.version_info[:2], "
                                "r.__version__)"], capture_output=True, text=True, check=False)
        if asked.returncode == 0:
            version, core = asked.stdout.split()
            found[version] = (python, core)
    return [found[version] for version in sorted(found, key=lambda v: tuple(map(int, v.split("."))))]


def version_of(python):
    return subprocess.run([python, "-c", "import sys; print(sys.version.split()[0])"], capture_output=True, text=True,
                          check=True).stdout.strip()


def child(python, code, args, pycache):
    """Run ``code`` in a fresh ``python``; byte code written and read under ``pycache`` (never the checkout's)."""
    env = dict((key, value) for key, value in os.environ.items()
               if key not in ("PYTHONDONTWRITEBYTECODE", "PYTHONPATH"))
    env["PYTHONPYCACHEPREFIX"] = pycache
    done = subprocess.run([python, "-c", code] + list(args), capture_output=True, text=True, check=False, env=env)
    if done.returncode:
        raise SystemExit("%s failed:\n%s" % (python, done.stderr))
    return json.loads(done.stdout.strip().splitlines()[-1])


def node_child(python, job, pycache):
    """``NODE_CHILD`` in a fresh ``python`` for ``job`` (written beside the byte code: a large section is more
    than an argument list takes)."""
    path = os.path.join(os.path.dirname(pycache), "job.json")
    with open(path, "w") as handle:
        json.dump(job, handle)
    return child(python, NODE_CHILD, [path], pycache)


def gpu_uuid(index):
    return "GPU-5f1c2a90-0001-4000-8000-%012x" % (index + 1)


def make_node(base, gpus=8):
    """A fakehw node under ``base``: its root and its hardware file."""
    root = os.path.join(base, "root")
    os.makedirs(root)
    hw = {"node_id": "measure", "boot_id": "6f0c1e9e-1c7a-4a43-9a9e-000000000001",
          "gpus": [{"uuid": gpu_uuid(i), "index": i, "minor": i, "numa_node": 0} for i in range(gpus)],
          "domains": [], "kubelet": {"reachable": True, "pods": []}}
    fakehw = os.path.join(base, "fakehw.json")
    with open(fakehw, "w") as handle:
        json.dump(hw, handle)
    return root, fakehw


def holds(count, gpus=8, per=1):
    """``count`` allocations of ``per`` slots each, spread over the GPUs."""
    return [{"allocation_id": "a%d" % i, "reservation_id": "rsv_%d" % i, "binding": "BINDING_HOLD",
             "devices": [{"id": "%s/s%d" % (gpu_uuid((i * per + j) % gpus), (i * per + j) // gpus),
                          "device_class": "gpu.slot"} for j in range(per)]}
            for i in range(count)]


def payload_zip(path, collections):
    """The collection's module_utils in a zip, laid out as AnsiballZ ships them (empty package inits above)."""
    module_utils = os.path.join(collections, "ansible_collections", "bcd", "devices", "plugins", "module_utils")
    with zipfile.ZipFile(path, "w", zipfile.ZIP_DEFLATED) as archive:
        for package in ("ansible_collections", "ansible_collections/bcd", "ansible_collections/bcd/devices",
                        "ansible_collections/bcd/devices/plugins", "ansible_collections/bcd/devices/plugins/module_utils"):
            archive.writestr(package + "/__init__.py", "")
        for top, dirs, files in os.walk(module_utils):
            dirs[:] = sorted(name for name in dirs if name != "__pycache__")
            for name in sorted(files):
                if name.endswith(".py"):
                    source = os.path.join(top, name)
                    archive.write(source, "ansible_collections/bcd/devices/plugins/module_utils/"
                                  + os.path.relpath(source, module_utils).replace(os.sep, "/"))
    return path


def ansible_module_utils(scratch):
    """A directory holding ``ansible/module_utils`` as a payload ships it (an empty ``ansible/__init__.py``), from
    .venv's ansible-core, for a node Python without ansible-core; None when .venv has none."""
    found = glob.glob(os.path.join(REPO, ".venv", "lib", "python3*", "site-packages", "ansible", "module_utils"))
    if not found:
        return None
    top = os.path.join(scratch, "ansible-payload")
    os.makedirs(os.path.join(top, "ansible"))
    open(os.path.join(top, "ansible", "__init__.py"), "w").close()
    os.symlink(found[0], os.path.join(top, "ansible", "module_utils"))
    return top


FIGURES = ("import", "pass", "total", "build")
WATCHED = ("gc import", "gc pass", "init import", "init pass", "re import", "re pass", "gc")


def summary(rounds, on=None, paired="total"):
    """The median of each figure over ``rounds`` (a watched one as ``[runs, ms]``); with ``on`` (the same rounds
    with every trick on), ``cost``: the median of each round's ``paired`` figure less the same round's with
    every trick on, which a slow minute shifts less than a difference of two medians."""
    out = {}
    for key in rounds[0]:
        if key in FIGURES:
            out[key] = statistics.median(found[key] for found in rounds)
        elif key in WATCHED:
            out[key] = [statistics.median(found[key][0] for found in rounds),
                        statistics.median(found[key][1] for found in rounds)]
    if on is not None:
        out["cost"] = statistics.median(found[paired] - base[paired] for found, base in zip(rounds, on))
    return out


def measure_node(python, parts, runs, scratch, collections):
    """The node's figures for one Python: ``{part: {variant: {figure: ms}}}``; the first round of each part
    (byte code compiled, caches warm) is left out."""
    pycache = os.path.join(scratch, "pycache")
    result = {"python": version_of(python)}
    base = tempfile.mkdtemp(dir=scratch)
    if "noop" in parts:
        root, fakehw = make_node(os.path.join(base, "noop"))
        job = {"source": collections, "ansible": ansible_module_utils(base),
               "module": {"root": root, "fakehw": fakehw, "generation": 1, "devices": holds(16)}}
        # bound by this script's own Python: a bind signs its events, and a node Python here may lack cryptography
        # (a no-op signs nothing)
        bound = node_child(sys.executable, dict(job, off=[]), pycache)
        assert bound["state"] == "CONVERGED", bound
        rounds = dict((variant, []) for variant in NOOP_VARIANTS)
        for _round in range(runs + 1):
            for variant in NOOP_VARIANTS:
                found = node_child(python, dict(job, off=[variant]), pycache)
                assert found["state"] == "CONVERGED", found
                rounds[variant].append(found)
        result["classes"] = rounds["on"][-1]["classes"]
        result["noop"] = dict((variant, summary(found[1:], rounds["on"][1:])) for variant, found in rounds.items())
    if "zip" in parts:
        zipped = payload_zip(os.path.join(base, "payload.zip"), collections)
        rounds = {"on": [], "zip": []}
        for _round in range(runs + 1):
            for variant in rounds:
                rounds[variant].append(node_child(python, {"source": zipped, "off": [variant]}, pycache))
        result["zip"] = dict((variant, summary(found[1:], rounds["on"][1:], "import")) for variant, found in rounds.items())
    if "bind" in parts:
        rounds = {"on": [], "fewer": []}
        for number in range(runs + 1):
            for variant in rounds:
                root, fakehw = make_node(os.path.join(base, "bind-%s-%d" % (variant, number)), gpus=16)
                job = {"source": collections, "root": root, "fakehw": fakehw, "devices": holds(512, gpus=16, per=8),
                       "off": [variant], "check": True}
                rounds[variant].append(node_child(python, job, pycache))
                shutil.rmtree(os.path.dirname(root))
        result["bind"] = dict((variant, summary(found[1:], rounds["on"][1:], "pass")) for variant, found in rounds.items())
    shutil.rmtree(base)
    return result


def measure_build(python, core, runs, scratch, collections):
    pycache = os.path.join(scratch, "pycache")
    rounds = {"on": [], "off": []}
    for _round in range(runs + 1):
        for variant in rounds:
            rounds[variant].append(child(python, BUILD_CHILD, [collections, variant], pycache))
    return {"python": version_of(python), "ansible-core": core, "files": rounds["on"][-1]["files"],
            "build": dict((variant, summary(found[1:], rounds["on"][1:], "build")) for variant, found in rounds.items())}


def watched(figure):
    return "%d, %.1f" % (figure[0], figure[1])


def whole(found, name):
    """A watched figure over the import and the pass together: ``[runs, ms]``."""
    return [found[name + " import"][0] + found[name + " pass"][0], found[name + " import"][1] + found[name + " pass"][1]]


def show(results, builds):
    """The figures as the Markdown tables of docs/performance.md (ms, medians; "runs, ms" for what was watched)."""
    noop = [result for result in results if "noop" in result]
    if noop:
        print("\n16-hold no-op from files (%d record classes declared, %d compiled by the no-op)\n"
              % tuple(noop[0]["classes"]))
        print("| Python | import, pass (all on) | collections in the import, in the pass | records off: costs | "
              "first_call off: costs | `__init__`s compiled, on / off | lazy off: costs | patterns compiled, on / off |")
        print("| --- " * 8 + "|")
        for result in noop:
            on, off = result["noop"]["on"], result["noop"]
            print("| %s | %.1f, %.1f | %s; %s | %+.1f | %+.1f | %s / %s | %+.1f | %s / %s |" % (
                result["python"], on["import"], on["pass"], watched(on["gc import"]), watched(on["gc pass"]),
                off["records"]["cost"], off["first_call"]["cost"], watched(whole(on, "init")),
                watched(whole(off["first_call"], "init")), off["lazy"]["cost"], watched(whole(on, "re")),
                watched(whole(off["lazy"], "re"))))
    zipped = [result for result in results if "zip" in result]
    if zipped:
        print("\n| Python | import from the zip, `compile_once` | without | without: costs |")
        print("| --- " * 4 + "|")
        for result in zipped:
            figures = result["zip"]
            print("| %s | %.1f | %.1f | %+.1f |" % (
                result["python"], figures["on"]["import"], figures["zip"]["import"], figures["zip"]["cost"]))
    bound = [result for result in results if "bind" in result]
    if bound:
        print("\n| Python | largest bind, check mode, `fewer_collections` | without | without: costs | collections, "
              "with / without |")
        print("| --- " * 5 + "|")
        for result in bound:
            on, off = result["bind"]["on"], result["bind"]["fewer"]
            print("| %s | %.1f | %.1f | %+.1f | %s / %s |" % (
                result["python"], on["pass"], off["pass"], off["cost"], watched(on["gc pass"]), watched(off["gc pass"])))
    if builds:
        print("\n| Python (ansible-core) | payload build, `fewer_collections(freeze=True)` | without | without: costs | "
              "collections, with / without |")
        print("| --- " * 5 + "|")
        for build in builds:
            on, off = build["build"]["on"], build["build"]["off"]
            print("| %s (%s, %d files) | %.1f | %.1f | %+.1f | %s / %s |" % (
                build["python"], build["ansible-core"], build["files"], on["build"], off["build"], off["cost"],
                watched(on["gc"]), watched(off["gc"])))


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n", maxsplit=1)[0])
    parser.add_argument("--runs", type=int, default=7, help="fresh processes per figure (median taken)")
    parser.add_argument("--python", action="append", default=[], help="a node interpreter (repeatable)")
    parser.add_argument("--only", action="append", choices=PARTS, default=[], help="a part (repeatable)")
    parser.add_argument("--json", help="write the figures to this file as JSON")
    parser.add_argument("--collections", default=BUILD,
                        help="the directory holding ansible_collections/bcd/devices (default: .build, the checkout)")
    options = parser.parse_args()
    collections = os.path.abspath(options.collections)
    if not os.path.isdir(os.path.join(collections, "ansible_collections", "bcd", "devices")):
        raise SystemExit("%s holds no ansible_collections/bcd/devices (make links .build's to the checkout)" % collections)
    parts = set(options.only or PARTS)
    pythons = options.python or [python for python in map(find_python, NODE_PYTHONS) if python]
    results, builds = [], []
    with tempfile.TemporaryDirectory() as scratch:
        os.chmod(scratch, 0o755)  # a pass as an account reaches its node's root, as it reaches / on a node
        if parts & {"noop", "zip", "bind"}:
            for python in pythons:
                results.append(measure_node(python, parts, options.runs, scratch, collections))
                sys.stderr.write("measured %s\n" % results[-1]["python"])
        if "build" in parts:
            for python, core in controller_pythons():
                builds.append(measure_build(python, core, options.runs, scratch, collections))
    show(results, builds)
    if options.json:
        with open(options.json, "w") as handle:
            json.dump({"node": results, "build": builds}, handle, indent=2, sort_keys=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
