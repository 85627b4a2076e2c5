# -*- coding: utf-8 -*-
# Copyright: contributors to bcd.devices
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""Root's own reading of the node for the root helper (``entry/helper/reading.py``).

``NodeView`` reads the hardware again once its interval is over, or at once when the host says it
changed. The vendor spec was parsed for every ``hold.write`` (PyYAML: milliseconds for NVIDIA's one-GPU
spec, more for eight GPUs): an account rewriting one hold 16 times a second kept root parsing. Now the
helper keeps it parsed while its file is the same (``vendor_spec.ParsedSpecCache``), and parses it again
once it changes. Who claims what by root's reading is ``test_one_gpu_one_hold.py``'s; what a flood of
``kube.look`` costs root, ``test_bounds.py``'s.
"""

from __future__ import annotations

import json
import os

from ansible_collections.bcd.devices.plugins.module_utils.domain.input.assignment import hold_request, parse_assignment
from ansible_collections.bcd.devices.plugins.module_utils.entry.helper.reading import VIEW_SECONDS, NodeView
from ansible_collections.bcd.devices.plugins.module_utils.node import vendor_spec as vendor_spec_module
from ansible_collections.bcd.devices.tests.unit.conftest import GPU_A
from ansible_collections.bcd.devices.tests.unit.plugins.module_utils.entry.helper.test_request import send, served


def test_the_view_is_read_again_after_its_interval_or_at_once_when_the_host_says_it_changed(node):
    now = [50.0]
    host = node.host()
    view = NodeView(host, clock=lambda: now[0])
    first = view.fresh()
    assert view.fresh() is first and view.readings == 1
    assert view.kube_view(first) is view.kube_view(first)  # the kubelet asked once for the interval
    now[0] += VIEW_SECONDS
    second = view.fresh()
    assert second is not first and view.readings == 2
    node.set_hardware(gpus=[{"uuid": GPU_A, "index": 0, "minor": 0}])  # the fakehw file changed: read at once
    third = view.fresh()
    assert third is not second and [gpu.uuid for gpu in third.inventory().gpus] == [GPU_A]
    now[0] -= 100  # a clock that went back is no reason to keep a reading
    assert view.fresh() is not third and view.readings == 4
    # a host given to handle_request itself (not a view) is read for that request alone
    assert NodeView(host, seconds=0).fresh() is not NodeView(host, seconds=0).fresh()


# -- the vendor spec, parsed once while its file is the same -----------------------------------------

def count_parses(monkeypatch):
    """How many times a vendor spec's bytes are parsed (PyYAML or json), by anyone."""
    parses = []
    real = vendor_spec_module.parse_spec_text

    def counted(text, name):
        parses.append(name)
        return real(text, name)

    monkeypatch.setattr(vendor_spec_module, "parse_spec_text", counted)
    return parses


def test_the_helper_parses_the_vendor_spec_once_until_its_file_changes(make_node, monkeypatch):
    """Twenty writes of a hold parse NVIDIA's spec once; a changed spec (content and mtime) is parsed again,
    and the next spec root writes has its edits. A pass parses it each time it reads it, as before."""
    node = make_node(vendor="full")
    parses = count_parses(monkeypatch)
    helper = served(node)
    hold = {"allocation_id": "a1", "reservation_id": "r1", "binding": "BINDING_HOLD",
            "devices": [{"id": GPU_A, "device_class": "gpu"}]}
    message = {"op": "hold.write", "kind": "cdi", "hold": hold_request(parse_assignment(hold), 1)}
    vendor = node.path("/var/run/cdi/nvidia.yaml")
    try:
        for _write in range(20):
            assert send(helper.socket, (json.dumps(message) + "\n").encode()) == {"ok": True}
        assert parses == ["/var/run/cdi/nvidia.yaml"]
        written = open(node.path("/etc/cdi/bcd-a1.json"), encoding="utf-8").read()
        assert "/dev/nvidia-changed" not in written
        # the vendor's spec changes: an edit of its own on every device node, and a later mtime
        before = os.stat(vendor)
        text = open(vendor, encoding="utf-8").read()
        assert text.count("/dev/nvidiactl") >= 1
        with open(vendor, "w", encoding="utf-8") as handle:
            handle.write(text.replace("/dev/nvidiactl", "/dev/nvidia-changed"))
        os.utime(vendor, ns=(before.st_atime_ns, before.st_mtime_ns + 10 ** 9))
        for _write in range(5):
            assert send(helper.socket, (json.dumps(message) + "\n").encode()) == {"ok": True}
        assert parses == ["/var/run/cdi/nvidia.yaml"] * 2
        assert "/dev/nvidia-changed" in open(node.path("/etc/cdi/bcd-a1.json"), encoding="utf-8").read()
    finally:
        helper.close()
    # a pass (a host of its own, no cache) parses it for every read, as it did
    node.host().vendor_spec()
    node.host().vendor_spec()
    assert len(parses) == 4


def test_a_file_of_the_same_times_and_size_but_other_bytes_is_parsed_again(make_node, monkeypatch):
    """The cache trusts nothing but the bytes it parsed: a spec rewritten in place to the same size, its file's
    identity the same throughout (as device, inode, size, mtime and ctime may all be on a coarse clock), is
    still parsed again."""
    node = make_node(vendor="full")
    parses = count_parses(monkeypatch)
    real = vendor_spec_module.read_regular_identified
    monkeypatch.setattr(vendor_spec_module, "read_regular_identified", lambda path, cap: (real(path, cap)[0], (1, 2, 3, 4, 5)))
    view = NodeView(node.host(), seconds=0)
    vendor = node.path("/var/run/cdi/nvidia.yaml")
    first = view.fresh().vendor_spec()
    assert view.fresh().vendor_spec().digest == first.digest and len(parses) == 1
    before = os.stat(vendor)
    text = open(vendor, encoding="utf-8").read()
    with open(vendor, "r+", encoding="utf-8") as handle:  # in place: the same inode, the same size
        handle.write(text.replace("/dev/nvidiactl", "/dev/nvidiaxtl"))
    os.utime(vendor, ns=(before.st_atime_ns, before.st_mtime_ns))
    again = view.fresh().vendor_spec()
    assert len(parses) == 2 and again.digest != first.digest
    assert "/dev/nvidiaxtl" in json.dumps(again.common_edits) + json.dumps(again.devices)
