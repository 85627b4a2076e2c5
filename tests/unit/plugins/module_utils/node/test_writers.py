# -*- coding: utf-8 -*-
# Copyright: contributors to bcd.devices
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""node/writers.py on its own: DirectWriter writes and removes a hold's files under the host's root,
atomically and never through a link; a kind or an id it does not know, or a path out of root, is
refused; set_aside and count_node_files keep /etc/cdi bounded."""

from __future__ import annotations

import os
import re

import pytest

from ansible_collections.bcd.devices.plugins.module_utils.node import fsutil
from ansible_collections.bcd.devices.plugins.module_utils.node import writers
from ansible_collections.bcd.devices.plugins.module_utils.node.fsutil import FsError
from ansible_collections.bcd.devices.plugins.module_utils.node.hosts import FakeHwHost
from ansible_collections.bcd.devices.plugins.module_utils.node.writers import DirectWriter, node_file_path

SPEC = "/etc/cdi/bcd-alloc_a.json"
ENV = "/run/bcd/allocations/alloc_a.env"
NOW = 1767225600.0  # 2026-01-01T00:00:00Z


@pytest.fixture
def host(node):
    return FakeHwHost(node.root, node.fakehw)


def everything(node):
    """Every file under the node's base directory (its root and its fakehw file), relative."""
    found = []
    for directory, _dirs, files in os.walk(node.base):
        found.extend(os.path.relpath(os.path.join(directory, name), node.base) for name in files)
    return sorted(found)


def test_node_file_paths_are_built_from_the_kind_and_a_checked_id():
    assert node_file_path("cdi", "alloc_a") == SPEC
    assert node_file_path("allocation-env", "alloc_a") == ENV
    with pytest.raises(ValueError, match="unknown node file kind"):
        node_file_path("ledger", "alloc_a")
    for bad in ("../alloc", "alloc/a", "", "a" * 200, None, "alloc\0a"):
        with pytest.raises(ValueError, match="is not valid"):
            node_file_path("cdi", bad)


def test_a_hold_file_is_written_whole_with_mode_0644_under_root_and_nowhere_else(node, host):
    before = everything(node)
    os.umask(0o077)
    try:
        DirectWriter(host).write_node_file("cdi", "alloc_a", b'{"cdiVersion": "0.6.0"}', hold={"ignored": True})
        DirectWriter(host).write_node_file("allocation-env", "alloc_a", b"NVIDIA_VISIBLE_DEVICES=void\n")
    finally:
        os.umask(0o022)
    assert node.read(SPEC) == b'{"cdiVersion": "0.6.0"}'
    assert node.read(ENV) == b"NVIDIA_VISIBLE_DEVICES=void\n"
    assert node.mode(SPEC) == node.mode(ENV) == 0o644
    assert sorted(set(everything(node)) - set(before)) == ["root/etc/cdi/bcd-alloc_a.json",
                                                           "root/run/bcd/allocations/alloc_a.env"]


def test_a_write_goes_through_a_temporary_file_fsynced_then_renamed(node, host, monkeypatch):
    calls = []
    real_fsync, real_rename = os.fsync, os.rename
    monkeypatch.setattr(fsutil.os, "fsync", lambda fd: (calls.append(("fsync", os.readlink("/proc/self/fd/%d" % fd))),
                                                        real_fsync(fd))[1])
    monkeypatch.setattr(fsutil.os, "rename", lambda src, dst: (calls.append(("rename", src, dst)), real_rename(src, dst))[1])
    node.write(SPEC, b"old")
    DirectWriter(host).write_node_file("cdi", "alloc_a", b"new")
    target = node.path(SPEC)
    renames = [call for call in calls if call[0] == "rename"]
    assert len(renames) == 1 and renames[0][2] == target
    temporary = renames[0][1]
    assert os.path.dirname(temporary) == os.path.dirname(target)
    assert re.fullmatch(r"\.bcd-alloc_a\.json\.tmp-[0-9a-f]{12}", os.path.basename(temporary))  # no runtime loads it
    assert calls.index(("fsync", temporary)) < calls.index(renames[0])  # the data is on disk before the rename
    assert calls[-1] == ("fsync", os.path.dirname(target))  # and the rename after it
    assert node.read(SPEC) == b"new"


@pytest.mark.parametrize("failing", ["write", "fsync", "rename"])
def test_a_failed_write_leaves_the_old_file_and_no_temporary(node, host, monkeypatch, failing):
    node.write(SPEC, b"old")

    def fail(*args, **kwargs):
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(fsutil.os, failing, fail)
    with pytest.raises(OSError, match="No space left"):
        DirectWriter(host).write_node_file("cdi", "alloc_a", b"new" * 1000)
    monkeypatch.undo()
    assert node.read(SPEC) == b"old"
    assert os.listdir(node.path("/etc/cdi")) == ["bcd-alloc_a.json"]


