# -*- coding: utf-8 -*-
# Copyright: contributors to bcd.devices
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""``bcd-holds metrics``: the node's holds in the Prometheus text format (version 0.0.4).

What it reads is what ``holds_info`` reports (``entry/status.py``), plus the ledger's
refusals, the journal and the last pass's stamp. ``--textfile`` writes it atomically for
node_exporter's textfile collector (a ``.prom`` file). Every name starts ``bcd_``:

======================================== ============================================
``bcd_holds{binding,state}``             holds by binding, ``bound`` or ``devices_missing``
``bcd_gpus{state}``                      GPUs ``held`` (whole or a part), ``free``, and
                                         (counted apart) ``maintenance``, ``unhealthy``, ``busy``
``bcd_kubernetes_releases_pending``      Kubernetes releases still waiting for pods
``bcd_kubernetes_release_oldest_age_seconds``  age of the oldest (0 without one)
``bcd_refusals{reason}``                 refusals final at their generation, by reason:
                                         each of ``domain/input/refusals.REASONS``, and ``other``
``bcd_last_pass_timestamp_seconds``      when the last real pass finished
``bcd_last_pass_duration_seconds``       how long it ran, lock held
``bcd_last_pass_state{state}``           1 for its section state, 0 for the others
``bcd_events_unacknowledged``            journaled events the gateway has not taken
``bcd_condition{type}``                  1 for each node condition raised
``bcd_mig_mode{gpu}``                    MIG mode of each GPU that can do MIG: 1 on, 0 off
``bcd_mig_instances{gpu,profile}``       MIG (compute) instances of each such GPU, by
                                         compute profile (``3g.40gb``, ``1c.3g.40gb``)
======================================== ============================================

The MIG layout is read live (``host.mig_side()``: ``nvidia-smi`` as root, which the metrics unit
is, or the fakehw file); where it cannot be read (another account, no ``nvidia-smi``), it is the
layout the last ``bcd.devices.mig_layout`` run recorded (``state/mig_record.py``), its instances
only when recorded in this boot (MIG instances do not survive a reboot; the mode does).

