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
  - Each GPU taken out of service or put back is one signed event in the node's journal, C(GPUMaintenanceStarted)
    or C(GPUMaintenanceEnded), journaled before the record changes. A journal at its bound changes nothing; the
    task fails, saying so, and is run again once the node's events are delivered.
  - With O(lease), the change belongs to a recovery (the playbook C(bcd.devices.gpu_recover)), and only one
    recovery works on a node at a time. V(present) takes the lease on the GPUs, or refreshes it (call it again
    while waiting, as an C(until) loop does), unless another recovery's lease is live on the node; then nothing
    changes and RV(lease_holder) names that recovery. V(absent) ends the lease on every GPU it covers, those put
    back in service and those left in maintenance alike.
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
  lease:
    description:
      - The id of the recovery this change belongs to (1 to 64 letters, digits, C(_), C(.) or C(-)), one per
        recovery run.
      - With O(state=present), the GPUs are under this lease for O(lease_seconds) from now; while it is live,
        another recovery of the node changes nothing and ends. A lease nobody refreshes (the engine running the
        recovery died) ends by itself.
      - With O(state=absent), O(gpus) may be empty (only the lease ends); a GPU under another recovery's live
        lease is refused.
      - Left out, the change is an operator's, and leases stay as they are.
    type: str
    version_added: 0.3.0
  lease_seconds:
    description: How long the lease lasts from this call, 1 to 3600 seconds. Used with O(lease) and O(state=present).
    type: float
    default: 300
    version_added: 0.3.0
  reraise_after:
    description:
      - How long after the lease ends, 0 to 604800 seconds, a node pass that still finds a GPU of the lease
        unhealthy and in maintenance (and not declared C(GPUResetIneffective)) raises its C(GPUUnhealthy) again,
        so that the rulebook runs the recovery again. Used with O(lease) and O(state=present).
    type: float
    default: 900
    version_added: 0.3.0
attributes:
  check_mode:
    support: full
    description: Computes the same change and writes nothing.
  diff_mode:
    support: full
    description: Shows the GPUs in maintenance before and after, and the recovery whose live lease each is under.
  idempotent:
    support: full
    description:
      - The same GPUs, state and reason change nothing the second time. Refreshing a live lease of the same id
        moves its end (RV(lease_until)) and is no change.
seealso:
  - module: bcd.devices.gpu_busy
  - module: bcd.devices.gpu_reset
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
msg:
  description:
    - With O(lease) and O(state=present) - each busy GPU with what claims it, or that they are free (as
      M(bcd.devices.gpu_busy) says it), or that another recovery is in progress.
  returned: with O(lease) and O(state=present)
  type: str
  sample: "GPU-5f1c2a90-0000-4000-8000-000000000001 is busy: held whole by alloc_01jz8k3a"
gpus:
  description: The GPUs of O(gpus), each as M(bcd.devices.gpu_busy) returns it, read under the same lock.
  returned: with O(lease) and O(state=present), unless another recovery holds the node
  type: list
  elements: dict
  contains:
    uuid:
      description: The GPU.
      type: str
    busy:
      description: Whether anything but maintenance claims it.
      type: bool
    claimed_by:
      description: Each claim, as M(bcd.devices.gpu_busy) returns it.
      type: list
      elements: dict
      contains:
        kind:
          description: V(hold), V(hold-unreadable), V(release), V(releases-unreadable), V(vm) or V(maintenance).
          type: str
        text:
          description: The claim in words, for a person.
          type: str
    healthy:
      description: Whether the node reads the GPU healthy now; null when the node does not list it now.
      type: bool
    problems:
      description: What makes it unhealthy; empty when healthy.
      type: list
      elements: str
    reset_ineffective:
      description: Its last reset left it unhealthy and it still is.
      type: bool
    recoverable:
      description: Unhealthy, listed, not declared reset-ineffective, and not in an operator's maintenance.
      type: bool
lease_holder:
  description:
    - Another recovery's live lease on the node, C({id, until, gpus}); nothing changed. Null otherwise.
  returned: always
  type: dict
  contains:
    id:
      description: The other recovery's lease id.
      type: str
    until:
      description: When its lease ends, unless refreshed, in UTC as ISO 8601.
      type: str
    gpus:
      description: The GPUs under its lease.
      type: list
      elements: str
  sample: {id: 6x0kq2rj7m, until: "2026-12-02T09:05:00Z", gpus: [GPU-5f1c2a90-0000-4000-8000-000000000001]}
lease_until:
  description: When this recovery's lease ends, in UTC as ISO 8601, unless refreshed. Null without a lease taken.
  returned: always
  type: str
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
    lease:
      description: The recovery lease it is (or was last) under; null for none.
      type: dict
      contains:
        id:
          description: The recovery's lease id.
          type: str
        until:
          description: When the lease ends (or ended), in UTC as ISO 8601.
          type: str
        live:
          description: Whether the lease is live now (a recovery is working on the GPU).
          type: bool
    reset:
      description: Its last reset (M(bcd.devices.gpu_reset)) and the health read after it; null for none since it went into maintenance.
      type: dict
      contains:
        at:
          description: When it was reset, in UTC as ISO 8601.
          type: str
        healthy:
          description: Whether it read healthy right after the reset.
          type: bool
        problems:
          description: What made it unhealthy then; empty when healthy.
          type: list
          elements: str
  sample:
    - uuid: GPU-5f1c2a90-0000-4000-8000-000000000001
      reason: firmware update
      since: "2026-12-02T09:00:00Z"
      lease: null
      reset: null
"""

from ansible.module_utils import basic

from ansible_collections.bcd.devices.plugins.module_utils.support import speed

speed.compile_once()  # first: the rest of the collection compiles once from Ansible's zip (docs/performance.md)

from ansible_collections.bcd.devices.plugins.module_utils.entry.modules import maintenance as module_code


def main() -> None:
    module_code.main(basic)


if __name__ == "__main__":
    main()
