# -*- coding: utf-8 -*-
# Copyright: contributors to bcd.devices
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""The error hierarchy (``support/errors.py``): every public exception of module_utils derives from
``BcdError`` (so every command and module shows it as one line, never a traceback), and only what may
work next pass is a ``RetryableError`` (a permanent fault fails where it is, instead of a section that
says PROGRESSING forever)."""

from __future__ import annotations

import importlib
import inspect
import os
import pkgutil

import pytest

from ansible_collections.bcd.devices.plugins import module_utils
from ansible_collections.bcd.devices.plugins.module_utils.support.errors import BcdError, RetryableError
from ansible_collections.bcd.devices.plugins.module_utils.state import events as _events
from ansible_collections.bcd.devices.plugins.module_utils.state.events import EventsError, Journal, NodeKey
from ansible_collections.bcd.devices.plugins.module_utils.state.store import NodeState


def public_exceptions():
    """``(module, class)`` for every exception class a module of module_utils defines and does not keep private."""
    found = []
    for info in pkgutil.walk_packages(module_utils.__path__, module_utils.__name__ + "."):
        if info.ispkg:
            continue
        try:
            module = importlib.import_module(info.name)
        except ImportError:  # an optional dependency (grpc) missing here: its module is checked where it loads
            continue
        for name, value in vars(module).items():
            if inspect.isclass(value) and issubclass(value, BaseException) and value.__module__ == module.__name__ \
                    and not name.startswith("_"):
                found.append((info.name, value))
    return found


def test_the_walk_finds_the_exceptions_of_every_layer():
    names = set(cls.__name__ for _module, cls in public_exceptions())
    assert {"BcdError", "InvalidAssignment", "SliceError", "EventsError", "InventoryError", "FsError",
            "PassError", "KubeletUnreachable", "MaintenanceError", "SpecFileError", "CdiVersionError"} <= names


@pytest.mark.parametrize("module, cls", public_exceptions(), ids=lambda value: getattr(value, "__name__", value))
def test_every_public_exception_derives_from_bcd_error(module, cls):
    assert issubclass(cls, BcdError), "%s.%s derives from %s, not BcdError" % (module, cls.__name__, cls.__mro__[1:])


# -- permanent faults are not retryable --------------------------------------------------------------

def test_a_corrupt_node_key_is_permanent(tmp_path):
    path = tmp_path / "node.key"
    path.write_bytes(b"garbage\n")
    with pytest.raises(EventsError, match="never replaced") as caught:
        NodeKey.load_or_create(str(path))
    assert not isinstance(caught.value, RetryableError)  # restoring it is an operator's work; no pass will


def test_an_unreadable_sequence_file_is_permanent(tmp_path):
    journal = Journal(str(tmp_path))
    (tmp_path / "events.seq").write_bytes(b"not a number\n")
    with pytest.raises(EventsError, match="does not hold a sequence number") as caught:
        journal.append("AllocationFailed", {"allocation_id": "a1", "generation": 1})
    assert not isinstance(caught.value, RetryableError)


def test_a_negative_acknowledgement_is_permanent(tmp_path):
    with pytest.raises(EventsError, match="must not be negative") as caught:
        NodeState(str(tmp_path / "state")).list_and_acknowledge(ack_through=-1)
    assert not isinstance(caught.value, RetryableError)


def test_a_journal_write_that_fails_now_is_retryable(tmp_path, monkeypatch):
    journal = Journal(str(tmp_path))

    def full(*_args):
        raise OSError(28, "No space left on device")
    monkeypatch.setattr(_events.os, "write", full)
    with pytest.raises(RetryableError, match="cannot journal an event in .*No space left on device") as caught:
        journal.append("AllocationFailed", {"allocation_id": "a1", "generation": 1})
    assert isinstance(caught.value, EventsError)
    assert not os.path.exists(str(tmp_path / "events.jsonl")) or Journal(str(tmp_path)).unacked() == []


def test_an_unreachable_kubelet_is_retryable(tmp_path):
    from ansible_collections.bcd.devices.plugins.module_utils.node.kubelet import KubeletUnreachable, list_pod_devices
    with pytest.raises(KubeletUnreachable) as caught:
        list_pod_devices(str(tmp_path / "kubelet.sock"))
    assert isinstance(caught.value, RetryableError)


def test_a_malformed_slice_request_is_permanent():
    from ansible_collections.bcd.devices.plugins.module_utils.domain.slices import SliceError, check_slice_request
    for name, properties, huge in (("bcd-alloc-../x.slice", {}, {}), ("bcd-alloc-a1.slice", {"Delegate": "yes"}, {}),
                                   ("bcd-alloc-a1.slice", {"AllowedCPUs": "0-3;rm -rf /"}, {}),
                                   ("bcd-alloc-a1.slice", {}, {"2MB": -1})):
        with pytest.raises(SliceError) as caught:
            check_slice_request(name, properties, huge)
        assert not isinstance(caught.value, RetryableError), name  # the same request never succeeds


def test_a_quota_that_starves_its_workload_is_permanent_and_no_headroom_is_retryable():
    from ansible_collections.bcd.devices.plugins.module_utils.domain.slices import (
        SliceError, SliceState, TransientSliceError, check_slice_change)
    with pytest.raises(SliceError, match="below the floor of 10% of one CPU") as caught:
        check_slice_change(None, {"CPUQuota": "1%"}, {}, "bcd-alloc-a1.slice")
    assert not isinstance(caught.value, RetryableError)
    running = SliceState(name="bcd-alloc-a1.slice", properties={"MemoryMax": str(4 << 30)}, populated=True,
                         memory_current=2 << 30)
    with pytest.raises(TransientSliceError, match="leaves no headroom over the slice's current use") as caught:
        check_slice_change(running, {"MemoryMax": str(1 << 30), "MemoryHigh": str(900 << 20)}, {})
    assert isinstance(caught.value, RetryableError)  # once the workload uses less (or exits), it is set


def test_a_slice_systemd_cannot_start_or_a_workload_still_runs_in_is_retryable(tmp_path):
    from ansible_collections.bcd.devices.plugins.module_utils.domain.slices import TransientSliceError
    from ansible_collections.bcd.devices.plugins.module_utils.node.slices import SystemdSlices

    class Host:
        def path(self, node_path):
            return str(tmp_path) + node_path

    slices = SystemdSlices(Host(), lambda argv: (1, "", "Failed to start: Transaction is destructive."))
    with pytest.raises(TransientSliceError, match="systemctl start bcd-alloc-a1.slice failed \\(1\\)") as caught:
        slices.apply("bcd-alloc-a1.slice", {"AllowedCPUs": "0-3"}, {})
    assert isinstance(caught.value, RetryableError)
    directory = tmp_path / "sys/fs/cgroup/bcd.slice/bcd-alloc.slice/bcd-alloc-a1.slice"
    directory.mkdir(parents=True)
    (directory / "cgroup.events").write_text("populated 1\nfrozen 0\n")
    with pytest.raises(TransientSliceError, match="still runs a workload") as caught:
        slices.remove("bcd-alloc-a1.slice")
    assert isinstance(caught.value, RetryableError)
