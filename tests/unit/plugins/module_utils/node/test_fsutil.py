# -*- coding: utf-8 -*-
# Copyright: contributors to bcd.devices
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""Tests for the shared file helpers: atomic writes, removal, the pass lock."""

from __future__ import annotations

import os
import shutil
import stat
import tempfile
import time

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from ansible_collections.bcd.devices.plugins.module_utils.node import fsutil as _fsutil
from ansible_collections.bcd.devices.plugins.module_utils.node.fsutil import (
    FsError,
    LockTimeout,
    PassLock,
    create_exclusive,
    ensure_dir,
    join_root,
    read_bytes,
    remove_file,
    write_atomic,
)


def mode_of(path):
    return stat.S_IMODE(os.stat(path).st_mode)


def tree(path):
    """Every entry under ``path`` with its content (files) and mode."""
    found = {}
    for dirpath, dirnames, filenames in os.walk(path):
        for name in dirnames:
            p = os.path.join(dirpath, name)
            found[p] = ("dir", mode_of(p))
        for name in filenames:
            p = os.path.join(dirpath, name)
            with open(p, "rb") as f:
                found[p] = (f.read(), mode_of(p))
    return found


@pytest.fixture
def umask_077():
    old = os.umask(0o077)
    yield
    os.umask(old)


def test_write_atomic_sets_mode_whatever_the_umask_and_creates_parents(tmp_path, umask_077):
    target = tmp_path / "etc" / "cdi" / "bcd-a.json"
    write_atomic(str(target), b'{"a": 1}', 0o644)
    assert target.read_bytes() == b'{"a": 1}'
    assert mode_of(target) == 0o644
    assert mode_of(tmp_path / "etc") == 0o755
    assert mode_of(tmp_path / "etc" / "cdi") == 0o755
    assert os.listdir(target.parent) == ["bcd-a.json"]


def test_write_atomic_replaces_and_fixes_mode(tmp_path):
    target = tmp_path / "f.env"
    target.write_bytes(b"old")
    os.chmod(target, 0o666)
    write_atomic(str(target), b"new", 0o600)
    assert target.read_bytes() == b"new"
    assert mode_of(target) == 0o600


def test_write_atomic_temporary_name_is_not_loaded_by_cdi_runtimes(tmp_path, monkeypatch):
    seen = []
    real_rename = os.rename

    def spy(src, dst):
        seen.append((src, dst, os.path.exists(src)))
        return real_rename(src, dst)

    monkeypatch.setattr(_fsutil.os, "rename", spy)
    write_atomic(str(tmp_path / "bcd-a.json"), b"{}", 0o644)
    write_atomic(str(tmp_path / "nvidia.yaml"), b"{}", 0o644)
    assert len(seen) == 2
    for src, dst, existed in seen:
        assert existed
        assert os.path.dirname(src) == os.path.dirname(dst)  # same filesystem: rename is atomic
        assert not src.endswith((".json", ".yaml", ".yml"))


def test_write_atomic_failure_leaves_target_and_no_temporary(tmp_path, monkeypatch):
    target = tmp_path / "bcd-a.json"
    target.write_bytes(b"before")

    def boom(src, dst):
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(_fsutil.os, "rename", boom)
    with pytest.raises(OSError):
        write_atomic(str(target), b"after", 0o644)
    assert target.read_bytes() == b"before"
    assert os.listdir(tmp_path) == ["bcd-a.json"]


def test_write_atomic_wants_bytes(tmp_path):
    with pytest.raises(TypeError):
        write_atomic(str(tmp_path / "x"), "text", 0o644)


def test_create_exclusive_never_replaces(tmp_path):
    target = tmp_path / "sub" / "node.key"
    assert create_exclusive(str(target), b"first", 0o600, 0o700) is True
    assert mode_of(target) == 0o600
    assert mode_of(tmp_path / "sub") == 0o700
    assert create_exclusive(str(target), b"second", 0o600) is False
    assert target.read_bytes() == b"first"
    assert os.listdir(target.parent) == ["node.key"]


def test_remove_and_read(tmp_path):
    target = tmp_path / "a.env"
    assert read_bytes(str(target)) is None
    assert remove_file(str(target)) is False
    target.write_bytes(b"X=1\n")
    assert read_bytes(str(target)) == b"X=1\n"
    assert remove_file(str(target)) is True
    assert not target.exists()


@pytest.mark.parametrize("path", ["../etc/passwd", "/var/../../etc", "/a/../../.."])
def test_join_root_refuses_paths_outside_root(tmp_path, path):
    with pytest.raises(FsError, match="outside root"):
        join_root(str(tmp_path), path)


def test_join_root_places_absolute_paths_under_root(tmp_path):
    assert join_root(str(tmp_path), "/var/lib/bcd") == str(tmp_path / "var" / "lib" / "bcd")
    assert join_root("/", "/var/lib/bcd") == "/var/lib/bcd"
    with pytest.raises(FsError):
        join_root(str(tmp_path), "/a\0b")


def test_pass_lock_creates_private_state_dir_and_lock_file(tmp_path, umask_077):
    state = tmp_path / "var" / "lib" / "bcd"
    with PassLock(str(state)) as lock:
        assert lock.held
    assert mode_of(state) == 0o700
    assert mode_of(state / "lock") == 0o600


def test_second_pass_times_out_naming_the_lock(tmp_path):
    state = str(tmp_path / "state")
    with PassLock(state):
        started = time.monotonic()
        with pytest.raises(LockTimeout) as exc:
            PassLock(state, timeout=0.3).acquire()
        assert time.monotonic() - started >= 0.25
        assert os.path.join(state, "lock") in str(exc.value)
        with pytest.raises(LockTimeout):
            PassLock(state, blocking=False).acquire()
    # released: the next pass gets it at once
    with PassLock(state, blocking=False):
        pass


def test_check_mode_lock_creates_nothing(tmp_path):
    missing = tmp_path / "missing"
    with PassLock(str(missing), create=False):
        pass
    assert not missing.exists()

    state = tmp_path / "state"
    state.mkdir()
    with PassLock(str(state), create=False):
        pass
    assert os.listdir(state) == []


def test_check_mode_lock_excludes_a_running_pass(tmp_path):
    state = tmp_path / "state"
    state.mkdir()
    before = tree(str(tmp_path))
    # no lock file yet: the read-only lock takes the directory, which a real pass locks too
    with PassLock(str(state), create=False):
        assert tree(str(tmp_path)) == before
        with pytest.raises(LockTimeout):
            PassLock(str(state), timeout=0.2).acquire()
    with PassLock(str(state)):  # creates the lock file
        with pytest.raises(LockTimeout):
            PassLock(str(state), create=False, timeout=0.2).acquire()
    with PassLock(str(state), create=False):
        with pytest.raises(LockTimeout):
            PassLock(str(state), timeout=0.2).acquire()


# -- directory modes (issue 46, item 2) ------------------------------------------------------------------------

DIR_MODES = st.sampled_from([0o700, 0o711, 0o750, 0o755, 0o775, 0o2775, 0o1777])


def _create(how, path, mode):
    """Create the directory ``path`` with ``mode`` the way one of the creating helpers does."""
    if how == "ensure_dir":
        ensure_dir(path, mode)
    elif how == "write_atomic":
        write_atomic(os.path.join(path, "f.json"), b"{}", 0o600, mode)
    elif how == "create_exclusive":
        create_exclusive(os.path.join(path, "node.key"), b"k", 0o600, mode)
    else:
        with PassLock(path, dir_mode=mode, timeout=1):
            pass


@settings(max_examples=200, deadline=None, derandomize=True)
@given(existing=st.lists(DIR_MODES, max_size=3), new=st.integers(min_value=1, max_value=4), mode=DIR_MODES,
       umask=st.sampled_from([0, 0o022, 0o027, 0o077, 0o777]),
       how=st.sampled_from(["ensure_dir", "write_atomic", "create_exclusive", "PassLock"]))
def test_a_created_directory_takes_the_mode_asked_those_above_it_0755_and_existing_ones_keep_theirs(
        existing, new, mode, umask, how):
    """Whatever exists already and whatever the umask: each directory created above the one asked for is 0755,
    the one asked for has ``mode``, and each one that existed keeps its mode; asked again, nothing changes."""
    base = tempfile.mkdtemp()
    old = os.umask(umask)
    try:
        path = base
        for index, existing_mode in enumerate(existing):
            path = os.path.join(path, "old%d" % index)
            os.mkdir(path)
            os.chmod(path, existing_mode)
        created = []
        for index in range(new):
            path = os.path.join(path, "new%d" % index)
            created.append(path)
        _create(how, path, mode)
        os.umask(old)
        modes = dict((p, mode_of(p)) for p in [os.path.join(base, *["old%d" % i for i in range(n + 1)])
                                               for n in range(len(existing))] + created)
        assert [modes[p] for p in modes if p not in created] == existing
        assert [modes[p] for p in created] == [0o755] * (new - 1) + [mode]
        if os.geteuid() == 0:
            assert set((os.stat(p).st_uid, os.stat(p).st_gid) for p in created) == {(0, 0)}
        _create(how, path, 0o700 if mode != 0o700 else 0o755)  # asked again, with another mode: left as it is
        assert dict((p, mode_of(p)) for p in modes) == modes
    finally:
        os.umask(old)
        shutil.rmtree(base)
