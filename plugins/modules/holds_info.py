#!/usr/bin/python
# -*- coding: utf-8 -*-
# Copyright: contributors to bcd.devices
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""Ansible module bcd.devices.holds_info: what a node holds, per GPU, read-only."""

from __future__ import annotations

DOCUMENTATION = r"""
module: holds_info
short_description: Show a GPU node's holds, who holds each GPU, its capabilities and its public key
version_added: 0.1.0
description:
  - Reads the holds back from C(/etc/cdi/bcd-*.json) and the node's GPU inventory, and reports per GPU
    which allocation holds it whole or holds its MIG instances or slots.
  - Lists Kubernetes releases still waiting for pods, with their age.
  - Returns the node's capabilities, its conditions and its public key, for checking event signatures
    on the controller with P(bcd.devices.verify_report#filter).
  - Writes nothing, ever.
author:
  - bcd.devices developers (@bcd-devices)
extends_documentation_fragment:
  - bcd.devices.node
  - bcd.devices.node.helper
  - bcd.devices.node.runtimes
  - bcd.devices.node.read_only
options:
  lock_timeout:
    description:
      - Taken so that C(module_defaults) for C(group/bcd.devices.all) may set it for every module; this module reads
        files each pass writes whole (renamed into place) and so does not wait for the pass lock.
    type: float
    default: 120
seealso:
  - module: bcd.devices.holds
  - module: bcd.devices.events
"""

EXAMPLES = r"""
- name: Read the node's holds
  bcd.devices.holds_info:
  register: info

- name: Show who holds each GPU, whole or in parts (a MIG instance, a slot)
  ansible.builtin.debug:
    msg: >-
      GPU {{ item.index }} {{ item.uuid }}:
      {{ item.held_by or (parts | join(', ')) or ('claimed' if item.busy else 'free') }}
  vars:
    parts: "{{ (item.mig + item.slots) | selectattr('held_by') | map(attribute='id') | list }}"
  loop: "{{ info.gpus }}"

- name: Fail when a kept hold's spec names driver files the node no longer has (after a driver upgrade)
  ansible.builtin.assert:
    that: info.holds | map(attribute='stale_edits') | flatten | length == 0
    fail_msg: "{{ info.conditions | selectattr('type', 'eq', 'VendorSpecStale') | map(attribute='message') | first | default('stale holds') }}"

- name: Keep the node's public key for checking its events
  ansible.builtin.set_fact:
    node_public_key: "{{ info.node_public_key }}"
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
holds:
  description:
    - The holds on the node, read back from their CDI specs, as M(bcd.devices.holds) returns them.
    - C(missing_devices) lists the hold's devices the inventory lacks now (a MIG instance before
      C(mig-layout) has made it again after a reboot). The hold is on disk and kept, its spec left as it is.
    - C(stale_edits) lists what the hold's spec names that the node does not have now (a device node gone or
      renumbered, a library mount whose file is gone after a driver upgrade). A kept hold is rewritten once a
      fresh vendor spec appears; until then containers started from it may fail.
  returned: always
  type: list
  elements: dict
  contains:
    allocation_id:
      description: The allocation.
      type: str
    reservation_id:
      description: Its reservation.
      type: str
    generation:
      description: The generation the hold was bound at.
      type: int
    binding:
      description: V(BINDING_HOLD) or V(BINDING_KUBERNETES).
      type: str
    device_ids:
      description: Its atoms.
      type: list
      elements: str
    cdi_devices:
      description: The fully qualified CDI device names, C(bcd.dev/gpu=<atom id with / as _>).
      type: list
      elements: str
    cdi_spec_path:
      description: Its CDI spec.
      type: str
    env_file:
      description: Its env file.
      type: str
    cgroup_parent:
      description: The hold's slice, for a plain hold with limits.
      type: str
      returned: when the hold has a slice
    missing_devices:
      description: Its atoms the inventory lacks now.
      type: list
      elements: str
    stale_edits:
      description: What its spec names that the node does not have now, one line each.
      type: list
      elements: str
    locality:
      description: >-
        When the C(limits.cpus) or C(limits.mems) it was bound with lie outside the NUMA nodes of its GPUs: what
        lies outside (as the V(bind) of M(bcd.devices.holds) said it); null when they are local, it books neither,
        or the node cannot tell (a GPU's NUMA node, or the node's CPUs, not known). docs/slices-and-admission.md,
        "NUMA locality".
      type: dict
      contains:
        gpu_numa_nodes:
          description: The NUMA nodes of the hold's GPUs (NVML, sysfs or the fakehw file say).
          type: list
          elements: int
        local_cpus:
          description: The CPUs of those nodes, as a cpulist.
          type: str
        remote_cpus:
          description: Its C(cpus) outside those CPUs, as a cpulist; null when every one is local.
          type: str
        remote_mems:
          description: Its C(mems) other than those nodes, as a cpulist; null when none is.
          type: str
        text:
          description: The same in one line.
          type: str
  sample:
    - allocation_id: alloc_01jz8k2v
      reservation_id: rsv_01jz8k1q
      generation: 42
      binding: BINDING_HOLD
      device_ids: [GPU-5f1c2a90-0000-4000-8000-000000000001]
      cdi_devices: [bcd.dev/gpu=GPU-5f1c2a90-0000-4000-8000-000000000001]
      cdi_spec_path: /etc/cdi/bcd-alloc_01jz8k2v.json
      env_file: /run/bcd/allocations/alloc_01jz8k2v.env
      missing_devices: []
      stale_edits: []
      locality: null
