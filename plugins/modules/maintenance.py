#!/usr/bin/python
# -*- coding: utf-8 -*-
# Copyright: contributors to bcd.devices
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""Ansible module bcd.devices.maintenance: take GPUs out of service on a node, and put them back."""

from __future__ import annotations

DOCUMENTATION = r"""
module: maintenance
short_description: Take GPUs out of service on a node, and put them back
version_added: 0.2.0
description:
  - While a GPU is in maintenance, no new hold may claim it or any part of it - M(bcd.devices.holds) refuses
    it with V(overlap) and C(GPU-... is in maintenance (<reason>)) - so the control plane places the
    allocation elsewhere.
  - Holds the GPU already has are kept; releasing them is the control plane's decision.
    M(bcd.devices.gpu_busy) tells when they are gone.
  - Recorded in the node's state directory (C(<state_dir>/maintenance.json)) under the pass lock, so the
    node's timers honour it between runs. M(bcd.devices.holds_info) and C(bcd-holds status) show it.
author:
  - bcd.devices developers (@bcd-devices)
extends_documentation_fragment:
  - bcd.devices.node
  - bcd.devices.node.lock
options:
  gpus:
    description: UUIDs of the GPUs (C(GPU-...)); to put one in maintenance it must be a GPU of the node.
    type: list
    elements: str
    required: true
  state:
    description: V(present) puts the GPUs in maintenance, V(absent) puts them back in service.
    type: str
    choices: [present, absent]
    default: present
  reason:
    description:
      - Why, as the refusal of a new hold names it. Required with O(state=present); a GPU already in
        maintenance takes the new reason and keeps its start time.
    type: str
attributes:
  check_mode:
    support: full
    description: Computes the same change and writes nothing.
  diff_mode:
    support: full
    description: Shows the GPUs in maintenance before and after.
  idempotent:
    support: full
    description: The same GPUs, state and reason change nothing the second time.
seealso:
  - module: bcd.devices.gpu_busy
  - module: bcd.devices.holds
"""

EXAMPLES = r"""
- name: Take a GPU out of service for a firmware update
  bcd.devices.maintenance:
    gpus: [GPU-5f1c2a90-0000-4000-8000-000000000001]
    reason: firmware update

- name: Put it back in service
  bcd.devices.maintenance:
    gpus: [GPU-5f1c2a90-0000-4000-8000-000000000001]
    state: absent
"""

RETURN = r"""
ran_from:
  description:
    - Which code ran - V(node-library), the library the role bcd.devices.bcd_holds installed on the node (it
      is this controller's code, verified by content, and root's alone), or V(bundled), the module as Ansible
      ships it (with a warning naming why the library could not run, unless C(bcd_devices_node_library) is false).
    - The result is otherwise the same. docs/performance.md, "The node library".
  returned: always
  type: str
  sample: node-library
maintenance:
  description: The GPUs in maintenance on the node after the change (before it in check mode, as planned).
  returned: always
  type: list
  elements: dict
  contains:
    uuid:
      description: The GPU.
      type: str
    reason:
      description: Why it is out of service.
      type: str
    since:
      description:
        - When it was put in maintenance, in UTC as ISO 8601 (C(2026-12-02T09:00:00Z)); null when the record does
          not say.
      type: str
  sample:
    - uuid: GPU-5f1c2a90-0000-4000-8000-000000000001
      reason: firmware update
      since: "2026-12-02T09:00:00Z"
"""

import gc

from ansible.module_utils import basic

from ansible_collections.bcd.devices.plugins.module_utils.entry import zip_payload

zip_payload.compile_once()  # first: the rest of the collection compiles once from Ansible's zip (docs/performance.md)

from ansible_collections.bcd.devices.plugins.module_utils.entry.modules import maintenance as module_code


def main():
    gc.freeze()  # what is imported lives as long as the run: no collection walks it (docs/performance.md)
    module_code.main(basic)


if __name__ == "__main__":
    main()
