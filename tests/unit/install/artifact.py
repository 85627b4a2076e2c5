# -*- coding: utf-8 -*-
# Copyright: contributors to bcd.devices
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""The collection as its users get it: the artifact ``ansible-galaxy collection build`` makes, installed
with ``ansible-galaxy collection install`` into a collections path of the test's own, and run from
there, never from this checkout.

``build(out)`` makes the tarball (with the ``ansible-galaxy`` beside ``sys.executable``; the
``artifact`` fixture of conftest.py does it once a session); ``install(artifact, bin_dir, dest)``
installs it with the ``ansible-galaxy`` of ``bin_dir`` and returns the collections path; ``clean_env(tmp, collections)`` is an environment
for Ansible's commands that reads nothing of the user's (no ``ANSIBLE_*`` of the caller's, a
private ``ANSIBLE_HOME``) and finds ``bcd.devices`` only there.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import yaml

REPO = Path(__file__).resolve().parents[3]
GALAXY = yaml.safe_load((REPO / "galaxy.yml").read_text(encoding="utf-8"))
VERSION = GALAXY["version"]
# What ansible-core prints when meta/runtime.yml's requires_ansible does not admit it: a refusal at
# install time ("requires ansible-core >=...") and a warning on every task of a run.
UNSUPPORTED = ("does not support Ansible version", "requires ansible-core")


def clean_env(tmp, collections, bin_dir=None):
    """Environment for ansible-galaxy, ansible-playbook or ansible-runner: the caller's ANSIBLE_*
    dropped, Ansible's home and temporary files under ``tmp``, ``bcd.devices`` found only in
    ``collections`` (not in the checkout's .build, not on sys.path)."""
    env = {key: value for key, value in os.environ.items() if not key.startswith("ANSIBLE_")}
    home = Path(tmp) / "ansible-home"
    env.update(
        PATH="%s:%s" % (bin_dir or Path(sys.executable).parent, os.environ.get("PATH", "")),
        ANSIBLE_HOME=str(home),
        ANSIBLE_LOCAL_TEMP=str(home / "tmp"),
        ANSIBLE_REMOTE_TEMP=str(home / "remote-tmp"),
        ANSIBLE_CONFIG=str(Path(tmp) / "ansible.cfg"),
        ANSIBLE_COLLECTIONS_PATH=str(collections),
        ANSIBLE_COLLECTIONS_SCAN_SYS_PATH="false",
        ANSIBLE_NOCOLOR="1",
        ANSIBLE_FORCE_COLOR="0",
        ANSIBLE_RETRY_FILES_ENABLED="0",
    )
    env.pop("PYTHONPATH", None)
    Path(tmp).mkdir(parents=True, exist_ok=True)
    Path(tmp, "ansible.cfg").write_text("[defaults]\n", encoding="utf-8")
    return env


def build(out):
    """bcd-devices-<version>.tar.gz in ``out``, built from this checkout as a release is built."""
    env = clean_env(out, out / "none")
    done = subprocess.run([str(Path(sys.executable).parent / "ansible-galaxy"), "collection", "build",
                           "--output-path", str(out), str(REPO)],
                          cwd=str(out), env=env, capture_output=True, text=True, timeout=300, check=False)
    assert done.returncode == 0, done.stdout + done.stderr
    tarball = out / ("bcd-devices-%s.tar.gz" % VERSION)
    assert tarball.is_file(), done.stdout
    return tarball


def install(artifact_path, bin_dir, dest):
    """``ansible-galaxy collection install`` of the artifact into ``dest``/collections with the
    ansible-galaxy of ``bin_dir``; returns (collections path, the command's output)."""
    collections = Path(dest) / "collections"
    env = clean_env(dest, collections, bin_dir)
    done = subprocess.run([str(Path(bin_dir) / "ansible-galaxy"), "collection", "install", "--offline",
                           "-p", str(collections), str(artifact_path)],
                          cwd=str(dest), env=env, capture_output=True, text=True, timeout=300, check=False)
    out = done.stdout + done.stderr
    assert done.returncode == 0, out
    for text in UNSUPPORTED:
        assert text not in out, out
    assert "bcd.devices:%s was installed successfully" % VERSION in out, out
    assert (collections / "ansible_collections" / "bcd" / "devices" / "MANIFEST.json").is_file()
    return collections, out
