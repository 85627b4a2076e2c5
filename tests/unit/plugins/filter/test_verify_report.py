# -*- coding: utf-8 -*-
# Copyright: contributors to bcd.devices
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""Tests for the bcd.devices.verify_report filter: the controller's signature check."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest
from ansible.errors import AnsibleFilterError

from ansible_collections.bcd.devices.plugins.filter import verify_report as filter_plugin
from ansible_collections.bcd.devices.plugins.module_utils.state.events import Journal, NodeKey

BOUND = {"node_id": "node-a", "boot_id": "b", "allocation_id": "alloc_1", "generation": 3,
         "device_ids": ["GPU-1"], "cdi_devices": ["bcd.dev/gpu=GPU-1"],
         "cdi_spec_path": "/etc/cdi/bcd-alloc_1.json", "env_file": "/run/bcd/allocations/alloc_1.env",
         "note": "Grüße"}
FAILED = {"node_id": "node-a", "allocation_id": "alloc_2", "generation": 3, "reason": "overlap",
          "message": "GPU-1 is assigned to alloc_1"}

verify = filter_plugin.FilterModule().filters()["verify_report"]


@pytest.fixture
def journaled(tmp_path):
    state = str(tmp_path / "state")
    key = NodeKey.load_or_create(os.path.join(state, "node.key"))
    journal = Journal(state)
    bound = journal.append("AllocationBound", BOUND, key)
    failed = journal.append("AllocationFailed", FAILED)
    return {"key": key, "bound": bound, "failed": failed}


def test_filter_is_registered_under_its_name():
    assert set(filter_plugin.FilterModule().filters()) == {"verify_report"}


def test_true_for_a_journaled_report_false_when_tampered(journaled):
    pub = journaled["key"].public_key_b64()
    assert verify(journaled["bound"], pub) is True
    tampered = json.loads(json.dumps(journaled["bound"]))
    tampered["body"]["device_ids"] = ["GPU-2"]
    assert verify(tampered, pub) is False
    assert verify(journaled["failed"], pub) is False
    assert verify("not an event", pub) is False


def test_public_key_with_a_trailing_newline_is_accepted(journaled):
    # e.g. read with lookup('file') or slurp from a file that ends in a newline
    assert verify(journaled["bound"], journaled["key"].public_key_b64() + "\n") is True


@pytest.mark.parametrize("public_key", [None, "", "bad", 42, "QUFB"])
def test_a_value_that_is_no_public_key_fails_the_task(journaled, public_key):
    with pytest.raises(AnsibleFilterError, match="public key"):
        verify(journaled["bound"], public_key)


def test_missing_cryptography_fails_the_task(journaled, monkeypatch):
    monkeypatch.setattr(filter_plugin, "HAS_CRYPTOGRAPHY", False)
    with pytest.raises(AnsibleFilterError, match="cryptography"):
        verify(journaled["bound"], journaled["key"].public_key_b64())


def _collections_path():
    # .../ansible_collections/bcd/devices/plugins/filter/verify_report.py -> the dir above ansible_collections
    here = os.path.abspath(filter_plugin.__file__)
    for _level in range(6):
        here = os.path.dirname(here)
    return here


def test_in_a_playbook(journaled, tmp_path):
    """Ansible's own templating (data tagging in 2.19) hands the filter what the module returned."""
    events_file = tmp_path / "events.json"
    tampered = json.loads(json.dumps(journaled["bound"]))
    tampered["body"]["generation"] = 4
    events_file.write_text(json.dumps([journaled["bound"], journaled["failed"], tampered]))
    key_file = tmp_path / "node.pub"
    key_file.write_text(journaled["key"].public_key_b64() + "\n")
    playbook = tmp_path / "pb.yml"
    playbook.write_text("""
- hosts: localhost
  gather_facts: false
  vars:
    events: "{{ lookup('file', '%s') | from_json }}"
    key: "{{ lookup('file', '%s') }}"
  tasks:
    - ansible.builtin.assert:
        that:
          - events | map('bcd.devices.verify_report', key) | list == [true, false, false]
          - events[0] | bcd.devices.verify_report(key)
""" % (events_file, key_file))
    env = dict(os.environ, ANSIBLE_COLLECTIONS_PATH=_collections_path(), ANSIBLE_HOME=str(tmp_path / "home"),
               ANSIBLE_NOCOLOR="1")
    proc = subprocess.run(
        [sys.executable, "-m", "ansible.cli.playbook", "-i", "localhost,", "-c", "local",
         "-e", "ansible_python_interpreter=%s" % sys.executable, str(playbook)],
        env=env, cwd=str(tmp_path), stdout=subprocess.PIPE, stderr=subprocess.STDOUT, timeout=120, check=False)
    out = proc.stdout.decode("utf-8", "replace")
    assert proc.returncode == 0, out
    assert "All assertions passed" in out
