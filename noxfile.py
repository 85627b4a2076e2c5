# Copyright: contributors to bcd.devices
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""The collection's chores as nox sessions, on antsibull-nox where it does the job.

make lint, make sanity and make units run these (the make targets stay the front door; .venv/bin/nox --list
shows them). antsibull-nox.toml declares antsibull-nox's own sessions that run here as they are (extra-checks);
this file adds, per supported ansible-core release:

    sanity-<release>   ansible-test sanity, then its compile test on every target Python of the release
                       this machine has (3.8 to 3.13); arguments after -- go to ansible-test and skip the
                       compile pass. The collection tree comes from antsibull-nox (prepare_collections);
                       ansible-core from the project's pins; the session's venv from the release's
                       controller Python. Sessions run side by side under nox --parallel.
    units-<release>    pytest on tests/unit in the release's venv (hack/core_venv.sh); arguments after --
                       replace "-n 2".
    units              make units: the whole suite under the oldest and the newest release of CORES, the
                       tests that drive Ansible itself (DRIVE_TESTS) under each release between them.

docs/compatibility.md ("What antsibull-nox does and what stays a script") says what antsibull-nox could not do
here and why hack/ keeps a script for it.
"""

from __future__ import annotations

import functools
import os
import re
import shutil
import subprocess
import sys
import tomllib
from pathlib import Path

import nox

try:
    import antsibull_nox
    from antsibull_nox.sessions import prepare_collections
except ImportError:
    sys.exit("noxfile.py: antsibull-nox is not installed beside nox; run .venv/bin/nox (make venv installs both)")

REPO = Path(__file__).resolve().parent
BUILD = REPO / (os.environ.get("BUILD") or ".build")  # make passes both, absolute or relative to the checkout
VENV = REPO / (os.environ.get("VENV") or ".venv")

nox.needs_version = ">=2026.10.20"  # --parallel
nox.options.envdir = str(BUILD / "nox")
nox.options.reuse_venv = "yes"  # the sanity venvs: pip re-applies the pins on every run, fast when nothing moved
nox.options.download_python = "never"  # nothing to download from here; the Pythons are found (hack/find_python.sh)
nox.options.error_on_missing_interpreters = True

antsibull_nox.load_antsibull_nox_toml()

# The target Pythons the compile test runs on (docs/compatibility.md): those of each release in this range.
# Newer ones (3.14, 2.22's 3.15) are not on these machines.
TARGET_PYTHONS = ((3, 8), (3, 13))
# The tests that drive Ansible itself, run under every release between the oldest and the newest (make units).
DRIVE_TESTS = "tests/unit/install tests/unit/plugins/action"


def releases() -> dict[str, tuple[str, list[str]]]:
    """Every supported ansible-core release, oldest first: its controller Python and the pip arguments that
    install its ansible-core as pinned. .venv's release is pinned in pyproject.toml (Python 3.11, transitive
    pins in requirements/constraints.txt); each newer one in requirements/tools/ansible-core-<release>.txt,
    whose "# python:" line names its Python."""
    project = tomllib.loads((REPO / "pyproject.toml").read_text(encoding="utf-8"))["project"]
    pin = next(req for req in project["optional-dependencies"]["test"] if req.startswith("ansible-core=="))
    oldest = ".".join(pin.split("==")[1].split(".")[:2])
    found = {oldest: ("3.11", [pin, "-c", "requirements/constraints.txt"])}
    for path in (REPO / "requirements" / "tools").glob("ansible-core-*.txt"):
        python = re.search(r"^# python: *(3\.\d+) *$", path.read_text(encoding="utf-8"), re.M)
        if python is None:
            raise ValueError("%s has no '# python: X.Y' line" % path.relative_to(REPO))
        found[path.stem[len("ansible-core-"):]] = (python.group(1), ["ansible-core", "-c", str(path.relative_to(REPO))])
    return dict(sorted(found.items(), key=lambda item: tuple(int(part) for part in item[0].split("."))))


RELEASES = releases()


@functools.cache
def find_python(version: str) -> str | None:
    """The interpreter of that X.Y on this machine (hack/find_python.sh: PATH, then pyenv's versions), or
    None. nox's own search (python-discovery) stops at pyenv's shims, which fail for every version but
    pyenv's global one."""
    done = subprocess.run(["bash", str(REPO / "hack" / "find_python.sh"), version], capture_output=True, text=True,
                          check=False)
    return done.stdout.strip() if done.returncode == 0 else None


def core_bin(core: str) -> Path:
    """The bin directory of the venv that runs that release (hack/core_venv.sh), made on first use."""
    done = subprocess.run(["bash", str(REPO / "hack" / "core_venv.sh"), core], stdout=subprocess.PIPE, text=True,
                          env={**os.environ, "VENV": str(VENV), "BUILD": str(BUILD)}, check=False)
    if done.returncode:
        raise RuntimeError("hack/core_venv.sh %s failed" % core)
    return Path(done.stdout.strip())


def version_of(text: str) -> tuple[int, ...]:
    return tuple(int(part) for part in text.split("."))


# ---------------------------------------------------------------------------------------------------- sanity

# What ansible-test asks pip for when it bootstraps a sanity venv: the get-pip.py it would download for that
# pip is replaced by hack/get_pip_stand_in.py.
PIP_OF_ANSIBLE_TEST = """
import sys, types
from ansible_test._internal.python_requirements import get_venv_packages
print(get_venv_packages(types.SimpleNamespace(version=sys.argv[1]))["pip"])
"""
TARGETS_OF_ANSIBLE_TEST = """
from ansible_test._internal.constants import SUPPORTED_PYTHON_VERSIONS
print(" ".join(SUPPORTED_PYTHON_VERSIONS))
"""


def last_line(output: str | bool | None) -> str:
    return str(output or "").strip().splitlines()[-1]


def offline_ansible_test(session: nox.Session, home: Path, python: str) -> None:
    """What ansible-test would fetch from hosts this machine cannot reach, made from the package index: the
    get-pip.py of its sanity venvs (hack/get_pip_stand_in.py, put where ansible-test looks first) and the
    venv of a test whose requirements name a package by URL (hack/sanity_offline_venvs.py)."""
    pip = last_line(session.run("python", "-c", PIP_OF_ANSIBLE_TEST, python, silent=True))
    cache = home / ".ansible" / "test" / "cache"
    cache.mkdir(parents=True, exist_ok=True)
    shutil.copyfile(REPO / "hack" / "get_pip_stand_in.py", cache / ("get_pip_%s.py" % pip.replace(".", "_")))
    session.run("python", str(REPO / "hack" / "sanity_offline_venvs.py"), python, env={"HOME": str(home)})


def target_pythons(session: nox.Session, links: Path) -> list[str]:
    """The release's target Pythons within TARGET_PYTHONS, each linked as links/pythonX.Y (where ansible-test
    looks for it in PATH). A missing one fails the session: the compile test is how 3.8 is held."""
    supported = last_line(session.run("python", "-c", TARGETS_OF_ANSIBLE_TEST, silent=True)).split()
    wanted = [version for version in supported if TARGET_PYTHONS[0] <= version_of(version) <= TARGET_PYTHONS[1]]
    links.mkdir(parents=True, exist_ok=True)
    for version in wanted:
        path = find_python(version)
        if path is None:
            session.error("no Python %s on this machine for the compile test (hack/find_python.sh %s says where it"
                          " looked)" % (version, version))
        link = links / ("python%s" % version)
        if link.is_symlink() or link.exists():
            link.unlink()
        link.symlink_to(path)
    return wanted


def runs_shellcheck(args: list[str]) -> bool:
    """Whether ansible-test's shellcheck test is among those to run (all of them, or --test shellcheck)."""
    return "--test" not in args or "shellcheck" in args


def run_sanity(session: nox.Session, core: str, python: str, *, target_pythons_too: bool) -> None:
    """ansible-test sanity in a copy of the collection that antsibull-nox makes (an ansible_collections tree of
    the files git would ship), with ansible-core already installed in the session's venv."""
    collections = prepare_collections(session, ansible_core_version=core if core[0].isdigit() else None,
                                      install_in_site_packages=False, install_out_of_tree=True)
    if collections is None:
        session.error("antsibull-nox made no collection tree (run without --no-venv)")
    # ansible-test keeps its sanity venvs under HOME: one per release, so that releases side by side
    # (nox --parallel) never build the same venv at once, and nothing is read from the user's home.
    home = BUILD / "ansible-test" / core
    env = {"HOME": str(home)}
    with session.chdir(collections.current_path):
        offline_ansible_test(session, home, python)
        session.run("ansible-test", "sanity", "--python", python, "--color", "no", *session.posargs, env=env)
        if session.posargs or not target_pythons_too:
            return
        links = home / "pythons"
        for version in target_pythons(session, links):
            session.log("compile test on target Python %s (%s)" % (version, os.readlink(links / ("python" + version))))
            session.run("ansible-test", "sanity", "--test", "compile", "--python", version, "--color", "no",
                        env={**env, "PATH": "%s%s%s" % (links, os.pathsep, os.environ["PATH"])})


def require_shellcheck(session: nox.Session) -> None:
    """ansible-test skips its shellcheck test, and passes, without shellcheck: here that is a failure."""
    if shutil.which("shellcheck") is None and runs_shellcheck(session.posargs):
        session.error("shellcheck is not installed, so ansible-test would skip its shellcheck test. Install it"
                      " (Debian, Ubuntu: sudo apt-get install shellcheck; .ci/run installs it when run as root)")


def add_sanity(core: str, python: str, install: list[str]) -> None:
    def sanity(session: nox.Session) -> None:
        require_shellcheck(session)
        session.install(*install)
        run_sanity(session, core, python, target_pythons_too=True)

    sanity.__doc__ = ("ansible-test sanity under ansible-core %s (Python %s), then its compile test on every target"
                      " Python %d.%d to %d.%d" % ((core, python) + TARGET_PYTHONS[0] + TARGET_PYTHONS[1]))
    nox.session(name="sanity-%s" % core, python=find_python(python) or python, default=False,
                allow_parallel=True)(sanity)


for _core, (_python, _install) in RELEASES.items():
    add_sanity(_core, _python, _install)


NEXT_PYTHON = "3.13"


@nox.session(name="sanity-next", python=find_python(NEXT_PYTHON) or NEXT_PYTHON, default=False)
def sanity_next(session: nox.Session) -> None:
    """make canary: ansible-test sanity under the newest ansible-core the package index serves, pre-releases
    included (BCD_NEXT_CORE=X.Y.Z: that one, as hack/canary.sh found it)."""
    require_shellcheck(session)
    wanted = os.environ.get("BCD_NEXT_CORE")
    session.install("ansible-core==%s" % wanted if wanted else "ansible-core", "--pre")
    run_sanity(session, "next", NEXT_PYTHON, target_pythons_too=False)


# ---------------------------------------------------------------------------------------------------- units

def pytest(session: nox.Session, core: str, args: list[str], env: dict[str, str]) -> None:
    python = core_bin(core) / "python"
    version = subprocess.run([str(python), "-c", "import ansible; print(ansible.__version__)"], capture_output=True,
                             text=True, check=True).stdout.strip()
    session.log("units: ansible-core %s: pytest %s" % (version, " ".join(args)))
    session.run(str(python), "-m", "pytest", *args, env=env, external=True)


def add_units(core: str) -> None:
    def units_of_release(session: nox.Session) -> None:
        pytest(session, core, session.posargs or ["-n", "2"], {})

    units_of_release.__doc__ = "pytest on tests/unit under ansible-core %s (arguments after -- replace -n 2)" % core
    nox.session(name="units-%s" % core, python=False, default=False)(units_of_release)


for _core in RELEASES:
    add_units(_core)


def units_plan(cores: list[str], posargs: list[str], environ: dict[str, str]) -> list[tuple[str, list[str], dict[str, str]]]:
    """make units' passes, in order: (release, pytest arguments, environment).

    The whole suite under the oldest and the newest release of CORES (UNITS_CORES); the first pass also runs the
    install test under every other release of CORES (BCD_INSTALL_CORES), and the passes after it leave out the
    module_utils tests that run no Ansible code (BCD_UNITS_ANSIBLE_ONLY, tests/unit/conftest.py): they answer the
    same under every release. Each release between them gets a pass of its own over the tests that drive Ansible
    itself (DRIVE_TESTS), about 40 s a release on two cores, where the whole suite under each would add a full unit
    pass per release. Arguments (make units PYTEST_ARGS=...) replace "-n 2" and leave out the passes between."""
    cores = sorted(cores, key=version_of)
    units_cores = environ.get("UNITS_CORES", "").split() or sorted({cores[0], cores[-1]}, key=version_of)
    drive_cores = environ.get("DRIVE_CORES", "").split() or (
        [] if posargs else [core for core in cores if core not in units_cores])
    drive_tests = (environ.get("DRIVE_TESTS") or DRIVE_TESTS).split()
    install_cores = " ".join(core for core in cores if core not in drive_cores)
    plan = []
    for index, core in enumerate(units_cores):
        plan.append((core, posargs or ["-n", "2"], {
            "BCD_UNITS_ANSIBLE_ONLY": "1" if index and not posargs else "",
            "BCD_INSTALL_CORES": install_cores if index == 0 else "",
        }))
    plan.extend((core, ["-n", "2"] + drive_tests, {"BCD_INSTALL_CORES": ""}) for core in drive_cores)
    return plan


@nox.session(python=False, default=False)
def units(session: nox.Session) -> None:
    """make units: pytest on tests/unit under the oldest and the newest release of CORES, the tests that drive
    Ansible itself under each release between them (units_plan); arguments after -- replace "-n 2"."""
    cores = os.environ.get("CORES", "").split() or list(RELEASES)
    unknown = [core for core in cores if core not in RELEASES]
    if unknown:
        session.error("units: no ansible-core %s here; supported: %s" % (", ".join(unknown), ", ".join(RELEASES)))
    for core in cores:
        core_bin(core)  # every venv made before the first pass (the install test uses them)
    for core, args, env in units_plan(cores, session.posargs, dict(os.environ)):
        if env.get("BCD_UNITS_ANSIBLE_ONLY"):
            session.log("units: leaving out the module_utils tests that run no Ansible code (they ran in the first pass)")
        pytest(session, core, args, env)


if __name__ == "__main__":
    nox.main()