def test_a_link_in_place_of_a_hold_file_is_replaced_never_followed(node, host, tmp_path):
    outside = tmp_path / "outside.json"
    outside.write_bytes(b"root's own file")
    os.makedirs(node.path("/etc/cdi"))
    os.symlink(str(outside), node.path(SPEC))
    DirectWriter(host).write_node_file("cdi", "alloc_a", b"{}")
    assert outside.read_bytes() == b"root's own file"
    assert not os.path.islink(node.path(SPEC)) and node.read(SPEC) == b"{}"
    DirectWriter(host).remove_node_file("cdi", "alloc_a")
    assert not os.path.lexists(node.path(SPEC)) and outside.read_bytes() == b"root's own file"


def test_removing_a_link_removes_the_link_not_its_target(node, host, tmp_path):
    outside = tmp_path / "outside.env"
    outside.write_bytes(b"keep")
    os.makedirs(node.path("/run/bcd/allocations"))
    os.symlink(str(outside), node.path(ENV))
    DirectWriter(host).remove_node_file("allocation-env", "alloc_a")
    assert not os.path.lexists(node.path(ENV)) and outside.read_bytes() == b"keep"


def test_removing_a_file_that_is_not_there_is_not_an_error(node, host):
    DirectWriter(host).remove_node_file("cdi", "alloc_a")
    assert not node.exists(SPEC)


@pytest.mark.parametrize("allocation_id", ["../../../tmp/x", "/etc/passwd", "a/../../b"])
def test_an_id_that_would_leave_the_directory_is_refused_and_nothing_is_written(node, host, allocation_id):
    before = everything(node)
    with pytest.raises(ValueError):
        DirectWriter(host).write_node_file("cdi", allocation_id, b"{}")
    with pytest.raises(ValueError):
        DirectWriter(host).remove_node_file("allocation-env", allocation_id)
    with pytest.raises(ValueError):
        DirectWriter(host).set_aside_spec(allocation_id, NOW)
    assert everything(node) == before


def test_the_path_the_planner_made_is_written_not_one_made_again_from_the_id(node, host):
    """``FileChange.path`` is where the file goes: a writer that made the path again from the kind and the id
    would write ``SPEC`` here."""
    before = everything(node)
    planned = "/etc/cdi/bcd-alloc_b.json"
    DirectWriter(host).write_node_file("cdi", "alloc_a", b"{}", hold={"ignored": True}, path=planned)
    DirectWriter(host).write_node_file("allocation-env", "alloc_a", b"X=1\n", path="/run/bcd/allocations/alloc_b.env")
    assert node.read(planned) == b"{}" and node.mode(planned) == 0o644 and not node.exists(SPEC)
    assert sorted(set(everything(node)) - set(before)) == ["root/etc/cdi/bcd-alloc_b.json",
                                                           "root/run/bcd/allocations/alloc_b.env"]
    node.write(SPEC, b"kept")
    DirectWriter(host).remove_node_file("cdi", "alloc_a", path=planned)
    assert not node.exists(planned) and node.read(SPEC) == b"kept"


def test_a_file_change_is_written_where_its_path_says(node, host):
    from ansible_collections.bcd.devices.plugins.module_utils.domain.plan.actions import FileChange  # pylint: disable=import-outside-toplevel
    planned = "/etc/cdi/bcd-alloc_b.json"
    FileChange("cdi", planned, None, b"{}", {"allocation_id": "alloc_b"}).apply(DirectWriter(host), "alloc_a")
    assert node.read(planned) == b"{}" and not node.exists(SPEC)


@pytest.mark.parametrize("kind, path", [
    ("cdi", "/etc/cdi/../../../tmp/bcd-alloc_a.json"),
    ("cdi", "/../../etc/cdi/bcd-alloc_a.json"),
    ("cdi", "/etc/cdi/./bcd-alloc_a.json"),
    ("cdi", "/etc/cdi//bcd-alloc_a.json"),
    ("cdi", "etc/cdi/bcd-alloc_a.json"),
    ("cdi", "/etc/passwd"),
    ("cdi", "/etc/cdi/nvidia.yaml"),
    ("cdi", "/etc/cdi/bcd-alloc_a.json.damaged-20260101T000000Z"),
    ("cdi", "/run/bcd/allocations/alloc_a.env"),
    ("allocation-env", "/etc/cdi/bcd-alloc_a.json"),
    ("allocation-env", "/run/bcd/allocations/../../../etc/alloc_a.env"),
    ("allocation-env", b"/run/bcd/allocations/alloc_a.env"),
    ("ledger", "/etc/cdi/bcd-alloc_a.json"),
])
def test_a_planned_path_that_is_not_one_of_its_kinds_names_is_refused_and_nothing_is_written(node, host, kind, path):
    before = everything(node)
    with pytest.raises(ValueError):
        DirectWriter(host).write_node_file(kind, "alloc_a", b"{}", path=path)
    with pytest.raises(ValueError):
        DirectWriter(host).remove_node_file(kind, "alloc_a", path=path)
    assert everything(node) == before


