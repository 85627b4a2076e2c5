# -*- coding: utf-8 -*-
# Copyright: contributors to bcd.devices
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""Every root process the role sets up is isolated from the pass account (docs/security.md,
"Root processes are isolated from the account").

The unit templates are rendered here with the role's defaults and vars (jinja2, with the few
Ansible filters they use) for every combination of the helper on/off, metrics set/unset, the
vendor spec watch on/off, a MIG layout set or not, and fakehw (none, outside the root, under it). Each unit the role
would write is parsed, and the check fails on any root command whose environment or working
directory the account controls:

* a ``+``/``!`` Exec line (root's rights) in a unit with ``User=`` the account;
* a unit that runs as root without ``WorkingDirectory=/``;
* ``HOME`` set to anything but root's, or an ``EnvironmentFile=`` in the state directory;
* an Exec line that runs bcd-holds other than through the launcher (whose first line asks for
  ``-I``) or a Python started with ``-I``.

The checker is shown to catch each of these on crafted units (the first is the 0.2.0 metrics
line). The role's tasks that run bcd-holds are checked the same way, and the launcher the
template renders is run as root with a HOME the attacker owns, holding a ``.pth`` file: it is
not loaded with ``-I``, and it is without (the reproduction can fail).
"""

from __future__ import annotations

import itertools
import os
import re
import shlex
import subprocess
from pathlib import Path

import jinja2
import pytest
import yaml
from jinja2.nativetypes import NativeEnvironment, native_concat

REPO = Path(__file__).resolve().parents[3]
ROLE = REPO / "roles" / "bcd_holds"
TEMPLATES = ROLE / "templates"
MODULE_UTILS = REPO / "plugins" / "module_utils"
EXEC_KEYS = ("ExecCondition", "ExecStartPre", "ExecStart", "ExecStartPost", "ExecReload", "ExecStop",
             "ExecStopPost")


# -- rendering the role's templates ---------------------------------------------------------------

def _comment(text):
    """Ansible's ``comment`` filter, its default (plain) style."""
    return "#\n" + "\n".join(("# " + line).rstrip() for line in str(text).splitlines()) + "\n#"


def _regex_replace(value, pattern, replacement=""):
    return re.sub(pattern, replacement, str(value))


def _bool(value):
    """Ansible's ``bool`` filter: a bool as it is, else yes/on/1/true (any case) is true."""
    return value if isinstance(value, bool) else str(value).strip().lower() in ("yes", "on", "1", "true", "y", "t")


def _environment(cls):
    # the template module's settings: trim_blocks on, the trailing newline kept
    env = cls(undefined=jinja2.StrictUndefined, keep_trailing_newline=True, trim_blocks=True)
    env.filters.update(comment=_comment, regex_replace=_regex_replace, bool=_bool)
    return env


TEXT = _environment(jinja2.Environment)
NATIVE = _environment(NativeEnvironment)


class RoleVars(dict):
    """The role's variables, each templated when first asked for (as Ansible does, lazily)."""

    def __init__(self, overrides):
        super().__init__()
        self.raw = {}
        for path in (ROLE / "defaults" / "main.yml", ROLE / "vars" / "main.yml"):
            self.raw.update(yaml.safe_load(path.read_text(encoding="utf-8")) or {})
        self.raw.update(ansible_managed="Ansible managed")
        for name, value in overrides.items():
            if value is None:
                self.raw.pop(name, None)
            else:
                self.raw[name] = value
        self.cache = {}

    def __contains__(self, name):
        return name in self.raw

    def __getitem__(self, name):
        if name not in self.cache:
            self.cache[name] = self.resolve(self.raw[name])
        return self.cache[name]

    def get(self, name, default=None):
        return self[name] if name in self else default

    def resolve(self, value):
        if isinstance(value, str) and ("{{" in value or "{%" in value):
            template = NATIVE.from_string(value)
            return native_concat(template.root_render_func(template.new_context(self, shared=True)))
        if isinstance(value, list):
            return [self.resolve(item) for item in value]
        if isinstance(value, dict):
            return {key: self.resolve(item) for key, item in value.items()}
        return value

    def render(self, name):
        template = TEXT.from_string((TEMPLATES / name).read_text(encoding="utf-8"))
        return "".join(template.root_render_func(template.new_context(self, shared=True)))


def written_units(role_vars):
    """{name: text} of every unit the role writes with these variables (tasks/units.yml)."""
    names = [unit["name"] for unit in role_vars["__bcd_holds_units"] if unit["wanted"] in (True, "True")]
    return {name: role_vars.render(name + ".j2") for name in names}


ROOT = "/srv/node"
MIG_LAYOUT = [{"devices": [0], "mig_enabled": True, "instances": [{"profile": "3g.40gb"}]}]
COMBINATIONS = [
    dict(bcd_holds_helper=helper, bcd_holds_metrics_textfile=metrics, bcd_holds_vendor_spec_watch=watch,
         bcd_holds_mig_layout=layout, bcd_holds_root=root, bcd_holds_fakehw=fakehw)
    for helper, metrics, watch, layout, (root, fakehw) in itertools.product(
        (True, False), (None, "/var/lib/node-exporter/bcd-holds.prom"), (True, False), (None, MIG_LAYOUT),
        (("/", None), ("/", "/etc/bcd/fakehw.yml"), (ROOT, ROOT + "/fakehw.yml"), (ROOT + "/", "/elsewhere/fakehw.yml")))
]


def combination_id(combination):
    return "helper=%s,metrics=%s,watch=%s,mig=%s,root=%s,fakehw=%s" % (
        combination["bcd_holds_helper"], bool(combination["bcd_holds_metrics_textfile"]),
        combination["bcd_holds_vendor_spec_watch"], bool(combination["bcd_holds_mig_layout"]),
        combination["bcd_holds_root"], combination["bcd_holds_fakehw"])


# -- the check ------------------------------------------------------------------------------------

def parse_unit(text):
    """[(section, key, value)] of a unit file (comments and blank lines left out)."""
    entries, section = [], None
    for line in text.splitlines():
        line = line.strip()
        if not line or line[0] in "#;":
            continue
        if line.startswith("[") and line.endswith("]"):
            section = line[1:-1]
            continue
        key, sep, value = line.partition("=")
        assert sep, "not a unit line: %r" % line
        entries.append((section, key.strip(), value.strip()))
    return entries


def _exec_prefixes(value):
    """The special prefixes of an Exec line (systemd.service: @ - : + ! !!) and the command."""
    index = 0
    while index < len(value) and value[index] in "@-:+!|":
        index += 1
    return value[:index], value[index:]


def unit_problems(name, text, role_vars):
    """Every way a root command of this unit runs in an environment or directory the account controls."""
    entries = parse_unit(text)
    service = [(key, value) for section, key, value in entries if section == "Service"]
    if not service:
        return []
    problems = []
    account = role_vars["bcd_holds_user"]
    state_dir = role_vars["bcd_holds_state_dir"].rstrip("/")
    launcher = role_vars["__bcd_holds_bin"]
    python = role_vars["bcd_holds_python"]
    users = [value for key, value in service if key == "User"]
    user = users[-1] if users else "root"
    root_unit = user in ("root", "0", "")
    if not root_unit and user != account:
        problems.append("%s: runs as %s, neither root nor %s" % (name, user, account))
    if any(key == "PermissionsStartOnly" and value.lower() in ("yes", "true", "1", "on") for key, value in service):
        problems.append("%s: PermissionsStartOnly= gives Exec lines root's rights" % name)
    for key, value in service:
        if key in EXEC_KEYS:
            prefixes, command = _exec_prefixes(value)
            if not root_unit and ("+" in prefixes or "!" in prefixes):
                problems.append("%s: %s=%s runs as root inside a User=%s service" % (name, key, value, user))
            argv = shlex.split(command)
            mentions = any("bcd-holds" in word for word in argv)
            if argv and argv[0] == launcher:
                pass                                   # the launcher: its first line asks for -I
            elif argv and os.path.basename(argv[0]).startswith("python") and mentions:
                if "-I" not in argv[1:argv.index(next(w for w in argv if "bcd-holds" in w))]:
                    problems.append("%s: %s=%s starts Python without -I" % (name, key, value))
            elif mentions:
                problems.append("%s: %s=%s runs bcd-holds other than through %s" % (name, key, value, launcher))
        if key == "EnvironmentFile":
            path = value.lstrip("-")
            if path == state_dir or path.startswith(state_dir + "/"):
                problems.append("%s: EnvironmentFile=%s is in the state directory" % (name, value))
        if key == "Environment":
            for assignment in shlex.split(value):
                variable, _sep, setting = assignment.partition("=")
                if variable == "HOME" and setting != "/root":
                    problems.append("%s: HOME=%s is not root's" % (name, setting))
                if variable.startswith("PYTHON") or variable.startswith("LD_"):
                    problems.append("%s: %s= steers what root's process loads" % (name, variable))
        if key == "PassEnvironment":
            problems.append("%s: PassEnvironment=%s hands the manager's environment on" % (name, value))
    if root_unit:
        directories = [value for key, value in service if key == "WorkingDirectory"]
        if directories[-1:] != ["/"]:
            problems.append("%s: a root unit without WorkingDirectory=/ (%s)" % (name, directories or "unset"))
    return problems


def launcher_problems(text, role_vars):
    first = text.splitlines()[0]
    if first != "#!%s -I" % role_vars["bcd_holds_python"]:
        return ["the launcher's first line %r does not start %s isolated (-I)" % (first, role_vars["bcd_holds_python"])]
    return []


# -- the units the role writes --------------------------------------------------------------------

@pytest.mark.parametrize("combination", COMBINATIONS, ids=combination_id)
def test_no_root_command_runs_where_the_account_reaches(combination):
    role_vars = RoleVars(combination)
    units = written_units(role_vars)
    problems = launcher_problems(role_vars.render("bcd-holds.j2"), role_vars)
    for name, text in units.items():
        problems += unit_problems(name, text, role_vars)
    assert problems == []
    # what the combination asks for is there, and every unit another names is written
    assert ("bcd-holds-helper.service" in units) == combination["bcd_holds_helper"]
    assert ("bcd-holds-vendor-spec.path" in units) == combination["bcd_holds_vendor_spec_watch"]
    metrics = combination["bcd_holds_metrics_textfile"]
    assert ("bcd-holds-metrics.service" in units) == bool(metrics)
    for name, text in units.items():
        for _section, key, value in parse_unit(text):
            if key in ("Unit", "OnSuccess", "OnFailure", "Wants", "Requires", "Before", "After"):
                for other in value.split():
                    if other.startswith("bcd-holds-"):
                        assert other in units, (name, key, other)
    passes = [name for name, text in units.items() if "converge --stored" in text]
    assert sorted(passes) == ["bcd-holds-converge.service", "bcd-holds-retry.service"]
    for name in passes:
        entries = parse_unit(units[name])
        assert ("Service", "User", "bcd" if combination["bcd_holds_helper"] else "root") in entries
        for key in ("OnSuccess", "OnFailure"):
            assert (("Unit", key, "bcd-holds-metrics.service") in entries) == bool(metrics), (name, key)
    # with a MIG layout, root's boot unit makes the recorded layout again before the passes, and is enabled
    assert ("bcd-holds-mig-layout.service" in units) == bool(combination["bcd_holds_mig_layout"])
    if combination["bcd_holds_mig_layout"]:
        entries = parse_unit(units["bcd-holds-mig-layout.service"])
        assert [value for _s, key, value in entries if key == "ExecStart"] == [
            "/usr/local/bin/bcd-holds mig-layout --boot %s" % role_vars["__bcd_holds_node_args"].strip()]
        assert not any(key == "User" for _s, key, _v in entries)
        assert ("Service", "Type", "oneshot") in entries and ("Service", "RemainAfterExit", "yes") in entries
        assert ("Unit", "Before", "bcd-holds-converge.service bcd-holds-retry.service nvidia-cdi-refresh.service") in entries
        assert ("Install", "WantedBy", "multi-user.target") in entries
        after = [value for _s, key, value in entries if key == "After"]
        assert after == ["nvidia-persistenced.service"] + (
            ["bcd-holds-helper.service"] if combination["bcd_holds_helper"] else [])
        assert not any(key in ("Wants", "Requires", "BindsTo") for _s, key, _v in entries)
    if metrics:
        entries = parse_unit(units["bcd-holds-metrics.service"])
        starts = [value for _s, key, value in entries if key == "ExecStart"]
        assert starts == ["/usr/local/bin/bcd-holds metrics --textfile %s %s"
                          % (metrics, role_vars["__bcd_holds_node_args"].strip())]
        assert not any(key == "User" for _s, key, _v in entries)
        assert not any(key == "WantedBy" for _s, key, _v in entries)   # started by the passes only


def test_every_unit_template_is_one_the_role_writes_and_checks():
    role_vars = RoleVars({})
    listed = {unit["name"] for unit in role_vars["__bcd_holds_units"]}
    templates = {path.name[:-len(".j2")] for path in TEMPLATES.glob("*.j2") if path.name != "bcd-holds.j2"}
    assert templates == listed


def test_the_account_s_home_is_not_a_directory_it_owns():
    tasks = yaml.safe_load((ROLE / "tasks" / "install.yml").read_text(encoding="utf-8"))
    (account,) = [task for task in tasks if task.get("name") == "Create the pass account"]
    arguments = account["ansible.builtin.user"]
    assert arguments["home"] == "/nonexistent"
    assert arguments["create_home"] is False and arguments["move_home"] is False


def _tasks(node):
    if isinstance(node, list):
        for item in node:
            yield from _tasks(item)
    elif isinstance(node, dict):
        if "name" in node:
            yield node
        for key in ("block", "rescue", "always"):
            yield from _tasks(node.get(key))


def test_the_role_s_tasks_run_bcd_holds_through_the_launcher_or_python_I():
    runs = []
    for path in sorted((ROLE / "tasks").glob("*.yml")):
        for task in _tasks(yaml.safe_load(path.read_text(encoding="utf-8"))):
            assert "environment" not in task, (path.name, task["name"])   # nothing steers root's processes
            for module in ("ansible.builtin.command", "ansible.builtin.shell", "ansible.builtin.raw",
                           "ansible.builtin.script", "command", "shell", "raw", "script"):
                if module in task and "__bcd_holds_bin" in yaml.safe_dump(task[module]):
                    runs.append((path.name, task["name"], task[module]))
    assert runs, "the record task runs bcd-holds"
    for file_name, name, arguments in runs:
        argv = arguments["argv"] if isinstance(arguments, dict) else arguments
        if isinstance(argv, list):  # a YAML list of words, each a literal or one variable
            words = [word.strip(" {}") for word in argv]
        else:
            assert isinstance(argv, str), (file_name, name)
            words = [word.strip(" '\"") for word in argv.strip(" {}[]\n").split(",")]
        if words[0] == "bcd_holds_python":
            assert words[1] == "-I", (file_name, name, argv)
        else:
            assert words[0] in ("__bcd_holds_root ~ __bcd_holds_bin", "__bcd_holds_bin"), (file_name, name, argv)


# -- the checker catches what it must -------------------------------------------------------------

GOOD_PASS = """[Unit]
Description=x
[Service]
Type=oneshot
User=bcd
WorkingDirectory=/
ExecStart=/usr/local/bin/bcd-holds converge --stored --state-dir /var/lib/bcd
"""
GOOD_ROOT = """[Service]
Type=oneshot
WorkingDirectory=/
ExecStart=/usr/local/bin/bcd-holds metrics --textfile /x.prom --state-dir /var/lib/bcd
"""


@pytest.mark.parametrize("text, problem", [
    # 0.2.0: root metrics in the account's unit (HOME=/var/lib/bcd, the account's)
    (GOOD_PASS + "ExecStopPost=+/usr/local/bin/bcd-holds metrics --textfile /x.prom\n", "runs as root inside a User=bcd"),
    (GOOD_PASS + "ExecStartPre=!/bin/true\n", "runs as root inside a User=bcd"),
    (GOOD_PASS + "ExecStartPre=-+/bin/true\n", "runs as root inside a User=bcd"),
    (GOOD_PASS + "PermissionsStartOnly=yes\n", "PermissionsStartOnly"),
    (GOOD_ROOT.replace("WorkingDirectory=/\n", ""), "without WorkingDirectory=/"),
    (GOOD_ROOT.replace("WorkingDirectory=/\n", "WorkingDirectory=/var/lib/bcd\n"), "without WorkingDirectory=/"),
    (GOOD_ROOT.replace("WorkingDirectory=/\n", "WorkingDirectory=~\n"), "without WorkingDirectory=/"),
    (GOOD_ROOT + "Environment=HOME=/var/lib/bcd\n", "HOME=/var/lib/bcd is not root's"),
    (GOOD_ROOT + "Environment=\"PYTHONPATH=/var/lib/bcd\"\n", "PYTHONPATH= steers"),
    (GOOD_ROOT + "EnvironmentFile=-/var/lib/bcd/env\n", "in the state directory"),
    (GOOD_ROOT + "PassEnvironment=HOME\n", "PassEnvironment"),
    (GOOD_ROOT.replace("ExecStart=", "ExecStart=/usr/bin/python3 "), "starts Python without -I"),
    (GOOD_ROOT.replace("ExecStart=/usr/local/bin/bcd-holds", "ExecStart=/bin/sh -c '/usr/local/bin/bcd-holds"
                       ).replace("/var/lib/bcd\n", "/var/lib/bcd'\n"), "other than through"),
    (GOOD_PASS.replace("User=bcd", "User=nobody"), "neither root nor bcd"),
])
def test_the_check_fails_on_a_root_command_the_account_reaches(text, problem):
    role_vars = RoleVars({})
    assert unit_problems("bad.service", GOOD_PASS, role_vars) == []
    assert unit_problems("good.service", GOOD_ROOT, role_vars) == []
    assert unit_problems("good.service", GOOD_ROOT.replace("ExecStart=", "ExecStart=/usr/bin/python3 -I "), role_vars) == []
    problems = unit_problems("bad.service", text, role_vars)
    assert any(problem in found for found in problems), problems


def test_the_check_fails_on_a_launcher_without_I():
    role_vars = RoleVars({})
    assert launcher_problems("#!/usr/bin/python3 -I\n", role_vars) == []
    assert launcher_problems("#!/usr/bin/python3\n", role_vars) != []
    assert launcher_problems("#!/usr/bin/python3 -s\n", role_vars) != []


# -- the reproduction: a .pth file in the HOME root runs with -------------------------------------

PYTHON = "/usr/bin/python3"


def _installed_launcher(tmp_path):
    """The launcher the template renders, installed with its library under tmp_path/usr/local."""
    role_vars = RoleVars({"bcd_holds_python": PYTHON})
    prefix = tmp_path / "usr" / "local"
    (prefix / "bin").mkdir(parents=True)
    package = prefix / "lib" / "bcd-holds" / "ansible_collections" / "bcd" / "devices" / "plugins"
    package.mkdir(parents=True)
    (package / "module_utils").symlink_to(MODULE_UTILS)
    launcher = prefix / "bin" / "bcd-holds"
    launcher.write_text(role_vars.render("bcd-holds.j2"), encoding="utf-8")
    launcher.chmod(0o755)
    return launcher


@pytest.mark.skipif(os.geteuid() != 0 or not os.path.exists(PYTHON), reason="needs root (a HOME another account owns) and %s" % PYTHON)
def test_root_s_launcher_does_not_load_a_pth_file_from_a_home_the_account_owns(tmp_path):
    launcher = _installed_launcher(tmp_path)
    tmp_path.chmod(0o755)
    home = tmp_path / "home"                       # the account's home, as 0.2.0 left it (its state dir)
    version = subprocess.run([PYTHON, "-c", "import sys; print('%d.%d' % sys.version_info[:2])"],
                             stdout=subprocess.PIPE, check=True, universal_newlines=True).stdout.strip()
    site_packages = home / ".local" / "lib" / ("python" + version) / "site-packages"
    site_packages.mkdir(parents=True)
    marker = tmp_path / "ran-as-root"
    (site_packages / "evil.pth").write_text("import os; open(%r, 'w').write(str(os.geteuid()))\n" % str(marker))
    poison = tmp_path / "poison"
    poison.mkdir()
    (poison / "sitecustomize.py").write_text("open(%r, 'w').write('sitecustomize')\n" % str(marker))
    for path in [home] + list(home.rglob("*")) + [poison] + list(poison.rglob("*")):
        os.chown(str(path), 65534, 65534)          # nobody: an account that is not root
    env = dict(os.environ, HOME=str(home), PYTHONPATH=str(poison), PYTHONSTARTUP=str(poison / "sitecustomize.py"))
    env.pop("PYTHONNOUSERSITE", None)

    ran = subprocess.run([str(launcher), "--help"], env=env, cwd=str(poison), stdout=subprocess.PIPE,
                         stderr=subprocess.PIPE, universal_newlines=True, timeout=60, check=False)
    assert ran.returncode == 0, ran.stderr
    assert "converge" in ran.stdout
    assert not marker.exists()

    # without -I the same launcher runs the account's code as root: the test can fail
    without = subprocess.run([PYTHON, str(launcher), "--help"], env=dict(env, PYTHONPATH="", PYTHONSTARTUP=""),
                             stdout=subprocess.PIPE, stderr=subprocess.PIPE, timeout=60, check=False)
    assert without.returncode == 0, without.stderr
    assert marker.read_text() == "0"
    marker.unlink()
    subprocess.run([PYTHON, str(launcher), "--help"], env=dict(env, HOME="/nonexistent"),
                   stdout=subprocess.PIPE, stderr=subprocess.PIPE, timeout=60, check=False)
    assert marker.read_text() == "sitecustomize"       # PYTHONPATH's, which -I ignored above
