#!/usr/bin/python
# -*- coding: utf-8 -*-
# Copyright: contributors to bcd.devices
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""Ansible module bcd.devices.mig_layout: converge the GPUs' MIG layout, never under a hold."""

from __future__ import annotations

DOCUMENTATION = r"""
module: mig_layout
short_description: Converge the MIG layout of a node's GPUs, never under a hold
version_added: 0.3.0
description:
  - Turns MIG mode on or off and makes and destroys GPU and compute instances until each GPU the layout names has
    the instances it lists, by profile name as C(nvidia-smi mig -lgip) shows them (V(3g.40gb)), at the placements
    given or at ones chosen so that they fit. GPUs the layout does not name are left as they are.
  - Takes the layout as O(layout), or as the layouts operators keep for NVIDIA's mig-parted (O(mig_parted), the
    whole C(version) V(v1) document with its C(mig-configs), and O(mig_config), the one to apply).
  - B(Never under a hold.) A GPU with a live hold on it or on one of its MIG instances, a pending Kubernetes
    release, a VM that has it, or a host process using it is not changed, and the task fails saying which GPU and
    who holds what; the other GPUs are changed. A change that keeps every held instance as it is (same GI/CI, same
    C(MIG-) UUID) and touches only free ones goes ahead. When the root helper does root's work (O(helper_socket)),
    it checks each change against the claims it reads itself.
  - B(Bad input is refused before anything changes) - a profile the GPU does not have, a placement that is not one
    of the profile's or overlaps another, instances that do not fit, more instances than the GPU has slices, a GPU
    not present, a GPU named twice - naming the field and the GPU.
  - Instances that match the layout stay; the rest are destroyed and the missing made, each at an explicit
    placement. The result and C(--diff) say, per GPU, which instances stay, which go and which are made.
  - Each instance made or destroyed and each MIG mode change is journaled as a signed event
    (C(MIGInstanceCreated), C(MIGInstanceDestroyed), C(MIGModeChanged); C(docs/events.md)), and the layout as it
    then is is recorded in O(state_dir) (C(mig-layout.json)). What changed since the last record in the same
    boot, by anyone else, is journaled at the next run with the reason C(ChangedOutside).
  - MIG instances do not survive a reboot. C(bcd-holds mig-layout --boot) (the role's C(bcd-holds-mig-layout)
    unit, before the holds' boot pass) makes the recorded layout again, in the same order at the same placements,
    so that kept C(gpu.mig) holds find their GI/CI again; the first pass once NVIDIA's CDI spec names the new
    instances renders their specs and env files with the new C(MIG-) UUIDs (C(docs/mig-layout.md)).
  - Turning MIG mode on or off may wait for a GPU reset (the driver says it is pending); the GPU's entry then says
    RV(gpus[].reset_needed), nothing is made on it, and the next run after a reset (M(bcd.devices.gpu_reset)) or
    a reboot goes on.
  - On a real node, as root (or through the root helper), C(nvidia-smi -i <UUID> -mig 1|0),
    C(nvidia-smi mig -i <index> -cgi <profile id>:<start>), C(-gi <GI> -cci <profile id>), C(-gi <GI> -ci <CI> -dci)
    and C(-gi <GI> -dgi). A fakehw node changes its hardware file (C(docs/fakehw.md)).
author:
  - bcd.devices developers (@bcd-devices)
extends_documentation_fragment:
  - bcd.devices.node
  - bcd.devices.node.helper
  - bcd.devices.node.lock
options:
  layout:
    description:
      - The wanted layout, one entry per group of GPUs. A GPU picked by two entries is refused.
      - Mutually exclusive with O(mig_parted).
    type: list
    elements: dict
    suboptions:
      devices:
        description: V(all), or a list of GPU indexes and C(GPU-) UUIDs.
        type: raw
        required: true
      products:
        description: Only the GPUs of these products (as C(nvidia-smi -L) names them; case and a leading C(NVIDIA) do
          not matter).
        type: list
        elements: str
      mig_enabled:
        description: MIG mode on or off. Off destroys every instance of the GPU first.
        type: bool
        required: true
      instances:
        description: The GPU instances, in the order they are made (at most 7 per GPU).
        type: list
        elements: dict
        suboptions:
          profile:
            description: The GPU instance profile (V(1g.10gb), V(3g.40gb), V(1g.10gb+me)).
            type: str
            required: true
          placement:
            description: The memory slice it starts at (one of the profile's placements, C(nvidia-smi mig -lgipp));
              chosen when not given.
            type: int
          count:
            description: How many such instances (without O(layout[].instances[].placement)).
            type: int
            default: 1
          compute:
            description: Its compute instances by profile (V(1c.3g.40gb)); by default one spanning it.
            type: list
            elements: str
  mig_parted:
    description:
      - A mig-parted configuration document (C(version), C(mig-configs)), as the file mig-parted reads holds it,
        e.g. C({{ lookup('file', 'config.yaml') | from_yaml }}). Its entries take C(devices), C(device-filter)
        (PCI device ids or product names), C(mig-enabled) and C(mig-devices).
      - Needs O(mig_config); mutually exclusive with O(layout).
    type: dict
  mig_config:
    description: The name of the configuration of O(mig_parted) to apply.
    type: str
attributes:
  check_mode:
    support: full
    description: Plans as a real run does (the same refusals, the same instances kept, destroyed and made, at the same
      placements) and changes nothing. A mode change that will wait for a reset is not known before it is made.
  diff_mode:
    support: full
    description: Shows each GPU's instances before and after.
  idempotent:
    support: full
    description: A second run with the same layout changes nothing.
seealso:
  - module: bcd.devices.gpu_busy
  - module: bcd.devices.gpu_reset
  - module: bcd.devices.holds_info
"""

