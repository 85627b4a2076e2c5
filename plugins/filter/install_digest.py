# -*- coding: utf-8 -*-
# Copyright: contributors to bcd.devices
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""Filter bcd.devices.install_digest: what the role's install would be made of, as one digest."""

from __future__ import annotations

DOCUMENTATION = r"""
name: install_digest
short_description: One digest of everything the role bcd_holds's install reads
version_added: 0.3.0
author:
  - bcd.devices developers (@bcd-devices)
description:
  - >-
    The SHA-256 over the input (the role's variables its install reads, as a mapping), every file of the role's
    directory O(role_path) (its tasks, templates, defaults and vars), and the controller collection's
    C(module_utils) (the library the role installs).
  - >-
    The role P(bcd.devices.bcd_holds#role) records it on the node after a full install, and its later runs check the
    record before anything else: where the digest and the installed files are as recorded, the run converges the
    holds and installs nothing. A changed variable, another version of the collection or of the role gives
    another digest, and the next run installs again.
options:
  _input:
    description: The variables the install reads, as a mapping (JSON-serializable).
    type: dict
    required: true
  role_path:
    description: The role's directory on the controller (C(role_path)).
    type: path
    required: true
seealso:
  - module: bcd.devices.holds
"""

EXAMPLES = r"""
- name: The digest the role records after a full install
  ansible.builtin.debug:
    msg: "{{ {'user': 'bcd', 'prefix': '/usr/local'} | bcd.devices.install_digest(role_path) }}"
"""

RETURN = r"""
_value:
  description: The SHA-256, 64 hexadecimal digits.
  type: str
"""

import hashlib
import json
import os
from typing import Any, Callable, Dict

from ansible.errors import AnsibleFilterError

from ansible_collections.bcd.devices.plugins.plugin_utils.node_library import controller_digest

MAX_ROLE_FILES = 256


def role_digest(role_path: str) -> str:
    """One SHA-256 over every file under ``role_path``: its path relative to it and its content, sorted."""
    lines = []
    for top, dirs, files in os.walk(role_path):
        dirs[:] = sorted(d for d in dirs if d != "__pycache__")
        for name in files:
            path = os.path.join(top, name)
            with open(path, "rb") as handle:
                lines.append("%s\0%s\n" % (os.path.relpath(path, role_path), hashlib.sha256(handle.read()).hexdigest()))
            if len(lines) > MAX_ROLE_FILES:
                raise AnsibleFilterError("install_digest: %s has more than %d files" % (role_path, MAX_ROLE_FILES))
    if not lines:
        raise AnsibleFilterError("install_digest: %s has no files: not a role's directory" % role_path)
    return hashlib.sha256("".join(sorted(lines)).encode("utf-8", "surrogateescape")).hexdigest()


def install_digest(inputs: object, role_path: object) -> str:
    if not isinstance(inputs, dict):
        raise AnsibleFilterError("install_digest: the input must be a mapping, not %s" % type(inputs).__name__)
    try:
        text = json.dumps(inputs, sort_keys=True, default=str)
    except (TypeError, ValueError) as exc:
        raise AnsibleFilterError("install_digest: the input is not JSON: %s" % exc)
    try:
        role = role_digest(str(role_path))
    except OSError as exc:
        raise AnsibleFilterError("install_digest: %s" % exc)
    return hashlib.sha256(("%s\n%s\n%s" % (text, role, controller_digest())).encode("utf-8")).hexdigest()


class FilterModule:
    """bcd.devices install_digest filter."""

    def filters(self) -> Dict[str, Callable[..., Any]]:
        return {"install_digest": install_digest}
