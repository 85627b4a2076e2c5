# -*- coding: utf-8 -*-
# Copyright: contributors to bcd.devices
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""Filter bcd.devices.delivery: what a post of a node's events to a gateway achieved."""

from __future__ import annotations

DOCUMENTATION = r"""
name: delivery
short_description: Work out what a gateway accepted of a node's events, and what to acknowledge
version_added: 0.3.0
author:
  - bcd.devices developers (@bcd-devices)
description:
  - >-
    Takes the events read by M(bcd.devices.events) and the registered result of the
    M(ansible.builtin.uri) task that posted them as C({"events": [...]}) to a gateway answering
    C(200 {"accepted": [seq, ...]}) (and, if it likes, C("rejected": [...])).
  - Events are acknowledged through the highest C(seq) of the contiguous accepted prefix, so an
    event the gateway did not accept stays in the journal, with everything after it, and is posted
    again next time.
  - An answer other than 200, or one that is not a mapping with a list C(accepted), acknowledges
    nothing. A skipped post (nothing to post, or check mode) posted nothing.
  - The role P(bcd.devices.bcd_holds#role) delivers this way (its C(deliver) entry point).
options:
  _input:
    description: The events as returned by M(bcd.devices.events) in C(events), oldest first.
    type: list
    elements: dict
    required: true
  post:
    description: The registered result of the M(ansible.builtin.uri) task that posted them.
    type: dict
    required: true
  gateway_url:
    description: The gateway's URL, named in C(error) and C(message).
    type: str
    required: true
seealso:
  - module: bcd.devices.events
"""

EXAMPLES = r"""
- name: Read the events not yet acknowledged
  bcd.devices.events:
  register: journal

- name: Post them to the gateway
  ansible.builtin.uri:
    url: https://gateway.example/events
    method: POST
    body_format: json
    body:
      events: "{{ journal.events }}"
    status_code: [200]
  register: post
  failed_when: false
  when: journal.events | length > 0

- name: Acknowledge what the gateway accepted
  bcd.devices.events:
    ack_through: "{{ delivered.ack_through }}"
  when: delivered.ack_through is not none
  vars:
    delivered: "{{ journal.events | bcd.devices.delivery(post, 'https://gateway.example/events') }}"
"""

RETURN = r"""
_value:
  description: What the post achieved.
  type: dict
  contains:
    posted:
      description: The seqs posted, oldest first; empty when the post was skipped.
      type: list
      elements: int
    accepted:
      description: The seqs the gateway accepted.
      type: list
      elements: int
    rejected:
      description: What the gateway said of the events it did not accept, as it said it.
      type: list
    ack_through:
      description: The seq to acknowledge through (O(bcd.devices.events#module:ack_through)); V(null) for none.
      type: int
    error:
      description: Why the gateway could not be reached or what else it answered; empty on a 200 answer.
      type: str
    left:
      description: The posted seqs that stay in the journal.
      type: list
      elements: int
    message:
      description: One line saying why events stay and how many; empty when none stay.
      type: str
"""

from typing import Any, Callable, Dict

from ansible_collections.bcd.devices.plugins.module_utils.domain.delivery import delivery


class FilterModule:
    """bcd.devices delivery filter."""

    def filters(self) -> Dict[str, Callable[..., Any]]:
        return {"delivery": delivery}
