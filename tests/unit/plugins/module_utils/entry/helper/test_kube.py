# -*- coding: utf-8 -*-
# Copyright: contributors to bcd.devices
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""An unprivileged pass asks the kubelet through the root helper (the kubelet's socket is root's)."""

from __future__ import annotations

import json
import os
import threading

import pytest

from ansible_collections.bcd.devices.plugins.module_utils.entry.helper.server import listen, Policy, serve
from ansible_collections.bcd.devices.plugins.module_utils.node.helper_client import HelperClient
from ansible_collections.bcd.devices.plugins.module_utils.node.hosts import FakeHwHost
from ansible_collections.bcd.devices.plugins.module_utils.node.writers import HelperWriter
from ansible_collections.bcd.devices.tests.unit.conftest import GPU_A, GPU_B, MIG_A1


@pytest.fixture
def helper_for(tmp_path):
    """Start a real helper for a node; yield its socket path; stop it afterwards."""
    stops = []

    def start(node):
        socket_path = str(tmp_path / "helper.sock")
        server = listen(socket_path)
        stop = threading.Event()
        thread = threading.Thread(target=serve, args=(FakeHwHost(node.root, node.fakehw), server, Policy()),
                                  kwargs={"stop": stop})
        thread.daemon = True
        thread.start()
        stops.append((stop, server, thread))
        return socket_path

    yield start
    for stop, server, thread in stops:
        stop.set()
        thread.join(5)
        server.close()


def with_kubelet(node, reachable, pods):
    with open(node.fakehw) as handle:
        hardware = json.load(handle)
    hardware["kubelet"] = {"reachable": reachable, "pods": pods}
    with open(node.fakehw, "w") as handle:
        json.dump(hardware, handle)


def test_the_helper_answers_what_pods_hold(make_node, helper_for, monkeypatch):
    node = make_node()
    with_kubelet(node, True, [{"namespace": "ml", "name": "train-0", "container": "main", "device_ids": [MIG_A1]}])
    socket_path = helper_for(node)
    monkeypatch.setattr(os, "geteuid", lambda: 1000)
    host = FakeHwHost(node.root, node.fakehw, writer=HelperWriter(HelperClient(socket_path)))
    view = host.kube_side().look(host.inventory())
    assert view.error is None
    assert MIG_A1 in view.held and GPU_A in view.held  # a pod on a MIG device holds its GPU too
    assert GPU_B not in view.held
    assert view.holders(MIG_A1) == ["ml/train-0 (main)"]


def test_an_unreachable_kubelet_behind_the_helper_counts_as_held(make_node, helper_for, monkeypatch):
    node = make_node()
    with_kubelet(node, False, [])
    socket_path = helper_for(node)
    monkeypatch.setattr(os, "geteuid", lambda: 1000)
    host = FakeHwHost(node.root, node.fakehw, writer=HelperWriter(HelperClient(socket_path)))
    view = host.kube_side().look(host.inventory())
    assert view.error and "unreachable" in view.error


def test_a_helper_that_is_gone_counts_as_held(make_node, tmp_path, monkeypatch):
    node = make_node()
    monkeypatch.setattr(os, "geteuid", lambda: 1000)
    host = FakeHwHost(node.root, node.fakehw, writer=HelperWriter(HelperClient(str(tmp_path / "no-helper.sock"), timeout=2)))
    view = host.kube_side().look(host.inventory())
    assert view.error and "cannot be reached" in view.error