def test_a_link_in_place_of_a_planned_path_is_replaced_never_followed(node, host, tmp_path):
    outside = tmp_path / "outside.json"
    outside.write_bytes(b"root's own file")
    planned = "/etc/cdi/bcd-alloc_b.json"
    os.makedirs(node.path("/etc/cdi"))
    os.symlink(str(outside), node.path(planned))
    DirectWriter(host).write_node_file("cdi", "alloc_a", b"{}", path=planned)
    assert outside.read_bytes() == b"root's own file"
    assert not os.path.islink(node.path(planned)) and node.read(planned) == b"{}"
    os.unlink(node.path(planned))
    os.symlink(str(outside), node.path(planned))
    DirectWriter(host).remove_node_file("cdi", "alloc_a", path=planned)
    assert not os.path.lexists(node.path(planned)) and outside.read_bytes() == b"root's own file"


def test_the_helper_writer_never_sends_a_path(node):
    client = Recorder()
    writer = writers.HelperWriter(client)
    writer.write_node_file("cdi", "alloc_a", b"{}", hold={"allocation_id": "alloc_a"}, path="/etc/cdi/bcd-alloc_a.json")
    writer.remove_node_file("allocation-env", "alloc_a", path="/run/bcd/allocations/alloc_a.env")
    assert client.requests == [{"op": "hold.write", "kind": "cdi", "hold": {"allocation_id": "alloc_a"}},
                               {"op": "hold.remove", "kind": "allocation-env", "allocation_id": "alloc_a"}]
    assert "/etc/cdi" not in repr(client.requests) and "/run/bcd" not in repr(client.requests)


def test_a_host_path_outside_root_is_refused(host):
    with pytest.raises(FsError, match="outside root"):
        host.path("/../../etc/passwd")


def test_a_damaged_spec_is_set_aside_under_a_dated_name_and_only_the_newest_copies_are_kept(node, host):
    writer = DirectWriter(host)
    names = []
    for number in range(5):
        node.write(SPEC, b"damaged %d" % number)
        names.append(writer.set_aside_spec("alloc_a", NOW))
    assert names == ["bcd-alloc_a.json.damaged-20260101T000000Z"] + [
        "bcd-alloc_a.json.damaged-20260101T000000Z-%d" % n for n in range(2, 6)]
    kept = sorted(os.listdir(node.path("/etc/cdi")))
    assert kept == sorted(names[-writers.ASIDE_PER_HOLD:])
    assert node.read("/etc/cdi/" + names[-1]) == b"damaged 4"
    assert writer.set_aside_spec("alloc_a", NOW) is None  # no spec: nothing set aside


def test_pruning_removes_only_regular_files_this_uid_owns_never_a_link(node, host, tmp_path):
    outside = tmp_path / "outside"
    outside.write_bytes(b"keep")
    os.makedirs(node.path("/etc/cdi"))
    old = "bcd-alloc_a.json.damaged-20250101T000000Z"
    os.symlink(str(outside), node.path("/etc/cdi/" + old))
    writer = DirectWriter(host)
    for number in range(writers.ASIDE_PER_HOLD + 1):
        node.write(SPEC, b"damaged %d" % number)
        writer.set_aside_spec("alloc_a", NOW)
    assert os.path.islink(node.path("/etc/cdi/" + old)) and outside.read_bytes() == b"keep"


def test_set_aside_refuses_a_linked_directory(node, host, tmp_path):
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    (elsewhere / "bcd-alloc_a.json").write_bytes(b"{}")
    os.makedirs(node.path("/etc"))
    os.symlink(str(elsewhere), node.path("/etc/cdi"))
    with pytest.raises(OSError):
        DirectWriter(host).set_aside_spec("alloc_a", NOW)
    assert sorted(os.listdir(str(elsewhere))) == ["bcd-alloc_a.json"]


