#!/usr/bin/python
# -*- coding: utf-8 -*-
# Copyright: contributors to bcd.devices
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""Ansible module bcd.devices.events: list and acknowledge a node's journaled events."""

from __future__ import annotations

DOCUMENTATION = r"""
module: events
short_description: List and acknowledge the node's journaled GPU hold events
version_added: 0.1.0
description:
  - Returns every event in the node's event journal (C(<root>/<state_dir>/events.jsonl)) that has
    not been acknowledged yet, oldest first.
  - Every bind and release of a hold by M(bcd.devices.holds) is journaled as an attested event
    (V(AllocationBound), V(AllocationReleased)) signed with the node key; a refused assignment is
    journaled as a plain V(AllocationFailed) event. Events are returned by every run until they
    are acknowledged here with O(ack_through).
  - Acknowledged events are dropped from the journal. Sequence numbers are never reused, so the
    next event after an acknowledgement continues the count.
  - Check signatures on the controller with the filter P(bcd.devices.verify_report#filter) and
    the node public key returned by M(bcd.devices.holds_info).
  - The pass lock under O(state_dir) is held while the journal is read and rewritten, so this
    never interleaves with a converging pass.
author:
  - bcd.devices developers (@bcd-devices)
extends_documentation_fragment:
  - bcd.devices.node
  - bcd.devices.node.lock
options:
  ack_through:
    description:
      - Acknowledge every journaled event whose C(seq) is at most this number.
      - Omit to only list the unacknowledged events.
    type: int
attributes:
  check_mode:
    support: full
    description:
      - Reports what would be acknowledged and which events would remain; writes nothing, not even
        the state directory or its lock file.
  diff_mode:
    support: none
    description:
      - The journal is not shown as a diff; RV(events) and RV(acknowledged) say what changed.
  idempotent:
    support: full
    description:
      - Acknowledging the same O(ack_through) twice changes nothing the second time.
notes:
  - Listing and acknowledging need no C(cryptography) library on the node; only signing (by
    M(bcd.devices.holds)) and checking signatures (P(bcd.devices.verify_report#filter)) do.
seealso:
  - module: bcd.devices.holds
  - module: bcd.devices.holds_info
  - plugin: bcd.devices.verify_report
    plugin_type: filter
"""

EXAMPLES = r"""
- name: Read the node's unacknowledged events
  bcd.devices.events:
  register: journal

- name: Get the node public key
  bcd.devices.holds_info:
  register: info

- name: Refuse to go on if an attested event does not verify
  ansible.builtin.assert:
    that:
      - item | bcd.devices.verify_report(info.node_public_key)
    quiet: true
  loop: "{{ journal.events | selectattr('purpose', 'defined') }}"
  loop_control:
    label: "{{ item.seq }} {{ item.type }}"

- name: Acknowledge what was read (events journaled meanwhile stay)
  bcd.devices.events:
    ack_through: "{{ journal.events | map(attribute='seq') | max }}"
  when: journal.events | length > 0

- name: Events of a fakehw test host kept in a directory (hack/fakehw_node.py --root /tmp/bcd-nodes/node-a)
  bcd.devices.events:
    root: /tmp/bcd-nodes/node-a
    state_dir: /var/lib/bcd
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
events:
  description:
    - The unacknowledged journal after acknowledging, oldest first.
    - In check mode, what would remain after acknowledging.
    - V(AllocationBound) and V(AllocationReleased) carry C(purpose) (V(attested-report)) and
      C(signature) (base64 Ed25519 over C(attested-report\n) followed by the canonical JSON of C(body));
      V(AllocationFailed) carries neither.
  returned: always
  type: list
  elements: dict
  contains:
    seq:
      description: The event's sequence number; it grows by one per event and is never reused.
      type: int
    type:
      description: V(AllocationBound), V(AllocationReleased) or V(AllocationFailed).
      type: str
    body:
      description: What the event reports; its fields by event type are below and in docs/events.md.
      type: dict
      contains:
        node_id:
          description: The node that journaled the event.
          type: str
        allocation_id:
          description: The allocation the event is about.
          type: str
        generation:
          description: The generation of the pass that journaled it.
          type: int
        boot_id:
          description: The node's boot the hold was bound or released in.
          type: str
          returned: for AllocationBound and AllocationReleased
        device_ids:
          description: The atoms bound or released.
          type: list
          elements: str
          returned: for AllocationBound and AllocationReleased
        cdi_devices:
          description: The fully qualified CDI device names of the hold.
          type: list
          elements: str
          returned: for AllocationBound
        cdi_spec_path:
          description: The hold's CDI spec.
          type: str
          returned: for AllocationBound
        env_file:
          description: The hold's env file.
          type: str
          returned: for AllocationBound
        cgroup_parent:
          description: The hold's slice.
          type: str
          returned: for AllocationBound of a hold with a slice
        reason:
          description: Why the allocation was refused (V(overlap), V(device-missing), ...).
          type: str
          returned: for AllocationFailed
        message:
          description: Why, in one line.
          type: str
          returned: for AllocationFailed
    purpose:
      description: V(attested-report), on attested events (binds and releases).
      type: str
      returned: for AllocationBound and AllocationReleased
    signature:
      description: Base64 Ed25519 signature by the node key; check it with P(bcd.devices.verify_report#filter).
      type: str
      returned: for AllocationBound and AllocationReleased
  sample:
    - seq: 7
      type: AllocationBound
      body:
        node_id: node-a
        boot_id: 6f0c1e9e-1c7a-4a43-9a9e-2c4f1d2b7a10
        allocation_id: alloc_01jz8k2v
        generation: 42
        device_ids: [GPU-5f1c2a90-0000-4000-8000-000000000001]
        cdi_devices: [bcd.dev/gpu=GPU-5f1c2a90-0000-4000-8000-000000000001]
        cdi_spec_path: /etc/cdi/bcd-alloc_01jz8k2v.json
        env_file: /run/bcd/allocations/alloc_01jz8k2v.env
      purpose: attested-report
      signature: 3q2+7w...==
    - seq: 8
      type: AllocationFailed
      body:
        node_id: node-a
        allocation_id: alloc_01jz8k2w
        generation: 42
        reason: overlap
        message: GPU-5f1c2a90-0000-4000-8000-000000000001 is assigned to alloc_01jz8k2v
acknowledged:
  description: How many events were acknowledged (in check mode, would be).
  returned: always
  type: int
  sample: 2
"""

from ansible.module_utils import basic

from ansible_collections.bcd.devices.plugins.module_utils.support import speed

speed.compile_once()  # first: the rest of the collection compiles once from Ansible's zip (docs/performance.md)

from ansible_collections.bcd.devices.plugins.module_utils.entry.modules import events as module_code


def main() -> None:
    module_code.main(basic)


if __name__ == "__main__":
    main()
