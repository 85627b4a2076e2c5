#!/usr/bin/python
# -*- coding: utf-8 -*-
# Copyright: contributors to bcd.devices
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""Ansible module bcd.devices.gpu_busy: who claims a GPU, for playbooks that reset or re-partition GPUs."""

from __future__ import annotations

DOCUMENTATION = r"""
module: gpu_busy
short_description: Tell whether GPUs are claimed, before resetting or re-partitioning them
version_added: 0.2.0
description:
  - For each GPU, lists who claims it - a live hold of the GPU whole, of one of its MIG instances or of a
    slot, a hold spec that cannot be read back, a pending Kubernetes release, an unreadable releases file, a
    VM that has it through VFIO, maintenance - and whether it is busy; and whether it is healthy, as the node
    reads it now (NVML, the kernel's XIDs since its last reset).
  - Without O(gpus), every GPU the node lists. This is how a recovery (the playbook C(bcd.devices.gpu_recover))
    asks the node which GPUs to recover, instead of trusting what an event said.
  - A GPU is busy when anything but maintenance claims it. Maintenance (M(bcd.devices.maintenance)) keeps
    new holds off a GPU so that it can be reset once its holds are gone.
  - Reads under the node's pass lock, shared, so a converging pass and this check never see half a change.
  - The same as C(bcd-holds busy GPU-...) on the node (exit 0 free, 3 busy, 2 bad input).
  - Writes nothing, ever.
author:
  - bcd.devices developers (@bcd-devices)
extends_documentation_fragment:
  - bcd.devices.node
  - bcd.devices.node.lock
  - bcd.devices.node.read_only
options:
  gpus:
    description:
      - UUIDs of the GPUs to check (C(GPU-...)); each must be a GPU of the node.
      - Left out, every GPU the node lists, in its order.
    type: list
    elements: str
seealso:
  - module: bcd.devices.maintenance
  - module: bcd.devices.holds_info
"""

EXAMPLES = r"""
- name: Keep new holds off the GPU first
  bcd.devices.maintenance:
    gpus: [GPU-5f1c2a90-0000-4000-8000-000000000001]
    reason: firmware update

- name: Wait until nothing holds it, then reset it
  bcd.devices.gpu_busy:
    gpus: [GPU-5f1c2a90-0000-4000-8000-000000000001]
  register: busy
  until: not busy.gpus[0].busy
  retries: 60
  delay: 30

- name: Refuse to reset a GPU something claims
  bcd.devices.gpu_busy:
    gpus: "{{ gpus_to_reset }}"
  register: busy
  failed_when: busy.gpus | selectattr('busy') | list | length > 0

- name: Reset it
  ansible.builtin.command: nvidia-smi --gpu-reset -i {{ gpus_to_reset | join(',') }}
  changed_when: true
"""

RETURN = r"""
msg:
  description:
    - The outcome in words, so that a C(until) loop whose retries run out says why. Each busy GPU with what
      claims it, joined by C(; ), or that the GPUs are free (C(GPU-... is free)), or C(the node lists no GPU).
  returned: always
  type: str
  sample: "GPU-5f1c2a90-0000-4000-8000-000000000001 is busy: MIG instance gi1/ci0 held by alloc_01jz8k3a"
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
  description: One entry per GPU asked about, in the order given (every GPU the node lists, without O(gpus)).
  returned: always
  type: list
  elements: dict
  contains:
    uuid:
      description: The GPU.
      type: str
    busy:
      description: Whether anything but maintenance claims it.
      type: bool
    healthy:
      description:
        - Whether the node reads the GPU healthy now; null when the node does not list it now (a GPU a hold or a
          record names, that fell off the bus).
      type: bool
    problems:
      description: What makes it unhealthy, as C(GPU-... is unhealthy) names it; empty when healthy.
      type: list
      elements: str
    reset_ineffective:
      description:
        - Its last reset (M(bcd.devices.gpu_reset)) left it unhealthy and it still is; it waits in maintenance for
          a person (condition C(GPUResetIneffective)).
      type: bool
    recoverable:
      description:
        - Unhealthy, listed, not declared reset-ineffective, and not in an operator's maintenance (one without a
          recovery's lease), the GPUs that C(bcd.devices.gpu_recover) recovers.
      type: bool
    claimed_by:
      description:
        - Each claim, with C(kind) (V(hold), V(hold-unreadable), V(release), V(releases-unreadable), V(vm),
          V(maintenance)) and C(text), plus C(allocation_id) and C(device_id) for holds and releases,
          C(instance_id) for a VM, C(reason) for maintenance.
      type: list
      elements: dict
      contains:
        kind:
          description: >-
            V(hold), V(hold-unreadable) (a hold spec that cannot be read back), V(release) (a pending
            Kubernetes release), V(releases-unreadable), V(vm) or V(maintenance); all but V(maintenance) make
            the GPU busy.
          type: str
        text:
          description: The claim in words, for a person.
          type: str
        allocation_id:
          description: The allocation holding or releasing the GPU.
          type: str
          returned: for V(hold), V(hold-unreadable) and V(release)
        device_id:
          description: The atom claimed (the GPU, one of its MIG instances or slots).
          type: str
          returned: for V(hold) and V(release)
        instance_id:
          description: The VM the GPU is passed through to.
          type: str
          returned: for V(vm)
        reason:
          description: Why the GPU is in maintenance.
          type: str
          returned: for V(maintenance)
  sample:
    - uuid: GPU-5f1c2a90-0000-4000-8000-000000000001
      busy: true
      healthy: true
      problems: []
      reset_ineffective: false
      recoverable: false
      claimed_by:
        - {kind: hold, text: "MIG instance gi1/ci0 held by alloc_01jz8k3a", allocation_id: alloc_01jz8k3a,
           device_id: GPU-5f1c2a90-0000-4000-8000-000000000001/gi1/ci0}
        - {kind: maintenance, text: "in maintenance (firmware update)", reason: firmware update}
"""

from ansible.module_utils import basic

from ansible_collections.bcd.devices.plugins.module_utils.support import speed

speed.compile_once()  # first: the rest of the collection compiles once from Ansible's zip (docs/performance.md)

from ansible_collections.bcd.devices.plugins.module_utils.entry.modules import gpu_busy as module_code


def main() -> None:
    module_code.main(basic)


if __name__ == "__main__":
    main()
