# -*- coding: utf-8 -*-
# Copyright: contributors to bcd.devices
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""The module bcd.devices.holds: one converging pass with the task's options.

Its options are documented in plugins/modules/holds.py, which runs this bundled; the action plugin of the same
name runs it from the node's installed library when it is the controller's code (node/library.py)."""

from __future__ import annotations

import hashlib
import json
from typing import TYPE_CHECKING, Any, Dict, List, Optional, Sequence

from ansible_collections.bcd.devices.plugins.module_utils.domain.input.refusals import Reason
from ansible_collections.bcd.devices.plugins.module_utils.entry.converge import run_pass
from ansible_collections.bcd.devices.plugins.module_utils.entry.metrics import node_metrics, write_textfile
from ansible_collections.bcd.devices.plugins.module_utils.entry.module_host import host_from_params
from ansible_collections.bcd.devices.plugins.module_utils.entry.module_options import (
    HELPER_OPTIONS,
    LOCK_OPTIONS,
    NODE_OPTIONS,
    RUNTIME_OPTIONS,
    Module,
    OptionSpec,
    argument_spec,
    warn,
)
from ansible_collections.bcd.devices.plugins.module_utils.node.isolation import refuse_unless_isolated
from ansible_collections.bcd.devices.plugins.module_utils.state.events import HAS_CRYPTOGRAPHY
from ansible_collections.bcd.devices.plugins.module_utils.support.errors import BcdError
from ansible_collections.bcd.devices.plugins.module_utils.support.text import printable, printable_lines

if TYPE_CHECKING:
    from types import ModuleType

    from ansible_collections.bcd.devices.plugins.module_utils.domain.input.refusals import Refusal
    from ansible_collections.bcd.devices.plugins.module_utils.node.hosts import Host

# What an Ansible user does about a refusal, after the spec's own message.
BECOME = ("add become: true to the task or play, or set helper_socket to the root helper's socket (the role "
          "bcd.devices.bcd_holds runs one)")
ANSIBLE_FIX = {
    Reason.NODE_UNPRIVILEGED: "; with Ansible: " + BECOME,
}


def refusal_message(failures: Sequence[Refusal], hints: Optional[Sequence[str]] = None) -> str:
    """The task's ``msg`` for a pass that did not reach the asked state: ``allocation: reason: message`` for each
    refusal, with what would help (``hints``, one per refusal: the node's GPUs for a device it lacks, ...);
    ``become: true`` first when the pass ran without root and without the helper."""
    hints = hints or [""] * len(failures)
    listed = "; ".join("%s: %s: %s%s" % (f.allocation_id, f.reason, f.message, hint) for f, hint in zip(failures, hints))
    if any(f.reason == Reason.NODE_UNPRIVILEGED for f in failures):
        return ("%s: this pass ran without root and without the root helper, so it refused every new hold and wrote "
                "nothing; refused: %s" % (BECOME, listed))
    return "assignments refused (the others of the pass are held): %s" % listed


def on_refusal(params: Dict[str, Any]) -> str:
    """``fail`` or ``report``: ``on_refusal``, else what the deprecated ``fail_on_refusal`` said, else ``fail``."""
    if params.get("on_refusal") is not None:
        chosen: str = params["on_refusal"]  # one of its choices: AnsibleModule refused any other
        return chosen
    if params.get("fail_on_refusal") is False:
        return "report"
    return "fail"


def module_argument_spec() -> OptionSpec:
    return argument_spec(
        NODE_OPTIONS, HELPER_OPTIONS, RUNTIME_OPTIONS, LOCK_OPTIONS,
        generation=dict(type="int"),  # left out: the node numbers its inputs
        # The assignments are checked by the converger, which refuses a bad one with
        # invalid-assignment instead of failing the whole task: so no suboptions here.
        devices=dict(type="list", elements="raw", required=True),
        instances=dict(type="list", elements="dict", default=[], options=dict(
            instance_id=dict(type="str", required=True),
            gpus=dict(type="list", elements="str", default=[]),
        )),
        # fail (the default): a refused assignment fails the task, as a state module that did not reach its
        # state; report: the task succeeds and a control plane reads the refusals from the events
        on_refusal=dict(type="str", choices=["fail", "report"]),
        # what --diff shows of a CDI spec: summary (NVIDIA's common edits as one line), or full (every line)
        diff_detail=dict(type="str", choices=["summary", "full"], default="summary"),
        # the only env keys a hold may set (within the env policy); left out, every key the policy allows
        env_allow=dict(type="list", elements="str"),
        # a node path: the node's metrics in node_exporter's textfile format, written after the pass (entry/metrics.py)
        metrics_textfile=dict(type="str"),
        fail_on_refusal=dict(type="bool", removed_in_version="1.0.0", removed_from_collection="bcd.devices"),
    )


def shown_diff(entry: Dict[str, Any]) -> Dict[str, Any]:
    """A ``--diff`` entry as Ansible prints it to a terminal: each text escaped line by line (the bytes of a
    spec already in /etc/cdi, a pod's name in the plan), its newlines kept (``support/text.py``)."""
    return dict((key, printable_lines(value) if isinstance(value, str) else value) for key, value in entry.items())


def echoed(params: Dict[str, Any]) -> Dict[str, Any]:
    """What the result echoes of the task's options as Ansible's ``invocation`` (shown at ``-vvv``, kept when
    registered): every option as the module read it, the assignments by their count and digest. Echoed whole,
    the ``devices`` the task just sent made a third of a no-op's result (46 KB of 130 KB at 256 holds) on every
    run; the task and its variables already hold them. docs/performance.md, "Smaller results"."""
    args = dict(params)
    devices = args.get("devices") or []
    digest = hashlib.sha256(json.dumps(devices, sort_keys=True, default=str).encode("utf-8")).hexdigest()
    args["devices"] = "%d assignment%s, sha256 %s (not echoed)" % (len(devices), "" if len(devices) == 1 else "s", digest)
    return {"module_args": args}


def written_metrics(host: Host, textfile: str, state_dir: str) -> List[str]:
    """Write the node's metrics after the pass to ``textfile`` (a node path ending in ``.prom``); the warnings when
    it could not be (the pass stands: the metrics are a report of it, and the timers' next pass writes them too)."""
    try:
        write_textfile(host.path(textfile), node_metrics(host, state_dir))
    except (BcdError, OSError, ValueError) as exc:
        return ["the metrics were not written to %s: %s" % (textfile, printable(exc))]
    return []


def main(basic: ModuleType) -> None:
    """The module's run; ``basic`` is ``ansible.module_utils.basic``, which the module passes in (this
    library runs without Ansible too: bcd-holds imports its siblings)."""
    module: Module = basic.AnsibleModule(argument_spec=module_argument_spec(), supports_check_mode=True,
                                         mutually_exclusive=[("on_refusal", "fail_on_refusal")])
    refuse_unless_isolated(module)  # root: no Python another account steers (node/isolation.py)
    params = module.params
    if not HAS_CRYPTOGRAPHY:
        module.fail_json(msg=basic.missing_required_lib("cryptography"), invocation=echoed(params))
    try:
        host = host_from_params(params)
        result = run_pass(host, params["generation"], params["devices"], params["instances"],
                          state_dir=params["state_dir"], check_mode=module.check_mode,
                          lock_timeout=params["lock_timeout"], cdi_runtimes=params["cdi_runtimes"],
                          env_allow=params["env_allow"])
    except (BcdError, OSError) as exc:
        module.fail_json(msg=printable(exc), invocation=echoed(params))
    output = result.to_dict()
    output["invocation"] = echoed(params)
    if params["metrics_textfile"] and not module.check_mode:
        result.warnings.extend(written_metrics(host, params["metrics_textfile"], params["state_dir"]))
    if module._diff:
        output["diff"] = [shown_diff(entry) for entry in result.plan.diffs(full=params["diff_detail"] == "full")]
    failures = result.plan.failures
    fails = bool(failures) and not result.retry and (
        on_refusal(params) == "fail" or any(f.reason == Reason.NODE_UNPRIVILEGED for f in failures))
    # A failing task's msg lists its refusals, hints included: a warning of each would only say it again.
    warn(module, host.node_id(), result.warnings + ([] if fails else [
        text + ANSIBLE_FIX.get(failure.reason, "") for failure, text in zip(failures, result.refusal_texts())]))
    if result.retry or fails:
        # a failed task is printed whole: it shows this pass's events, and counts the older ones and says where they
        # are (events_elsewhere) instead of printing up to 16 of them, signatures and all, on every node it fails on
        output.update(result.failed_events())
    if result.retry:
        module.fail_json(msg="the pass could not finish and will be retried: %s" % printable(result.section["message"]),
                         **output)
    if fails:
        module.fail_json(msg=printable(refusal_message(failures, result.refusal_hints())), **output)
    module.exit_json(**output)
