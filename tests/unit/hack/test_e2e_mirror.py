# -*- coding: utf-8 -*-
# Copyright: contributors to bcd.devices
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""The e2e root filesystems come from the Debian archive this machine's apt already uses
(tests/e2e/lib/rootfs.sh debian_mirror), or E2E_DEBIAN_MIRROR: the repository names no
registry host of its own."""

from __future__ import annotations

import glob
import os
import re
import subprocess
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[3]

DEB822 = """\
# a comment before the first stanza
Types: deb-src
URIs: http://src.example.test/debian
Suites: bookworm
Components: main

Types: deb
# http://snapshot.example.test/archive/debian/20250520T000000Z
URIs: http://archive.example.test/debian/ http://second.example.test/debian
Suites: bookworm bookworm-updates
Components: main
Signed-By: /usr/share/keyrings/debian-archive-keyring.gpg

Types: deb
URIs: http://archive.example.test/debian-security
Suites: bookworm-security
Components: main
"""


def mirror(apt_dir, **env):
    done = subprocess.run(["bash", "-c", "set -euo pipefail; source tests/e2e/lib/rootfs.sh; debian_mirror"],
                          cwd=str(REPO), capture_output=True, text=True, check=False, timeout=30,
                          env=dict(dict(os.environ, E2E_APT_DIR=str(apt_dir), E2E_DEBIAN_MIRROR=""), **env))
    return done.returncode, done.stdout.strip(), done.stderr.strip()


@pytest.fixture
def apt(tmp_path):
    (tmp_path / "sources.list.d").mkdir()
    return tmp_path


def test_a_deb822_source_gives_the_first_archive_not_sources_or_security(apt):
    (apt / "sources.list.d" / "debian.sources").write_text(DEB822)
    assert mirror(apt) == (0, "http://archive.example.test/debian", "")


def test_a_disabled_stanza_is_skipped(apt):
    (apt / "sources.list.d" / "a.sources").write_text(
        "Types: deb\nEnabled: no\nURIs: http://off.example.test/debian\nSuites: trixie\n")
    (apt / "sources.list.d" / "b.sources").write_text("Types: deb\nURIs: https://on.example.test/debian\nSuites: trixie\n")
    assert mirror(apt)[1] == "https://on.example.test/debian"


def test_a_one_line_sources_list_with_options(apt):
    (apt / "sources.list").write_text(
        "# deb http://commented.example.test/debian bookworm main\n"
        "deb [signed-by=/usr/share/keyrings/debian-archive-keyring.gpg arch=amd64] http://security.example.test/debian-security bookworm-security main\n"
        "deb [signed-by=/usr/share/keyrings/debian-archive-keyring.gpg] http://line.example.test/debian bookworm main\n")
    assert mirror(apt) == (0, "http://line.example.test/debian", "")


def test_the_environment_variable_overrides_the_sources(apt):
    (apt / "sources.list.d" / "debian.sources").write_text(DEB822)
    assert mirror(apt, E2E_DEBIAN_MIRROR="http://override.example.test/debian")[1] == "http://override.example.test/debian"


def test_no_source_is_a_clear_error(apt):
    code, out, err = mirror(apt)
    assert code != 0 and out == ""
    assert "set E2E_DEBIAN_MIRROR" in err


def machine_registry_hosts():
    """The hosts of the registries this machine uses, read from its own configuration (apt sources, pip
    config): the test names none itself."""
    texts = []
    for pattern in ("/etc/apt/sources.list", "/etc/apt/sources.list.d/*", "/etc/pip.conf", "/etc/xdg/pip/pip.conf",
                    os.path.expanduser("~/.config/pip/pip.conf"), os.path.expanduser("~/.pip/pip.conf")):
        for name in glob.glob(pattern):
            try:
                texts.append(Path(name).read_text(errors="replace"))
            except OSError:
                pass
    texts.extend(os.environ.get(key, "") for key in ("PIP_INDEX_URL", "PIP_EXTRA_INDEX_URL"))
    return sorted(set(re.findall(r"https?://([A-Za-z0-9.-]+\.[A-Za-z]{2,})", "\n".join(texts))))


def test_no_registry_host_of_this_machine_is_written_in_the_repository():
    hosts = machine_registry_hosts()
    if not hosts:
        pytest.skip("this machine's apt and pip configuration name no registry host")
    listed = subprocess.run(["git", "ls-files", "-z", "--cached", "--others", "--exclude-standard"], cwd=str(REPO),
                            capture_output=True, check=True).stdout.decode().split("\0")
    found = []
    for name in filter(None, listed):
        path = REPO / name
        if not path.is_file() or path.is_symlink():
            continue
        text = path.read_bytes().decode("utf-8", "replace")
        found.extend("%s: %s" % (name, host) for host in hosts if host in text)
    assert found == []