Every label value is from a closed set, whatever the files say: the ledger is the ``bcd``
account's, and a reason it wrote is counted under its name only when it is one of the
spec's reasons, else under ``other`` (on earlier releases 60 000 distinct reasons made
60 000 series, a 12.8 MiB ``.prom`` file every 30 s).
"""

from __future__ import annotations

import os
from typing import TYPE_CHECKING, Any, Dict, Iterable, List, Tuple

from ansible_collections.bcd.devices.plugins.module_utils.domain.event_types import CONDITION_TYPES
from ansible_collections.bcd.devices.plugins.module_utils.domain.input.refusals import REASONS
from ansible_collections.bcd.devices.plugins.module_utils.entry.status import node_status
from ansible_collections.bcd.devices.plugins.module_utils.node.fsutil import write_atomic
from ansible_collections.bcd.devices.plugins.module_utils.state.store import DEFAULT_STATE_DIR, NodeState
from ansible_collections.bcd.devices.plugins.module_utils.support.errors import BcdError
from ansible_collections.bcd.devices.plugins.module_utils.support.speed import lazy_pattern
from ansible_collections.bcd.devices.plugins.module_utils.support.text import printable

if TYPE_CHECKING:
    from ansible_collections.bcd.devices.plugins.module_utils.domain.mig.model import GpuInstance
    from ansible_collections.bcd.devices.plugins.module_utils.node.hosts import Host

PASS_STATES = ("CONVERGED", "PROGRESSING", "FAILED")
OTHER_REASON = "other"  # a ledger's reason that is none of REASONS
REFUSAL_REASONS = tuple(REASONS) + (OTHER_REASON,)
# The MIG families' label values: a GPU UUID and a profile name by their grammar (else the GPU is left out, the
# profile counted as ``other``), at most MAX_MIG_GPUS GPUs: whatever nvidia-smi or a record says, the series stay few.
MAX_MIG_GPUS = 256
_GPU_UUID = lazy_pattern(r"GPU-[0-9A-Za-z-]{1,128}")
_PROFILE = lazy_pattern(r"[0-9a-z][0-9a-z.+-]{0,63}")


def _label(value: object) -> str:
    # escaped first (``support/text.py``: a reason from the ledger is the account's), then as the format asks
    return printable(value).replace("\\", "\\\\").replace('"', '\\"')


class _Text:
    def __init__(self) -> None:
        self.lines: List[str] = []

    def family(self, name: str, kind: str, help_text: str, samples: Iterable[Tuple[Dict[str, str], float]]) -> None:
        """``samples``: ``[(labels dict, value)]``."""
        self.lines.append("# HELP %s %s" % (name, help_text))
        self.lines.append("# TYPE %s %s" % (name, kind))
        for labels, value in samples:
            shown = ",".join('%s="%s"' % (key, _label(labels[key])) for key in sorted(labels))
            self.lines.append("%s%s %s" % (name, "{%s}" % shown if shown else "", _number(value)))

    def text(self) -> str:
        return "\n".join(self.lines) + "\n"


def _number(value: float) -> str:
    if isinstance(value, bool):
        return "1" if value else "0"
    if isinstance(value, int):
        return str(value)
    return repr(float(value))


def _held(gpu: Dict[str, Any]) -> bool:
    return bool(gpu["held_by"] or any(m["held_by"] for m in gpu["mig"]) or gpu["slots"] or gpu["missing_parts"])


def _compute_profiles(instances: Iterable[GpuInstance]) -> Dict[str, int]:
    counts: Dict[str, int] = {}
    for inst in instances:
        for ci in inst.compute:
            profile = ci.profile if _PROFILE.fullmatch(ci.profile) else OTHER_REASON
            counts[profile] = counts.get(profile, 0) + 1
    return counts


def mig_layout(host: Host, state: NodeState) -> Dict[str, Tuple[bool, Dict[str, int]]]:
    """``{GPU uuid: (MIG mode on, {compute profile: instances})}`` of the GPUs that can do MIG."""
    found: Dict[str, Tuple[bool, Dict[str, int]]] = {}
    try:
        node = host.mig_side().read()
    except (BcdError, OSError):
        node = None
    if node is not None and (node.gpus or not node.error):
        # live: what the driver (or the fakehw file) says now
        for gpu in node.gpus:
            if gpu.capability is not None or gpu.mode is not None:
                found[gpu.uuid] = (bool(gpu.mode), _compute_profiles(gpu.instances))
    else:
        # not readable here: the layout the last mig_layout run recorded; its instances only if recorded in this
        # boot (a reboot drops every MIG instance until the boot unit makes them again, and records them anew)
        record, _problem = state.load_mig_record()
        this_boot = bool(record.boot_id) and record.boot_id == host.boot_id()
        for uuid, gpu in record.gpus.items():
            found[uuid] = (gpu.mig_enabled, _compute_profiles(gpu.instances) if this_boot else {})
    return dict((uuid, found[uuid]) for uuid in [u for u in sorted(found) if _GPU_UUID.fullmatch(u)][:MAX_MIG_GPUS])


def node_metrics(host: Host, state_dir: str = DEFAULT_STATE_DIR) -> str:
    """The metrics text of the node."""
    status = node_status(host, state_dir)
    state = NodeState(host.path(state_dir), state_dir)
    ledger = state.load(write=False).ledger
    unacked = len(state.unacked())
    last = state.last_pass()
    out = _Text()

    holds: Dict[Tuple[str, str], int] = {}
    for hold in status["holds"]:
        key = (hold["binding"], "devices_missing" if hold["missing_devices"] else "bound")
        holds[key] = holds.get(key, 0) + 1
    samples = [({"binding": binding, "state": kind}, holds.get((binding, kind), 0))
               for binding in ("BINDING_HOLD", "BINDING_KUBERNETES") for kind in ("bound", "devices_missing")]
    out.family("bcd_holds", "gauge", "Holds on the node, by binding and state.", samples)

    gpus = [gpu for gpu in status["gpus"] if gpu["present"]]
    held = sum(1 for gpu in gpus if _held(gpu))
    counts = [({"state": "held"}, held), ({"state": "free"}, len(gpus) - held),
              ({"state": "maintenance"}, sum(1 for gpu in gpus if gpu.get("maintenance"))),
              ({"state": "unhealthy"}, sum(1 for gpu in gpus if gpu.get("health"))),
              ({"state": "busy"}, sum(1 for gpu in gpus if gpu.get("busy")))]
    out.family("bcd_gpus", "gauge", "GPUs of the node: held (whole or a part) or free; in maintenance; unhealthy; "
                                    "busy for a reset.", counts)

    pending = status["pending_releases"]
    out.family("bcd_kubernetes_releases_pending", "gauge", "Kubernetes releases waiting for their pods to end.",
               [({}, len(pending))])
    out.family("bcd_kubernetes_release_oldest_age_seconds", "gauge", "Age of the oldest pending Kubernetes release.",
               [({}, max([p.get("age_seconds") or 0 for p in pending] or [0]))])

    reasons: Dict[str, int] = dict((reason, 0) for reason in REFUSAL_REASONS)
    for journaled in ledger.failures.values():
        if journaled.refusal is not None:
            reason = journaled.refusal.reason if journaled.refusal.reason in REASONS else OTHER_REASON
            reasons[reason] += 1
    out.family("bcd_refusals", "gauge", "Assignments refused at their generation, by reason (other: a reason the "
                                        "spec does not name).",
               [({"reason": reason}, reasons[reason]) for reason in REFUSAL_REASONS])

    if last is not None:
        out.family("bcd_last_pass_timestamp_seconds", "gauge", "When the last pass finished.",
                   [({}, float(last["finished"]))])
        out.family("bcd_last_pass_duration_seconds", "gauge", "How long the last pass ran, its lock held.",
                   [({}, float(last["duration_seconds"]))])
    last_state = last["state"] if last is not None else ledger.last_state
    out.family("bcd_last_pass_state", "gauge", "The section state of the last pass (1 for the one it left).",
               [({"state": name}, int(last_state == name)) for name in PASS_STATES])
    out.family("bcd_events_unacknowledged", "gauge", "Journaled events no gateway has acknowledged.", [({}, unacked)])
    raised = set(condition["type"] for condition in status["conditions"])
    out.family("bcd_condition", "gauge", "Node conditions raised now (1) or not (0).",
               [({"type": name}, int(name in raised)) for name in CONDITION_TYPES])
    layout = mig_layout(host, state)
    out.family("bcd_mig_mode", "gauge", "MIG mode of each GPU that can do MIG (1 on, 0 off).",
               [({"gpu": uuid}, int(mode)) for uuid, (mode, _counts) in layout.items()])
    out.family("bcd_mig_instances", "gauge", "MIG compute instances of each GPU, by compute profile.",
               [({"gpu": uuid, "profile": profile}, counts[profile])
                for uuid, (_mode, counts) in layout.items() for profile in sorted(counts)])
    return out.text()


def write_textfile(path: str, text: str) -> None:
    """``text`` into ``path`` atomically (node_exporter reads only ``*.prom``: a temporary name is never one)."""
    if not path.endswith(".prom"):
        raise ValueError("the textfile must end in .prom (node_exporter's textfile collector reads only those): %s"
                         % path)
    write_atomic(os.path.abspath(path), text.encode("utf-8"), 0o644)
