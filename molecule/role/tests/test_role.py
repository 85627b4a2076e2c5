# Copyright: contributors to bcd.devices
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""What the role left on the fakehw node: the account, the command, its library, the units, the holds.

The node's files are read once (snapshot.py); commands run on the node as root or as bcd.
"""

import hashlib
import json
import os
import sys

import pytest

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "..", "shared"))  # snapshot.py, shared by scenarios
from snapshot import snapshot  # noqa: E402

# This run's directory for the scenario (hack/molecule.sh makes it, and removes it on exit).
BASE = os.path.join(os.environ["BCD_MOLECULE_TMP"], "role")
ROOT = BASE + "/node-r"
FAKEHW = ROOT + "/fakehw.yml"
BIN = "/usr/local/bin/bcd-holds"
LIB = "/usr/local/lib/bcd-holds/ansible_collections/bcd/devices/plugins/module_utils"
UNITS = "/etc/systemd/system"
HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.environ.get("MOLECULE_PROJECT_DIRECTORY") or os.path.abspath(os.path.join(HERE, "..", "..", ".."))
UNIT_NAMES = ["bcd-holds-helper.service", "bcd-holds-converge.service", "bcd-holds-retry.service",
              "bcd-holds-retry.timer", "bcd-holds-drift.timer", "bcd-holds-vendor-spec.path",
              "bcd-holds-metrics.service"]
COMMON = "--root %s --fakehw %s" % (ROOT, FAKEHW)


@pytest.fixture(scope="module")
def node(host):
    return snapshot(host, ROOT)


def owner_mode(item):
    return item["user"], item["group"], item["mode"]


def as_bcd(host, arguments):
    return host.run("setpriv --reuid=bcd --regid=bcd --init-groups -- %s%s %s %s" % (ROOT, BIN, arguments, COMMON))


def test_the_bcd_account_is_a_system_account_without_a_login(host):
    user = host.user("bcd")
    assert user.exists
    assert user.group == "bcd"
    assert user.uid < 1000
    assert user.shell == "/usr/sbin/nologin"
    assert user.home == "/nonexistent"          # not a directory it owns (its state directory was, in 0.2.0)


def test_bcd_holds_is_installed_under_the_prefix(node):
    launcher = node[BIN]
    assert owner_mode(launcher) == ("root", "root", 0o755)
    lines = launcher["text"].splitlines()
    assert lines[0] == "#!/usr/bin/python3 -I"       # root's Python isolated from the account
    assert "# Ansible managed" in lines[1:4]
    assert "from ansible_collections.bcd.devices.plugins.module_utils.entry.cli import main" in launcher["text"]


def test_the_library_is_the_collections_module_utils(node):
    source = os.path.join(REPO, "plugins", "module_utils")
    wanted = sorted(os.path.relpath(os.path.join(directory, name), source)
                    for directory, _dirs, names in os.walk(source) if "__pycache__" not in directory
                    for name in names if name.endswith(".py"))
    assert "domain/plan/planner.py" in wanted and "domain/__init__.py" in wanted  # the subpackages go too
    installed = sorted(path[len(LIB) + 1:] for path in node
                       if path.startswith(LIB + "/") and path.endswith(".py") and "/__pycache__/" not in path)
    assert installed == wanted
    for name in wanted:
        item = node["%s/%s" % (LIB, name)]
        assert owner_mode(item) == ("root", "root", 0o644), name
        with open(os.path.join(source, name), "rb") as handle:
            assert item["sha256"] == hashlib.sha256(handle.read()).hexdigest(), name
    for directory in ("/usr/local/lib/bcd-holds", LIB, LIB + "/domain", LIB + "/entry"):
        assert owner_mode(node[directory]) == ("root", "root", 0o755)


def test_the_library_is_recorded_as_the_local_fact_the_modules_read(node):
    """Fact gathering reads it as ansible_local.bcd_holds; the action plugins then run the modules from the
    library without asking the node first (tests/unit/plugins/action/test_node_library_play.py)."""
    fact = node["/etc/ansible/facts.d/bcd_holds.fact"]
    assert owner_mode(fact) == ("root", "root", 0o644)
    assert json.loads(fact["text"]) == {"node_library": "/usr/local/lib/bcd-holds"}
    assert owner_mode(node["/etc/ansible/facts.d"]) == ("root", "root", 0o755)


def test_the_units_are_written_with_node_paths(node):
    for name in UNIT_NAMES:
        unit = node["%s/%s" % (UNITS, name)]
        assert owner_mode(unit) == ("root", "root", 0o644), name
        assert unit["text"].startswith("#\n# Ansible managed\n#\n"), name
        assert ROOT not in unit["text"], name          # node paths, not this machine's
    helper = node[UNITS + "/bcd-holds-helper.service"]["text"]
    assert ("ExecStart=/usr/local/bin/bcd-holds helper --socket /run/bcd/helper.sock --allow-user bcd "
            "--state-dir /var/lib/bcd --fakehw /fakehw.yml\n") in helper
    assert "User=" not in helper
    converge = node[UNITS + "/bcd-holds-converge.service"]["text"]
    assert "User=bcd\n" in converge and "Type=oneshot\n" in converge
    assert ("ExecStart=/usr/local/bin/bcd-holds converge --stored --state-dir /var/lib/bcd --fakehw /fakehw.yml "
            "--helper-socket /run/bcd/helper.sock\n") in converge
    retry = node[UNITS + "/bcd-holds-retry.service"]["text"]
    assert "User=bcd\n" in retry and "converge --stored --retry-only " in retry
    retry_timer = node[UNITS + "/bcd-holds-retry.timer"]["text"]
    assert "OnUnitInactiveSec=30s\n" in retry_timer and "Unit=bcd-holds-retry.service\n" in retry_timer
    drift_timer = node[UNITS + "/bcd-holds-drift.timer"]["text"]
    assert "OnUnitInactiveSec=10min\n" in drift_timer and "Unit=bcd-holds-converge.service\n" in drift_timer
    watch = node[UNITS + "/bcd-holds-vendor-spec.path"]["text"]  # bcd_holds_vendor_spec_watch: true
    assert ("PathChanged=/etc/cdi/nvidia.yaml\nPathChanged=/etc/cdi/nvidia.json\nPathChanged=/var/run/cdi/nvidia.yaml\n"
            "PathChanged=/var/run/cdi/nvidia.json\nUnit=bcd-holds-converge.service\n") in watch
    assert "bcd-" not in watch.split("[Path]")[1].replace("bcd-holds-converge", "")  # no hold file is watched


def test_the_metrics_are_written_after_the_pass_and_by_the_units(node):
    prom = node["/var/lib/node-exporter/bcd-holds.prom"]
    assert owner_mode(prom) == ("root", "root", 0o644)
    assert 'bcd_holds{binding="BINDING_HOLD",state="bound"} 3\n' in prom["text"]
    assert "bcd_last_pass_state{state=\"CONVERGED\"} 1\n" in prom["text"]
    for name in ("bcd-holds-converge.service", "bcd-holds-retry.service"):
        text = node["%s/%s" % (UNITS, name)]["text"]
        assert "OnSuccess=bcd-holds-metrics.service\nOnFailure=bcd-holds-metrics.service\n" in text, name
        assert "ExecStopPost" not in text and "=+" not in text and "=!" not in text, name
    metrics = node[UNITS + "/bcd-holds-metrics.service"]["text"]   # root's, a unit of its own
    assert ("ExecStart=/usr/local/bin/bcd-holds metrics --textfile /var/lib/node-exporter/bcd-holds.prom "
            "--state-dir /var/lib/bcd --fakehw /fakehw.yml\n") in metrics
    settings = [line for line in metrics.splitlines() if line and not line.startswith("#")]
    assert "WorkingDirectory=/" in settings
    assert not [line for line in settings if line.startswith(("User=", "Environment", "WantedBy="))]


def test_the_timers_passes_use_the_runtimes_the_role_named(node):
    stored = json.loads(node["/var/lib/bcd/nodespec.json"]["text"])
    assert stored["cdi_runtimes"] == [{"name": "podman", "version": "5.4.2"}]
    spec = json.loads(node["/etc/cdi/bcd-r_whole.json"]["text"])
    assert spec["cdiVersion"] in ("0.6.0", "0.7.0", "0.8.0")  # at most what Podman 5.4 loads


def test_the_units_pass_systemd_analyze_verify(host, node, tmp_path):
    if not host.exists("systemd-analyze"):
        pytest.skip("no systemd-analyze here")
    # verify checks that ExecStart's program exists on this machine: point it at the
    # installed one
    # (testinfra runs on this machine: the local connection)
    for name in UNIT_NAMES:
        text = node["%s/%s" % (UNITS, name)]["text"]
        text = text.replace("ExecStart=" + BIN, "ExecStart=" + ROOT + BIN)
        (tmp_path / name).write_text(text)
    paths = " ".join(str(tmp_path / name) for name in UNIT_NAMES)
    result = host.run("systemd-analyze verify %s" % paths)
    assert result.rc == 0, result.stderr
    assert result.stdout + result.stderr == ""        # not even a warning
    # and it would notice a mistake
    with open(str(tmp_path / "bcd-holds-retry.timer"), "a") as handle:
        handle.write("OnCalendr=daily\n")
    assert "Unknown key 'OnCalendr'" in host.run("systemd-analyze verify %s" % paths).stderr


def test_the_state_directory_and_every_file_in_it_belong_to_bcd(node):
    assert owner_mode(node["/var/lib/bcd"]) == ("bcd", "bcd", 0o700)
    names = [path.rsplit("/", 1)[1] for path in node if path.startswith("/var/lib/bcd/")]
    assert {"events.jsonl", "ledger.json", "node.key", "nodespec.json", "lock"} <= set(names)
    for name in names:
        assert owner_mode(node["/var/lib/bcd/" + name]) == ("bcd", "bcd", 0o600), name
    assert node["/var/lib"]["user"] == "root"                 # its parent is left to root


def test_the_holds_are_bound(node):
    for allocation in ("r_whole", "r_mig", "r_sliced"):
        spec = node["/etc/cdi/bcd-%s.json" % allocation]
        assert owner_mode(spec) == ("root", "root", 0o644)
        assert json.loads(spec["text"])["annotations"]["bcd.dev/allocation-id"] == allocation
        assert node["/run/bcd/allocations/%s.env" % allocation]["mode"] == 0o644
    record = json.loads(node["/run/bcd/slices/bcd-alloc-r_sliced.slice.json"]["text"])
    assert record["properties"]["AllowedCPUs"] == "0-1"
    assert record["properties"]["CPUQuota"] == "150%"


def test_the_installed_command_runs_as_bcd_on_the_state_the_role_left(host):
    status = as_bcd(host, "status")
    assert status.rc == 0, status.stderr
    lines = status.stdout.splitlines()
    assert lines[1].split()[2] == "r_whole"
    assert "gi1/ci0 r_mig" in lines[2] and "s0 r_sliced" in lines[2]
    # the timers' passes: nothing to retry; a drift pass as bcd reads and rewrites the state the role left
    retry = as_bcd(host, "converge --stored --retry-only")
    assert retry.rc == 0 and retry.stdout.startswith("nothing to retry: the last pass was CONVERGED"), retry.stderr
    drift = as_bcd(host, "converge --stored")
    assert drift.rc == 0, drift.stderr
    assert drift.stdout.splitlines()[-1] == "section: CONVERGED at generation 1 (observed 1)"
    events = as_bcd(host, "events")
    assert [json.loads(line)["type"] for line in events.stdout.splitlines()] == ["AllocationBound"] * 3


def test_doctor_as_root_finds_nothing_wrong_but_the_helper_no_one_started(host):
    """PID 1 is not systemd here: nothing runs the units, so nothing started the root helper their passes
    use. Root's doctor, with no option, reads the units and says so, and exits 1 (issue 32); every other
    check, the units, the timers and the pass units included, is OK."""
    doctor = host.run("%s%s doctor %s" % (ROOT, BIN, COMMON))
    assert doctor.rc == 1, doctor.stdout
    levels = dict(line.split()[1::-1] for line in doctor.stdout.splitlines())
    assert dict((name, level) for name, level in levels.items() if level != "OK") == {"helper": "ERROR"}, doctor.stdout
    assert ("the root helper at %s/run/bcd/helper.sock (the units' --helper-socket) does not answer" % ROOT
            in doctor.stdout)
    assert {"gpu-binding", "units", "timers", "passes", "inventory", "vendor-spec", "holds", "slices",
            "state"} <= set(levels)