gpus:
  description:
    - One entry per GPU, in inventory order, then GPUs that holds name but the inventory no longer lists
      (C(present=false)).
    - C(held_by) is the allocation holding the GPU whole; C(mig) lists its MIG instances and C(slots) its
      held slots, each with C(held_by); C(missing_parts) lists held MIG instances that no longer exist;
      C(passed_through_to) names the VM that has the GPU through VFIO.
    - C(maintenance) is the reason the GPU is out of service (M(bcd.devices.maintenance)), or null; C(busy)
      whether anything but maintenance claims it, as M(bcd.devices.gpu_busy) says.
  returned: always
  type: list
  elements: dict
  contains:
    index:
      description: The GPU's index; null for a GPU the inventory no longer lists.
      type: int
    uuid:
      description: The GPU.
      type: str
    present:
      description: Whether the inventory lists the GPU (false for one only holds name).
      type: bool
    held_by:
      description: >-
        The allocation holding the GPU whole (C(<allocation> (release pending)) for a pending Kubernetes
        release), or null.
      type: str
    passed_through_to:
      description: The VM that has the GPU through VFIO, or null.
      type: str
    mig:
      description: Its MIG instances.
      type: list
      elements: dict
      contains:
        gi:
          description: The GPU instance id.
          type: int
        ci:
          description: The compute instance id.
          type: int
        uuid:
          description: The MIG instance's UUID.
          type: str
        id:
          description: The atom id, C(<GPU uuid>/gi<N>/ci<N>).
          type: str
        held_by:
          description: The allocation holding it, or null when free.
          type: str
    slots:
      description: Its held slots.
      type: list
      elements: dict
      contains:
        id:
          description: The atom id.
          type: str
        slot:
          description: The slot number.
          type: int
        held_by:
          description: The allocation holding it.
          type: str
    missing_parts:
      description: Held MIG instances that no longer exist.
      type: list
      elements: dict
      contains:
        id:
          description: The atom id.
          type: str
        held_by:
          description: The allocation holding it.
          type: str
    health:
      description: What makes the GPU unhealthy, one line each; empty when nothing does.
      type: list
      elements: str
    maintenance:
      description: The reason the GPU is out of service, or null.
      type: str
    busy:
      description: Whether anything but maintenance claims it.
      type: bool
table:
  description:
    - The table C(bcd-holds status) prints, one line per element, for a person to read (a debug task shows it
      as is) - one row per GPU (index, short UUID, who holds it whole, whether a reset must wait, maintenance,
      its MIG instances and held slots, free ones marked V(free)), then pending releases, conditions and
      capabilities. Code should read RV(gpus) instead.
  returned: always
  type: list
  elements: str
  sample:
    - "GPU  UUID                  HELD BY      RESET  SERVICE  MIG INSTANCES AND SLOTS"
    - "0    GPU-5f1c2a90…000001  alloc_train  wait   -        -"
    - "1    GPU-5f1c2a90…000002  -            wait   -        gi1/ci0 alloc_notebook, gi2/ci0 free"
inventory_source:
  description: Where the GPUs came from (V(nvml), V(nvidia-smi), V(fakehw) or V(none)).
  returned: always
  type: str
