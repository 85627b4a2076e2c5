# -*- coding: utf-8 -*-
# Copyright: contributors to bcd.devices
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""Issue 33, item 1: a pass through the root helper that settles a Kubernetes release (no pod holds its devices)
and binds another allocation on them follows the planner's order: the release leaves the pending releases on disk
before the bind asks root, which counts every pending release as a claim, to write the new hold."""

from __future__ import annotations

import json
import os

from ansible_collections.bcd.devices.plugins.module_utils.entry.converge import run_pass
from ansible_collections.bcd.devices.plugins.module_utils.node.helper_client import HelperClient
from ansible_collections.bcd.devices.plugins.module_utils.node.hosts import FakeHwHost
from ansible_collections.bcd.devices.plugins.module_utils.node.writers import HelperWriter
from ansible_collections.bcd.devices.tests.unit.builders import hold, kube
from ansible_collections.bcd.devices.tests.unit.conftest import GPU_A
from ansible_collections.bcd.devices.tests.unit.plugins.module_utils.entry.helper.test_kube import (  # noqa: F401  # pylint: disable=unused-import
    helper_for,
    with_kubelet,
)


def test_a_settled_kubernetes_release_and_the_bind_that_takes_its_gpu_in_one_pass(make_node, helper_for, monkeypatch):  # noqa: F811  # pylint: disable=redefined-outer-name
    node = make_node()
    with_kubelet(node, True, [])  # no pod holds anything: the release settles at once
    assert node.run(1, [kube("k1", GPU_A)]).plan.failures == []
    socket_path = helper_for(node)
    monkeypatch.setattr(os, "geteuid", lambda: 1000)  # the pass runs as the account, root's writes through the helper
    host = FakeHwHost(node.root, node.fakehw, writer=HelperWriter(HelperClient(socket_path)))
    result = run_pass(host, 2, [hold("a1", GPU_A)], state_dir=node.state_dir, lock_timeout=5)
    assert result.errors == [] and result.plan.failures == []
    assert os.path.exists(node.path("/etc/cdi/bcd-a1.json")) and not os.path.exists(node.path("/etc/cdi/bcd-k1.json"))
    pending = node.read(node.state_dir + "/releasing.json")
    assert pending is None or json.loads(pending)["releases"] == {}
