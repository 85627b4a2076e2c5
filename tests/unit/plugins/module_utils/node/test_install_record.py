# -*- coding: utf-8 -*-
# Copyright: contributors to bcd.devices
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""The record of the role's install (node/library.py, ``install_manifest`` and ``install_refusal``), which a role
re-run checks instead of running its install tasks: anything the role installed that is no longer as recorded,
and any record root did not write alone, makes the run install again. A drift the check missed would leave a node
as it drifted for as long as nothing else changes, so every kind of drift is made here, and a property test makes
one of each kind on random installs."""

from __future__ import annotations

import io
import json
import os
import pwd
import stat

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from ansible_collections.bcd.devices.plugins.module_utils.entry import installed
from ansible_collections.bcd.devices.plugins.module_utils.entry.cli import EX_CHECK, EX_ERROR, EX_OK, main
from ansible_collections.bcd.devices.plugins.module_utils.node import library

ME = os.geteuid()
ACCOUNT = pwd.getpwuid(ME).pw_name
DIGEST = "d" * 64


def make_install(base, files=2, units=("bcd-holds-retry.timer",)):
    """A small install under ``base``: files, a directory, an enabling link, a removed unit; its record's spec."""
    (base / "bin").mkdir()
    (base / "units" / "timers.target.wants").mkdir(parents=True)
    paths = []
    for number in range(files):
        path = base / "bin" / ("file%d" % number)
        path.write_text("content %d\n" % number)
        path.chmod(0o644)
        paths.append(str(path))
    for unit in units:
        (base / "units" / unit).write_text("[Timer]\n")
        os.symlink("../" + unit, str(base / "units" / "timers.target.wants" / unit))
        paths.append(str(base / "units" / unit))
    return {"digest": DIGEST, "account": ACCOUNT, "files": paths, "dirs": [str(base / "bin"), str(base / "units")],
            "absent": [str(base / "units" / "bcd-holds-vendor-spec.path")],
            "link_globs": [str(base / "units" / "*.wants" / "bcd-holds-*")]}


def recorded(base, spec):
    manifest = base / "installed.json"
    manifest.write_text(json.dumps(library.install_manifest(spec)))
    manifest.chmod(0o600)
    return str(manifest)


def test_an_install_as_recorded_stands(tmp_path):
    spec = make_install(tmp_path)
    manifest = recorded(tmp_path, spec)
    found = json.loads(open(manifest).read())
    kinds = sorted(entry["kind"] for entry in found["entries"])
    assert kinds == ["absent", "dir", "dir", "file", "file", "file", "link"]
    assert found["account"] == {"name": ACCOUNT, "uid": ME, "gid": pwd.getpwuid(ME).pw_gid}
    assert library.install_refusal(manifest, DIGEST, owner=ME) is None
    assert library.install_refusal(manifest, None, owner=ME) is None  # bcd-holds installed, doctor: any digest


def _content(base):
    path = base / "bin" / "file0"
    path.write_text("changed\n")
    return path, "differs from what the role installed"


def _mode(base):
    path = base / "bin" / "file1"
    path.chmod(0o666)
    return path, "mode 0666, not as installed"


def _missing(base):
    path = base / "units" / "bcd-holds-retry.timer"
    path.unlink()
    return path, "is missing"


def _dir_mode(base):
    path = base / "bin"
    path.chmod(0o777)
    return path, "mode 0777, not as installed"


def _back(base):
    path = base / "units" / "bcd-holds-vendor-spec.path"
    path.write_text("[Path]\n")
    return path, "is there, and the role removed it"


def _disabled(base):
    path = base / "units" / "timers.target.wants" / "bcd-holds-retry.timer"
    path.unlink()
    return path, "is missing"


def _retargeted(base):
    path = base / "units" / "timers.target.wants" / "bcd-holds-retry.timer"
    path.unlink()
    os.symlink("/dev/null", str(path))
    return path, "is not the link to ../bcd-holds-retry.timer"


def _linked(base):
    path = base / "bin" / "file0"
    path.unlink()
    os.symlink(str(base / "bin" / "file1"), str(path))
    return path, "is not the file the role installed"


def _replaced_by_dir(base):
    path = base / "bin" / "file1"
    path.unlink()
    path.mkdir()
    return path, "is not the file the role installed"


DRIFTS = [_content, _mode, _missing, _dir_mode, _back, _disabled, _retargeted, _linked, _replaced_by_dir]


@pytest.mark.parametrize("drift", DRIFTS, ids=lambda drift: drift.__name__.strip("_"))
def test_every_drift_from_the_record_is_found_and_named(tmp_path, drift):
    manifest = recorded(tmp_path, make_install(tmp_path))
    path, words = drift(tmp_path)
    why = library.install_refusal(manifest, DIGEST, owner=ME)
    assert why is not None and str(path) in why and words in why, why


