# -*- coding: utf-8 -*-
# Copyright: contributors to bcd.devices
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""The ledger: what the node has *reported*, so every report happens exactly once.

A pass reads the holds themselves from ``/etc/cdi``; the ledger remembers only what it cannot see on the
host, and the planner decides from it (``Observed.ledger``) as from the rest of what a pass observed:

``bound``
    holds whose ``AllocationBound`` was journaled (a hold written but never reported, because the pass
    died in between, is reported by the next pass), with the limits they were bound with and the cgroup
    parent their last one named (``None``: none);
``unfinished_releases``
    plain releases recorded before their files are removed (a release cut short is finished, and
    reported, by the next pass). Kubernetes releases pending on pods are ``kube_release.Releases``;
``failures``
    each allocation's last ``AllocationFailed``: its generation, reason and message. A refusal is final at
    its generation (the control plane re-places the reservation), so a later pass at that generation
    refuses it again with the same reason, unreported, instead of binding it;
``vfio``
    the GPUs running domains had at the last pass;
``renders``
    per kept hold, a digest of what its files were last rendered from and of the files
    (``cdi.hold_spec.render_record``): a pass renders a hold again only when either changed;
``observed_generation``
    the last generation a pass finished (``CONVERGED`` or ``FAILED``);
``journal_seq``
    the seq of the last journaled event whose effect is in the ledger (the state catches up from the
    journal what a crash kept from being recorded);
``last_state``
    the section state of the last pass (the retry timer runs a pass only while it is ``PROGRESSING``);
``conditions``
    the node conditions whose appearing was journaled and whose clearing was not
    (``plan/condition_events.py``), by key (``GPUUnhealthy/<GPU UUID>``, ``KubernetesReleaseStuck/<allocation>``,
    or the type alone): each the devices and allocation its events name.

The file it is kept in, how it is read back and how a journaled event settles in it are the state's
(``state/ledger.py``).
"""

from __future__ import annotations

from typing import Dict, Optional, Tuple

from ansible_collections.bcd.devices.plugins.module_utils.support.records import field, record


@record
class Ledger:
    bound: Dict[str, dict] = field(default_factory=dict)
    unfinished_releases: Dict[str, dict] = field(default_factory=dict)
    failures: Dict[str, dict] = field(default_factory=dict)  # allocation -> {generation, reason, message}
    vfio: Dict[str, str] = field(default_factory=dict)
    renders: Dict[str, dict] = field(default_factory=dict)  # allocation -> {key, spec, env, notes}
    observed_generation: Optional[int] = None
    last_state: Optional[str] = None
    journal_seq: int = 0
    conditions: Dict[str, dict] = field(default_factory=dict)  # condition key -> {device_ids, allocation_id}: raised, not cleared
    problem: Optional[str] = None  # why the file could not be read (not saved)

    def refusal_at(self, allocation_id: str, generation: Optional[int]) -> Optional[Tuple[str, str]]:
        """``(reason, message)`` of the allocation's refusal journaled at ``generation``, or None."""
        record = self.failures.get(allocation_id) or {}
        if record.get("generation") != generation or not isinstance(record.get("reason"), str):
            return None
        return record["reason"], record.get("message") or ""

    def refused_at(self, allocation_id: str) -> Optional[int]:
        """The generation of the allocation's last journaled refusal, or None."""
        return (self.failures.get(allocation_id) or {}).get("generation")
