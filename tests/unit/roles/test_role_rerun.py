# -*- coding: utf-8 -*-
# Copyright: contributors to bcd.devices
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""The role's re-run (issue 46; docs/performance.md, "The role's re-run"): where the node is as the role's last full
install recorded it, a run is the pass alone, one module run per node; a new node, a file no longer as installed, a
changed variable or another version installs everything again, and ``--check`` says so without writing. And the
guide's order works: the modules first, then the role, on the same node.

The role runs for real here (ansible-playbook, as root) on fakehw nodes, from a copy of the collection taken when
the test starts (a node library installed from one tree is refused by a controller reading another)."""

from __future__ import annotations

import json
import os
import re
import shutil
import stat
import subprocess
import sys
import tempfile
from pathlib import Path

import pytest
import yaml

REPO = Path(__file__).resolve().parents[3]
ROLE = REPO / "roles" / "bcd_holds"
ANSIBLE_PLAYBOOK = Path(sys.executable).parent / "ansible-playbook"
GPU = "GPU-5f1c2a90-0001-4000-8000-%012x"
# What the install does not read, and why (roles/bcd_holds/vars/main.yml, __bcd_holds_install_inputs): the pass's
# input, which it stores for the timers, and what only the play's own delivery or the run itself reads.
NOT_INSTALL_INPUTS = {
    "bcd_holds_devices", "bcd_holds_generation", "bcd_holds_instances", "bcd_holds_cdi_runtimes",
    "bcd_holds_env_allow", "bcd_holds_mig_layout", "bcd_holds_mig_parted", "bcd_holds_mig_config",
    "bcd_holds_mig_vendor_spec_refresh", "bcd_holds_fail_on_refusal", "bcd_holds_gateway_headers",
    "bcd_holds_gateway_validate_certs", "bcd_holds_gateway_required", "bcd_holds_full_install",
}
# The tasks of a re-run where the node is as recorded: the pass (and the MIG layout's run, skipped without a layout),
# and what is skipped or done on the controller.
FAST_TASKS = [
    "Validating arguments against arg spec 'main'",
    "Apply the MIG layout",
    "Have NVIDIA's CDI refresh generate its spec for the new MIG devices",
    "Converge the holds",
    "Apply the MIG layout again where a hold refused a GPU before the pass",
    "Have NVIDIA's CDI refresh generate its spec for the MIG devices made after the pass",
    "End the role where the pass ran from the recorded install",
    "The pass ran from the installed library",
]


def test_every_variable_the_install_reads_is_in_its_digest():
    """A variable left out of the digest is one whose change the re-run would not put right."""
    specs = yaml.safe_load((ROLE / "meta" / "argument_specs.yml").read_text())["argument_specs"]["main"]["options"]
    inputs = yaml.safe_load((ROLE / "vars" / "main.yml").read_text())["__bcd_holds_install_inputs"]
    digested = set(re.findall(r"bcd_holds_\w+", json.dumps(inputs)))
    assert set(specs) - NOT_INSTALL_INPUTS == digested
    # and none of those left out is read by what the install writes
    for path in sorted((ROLE / "templates").glob("*.j2")) + [ROLE / "tasks" / name for name in (
            "install.yml", "units.yml", "services.yml")]:
        read = set(re.findall(r"\b(bcd_holds_\w+)", path.read_text()))
        assert not read & NOT_INSTALL_INPUTS, (path.name, read & NOT_INSTALL_INPUTS)


# -- the role, for real -------------------------------------------------------------------------------------------

def _collection(base):
    """A copy of the collection as it is now: the run's controller reads it, the nodes get its library."""
    dest = base / "collections" / "ansible_collections" / "bcd" / "devices"
    for name in ("plugins", "roles", "meta"):
        shutil.copytree(str(REPO / name), str(dest / name), ignore=shutil.ignore_patterns("__pycache__", "*.pyc"))
    shutil.copy2(str(REPO / "galaxy.yml"), str(dest))
    return base / "collections"


