# -*- coding: utf-8 -*-
# Copyright: contributors to bcd.devices
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""The collection installs and runs as its users install and run it, under every ansible-core release
it supports (meta/runtime.yml's requires_ansible; docs/compatibility.md).

For each release: the built artifact is installed with that release's ``ansible-galaxy collection
install`` into a collections path of the test's own, and a playbook run with that release's
``ansible-playbook`` binds a hold on a fakehw node through the installed ``bcd.devices.holds``,
reads it back with ``bcd.devices.holds_info`` and checks the bind's signed event with the filter
``bcd.devices.verify_report``. Neither command may print that the collection does not support the
release (ansible-galaxy refuses a release requires_ansible leaves out; ansible-playbook warns on
every task), nor any other warning.

The releases are those in BCD_INSTALL_CORES (make units sets it to CORES on its first pass; each
release's venv comes from hack/core_venv.sh), or else the one running the tests.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

import ansible

from ansible_collections.bcd.devices.tests.unit.install.artifact import REPO, UNSUPPORTED, VERSION, clean_env, install

RUNNING = ".".join(ansible.__version__.split(".")[:2])
CORES = os.environ.get("BCD_INSTALL_CORES", "").split() or [RUNNING]

needs_root = pytest.mark.skipif(os.geteuid() != 0, reason="a pass binds only with root's rights, on fakehw as on a real node")


def core_bin(core):
    """The bin directory of the venv that runs ``core`` (made on first use)."""
    if core == RUNNING:
        return Path(sys.executable).parent
    done = subprocess.run(["bash", str(REPO / "hack" / "core_venv.sh"), core], cwd=str(REPO),
                          capture_output=True, text=True, timeout=600, check=False)
    assert done.returncode == 0, done.stderr
    return Path(done.stdout.strip())


def requires_ansible():
    return yaml.safe_load((REPO / "meta" / "runtime.yml").read_text(encoding="utf-8"))["requires_ansible"]


PLAY = """
- name: Hold a GPU through the installed collection
  hosts: node-a
  gather_facts: false
  vars:
    bcd_devices_node_library: false  # a fakehw node without the role: the shipped modules, no probe, no warning
  tasks:
    - name: Converge the node's holds
      bcd.devices.holds:
        root: "{{ bcd_root }}"
        fakehw: "{{ bcd_fakehw }}"
        generation: 1
        devices:
          - allocation_id: alloc_installed
            reservation_id: rsv_installed
            binding: BINDING_HOLD
            devices: [{id: "{{ bcd_gpu }}"}]
      register: converged

    - name: Read the holds back
      bcd.devices.holds_info:
        root: "{{ bcd_root }}"
        fakehw: "{{ bcd_fakehw }}"
      register: info

    - name: Check the bind's signature on the controller
      ansible.builtin.assert:
        that:
          - converged is changed
          - converged.events | selectattr('type', 'equalto', 'AllocationBound') | list | length == 1
          - (converged.events | selectattr('type', 'equalto', 'AllocationBound') | first)
            | bcd.devices.verify_report(info.node_public_key)
          - info.holds | map(attribute='allocation_id') | list == ['alloc_installed']

    - name: Save what the run returned
      ansible.builtin.copy:
        content: "{{ {'converged': converged, 'info': info} | to_json }}"
        dest: "{{ bcd_results }}"
        mode: "0600"
      delegate_to: localhost
"""


@pytest.mark.parametrize("core", CORES)
def test_the_artifact_installs_and_runs_under_each_release(core, artifact, make_node, tmp_path):
    bin_dir = core_bin(core)
    have = subprocess.run([str(bin_dir / "python"), "-c", "import ansible; print(ansible.__version__)"],
                          capture_output=True, text=True, check=True).stdout.strip()
    assert have.startswith(core + "."), "%s runs ansible-core %s, not %s" % (bin_dir, have, core)

    collections = install(artifact, bin_dir, tmp_path)[0]
    env = clean_env(tmp_path, collections, bin_dir)
    listed = subprocess.run([str(bin_dir / "ansible-galaxy"), "collection", "list", "bcd.devices"], cwd=str(tmp_path),
                            env=env, capture_output=True, text=True, timeout=120, check=False)
    assert listed.returncode == 0 and str(collections) in listed.stdout and VERSION in listed.stdout, listed.stdout
    manifest = json.loads((collections / "ansible_collections/bcd/devices/MANIFEST.json").read_text())
    assert manifest["collection_info"]["version"] == VERSION
    installed_runtime = yaml.safe_load((collections / "ansible_collections/bcd/devices/meta/runtime.yml").read_text())
    assert installed_runtime["requires_ansible"] == requires_ansible()

    if os.geteuid() != 0:
        pytest.skip("installed; the playbook binds a hold, which needs root's rights (CI runs as root)")
    node = make_node()
    gpu = json.loads(Path(node.fakehw).read_text())["gpus"][1]["uuid"]
    inventory = tmp_path / "inventory.yml"
    results = tmp_path / "results.json"
    inventory.write_text(yaml.safe_dump({"all": {"hosts": {"node-a": {
        "ansible_connection": "local", "ansible_python_interpreter": str(bin_dir / "python"),
        "bcd_root": node.root, "bcd_fakehw": node.fakehw, "bcd_gpu": gpu, "bcd_results": str(results)}}}}))
    playbook = tmp_path / "site.yml"
    playbook.write_text(PLAY)
    done = subprocess.run([str(bin_dir / "ansible-playbook"), "-i", str(inventory), str(playbook)], cwd=str(tmp_path),
                          env=env, capture_output=True, text=True, timeout=300, check=False)
    out = done.stdout + done.stderr
    assert done.returncode == 0, out
    for text in UNSUPPORTED:
        assert text not in out, out
    assert "[WARNING]" not in out and "[DEPRECATION WARNING]" not in out, out
    assert re.search(r"node-a +: ok=4 +changed=2 +unreachable=0 +failed=0 ", out), out  # the bind and the saved results

    # the hold exists on the node, as the installed module wrote it
    spec = json.loads(node.read("/etc/cdi/bcd-alloc_installed.json"))
    assert [device["name"] for device in spec["devices"]] == [gpu]
    assert b"BCD_ALLOCATION_ID=alloc_installed" in node.read("/run/bcd/allocations/alloc_installed.env")
    returned = json.loads(results.read_text())
    assert returned["converged"]["section"]["state"] == "CONVERGED"
    assert [hold["allocation_id"] for hold in returned["info"]["holds"]] == ["alloc_installed"]
