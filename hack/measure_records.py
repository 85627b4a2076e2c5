#!/usr/bin/env python
# Copyright: contributors to bcd.devices
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""Records against dataclasses, and the JSON writers, on every Python the node may have.

The figures of docs/performance.md, "Records and dataclasses; JSON". For each interpreter (``--python``,
else every ``~/.pyenv/versions/3.8*`` to ``3.13*``, else ``python3``), each figure the best of ``--runs``
fresh processes, after one run that leaves the byte code compiled (under a scratch ``PYTHONPYCACHEPREFIX``,
whatever ``PYTHONDONTWRITEBYTECODE`` says: a node runs the role's byte code); CPU time (``time.process_time``), which a
busy neighbour on a shared machine disturbs less than the wall clock:

* ``import``: importing the converger as a module run does (``entry.modules.holds`` and ``holds_info``),
  with ``support/records.py`` as it is (``record``) and with its ``record``, ``field``, ``fields``, ``replace``,
  ``asdict`` and ``is_record`` swapped for those of ``dataclasses`` before anything else imports them (``dataclass``):
  the same classes, built the other way;
* ``first``: then making the first instance of every record class that import reached (its fields without
  a default given ``None``): a dataclass compiled its ``__init__`` at import, a record's shared one makes it;
* ``each``: then making ``records.COMPILE_AFTER - 1`` more of each (31): a record compiles its ``__init__`` at
  the last, the most a class pays in a run before its records are made by compiled code;
* ``json``: 512 copies of ``tests/data/nvidia-cdi/ramalama_fullgpu_cdi.json`` written as a CDI spec is
  (``json.dumps(spec, indent=2, ensure_ascii=False)``), the same compact
  (``sort_keys=True, separators=(",", ":")``, as every state file now is), and one ledger of 512 bound
  holds (8 slot atoms, a slice and its limits, a render record each) written indented and compact; with
  ``support/pretty_json.py`` as git last had it (deleted in the change that made the state files compact)
  for the indented ones, when git has it.

Usage: python hack/measure_records.py [--runs N] [--python PATH]...
Prints one table per interpreter (milliseconds) and, with --json, the figures as JSON.
"""

import argparse
import glob
import json
import os
import subprocess
import sys
import tempfile

HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.dirname(HERE)
BUILD = os.path.join(REPO, ".build")
SPEC = os.path.join(REPO, "tests", "data", "nvidia-cdi", "ramalama_fullgpu_cdi.json")
PRETTY = "plugins/module_utils/support/pretty_json.py"

# Run in a fresh interpreter, as old as Python 3.8: argv is the mode and the .build directory.
IMPORT_CHILD = r'''
import sys, time, json
mode, build = sys.argv[1], sys.argv[2]
sys.path.insert(0, build)
PREFIX = "ansible_collections.bcd.devices"
started = time.process_time()
if mode == "dataclass":
    import dataclasses
    from ansible_collections.bcd.devices.plugins.module_utils.support import records
    records.record, records.field = dataclasses.dataclass, dataclasses.field
    records.fields, records.replace, records.asdict = dataclasses.fields, dataclasses.replace, dataclasses.asdict
    records.is_record = dataclasses.is_dataclass
from ansible_collections.bcd.devices.plugins.module_utils.entry.modules import holds, holds_info
imported = time.process_time()
marker = "__dataclass_fields__" if mode == "dataclass" else "__record_fields__"
classes = []
for name, module in sorted(sys.modules.items()):
    if not name.startswith(PREFIX) or module is None:
        continue
    for value in list(vars(module).values()):
        if isinstance(value, type) and value.__module__ == name and marker in value.__dict__:
            classes.append(value)

def required(cls):
    if mode == "dataclass":
        import dataclasses
        return sum(1 for item in dataclasses.fields(cls) if item.default is dataclasses.MISSING
                   and item.default_factory is dataclasses.MISSING)
    from ansible_collections.bcd.devices.plugins.module_utils.support import records
    return sum(1 for item in records.fields(cls) if item.default is records.MISSING
               and item.default_factory is records.MISSING)

counts = [required(cls) for cls in classes]
before = time.process_time()
made = 0
for cls, count in zip(classes, counts):
    try:
        cls(*([None] * count))
        made += 1
    except Exception:  # a class with an __init__ of its own: made neither way
        pass
first = time.process_time()
from ansible_collections.bcd.devices.plugins.module_utils.support.records import COMPILE_AFTER
for cls, count in zip(classes, counts):
    for _more in range(COMPILE_AFTER - 1):
        try:
            cls(*([None] * count))
        except Exception:
            break
each = time.process_time()
print(json.dumps({"import": (imported - started) * 1000, "first": (first - before) * 1000,
                  "each": (each - first) * 1000, "classes": len(classes), "made": made}))
'''

JSON_CHILD = r'''
import sys, time, json, hashlib
spec_path, pretty_dir, runs = sys.argv[1], sys.argv[2], int(sys.argv[3])
pretty = None
if pretty_dir:
    sys.path.insert(0, pretty_dir)
    import pretty_json as pretty
with open(spec_path) as handle:
    spec = json.load(handle)

def digest(text):
    return hashlib.sha256(text.encode()).hexdigest()

def ledger(holds):
    bound, renders = {}, {}
    for number in range(holds):
        allocation = "alloc-%04d" % number
        gpu = "GPU-%08x-1111-2222-3333-%012x" % (number % 16, number % 16)
        bound[allocation] = {"generation": 7, "device_ids": ["%s/s%d" % (gpu, slot) for slot in range(8)],
                             "cgroup_parent": "bcd-alloc-%s.slice" % allocation,
                             "limits": {"cpus": "%d-%d" % (number % 64, number % 64 + 3), "memory": "8589934592",
                                        "hugepages": {"2Mi": 0, "1Gi": 0}, "mems": "0"}}
        renders[allocation] = {"key": digest("key" + allocation), "spec": digest("spec" + allocation),
                               "env": digest("env" + allocation), "notes": []}
    return {"bound": bound, "unfinished_releases": {}, "failures": {}, "vfio": {}, "renders": renders,
            "observed_generation": 7, "last_state": "CONVERGED", "journal_seq": 1024}

hold_ledger = ledger(512)

def best(function):
    times = []
    for _run in range(runs):
        started = time.process_time()
        function()
        times.append(time.process_time() - started)
    return min(times) * 1000

out = {
    "spec indent": best(lambda: [json.dumps(spec, indent=2, ensure_ascii=False) for _copy in range(512)]),
    "spec compact": best(lambda: [json.dumps(spec, sort_keys=True, separators=(",", ":")) for _copy in range(512)]),
    "ledger indent": best(lambda: json.dumps(hold_ledger, indent=2, sort_keys=True)),
    "ledger compact": best(lambda: json.dumps(hold_ledger, sort_keys=True, separators=(",", ":"))),
    "spec bytes indent": len(json.dumps(spec, indent=2, ensure_ascii=False)) + 1,
    "spec bytes compact": len(json.dumps(spec, sort_keys=True, separators=(",", ":"))) + 1,
    "ledger bytes indent": len(json.dumps(hold_ledger, indent=2, sort_keys=True)) + 1,
    "ledger bytes compact": len(json.dumps(hold_ledger, sort_keys=True, separators=(",", ":"))) + 1,
}
if pretty is not None:
    assert pretty.dumps(spec, ensure_ascii=False) == json.dumps(spec, indent=2, ensure_ascii=False)
    out["spec pretty_json"] = best(lambda: [pretty.dumps(spec, ensure_ascii=False) for _copy in range(512)])
    out["ledger pretty_json"] = best(lambda: pretty.dumps(hold_ledger, sort_keys=True))
print(json.dumps(out))
'''


def pythons(given):
    if given:
        return given
    home = os.path.expanduser("~/.pyenv/versions")
    found = []
    for minor in range(8, 14):
        matches = sorted(glob.glob(os.path.join(home, "3.%d.*" % minor, "bin", "python")))
        if matches:
            found.append(matches[-1])
    return found or ["python3"]


def pretty_source():
    """support/pretty_json.py as the tree has it, or as the last commit that had it; None when neither."""
    path = os.path.join(REPO, PRETTY)
    if os.path.exists(path):
        with open(path, encoding="utf-8") as handle:
            return handle.read()

    def git(*args):
        return subprocess.run(["git", "-C", REPO] + list(args), capture_output=True, text=True, check=False)

    last = git("log", "-1", "--format=%H", "--", PRETTY).stdout.strip()  # the commit that deleted it, or HEAD's
    for commit in (last, last + "^") if last else ():
        shown = git("show", "%s:%s" % (commit, PRETTY))
        if shown.returncode == 0:
            return shown.stdout
    return None


def child(python, code, *args, pycache=None):
    """Run ``code`` in a fresh ``python``; byte code written and read under ``pycache`` (never the checkout's)."""
    env = dict((key, value) for key, value in os.environ.items() if key != "PYTHONDONTWRITEBYTECODE")
    if pycache:
        env["PYTHONPYCACHEPREFIX"] = pycache
    done = subprocess.run([python, "-c", code] + [str(arg) for arg in args], capture_output=True, text=True,
                          check=False, env=env)
    if done.returncode:
        raise SystemExit("%s failed:\n%s" % (python, done.stderr))
    return json.loads(done.stdout)


def measure(python, runs, pretty_dir, pycache):
    version = subprocess.run([python, "-c", "import sys; print(sys.version.split()[0])"], capture_output=True,
                             text=True, check=True).stdout.strip()
    result = {"python": version}
    for mode in ("record", "dataclass"):
        child(python, IMPORT_CHILD, mode, BUILD, pycache=pycache)  # byte code compiled, as on a node after its first run
        rounds = [child(python, IMPORT_CHILD, mode, BUILD, pycache=pycache) for _run in range(runs)]
        result[mode] = {"import": min(r["import"] for r in rounds), "first": min(r["first"] for r in rounds),
                        "each": min(r["each"] for r in rounds),
                        "total": min(r["import"] + r["first"] for r in rounds),
                        "classes": rounds[0]["classes"], "made": rounds[0]["made"]}
    result["json"] = child(python, JSON_CHILD, SPEC, pretty_dir or "", max(runs, 5), pycache=pycache)
    return result


def show(result):
    record, dataclass, figures = result["record"], result["dataclass"], result["json"]
    print("Python %s: %d record classes reached, %d made (fields without a default given None)" % (
        result["python"], record["classes"], record["made"]))
    print("  %-28s %10s %10s" % ("ms (best)", "record", "dataclass"))
    for key in ("import", "first", "each", "total"):
        print("  %-28s %10.1f %10.1f" % (key, record[key], dataclass[key]))
    for shape in ("spec", "ledger"):
        line = "  json %-6s indent %.1f  compact %.1f" % (shape, figures[shape + " indent"], figures[shape + " compact"])
        if shape + " pretty_json" in figures:
            line += "  pretty_json %.1f" % figures[shape + " pretty_json"]
        line += "  (bytes: %d indented, %d compact)" % (figures[shape + " bytes indent"], figures[shape + " bytes compact"])
        print(line)


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n", maxsplit=1)[0])
    parser.add_argument("--runs", type=int, default=7, help="fresh processes per figure (best taken)")
    parser.add_argument("--python", action="append", default=[], help="an interpreter (repeatable)")
    parser.add_argument("--json", action="store_true", help="print the figures as JSON as well")
    options = parser.parse_args()
    if not os.path.isdir(BUILD):
        raise SystemExit("%s is missing: make builds it (ansible_collections/bcd/devices -> the checkout)" % BUILD)
    results = []
    with tempfile.TemporaryDirectory() as scratch:
        source = pretty_source()
        pretty_dir = None
        if source is not None:
            with open(os.path.join(scratch, "pretty_json.py"), "w", encoding="utf-8") as handle:
                handle.write(source)
            pretty_dir = scratch
        for python in pythons(options.python):
            results.append(measure(python, options.runs, pretty_dir, os.path.join(scratch, "pycache")))
            show(results[-1])
    if options.json:
        print(json.dumps(results, indent=2, sort_keys=True))
    return 0


if __name__ == "__main__":
    sys.exit(main())
