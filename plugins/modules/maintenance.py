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
      description: When it was put in maintenance (seconds since the epoch).
      type: float
  sample:
    - uuid: GPU-5f1c2a90-0000-4000-8000-000000000001
      reason: firmware update
      since: 1796300000.0
"""

from ansible.module_utils.basic import AnsibleModule

from ansible_collections.bcd.devices.plugins.module_utils.domain.errors import BcdError
from ansible_collections.bcd.devices.plugins.module_utils.domain.text import printable
from ansible_collections.bcd.devices.plugins.module_utils.entry.busy import set_maintenance
from ansible_collections.bcd.devices.plugins.module_utils.entry.module_options import LOCK_OPTIONS, NODE_OPTIONS, argument_spec, host_from_params
from ansible_collections.bcd.devices.plugins.module_utils.node.isolation import refuse_unless_isolated


def _diff_text(records):
    # a reason may come from maintenance.json (the account's to write): escaped, one line per record
    return "".join("%s: %s\n" % (printable(record["uuid"]), printable(record["reason"])) for record in records)


def main():
    module = AnsibleModule(argument_spec=argument_spec(
        NODE_OPTIONS, LOCK_OPTIONS,
        gpus=dict(type="list", elements="str", required=True),
        state=dict(type="str", choices=["present", "absent"], default="present"),
        reason=dict(type="str"),
    ), required_if=[("state", "present", ("reason",))], supports_check_mode=True)
    refuse_unless_isolated(module)  # root: no Python another account steers (node/isolation.py)
    params = module.params
    try:
        changed, before, after = set_maintenance(
            host_from_params(params), params["gpus"], params["state"] == "present", params["reason"],
            params["state_dir"], module.check_mode, params["lock_timeout"])
    except (BcdError, OSError) as exc:
        module.fail_json(msg=printable(exc))
    result = {"changed": changed, "maintenance": after}
    if module._diff:
        path = "%s/maintenance.json" % params["state_dir"]
        result["diff"] = {"before": _diff_text(before), "after": _diff_text(after),
                          "before_header": path, "after_header": path}
    module.exit_json(**result)


if __name__ == "__main__":
    main()