capabilities:
  description: What the node can honour (V(cdi), V(devices.limits), V(binding.kubernetes), V(nvml)).
  returned: always
  type: list
  elements: str
conditions:
  description:
    - Node conditions about holds (V(KubernetesReleaseStuck), V(KubernetesReleasesUnreadable),
      V(HoldSpecDamaged), V(VendorSpecStale), V(VendorSpecUnsupported), V(HoldChangeRefused), V(GPUUnhealthy)),
      each with C(type), C(status), C(reason) and C(message).
    - V(VendorSpecStale) says what NVIDIA's spec names that the node does not have (device nodes, library
      mounts, the driver it was generated for); new holds get only its true edits until it is regenerated.
    - V(VendorSpecUnsupported) says NVIDIA's spec has a C(cdiVersion) no hold can be written at (later than any
      this bcd knows, or one no CDI release defines), and what to do.
    - V(HoldChangeRefused) names each allocation whose hold the last C(bcd.devices.holds) pass kept as it was
      bound (C(allocation_id), C(device_ids)) because its new assignment was refused - new limits, binding or
      input, or a move to other GPUs that would narrow the slice its workload still runs in; read from what
      that pass raised (this module plans nothing), and that pass's C(failures) say why.
  returned: always
  type: list
  elements: dict
  contains:
    type:
      description: >-
        V(KubernetesReleaseStuck), V(KubernetesReleasesUnreadable), V(HoldSpecDamaged) (damaged hold specs set
        aside), V(VendorSpecStale) (NVIDIA's CDI spec does not match the node), V(VendorSpecUnsupported),
        V(HoldChangeRefused), V(GPUUnhealthy), V(GPUResetIneffective) or V(GPURecoveryStalled).
      type: str
    status:
      description: V(True) while the condition holds; a condition that no longer holds is not returned.
      type: str
    reason:
      description: >-
        One word for why - V(PodsHoldDevices), V(ReleasesFileUnreadable), V(SpecUnreadable),
        V(NodeDiffersFromSpec), V(UnknownCdiVersion), V(KeptAsBound), V(GPUFaulted), V(ResetIneffective) or
        V(RecoveryStalled).
      type: str
    message:
      description: What is wrong and what to do, in one line.
      type: str
    allocation_id:
      description: The allocation whose hold is kept as bound.
      type: str
      returned: for V(HoldChangeRefused)
    device_ids:
      description: The devices the kept hold still holds (the control plane must not place another allocation on them).
      type: list
      elements: str
      returned: for V(HoldChangeRefused)
pending_releases:
  description:
    - Kubernetes releases still waiting for pods, each with C(allocation_id), C(device_ids), C(generation),
      C(age_seconds) and C(taken_back) (old devices of an allocation the spec wants again, never reported).
  returned: always
  type: list
  elements: dict
  contains:
    allocation_id:
      description: The Kubernetes allocation being released.
      type: str
    device_ids:
      description: The atoms still claimed for it.
      type: list
      elements: str
    generation:
      description: The generation the release was started at.
      type: int
    age_seconds:
      description: How long the release has waited, in seconds.
      type: int
    taken_back:
      description: Whether these are old devices of an allocation the spec wants again.
      type: bool
runtimes:
  description:
    - The node's container runtimes that load CDI specs (found, or as O(cdi_runtimes) names them), each with
      C(name), C(version) and C(max_cdi_version), the newest C(cdiVersion) its CDI library loads (null for a
      release without CDI support).
  returned: always
  type: list
  elements: dict
  contains:
    name:
      description: V(containerd), V(docker), V(podman) or V(cri-o).
      type: str
    version:
      description: Its version.
      type: str
    max_cdi_version:
      description: The newest C(cdiVersion) it loads, or null.
      type: str
  sample:
    - name: podman
      version: 5.4.2
      max_cdi_version: 0.8.0
node_public_key:
  description: Base64 of the node's raw 32-byte Ed25519 public key; null before the node signed its first event.
  returned: always
  type: str
"""

from ansible.module_utils import basic

from ansible_collections.bcd.devices.plugins.module_utils.support import speed

speed.compile_once()  # first: the rest of the collection compiles once from Ansible's zip (docs/performance.md)

from ansible_collections.bcd.devices.plugins.module_utils.entry.modules import holds_info as module_code


def main() -> None:
    module_code.main(basic)


if __name__ == "__main__":
    main()