class Node:
    def __init__(self, base, collections):
        self.base = base
        self.root = base / "node"
        self.root.mkdir()
        self.fakehw = base / "fakehw.json"
        self.fakehw.write_text(json.dumps({
            "node_id": "node-a", "boot_id": "6f0c1e9e-1c7a-4a43-9a9e-000000000001",
            "gpus": [{"uuid": GPU % i, "index": i, "minor": i, "numa_node": 0} for i in range(2)],
            "domains": [], "kubelet": {"reachable": True, "pods": []}}))
        self.devices = [{"allocation_id": "a%d" % i, "reservation_id": "rsv_%d" % i, "binding": "BINDING_HOLD",
                         "devices": [{"id": GPU % i, "device_class": "gpu"}]} for i in range(2)]
        (base / "hosts.yml").write_text(json.dumps({"nodes": {"hosts": {"node-a": {
            "ansible_connection": "local", "ansible_python_interpreter": sys.executable}}}}))
        (base / "ansible.cfg").write_text("[defaults]\n")
        self.env = dict(os.environ, ANSIBLE_COLLECTIONS_PATH=str(collections), ANSIBLE_HOME=str(base / "ansible-home"),
                        ANSIBLE_LOCAL_TEMP=str(base / "ansible-home" / "tmp"), ANSIBLE_NOCOLOR="1",
                        ANSIBLE_CONFIG=str(base / "ansible.cfg"), ANSIBLE_FORCE_COLOR="0")

    def play(self, text, *args, **role_vars):
        path = self.base / "play.yml"
        path.write_text(text)
        extra = dict(bcd_holds_root=str(self.root), bcd_holds_fakehw=str(self.fakehw), bcd_holds_systemd=False,
                     bcd_holds_install_dependencies=False, bcd_holds_generation=1, **role_vars)
        if self.devices is not None:
            extra["bcd_holds_devices"] = self.devices
        done = subprocess.run([str(ANSIBLE_PLAYBOOK), "-i", str(self.base / "hosts.yml"), str(path),
                               "-e", json.dumps(extra)] + list(args), env=self.env, cwd=str(self.base),
                              capture_output=True, text=True, timeout=600, check=False)
        assert done.returncode == 0, (done.stdout + done.stderr)[-8000:]
        assert "[WARNING]" not in done.stdout + done.stderr, (done.stdout + done.stderr)[-8000:]
        return done.stdout

    def role(self, *args, **role_vars):
        return self.play(ROLE_PLAY, *args, **role_vars)


ROLE_PLAY = """
- hosts: nodes
  gather_facts: false
  roles:
    - bcd.devices.bcd_holds
  post_tasks:
    - name: The pass ran from the installed library
      ansible.builtin.assert:
        that: bcd_holds_pass.ran_from == 'node-library'
        fail_msg: "{{ bcd_holds_pass | to_json }}"
      when: not ansible_check_mode and bcd_holds_devices is defined
    - name: A later task of the run, without facts gathered
      bcd.devices.holds_info:
        root: "{{ bcd_holds_root }}"
        fakehw: "{{ bcd_holds_fakehw }}"
      register: later
      when: not ansible_check_mode
    - name: It took the library from the role's run
      ansible.builtin.assert:
        that: later.ran_from == 'node-library'
        fail_msg: "{{ later | to_json }}"
      when: not ansible_check_mode
"""

MODULE_PLAY = """
- hosts: nodes
  gather_facts: false
  tasks:
    - name: Converge with the module, as the user guide starts
      bcd.devices.holds:
        root: "{{ bcd_holds_root }}"
        fakehw: "{{ bcd_holds_fakehw }}"
        state_dir: /var/lib/bcd
        generation: 1
        devices: "{{ bcd_holds_devices }}"
"""


def tasks_run(output):
    return [re.sub(r" - Install the node side of .*| \(a new node.*", "", name)
            for name in re.findall(r"^TASK \[bcd\.devices\.bcd_holds : (.*?)\] \*", output, re.M)
            + re.findall(r"^TASK \[(The pass ran from the installed library)\]", output, re.M)]


def recap(output):
    found = re.search(r"node-a\s+: ok=(\d+)\s+changed=(\d+)", output)
    return int(found.group(1)), int(found.group(2))


