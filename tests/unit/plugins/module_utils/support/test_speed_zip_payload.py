# -*- coding: utf-8 -*-
# Copyright: contributors to bcd.devices
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""``support.speed.compile_once``: a module run from Ansible's zip payload compiles each of the collection's
files once (docs/performance.md, "Round seven" and "Speed tricks, measured (issue 47)").

On every node Python this machine has (3.8 to 3.13), the collection's ``module_utils`` are zipped as
AnsiballZ lays them out and imported the way a shipped module imports them, counting ``compile()`` by file:
without the finder ``zipimport`` compiles each module twice (the cost being removed, shown on that
Python), with it once, and the modules are the same modules (``__file__``, package ``__path__``, a missing
name still ``ModuleNotFoundError``). Then the real thing: ``ansible`` runs the shipped ``bcd.devices.holds``
on a fakehw node, its kept payload runs again under a compile counter, and every collection file was
compiled once and the pass answered as before."""

from __future__ import annotations

import glob
import json
import os
import subprocess
import sys
import textwrap
import zipfile
from pathlib import Path

import pytest

from ansible_collections.bcd.devices.plugins.module_utils.support import speed

REPO = Path(__file__).resolve().parents[5]
MODULE_UTILS = REPO / "plugins" / "module_utils"
PACKAGE = "ansible_collections.bcd.devices.plugins.module_utils"
NODE_PYTHONS = ("3.8", "3.9", "3.10", "3.11", "3.12", "3.13")


def _find_python(version):
    """hack/find_python.sh's answer (PATH, then pyenv), or None where the machine lacks that Python."""
    found = subprocess.run(["bash", str(REPO / "hack" / "find_python.sh"), version], stdout=subprocess.PIPE,
                           stderr=subprocess.DEVNULL, check=False)
    return found.stdout.decode().strip() if found.returncode == 0 else None


PYTHONS = [python for python in map(_find_python, NODE_PYTHONS) if python]

# The child: imports the collection from the zip and reports the compiles of each of its files.
CHILD = textwrap.dedent("""
    import builtins, collections, json, sys
    zip_path, hook = sys.argv[1], sys.argv[2] == "hook"
    sys.path.insert(0, zip_path)
    counts = collections.Counter()
    real = builtins.compile
    def counting(source, filename, *args, **kwargs):
        counts[str(filename)] += 1
        return real(source, filename, *args, **kwargs)
    builtins.compile = counting
    from ansible_collections.bcd.devices.plugins.module_utils.support import speed
    installed = speed.compile_once() if hook else None
    before = dict(counts)
    from ansible_collections.bcd.devices.plugins.module_utils.domain.input import atoms
    from ansible_collections.bcd.devices.plugins.module_utils.domain.cdi import hold_spec as cdi
    from ansible_collections.bcd.devices.plugins.module_utils.domain.plan import planner
    from ansible_collections.bcd.devices.plugins.module_utils.state import store
    from ansible_collections.bcd.devices.plugins.module_utils import domain
    try:
        import ansible_collections.bcd.devices.plugins.module_utils.domain.no_such_module
        missing = "imported"
    except ModuleNotFoundError as exc:
        missing = exc.name
    after = {name: count - before.get(name, 0) for name, count in counts.items()
             if "/ansible_collections/" in name and count > before.get(name, 0)}
    print(json.dumps({"installed": installed, "compiles": after, "planner_file": planner.__file__,
                      "domain_path": list(domain.__path__), "missing": missing,
                      "names": [module.__name__ for module in (atoms, cdi, store)]}))
""")


@pytest.fixture(scope="module")
def payload(tmp_path_factory):
    """The collection's module_utils in a zip, laid out as AnsiballZ ships them (empty package inits above)."""
    path = tmp_path_factory.mktemp("payload") / "ansible_bcd.devices.holds_payload.zip"
    with zipfile.ZipFile(str(path), "w", zipfile.ZIP_DEFLATED) as archive:
        for package in ("ansible_collections", "ansible_collections/bcd", "ansible_collections/bcd/devices",
                        "ansible_collections/bcd/devices/plugins", "ansible_collections/bcd/devices/plugins/module_utils"):
            archive.writestr(package + "/__init__.py", "")
        for source in sorted(MODULE_UTILS.rglob("*.py")):
            if "__pycache__" not in source.parts:
                archive.write(str(source), "ansible_collections/bcd/devices/plugins/module_utils/"
                              + source.relative_to(MODULE_UTILS).as_posix())
    return path


def _child(python, payload, hook, tmp_path):
    script = tmp_path / "child.py"
    script.write_text(CHILD)
    out = subprocess.run([python, "-I", "-S", str(script), str(payload), "hook" if hook else "none"],
                         stdout=subprocess.PIPE, stderr=subprocess.PIPE, check=False, timeout=120)
    assert out.returncode == 0, out.stderr.decode()
    return json.loads(out.stdout)


