# -*- coding: utf-8 -*-
# Copyright: contributors to bcd.devices
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""Filter bcd.devices.verify_report: check a node-signed event on the controller."""

from __future__ import annotations

DOCUMENTATION = r"""
name: verify_report
short_description: Check that a node event is an untampered attested report
version_added: 0.1.0
author:
  - bcd.devices developers (@bcd-devices)
description:
  - Returns V(true) only when the input is an V(AllocationBound) or V(AllocationReleased) event
    with purpose V(attested-report) whose C(signature) is a valid Ed25519 signature, by the given
    node public key, over C(attested-report\n) followed by the canonical JSON of its C(body)
    (keys sorted, no spaces, UTF-8).
  - Returns V(false) for anything else, such as a changed field of the body, a changed type, purpose
    or signature, an V(AllocationFailed) event (never signed) or input that is not an event at all.
  - The C(seq) of an event is assigned by the node's journal and is not signed.
  - Needs the Python library C(cryptography) on the controller.
options:
  _input:
    description: An event as returned by M(bcd.devices.events) or M(bcd.devices.holds).
    type: dict
    required: true
  public_key:
    description:
      - The node public key, base64 of the raw 32-byte Ed25519 key, as returned by
        M(bcd.devices.holds_info) in C(node_public_key).
      - A value that is not such a key fails the task rather than returning V(false).
    type: str
    required: true
seealso:
  - module: bcd.devices.events
  - module: bcd.devices.holds_info
"""

EXAMPLES = r"""
- name: Get the node public key
  bcd.devices.holds_info:
  register: info

- name: Read the journal
  bcd.devices.events:
  register: journal

- name: Every attested event in the journal verifies
  ansible.builtin.assert:
    that: >-
      journal.events | selectattr('purpose', 'defined')
      | map('bcd.devices.verify_report', info.node_public_key) is all

- name: Fail on any forged or altered report
  ansible.builtin.assert:
    that: item | bcd.devices.verify_report(info.node_public_key)
    fail_msg: "event {{ item.seq }} does not carry a valid node signature"
  loop: "{{ journal.events | selectattr('type', 'in', ['AllocationBound', 'AllocationReleased']) }}"
  loop_control:
    label: "{{ item.seq }}"
"""

RETURN = r"""
_value:
  description: V(true) for an untampered attested event signed by O(public_key), else V(false).
  type: bool
"""

from typing import Any, Callable, Dict

from ansible.errors import AnsibleFilterError

from ansible_collections.bcd.devices.plugins.module_utils.state.events import (
    CRYPTOGRAPHY_IMPORT_ERROR,
    HAS_CRYPTOGRAPHY,
    EventsError,
    decode_public_key,
)
from ansible_collections.bcd.devices.plugins.module_utils.state.events import (
    verify_report as _verify_report,
)


def verify_report(event: Any, public_key: Any) -> bool:
    """True only for an untampered attested event signed by ``public_key``. Both are what the template passes
    (an event is JSON, of any shape; a key that is not one is an error)."""
    if not HAS_CRYPTOGRAPHY:
        raise AnsibleFilterError(
            "bcd.devices.verify_report needs the Python library 'cryptography' on the controller: %s"
            % CRYPTOGRAPHY_IMPORT_ERROR)
    try:
        decode_public_key(public_key)
    except EventsError as exc:
        raise AnsibleFilterError("bcd.devices.verify_report: %s" % exc)
    return _verify_report(event, public_key)


class FilterModule:
    """bcd.devices event filters."""

    def filters(self) -> Dict[str, Callable[..., Any]]:
        return {"verify_report": verify_report}