def test_another_digest_a_missing_or_foreign_record_installs_again(tmp_path):
    manifest = recorded(tmp_path, make_install(tmp_path))
    assert library.install_refusal(manifest, "e" * 64, owner=ME) == (
        "the install was made by another version of the role or with other variables")
    assert "the role has not recorded a complete install" in library.install_refusal(
        str(tmp_path / "none.json"), DIGEST, owner=ME)
    os.chmod(manifest, 0o620)
    assert "is not root's alone" in library.install_refusal(manifest, DIGEST, owner=ME)
    os.chmod(manifest, 0o600)
    assert "is not root's alone" in library.install_refusal(manifest, DIGEST, owner=ME + 1)
    link = tmp_path / "link.json"
    os.symlink(manifest, str(link))
    assert "cannot be read" in library.install_refusal(str(link), DIGEST, owner=ME)  # no link is followed
    for text in ("not json", json.dumps({"format": 2, "entries": []}), json.dumps([1]),
                 json.dumps({"format": 1, "digest": DIGEST, "entries": [{"path": 1, "kind": "file"}]}),
                 json.dumps({"format": 1, "digest": DIGEST, "entries": [{"path": "/etc", "kind": "socket"}]})):
        with open(manifest, "w") as handle:
            handle.write(text)
        assert library.install_refusal(manifest, DIGEST, owner=ME) is not None, text
    with open(manifest, "w") as handle:
        handle.write(" " * (library.MAX_MANIFEST_BYTES + 1))
    assert "is larger than" in library.install_refusal(manifest, DIGEST, owner=ME)


def test_an_account_gone_or_renumbered_installs_again(tmp_path):
    manifest = recorded(tmp_path, make_install(tmp_path))
    data = json.loads(open(manifest).read())
    data["account"]["uid"] += 1
    with open(manifest, "w") as handle:
        json.dump(data, handle)
    assert "as installed" in library.install_refusal(manifest, DIGEST, owner=ME)
    data["account"]["name"] = "bcd-no-such-account"
    with open(manifest, "w") as handle:
        json.dump(data, handle)
    assert "bcd-no-such-account" in library.install_refusal(manifest, DIGEST, owner=ME)


def test_a_record_of_what_the_role_does_not_install_is_refused(tmp_path):
    spec = make_install(tmp_path)
    for bad in ({"files": ["relative/path"]}, {"dirs": [str(tmp_path / "bin" / "file0")]},
                {"files": [str(tmp_path / "bin")]}, {"files": [str(tmp_path / "nothing")]},
                {"link_globs": ["*.wants"]}, {"digest": None}, {"account": "bcd-no-such-account"}):
        with pytest.raises(ValueError):
            library.install_manifest(dict(spec, **bad))
    with pytest.raises(ValueError, match="more than"):
        library.install_manifest(dict(spec, absent=["/x%d" % n for n in range(library.MAX_MANIFEST_ENTRIES + 1)]))


# -- the property: any one drift of any recorded entry is found -----------------------------------------------

@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(files=st.integers(min_value=1, max_value=6), pick=st.integers(min_value=0, max_value=10 ** 6),
       how=st.sampled_from(["content", "mode", "remove", "owner-bits", "link"]))
def test_any_one_drift_of_any_entry_is_found(tmp_path_factory, files, pick, how):
    base = tmp_path_factory.mktemp("install")
    manifest = recorded(base, make_install(base, files=files))
    entries = [entry for entry in json.loads(open(manifest).read())["entries"] if entry["kind"] != "absent"]
    entry = entries[pick % len(entries)]
    path = entry["path"]
    if entry["kind"] == "link" or how == "remove":
        os.unlink(path) if entry["kind"] != "dir" else os.rename(path, path + ".moved")
    elif how == "content" and entry["kind"] == "file":
        with open(path, "a") as handle:
            handle.write("x")
    elif how == "link" and entry["kind"] == "file":
        os.unlink(path)
        os.symlink("/etc/hostname", path)
    else:
        os.chmod(path, stat.S_IMODE(os.lstat(path).st_mode) ^ 0o002)
    assert library.install_refusal(manifest, DIGEST, owner=ME) is not None, (how, entry)


# -- bcd-holds installed ---------------------------------------------------------------------------------------

def test_bcd_holds_installed_records_then_checks(tmp_path, monkeypatch, capsys):
    (tmp_path / "root").mkdir()
    spec = make_install(tmp_path / "root")

    class Stdin:
        buffer = io.BytesIO(json.dumps(spec).encode())
    monkeypatch.setattr("sys.stdin", Stdin)
    manifest = "/usr/local/lib/bcd-holds/installed.json"
    assert main(["installed", "--record", "--root", str(tmp_path), "--manifest", manifest]) == EX_OK
    written = tmp_path / manifest.lstrip("/")
    assert stat.S_IMODE(os.stat(str(written)).st_mode) == 0o600
    assert "recorded 7 entries" in capsys.readouterr().out
    if ME == 0:  # the record must be root's: only root writes one that reads back
        assert main(["installed", "--root", str(tmp_path), "--manifest", manifest]) == EX_OK
        assert "as the role recorded it" in capsys.readouterr().out
        (tmp_path / "root" / "bin" / "file0").write_text("drifted\n")
        assert main(["installed", "--root", str(tmp_path), "--manifest", manifest]) == EX_CHECK
        assert "file0 differs from what the role installed" in capsys.readouterr().out
    assert main(["installed", "--root", str(tmp_path), "--manifest", "relative.json"]) == EX_ERROR
    assert "absolute node path" in capsys.readouterr().err
    with pytest.raises(ValueError):
        installed.manifest_path("/", "/usr/../etc/passwd")