def test_the_oldest_and_newest_node_pythons_are_found():
    found = {os.path.basename(python) for python in PYTHONS}
    assert {"python3.8", "python3.13"} <= found, found


@pytest.mark.parametrize("python", PYTHONS, ids=[os.path.basename(python) for python in PYTHONS])
def test_each_file_compiles_once_from_the_zip_and_twice_without_the_finder(python, payload, tmp_path):
    hooked = _child(python, payload, hook=True, tmp_path=tmp_path)
    assert hooked["installed"] is True
    compiled = hooked["compiles"]
    planner = [name for name in compiled if name.endswith("/domain/plan/planner.py")]
    assert planner, "planner.py was not imported from the zip: %s" % sorted(compiled)[:5]
    assert len(compiled) >= 20, sorted(compiled)
    assert {name: count for name, count in compiled.items() if count != 1} == {}
    assert hooked["planner_file"].startswith(str(payload) + os.sep)
    assert hooked["planner_file"].endswith("/domain/plan/planner.py")
    assert hooked["domain_path"] == [str(payload) + "/ansible_collections/bcd/devices/plugins/module_utils/domain"]
    assert hooked["missing"] == PACKAGE + ".domain.no_such_module"
    assert hooked["names"] == [PACKAGE + ".domain.input.atoms", PACKAGE + ".domain.cdi.hold_spec", PACKAGE + ".state.store"]

    # The control: the same imports on the same Python without the finder compile every file twice.
    plain = _child(python, payload, hook=False, tmp_path=tmp_path)
    assert set(plain["compiles"]) == set(compiled)
    assert set(plain["compiles"].values()) == {2}


def test_from_files_it_does_nothing():
    before = list(sys.meta_path)
    assert speed.compile_once() is False
    assert sys.meta_path == before


def test_the_shipped_module_compiles_each_file_once_through_ansible(tmp_path):
    """``ansible`` runs bcd.devices.holds as shipped (no node library) and keeps its payload; run again under
    a compile counter, it compiled every collection file once and answered the pass."""
    root = tmp_path / "node"
    subprocess.run([sys.executable, str(REPO / "hack" / "fakehw_node.py"), "--root", str(root), "--gpus", "2"],
                   check=True, stdout=subprocess.DEVNULL)
    kept = tmp_path / "kept"
    env = dict(os.environ, ANSIBLE_KEEP_REMOTE_FILES="1", ANSIBLE_REMOTE_TMP=str(kept),
               ANSIBLE_HOME=str(tmp_path / "ansible-home"), ANSIBLE_LOCALHOST_WARNING="false")
    env["ANSIBLE_COLLECTIONS_PATH"] = str(REPO / ".build")
    args = {"root": str(root), "fakehw": str(root / "fakehw.yml"), "generation": 1, "devices": []}
    ran = subprocess.run([str(Path(sys.executable).parent / "ansible"), "localhost", "-c", "local",
                          "-e", "ansible_python_interpreter=" + sys.executable,
                          "-m", "bcd.devices.holds", "-a", json.dumps(args)],
                         env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, check=False, timeout=300)
    assert ran.returncode == 0, ran.stdout.decode()
    payloads = glob.glob(str(kept / "*" / "AnsiballZ_holds.py"))
    assert len(payloads) == 1, ran.stdout.decode()
    counter = tmp_path / "count.py"
    counter.write_text(textwrap.dedent("""
        import builtins, collections, json, runpy, sys
        counts = collections.Counter()
        real = builtins.compile
        def counting(source, filename, *args, **kwargs):
            counts[str(filename)] += 1
            return real(source, filename, *args, **kwargs)
        builtins.compile = counting
        sys.argv = [sys.argv[1]]
        try:
            runpy.run_path(sys.argv[0], run_name="__main__")
        finally:
            ours = {name.split("/plugins/", 1)[1]: count for name, count in counts.items()
                    if "/ansible_collections/bcd/devices/plugins/" in name}
            sys.stderr.write("COMPILES " + json.dumps(ours) + "\\n")
    """))
    out = subprocess.run([sys.executable, str(counter), payloads[0]], stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                         check=False, timeout=120)
    result = json.loads(out.stdout.decode().strip().splitlines()[-1])
    assert result["section"]["state"] == "CONVERGED", result
    compiles = json.loads(out.stderr.decode().split("COMPILES ", 1)[1].splitlines()[0])
    assert "module_utils/domain/plan/planner.py" in compiles, sorted(compiles)
    # speed and the packages above it are imported before the finder exists, and Ansible runs the module itself
    # as __main__: those as before.
    before_finder = {"modules/holds.py", "module_utils/support/speed.py", "module_utils/support/__init__.py", "module_utils/__init__.py",
                     "__init__.py", "modules/__init__.py"}
    twice = sorted(name for name, count in compiles.items() if count != 1 and name not in before_finder)
    assert twice == [], twice
