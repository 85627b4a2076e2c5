#!/usr/bin/python
# -*- coding: utf-8 -*-
# Copyright: contributors to bcd.devices
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""Ansible module bcd.devices.gpu_reset: reset GPUs that are in maintenance and free, and read their health again."""

from __future__ import annotations

DOCUMENTATION = r"""
module: gpu_reset
short_description: Reset GPUs that are in maintenance and free, and read their health again
version_added: 0.3.0
description:
  - Resets each GPU of O(gpus) and reads its health again right after, under the node's pass lock.
  - Only a GPU in maintenance (M(bcd.devices.maintenance)) that nothing claims (M(bcd.devices.gpu_busy) - no hold,
    no pending Kubernetes release, no VM) is reset. When any GPU of O(gpus) is not on the node, not in maintenance
    or busy, the task fails saying which and why, and no GPU is reset.
  - On a real node, as root, C(nvidia-smi --gpu-reset -i <UUID>) for each GPU, one after the other (nvidia-smi(1),
    C(-r, --gpu-reset) with C(-i, --id)); no application may use the GPU. On a fakehw node, the GPU's C(health)
    faults are cleared in the hardware file, unless its C(health.reset_clears) is false (a GPU a reset does not
    help, docs/fakehw.md).
  - The time of each reset is recorded (C(<state_dir>/health.json)), so that the GPU's XIDs logged before it no
    longer count, and so is the outcome, in the GPU's maintenance record.
  - The GPUs stay in maintenance; put those that read healthy back in service with M(bcd.devices.maintenance)
    O(bcd.devices.maintenance#module:state=absent). A GPU still unhealthy after its reset raises the node condition
    C(GPUResetIneffective) (a person must reboot the node or replace the GPU), which clears when it reads healthy
    again or leaves maintenance.
  - Each GPU's reset is a signed C(GPUReset) event in the node's journal, its reason the outcome (C(ResetHealthy),
    C(ResetIneffective), C(ResetFailed)), and C(GPUResetIneffective) one more. A journal at its bound resets
    nothing; the task fails, saying so, and is run again once the node's events are delivered.
  - When a GPU's reset itself fails, the task fails with each GPU's outcome in RV(gpus).
author:
  - bcd.devices developers (@bcd-devices)
extends_documentation_fragment:
  - bcd.devices.node
  - bcd.devices.node.lock
options:
  gpus:
    description: UUIDs of the GPUs to reset (C(GPU-...)), each listed by the node's inventory.
    type: list
    elements: str
    required: true
attributes:
  check_mode:
    support: full
    description: Checks the GPUs as a real run does, resets nothing and says which would be reset, as they read now.
  diff_mode:
    support: full
    description: Shows each GPU's health before, and after its reset (in check mode, that it would be reset).
  idempotent:
    support: none
    description: Every run resets the GPUs again.
seealso:
  - module: bcd.devices.maintenance
  - module: bcd.devices.gpu_busy
"""

EXAMPLES = r"""
- name: Keep new holds off the GPU
  bcd.devices.maintenance:
    gpus: [GPU-5f1c2a90-0000-4000-8000-000000000001]
    reason: unhealthy, being reset

- name: Wait until nothing holds it
  bcd.devices.gpu_busy:
    gpus: [GPU-5f1c2a90-0000-4000-8000-000000000001]
  register: busy
  until: not busy.gpus[0].busy
  retries: 60
  delay: 30

- name: Reset it and read its health again
  bcd.devices.gpu_reset:
    gpus: [GPU-5f1c2a90-0000-4000-8000-000000000001]
  register: reset

- name: Put it back in service only if it reads healthy
  bcd.devices.maintenance:
    gpus: [GPU-5f1c2a90-0000-4000-8000-000000000001]
    state: absent
  when: reset.gpus[0].healthy
"""

RETURN = r"""
msg:
  description: What became of each GPU, joined by C(; ).
  returned: always
  type: str
  sample: "GPU-5f1c2a90-0000-4000-8000-000000000001 was reset and reads healthy"
ran_from:
  description:
    - Which code ran - V(node-library), the library the role bcd.devices.bcd_holds installed on the node (it
      is this controller's code, verified by content, and root's alone), or V(bundled), the module as Ansible
      ships it (with a warning naming why the library could not run, unless C(bcd_devices_node_library) is false).
    - The result is otherwise the same. docs/performance.md, "The node library".
  returned: always
  type: str
  sample: node-library
gpus:
  description: One entry per GPU of O(gpus), in that order.
  returned: when the GPUs were checked (not on bad input)
  type: list
  elements: dict
  contains:
    uuid:
      description: The GPU.
      type: str
    reset:
      description: Whether it was reset (false in check mode, and when its reset failed).
      type: bool
    healthy:
      description: Whether it reads healthy, after its reset (before it, in check mode or when its reset failed).
      type: bool
    problems:
      description: What makes it unhealthy; empty when healthy.
      type: list
      elements: str
    error:
      description: Why its reset failed (nvidia-smi's exit status and message); null otherwise.
      type: str
  sample:
    - uuid: GPU-5f1c2a90-0000-4000-8000-000000000001
      reset: true
      healthy: false
      problems: ["row remapping failed (the GPU has no spare rows left)"]
      error: null
"""

from ansible.module_utils import basic

from ansible_collections.bcd.devices.plugins.module_utils.support import speed

speed.compile_once()  # first: the rest of the collection compiles once from Ansible's zip (docs/performance.md)

from ansible_collections.bcd.devices.plugins.module_utils.entry.modules import gpu_reset as module_code


def main() -> None:
    module_code.main(basic)


if __name__ == "__main__":
    main()