def test_count_node_files_counts_names_of_the_kind_up_to_enough_and_bounds_the_scan(node, host):
    writer = DirectWriter(host)
    assert writer.count_node_files("cdi", 10) == 0  # no /etc/cdi
    for name in ("alloc_a", "alloc_b", "alloc_c"):
        node.write("/etc/cdi/bcd-%s.json" % name, b"{}")
    node.write("/etc/cdi/nvidia.yaml", b"")
    node.write("/etc/cdi/.bcd-alloc_d.json.tmp-0123456789ab", b"")
    node.write("/etc/cdi/bcd-alloc_a.json.damaged-20260101T000000Z", b"")
    assert writer.count_node_files("cdi", 10) == 3
    assert writer.count_node_files("cdi", 2) == 2
    with pytest.raises(writers.TooManyEntries):
        writers.count_node_files(node.path("/etc/cdi"), writers.NODE_FILE_NAMES["cdi"][1], 10, scan_limit=4)


def test_direct_writer_is_privileged_only_as_root(host):
    assert DirectWriter(host).privileged is (os.geteuid() == 0)


class Recorder(object):
    def __init__(self):
        self.requests = []

    def request(self, message):
        self.requests.append(message)
        return {}


def test_the_helper_writer_sends_what_a_file_is_rendered_from_never_its_bytes():
    client = Recorder()
    writer = writers.HelperWriter(client)
    hold = {"allocation_id": "alloc_a", "generation": 3}
    writer.write_node_file("cdi", "alloc_a", b"rendered bytes", hold=hold)
    writer.remove_node_file("allocation-env", "alloc_a")
    writer.set_aside_spec("alloc_a", NOW)
    writer.stop_slice("bcd-alloc-alloc_a.slice")
    assert client.requests == [
        {"op": "hold.write", "kind": "cdi", "hold": hold},
        {"op": "hold.remove", "kind": "allocation-env", "allocation_id": "alloc_a"},
        {"op": "hold.set_aside", "allocation_id": "alloc_a"},
        {"op": "slice.stop", "allocation_id": "alloc_a"},
    ]
    assert "rendered bytes" not in repr(client.requests)
    assert writer.privileged is True


def recording(monkeypatch):
    """Every fsync (by the path of what it syncs), rename and unlink, in order."""
    calls = []
    real_fsync, real_rename, real_unlink = os.fsync, os.rename, os.unlink
    monkeypatch.setattr(fsutil.os, "fsync", lambda fd: (calls.append(("fsync", os.readlink("/proc/self/fd/%d" % fd))),
                                                        real_fsync(fd))[1])
    monkeypatch.setattr(fsutil.os, "rename", lambda src, dst: (calls.append(("rename", src, dst)), real_rename(src, dst))[1])
    monkeypatch.setattr(fsutil.os, "unlink", lambda path: (calls.append(("unlink", path)), real_unlink(path))[1])
    return calls


def test_a_batch_fsyncs_every_file_before_its_rename_and_each_directory_once_at_flush(node, host, monkeypatch):
    node.write("/etc/cdi/bcd-old.json", b"{}")
    calls = recording(monkeypatch)
    writer = DirectWriter(host)
    writer.batch()
    for allocation_id in ("a1", "a2", "a3"):
        writer.write_node_file("allocation-env", allocation_id, b"X=1\n")
        writer.write_node_file("cdi", allocation_id, b"{}")
    writer.remove_node_file("cdi", "old")
    cdi, env = node.path("/etc/cdi"), node.path("/run/bcd/allocations")
    for call in calls:
        if call[0] == "rename":
            assert calls.index(("fsync", call[1])) < calls.index(call)  # the data is on disk before the rename
    assert ("fsync", cdi) not in calls and ("fsync", env) not in calls  # the directories wait for flush
    before = len(calls)
    writer.flush()
    flushed = [call[1] for call in calls[before:]]
    assert sorted(flushed) == sorted(set(flushed)) and {cdi, env} <= set(flushed)  # once each, nothing else
    assert node.read("/run/bcd/allocations/a3.env") == b"X=1\n" and not node.exists("/etc/cdi/bcd-old.json")
    # after flush, a write fsyncs its directory at once again
    writer.write_node_file("cdi", "a4", b"{}")
    assert calls[-1] == ("fsync", cdi)


def test_a_batched_slice_of_a_fakehw_node_waits_for_flush_too(node, host, monkeypatch):
    from ansible_collections.bcd.devices.plugins.module_utils.domain.plan.actions import SliceApply  # pylint: disable=import-outside-toplevel
    calls = recording(monkeypatch)
    writer = DirectWriter(host)
    writer.batch()
    writer.apply_slice(SliceApply("bcd-alloc-a1.slice", {"CPUQuota": "100%"}, {}))
    renamed = [call[2] for call in calls if call[0] == "rename"]
    assert len(renamed) == 1 and ("fsync", os.path.dirname(renamed[0])) not in calls
    writer.flush()
    assert calls[-1] == ("fsync", os.path.dirname(renamed[0]))