@pytest.fixture
def base():
    """A directory the pass account can reach (pytest's own is root's 0700): root's pass does its state work as the
    account in a state directory the account owns."""
    path = tempfile.mkdtemp(prefix="bcd-role-rerun.")
    os.chmod(path, 0o755)
    yield Path(path)
    shutil.rmtree(path, ignore_errors=True)


needs_root = pytest.mark.skipif(os.geteuid() != 0 or not ANSIBLE_PLAYBOOK.exists(),
                                reason="needs root (the role creates an account) and ansible-playbook")


@needs_root
def test_a_re_run_is_the_pass_alone_and_a_drift_or_a_new_variable_installs_again(base):
    node = Node(base, _collection(base))
    units = node.root / "etc" / "systemd" / "system"
    manifest = node.root / "usr" / "local" / "lib" / "bcd-holds" / "installed.json"

    first = node.role()
    assert "Record the install" in tasks_run(first) and recap(first)[1] > 0
    info = os.stat(str(manifest))
    assert (info.st_uid, stat.S_IMODE(info.st_mode)) == (0, 0o600)
    recorded = manifest.read_bytes()

    again = node.role()
    assert tasks_run(again) == FAST_TASKS, again
    assert recap(again)[1] == 0

    # a unit deleted by hand: --check says the full install would put it back, and writes nothing
    (units / "bcd-holds-drift.timer").unlink()
    checked = node.role("--check")
    assert "Read the facts the role needs (service manager, OS family)" in tasks_run(checked)
    assert "Write the pass and timer units" in tasks_run(checked)
    assert re.search(r"changed: \[node-a\] => \(item=bcd-holds-drift\.timer\)", checked), checked
    assert not (units / "bcd-holds-drift.timer").exists()
    assert manifest.read_bytes() == recorded

    # a changed variable: the next run installs again (the missing unit comes back too), then records the new digest
    changed = node.role(bcd_holds_vendor_spec_watch=True)
    assert "Record the install" in tasks_run(changed)
    assert (units / "bcd-holds-drift.timer").is_file() and (units / "bcd-holds-vendor-spec.path").is_file()
    assert manifest.read_bytes() != recorded
    settled = node.role(bcd_holds_vendor_spec_watch=True)
    assert tasks_run(settled) == FAST_TASKS and recap(settled)[1] == 0
    # without holds to converge, the run is the check of the install alone
    node.devices = None
    checked_only = node.role(bcd_holds_vendor_spec_watch=True)
    assert tasks_run(checked_only) == FAST_TASKS[:-1] + [
        "Check that the node is as the role's last install left it (no holds to converge)",
        "End the role where the node is as recorded and there is nothing to deliver",
        "The pass ran from the installed library"], checked_only
    # and the installed command agrees that the node is as recorded
    done = subprocess.run([sys.executable, "-I", str(node.root / "usr" / "local" / "bin" / "bcd-holds"), "installed",
                           "--root", str(node.root)], capture_output=True, text=True, check=False)
    assert done.returncode == 0 and "as the role recorded it" in done.stdout, done.stdout + done.stderr


@needs_root
def test_the_modules_first_then_the_role_converges(base):
    node = Node(base, _collection(base))
    node.play(MODULE_PLAY)
    state = node.root / "var" / "lib" / "bcd"
    assert os.stat(str(state)).st_uid == 0
    for directory in (node.root / "var", node.root / "var" / "lib"):
        assert stat.S_IMODE(os.stat(str(directory)).st_mode) == 0o755, directory
    output = node.role()
    assert recap(output)[0] > 0
    account = subprocess.run(["id", "-u", "bcd"], capture_output=True, text=True, check=True).stdout.strip()
    for path in [state] + sorted(state.iterdir()):
        assert os.lstat(str(path)).st_uid == int(account), path  # the account's, so that its passes get in
    assert stat.S_IMODE(os.stat(str(state)).st_mode) == 0o700
    assert sorted(p.name for p in (node.root / "etc" / "cdi").iterdir()) == ["bcd-a0.json", "bcd-a1.json"]
    again = node.role()
    assert tasks_run(again) == FAST_TASKS and recap(again)[1] == 0