EXAMPLES = r"""
- name: Cut GPU 0 into a 3g.40gb and two 2g.20gb, and GPU 1 into seven 1g.10gb
  bcd.devices.mig_layout:
    layout:
      - devices: [0]
        mig_enabled: true
        instances:
          - {profile: 3g.40gb, placement: 4}
          - {profile: 2g.20gb, count: 2}
      - devices: [1]
        mig_enabled: true
        instances:
          - {profile: 1g.10gb, count: 7}
  register: mig

- name: Apply a layout kept for mig-parted
  bcd.devices.mig_layout:
    mig_parted:
      version: v1
      mig-configs:
        all-disabled:
          - devices: all
            mig-enabled: false
        all-3g.40gb:
          - devices: all
            mig-enabled: true
            mig-devices:
              "3g.40gb": 2
    mig_config: all-3g.40gb

- name: Turn MIG off on GPU 2 (refused while anything holds it)
  bcd.devices.mig_layout:
    layout:
      - devices: [2]
        mig_enabled: false
"""

RETURN = r"""
msg:
  description: What became of each GPU the layout names, joined by C(; ); V(the MIG layout is as wanted) when nothing
    changed.
  returned: always
  type: str
  sample: "GPU-5f1c2a90-0000-4000-8000-000000000001 (GPU 0): made 3 changes"
ran_from:
  description: Which code ran - V(node-library) or V(bundled) (see M(bcd.devices.holds)).
  returned: always
  type: str
  sample: node-library
gpus:
  description: One entry per GPU the layout names, in index order.
  returned: when the layout was planned (not on bad input)
  type: list
  elements: dict
  contains:
    uuid:
      description: The GPU.
      type: str
    index:
      description: Its index.
      type: int
    source:
      description: The layout entry that picked it (V(layout[0]), V(mig-configs.all-3g.40gb[0])).
      type: str
    mig_enabled:
      description: MIG mode as wanted.
      type: bool
    before:
      description: Its MIG instances before the run, one per compute instance (C(device_id) as a C(gpu.mig) hold
        names it, C(gi), C(ci), C(gi_profile), C(profile), C(placement), C(uuid)).
      type: list
      elements: dict
      contains: &instance_fields
        device_id:
          description: The MIG instance as a C(gpu.mig) hold names it (C(GPU-.../gi1/ci0)).
          type: str
        gi:
          description: Its GPU instance id.
          type: int
        ci:
          description: Its compute instance id.
          type: int
        gi_profile:
          description: Its GPU instance's profile (V(3g.40gb)).
          type: str
        profile:
          description: Its compute instance's profile (V(1c.3g.40gb), or the GPU instance's when it spans it).
          type: str
        placement:
          description: The memory slice its GPU instance starts at.
          type: int
        uuid:
          description: Its C(MIG-) UUID; null where the driver did not say it.
          type: str
    after:
      description: Its MIG instances after the run (in check mode, those that stay).
      type: list
      elements: dict
      contains: *instance_fields
    kept:
      description: The instances that stay as they are (same GI/CI and UUID).
      type: list
      elements: dict
      contains: *instance_fields
    ops:
      description: The changes, in the order they run (made in check mode too), each with C(kind) (V(destroy),
        V(mode), V(create)), its fields and a C(text).
      type: list
      elements: dict
      contains:
        kind:
          description: V(destroy), V(mode) or V(create).
          type: str
        gpu:
          description: The GPU's UUID.
          type: str
        enabled:
          description: MIG mode on or off (V(mode) only).
          type: bool
        gi:
          description: The GPU instance destroyed, or that compute instances are made in; null for a new GPU
            instance (V(destroy) and V(create) only).
          type: int
        ci:
          description: The compute instance destroyed; null for the GPU instance whole (V(destroy) only).
          type: int
        profile:
          description: The GPU instance's profile (V(create) only).
          type: str
        placement:
          description: The memory slice the GPU instance starts at (V(create) only).
          type: int
        compute:
          description: The compute instances made in it, by profile (V(create) only).
          type: list
          elements: str
        text:
          description: The change in words, as C(--diff) shows it.
          type: str
    changed:
      description: Whether anything on it changed (would change, in check mode).
      type: bool
    refused:
      description: Why nothing on it changes - which instance or the GPU, and who holds it; null otherwise.
      type: str
    reset_needed:
      description: Its MIG mode change waits for a GPU reset or a reboot.
      type: bool
    error:
      description: The change that failed and the tool's words; null otherwise.
      type: str
held_missing:
  description: The MIG instances live holds name that the node does not have after the run (C(allocation_id),
    C(device_id)); their holds wait (C(missing_devices) in M(bcd.devices.holds_info)).
  returned: always
  type: list
  elements: dict
  contains:
    allocation_id:
      description: The hold.
      type: str
    device_id:
      description: The MIG instance it names (C(GPU-.../gi1/ci0)).
      type: str
"""

from ansible.module_utils import basic

from ansible_collections.bcd.devices.plugins.module_utils.support import speed

speed.compile_once()  # first: the rest of the collection compiles once from Ansible's zip (docs/performance.md)

from ansible_collections.bcd.devices.plugins.module_utils.entry.modules import mig_layout as module_code


def main() -> None:
    module_code.main(basic)


if __name__ == "__main__":
    main()
