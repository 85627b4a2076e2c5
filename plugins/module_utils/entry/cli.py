# -*- coding: utf-8 -*-
# Copyright: contributors to bcd.devices
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""``bcd-holds``: the converger on the node, without Ansible.

It runs the very code ``bcd.devices.holds`` runs: ``converge`` is ``run_pass``,
``status`` is ``holds_info``'s ``node_status``, ``events`` is the events
module's ``list_and_acknowledge``, ``deliver`` the role's delivery
(``entry/deliver.py``), ``mig-layout`` the ``bcd.devices.mig_layout`` module's run
(``entry/mig_layout.py``). The systemd timers call ``converge --stored`` and
``deliver``; the root helper is ``helper``; the boot unit ``mig-layout --boot``.

Exit codes: 0 done (a ``FAILED`` section is a terminal answer, not an error of
the command), 1 a check failed (``doctor``) or the gateway did not take every
event (``deliver``), 2 bad usage, the pass or the delivery could not run, or a
state file root will not use (``StateFileError``: one line naming the file and
what is wrong; ``doctor`` reports it as a failed check, 1), 3 a GPU is busy
(``busy``), 1 a GPU's layout was refused or a change failed (``mig-layout``),
75 the pass must be retried (``PROGRESSING``) or the gateway could
not be reached (``deliver``: it backs off, and a later run tries again).
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import threading
from typing import Any, Callable, Dict, List, Literal, Optional, Sequence

from ansible_collections.bcd.devices.plugins.module_utils.domain.cdi.runtimes import parse_runtimes_option
from ansible_collections.bcd.devices.plugins.module_utils.domain.plan.actions import Refuse
from ansible_collections.bcd.devices.plugins.module_utils.entry import installed
from ansible_collections.bcd.devices.plugins.module_utils.entry.busy import BusyError, busy_check, busy_lines
from ansible_collections.bcd.devices.plugins.module_utils.entry.converge import FAILED, PROGRESSING, node_runtimes, run_pass
from ansible_collections.bcd.devices.plugins.module_utils.entry.deliver import DEFAULT_CONFIG, run_delivery
from ansible_collections.bcd.devices.plugins.module_utils.entry.doctor.checks import run_checks
from ansible_collections.bcd.devices.plugins.module_utils.entry.doctor.report import doctor_lines
from ansible_collections.bcd.devices.plugins.module_utils.entry.helper.server import Policy, listen, serve
from ansible_collections.bcd.devices.plugins.module_utils.entry.installed import DEFAULT_MANIFEST
from ansible_collections.bcd.devices.plugins.module_utils.entry.metrics import node_metrics, write_textfile
from ansible_collections.bcd.devices.plugins.module_utils.entry.mig_layout import MigLayoutError, converge_layout, wanted_of
from ansible_collections.bcd.devices.plugins.module_utils.entry.status import node_status, status_table
from ansible_collections.bcd.devices.plugins.module_utils.node.hosts import Host, make_host
from ansible_collections.bcd.devices.plugins.module_utils.node.state_files import FILE_CAPS, NODESPEC_NAME
from ansible_collections.bcd.devices.plugins.module_utils.state.nodespec import nodespec_from_data
from ansible_collections.bcd.devices.plugins.module_utils.state.store import DEFAULT_STATE_DIR, NodeState
from ansible_collections.bcd.devices.plugins.module_utils.support import bounded_json
from ansible_collections.bcd.devices.plugins.module_utils.support.bounded_json import structure_problem
from ansible_collections.bcd.devices.plugins.module_utils.support.errors import BcdError, StateFileError
from ansible_collections.bcd.devices.plugins.module_utils.support.text import printable, printable_lines

EX_OK, EX_CHECK, EX_ERROR, EX_BUSY, EX_RETRY = 0, 1, 2, 3, 75
MAX_SPEC_BYTES = FILE_CAPS[NODESPEC_NAME]  # a spec is stored as the timers' input: the same cap
MAX_LAYOUT_BYTES = 1 << 20  # a layout file, or a mig-parted document of many configs
DEFAULT_HELPER_SOCKET = "/run/bcd/helper.sock"


def out(text: str) -> None:
    """Lines on stdout (module_utils code may not call print). The renderers escape what they show; each
    line is escaped here again (``support/text.py``: a no-op on escaped text), so nothing that reaches a
    terminal through bcd-holds is terminal control, whatever a renderer missed."""
    sys.stdout.write(printable_lines(text) + "\n")


def out_quiet(text: str) -> None:
    """A line on stdout that says nothing happened; under systemd at debug priority, so a timer's every run
    leaves nothing in the journal (the unit's ``LogLevelMax=info`` drops it)."""
    if os.environ.get("JOURNAL_STREAM"):
        sys.stdout.write("<7>" + printable(text) + "\n")
    else:
        out(text)


def log(level: Literal["ERROR", "WARNING", "INFO"], message: str) -> None:
    """A line on stderr; under systemd (JOURNAL_STREAM set) with the syslog priority prefix journald reads.
    The message is escaped to one line: it may quote a state file, a spec or a peer's request."""
    priority = {"ERROR": 3, "WARNING": 4, "INFO": 6}[level]
    prefix = "<%d>" % priority if os.environ.get("JOURNAL_STREAM") else ""
    sys.stderr.write("%s%s: %s\n" % (prefix, level, printable(message)))


def _common(parser: argparse.ArgumentParser, defaults: bool = True) -> None:
    """``--root``, ``--fakehw`` and ``--state-dir``: taken before the command (``bcd-holds --root X status``)
    and after it. Only the top parser has defaults: a command's own would overwrite what was given before it."""
    def default(value: Optional[str]) -> Optional[str]:
        return value if defaults else argparse.SUPPRESS
    parser.add_argument("--root", default=default("/"), help="prefix of every node path (default /)")
    parser.add_argument("--fakehw", default=default(None), help="a fakehw hardware file: the host is fakehw")
    parser.add_argument("--state-dir", default=default(DEFAULT_STATE_DIR), help="state directory under --root")


def build_parser() -> argparse.ArgumentParser:
    common = argparse.ArgumentParser(add_help=False)
    _common(common, defaults=False)
    parser = argparse.ArgumentParser(prog="bcd-holds", description="GPU holds on this node: converge, inspect, "
                                     "and the root helper. The same code as the bcd.devices collection.")
    _common(parser)
    commands = parser.add_subparsers(dest="command", metavar="COMMAND")
    commands.required = True

    converge = commands.add_parser("converge", parents=[common], help="run one pass")
    source = converge.add_mutually_exclusive_group(required=True)
    source.add_argument("--spec", help="a JSON file {generation, devices, instances}; without generation, the node numbers it")
    source.add_argument("--stored", action="store_true", help="the input of the last pass (<state-dir>/nodespec.json)")
    converge.add_argument("--check", action="store_true", help="plan only; write nothing")
    converge.add_argument("--retry-only", action="store_true",
                          help="run only while the last pass was PROGRESSING (the retry timer)")
    converge.add_argument("--helper-socket", help="send privileged writes through the root helper")
    converge.add_argument("--json", action="store_true", help="print the result as JSON")

    status = commands.add_parser("status", parents=[common], help="who holds each GPU")
    status.add_argument("--helper-socket", help="the root helper the passes use (for the capabilities shown)")
    status.add_argument("--json", action="store_true")

    doctor = commands.add_parser("doctor", parents=[common], help="check what would keep holds from binding")
    doctor.add_argument("--helper-socket", help="the root helper the passes use")
    doctor.add_argument("--json", action="store_true")

    busy = commands.add_parser("busy", parents=[common], help="who claims these GPUs (exit 0 free, 3 busy, 2 bad input)")
    busy.add_argument("gpus", nargs="+", metavar="GPU-UUID")
    busy.add_argument("--json", action="store_true")
    busy.add_argument("--lock-timeout", type=float, default=120.0, help="seconds to wait for a running pass")

    metrics = commands.add_parser("metrics", parents=[common], help="the node's holds in the Prometheus text format")
    metrics.add_argument("--textfile", metavar="PATH.prom",
                         help="write them atomically to this file (node_exporter's textfile collector) instead")

    events = commands.add_parser("events", parents=[common], help="the unacknowledged event journal")
    events.add_argument("--ack-through", type=int, metavar="SEQ", help="acknowledge events up to SEQ")

    deliver = commands.add_parser("deliver", parents=[common], help="post the unacknowledged events to the "
                                  "gateway and acknowledge what it accepted (exit 0 done, 1 not all taken, "
                                  "2 error, 75 unreachable: backing off)")
    deliver.add_argument("--config", default=DEFAULT_CONFIG, metavar="FILE",
                         help="the delivery's settings, a node path under --root (default %s)" % DEFAULT_CONFIG)
    deliver.add_argument("--now", action="store_true", help="try even while backing off from a gateway that failed")
    deliver.add_argument("--lock-timeout", type=float, default=120.0, help="seconds to wait for a running pass")
    deliver.add_argument("--json", action="store_true", help="print what the run did as JSON")

    record = commands.add_parser("installed", parents=[common], help="whether the role's install is as it recorded "
                                 "it (exit 0 yes, 1 no); --record writes the record (the role's last step)")
    record.add_argument("--manifest", default=DEFAULT_MANIFEST, metavar="PATH",
                        help="the record, a node path under --root (default %s)" % DEFAULT_MANIFEST)
    record.add_argument("--record", action="store_true", help="record the install described on stdin (JSON)")

    layout = commands.add_parser("mig-layout", parents=[common], help="make the GPUs' MIG layout, never under a hold: "
                                 "the recorded one (--boot) or a file's (exit 0 done, 1 a GPU refused or a change "
                                 "failed, 2 bad input)")
    wanted = layout.add_mutually_exclusive_group(required=True)
    wanted.add_argument("--boot", action="store_true", help="make the layout the last run recorded again (the boot "
                        "unit: MIG instances do not survive a reboot)")
    wanted.add_argument("--layout", metavar="FILE", help="a YAML or JSON file: the module's layout list, or a "
                        "mig-parted document (version, mig-configs) with --mig-config")
    layout.add_argument("--mig-config", metavar="NAME", help="the config of the mig-parted document to apply")
    layout.add_argument("--check", action="store_true", help="plan only; change nothing")
    layout.add_argument("--helper-socket", help="make the changes through the root helper")
    layout.add_argument("--lock-timeout", type=float, default=120.0, help="seconds to wait for a running pass")
    layout.add_argument("--json", action="store_true", help="print the result as JSON")

    helper = commands.add_parser("helper", parents=[common], help="the root helper")
    helper.add_argument("--socket", default=DEFAULT_HELPER_SOCKET)
    helper.add_argument("--allow-user", action="append", default=[], metavar="NAME")
    helper.add_argument("--allow-group", action="append", default=[], metavar="NAME")
    return parser


def _host(args: argparse.Namespace, helper_socket: Optional[str] = None) -> Host:
    return make_host(args.root, args.fakehw, helper_socket=helper_socket)


def _state(host: Host, args: argparse.Namespace) -> NodeState:
    return NodeState(host.path(args.state_dir), args.state_dir)


def _stored_runtimes(host: Host, args: argparse.Namespace, strict: bool = True) -> object:
    """``cdi_runtimes`` as the timers' passes use it: what the stored input names, else ``auto``. A stored
    input root will not use is an error (``strict``), or left to the caller's own check of it."""
    try:
        stored = _state(host, args).load_nodespec()
    except StateFileError:
        if strict:
            raise
        return "auto"
    except (BcdError, OSError):
        return "auto"
    option = stored[3] if stored is not None else "auto"
    try:
        parse_runtimes_option(option)
    except ValueError:
        return "auto"
    return option


def cmd_converge(args: argparse.Namespace) -> int:
    host = _host(args, args.helper_socket)
    state = _state(host, args)
    if args.retry_only:
        state.load(write=False)
        last, releases = state.ledger.last_state, state.releases
        if last != PROGRESSING and not releases.pending and not releases.marker and releases.unreadable is None:
            out("nothing to retry: the last pass was %s and no Kubernetes release is pending" % (last or "never run"))
            return EX_OK
    if args.stored:
        stored = state.load_nodespec()
        if stored is None:
            out("no stored input in %s/nodespec.json: nothing to converge" % args.state_dir)
            return EX_OK
        generation, devices, instances, cdi_runtimes, env_allow = stored
    else:
        try:
            with open(args.spec, "rb") as handle:
                content = handle.read(MAX_SPEC_BYTES + 1)
            if len(content) > MAX_SPEC_BYTES:
                raise ValueError("longer than %d bytes" % MAX_SPEC_BYTES)
            data = bounded_json.loads(content, args.spec)
        except (OSError, ValueError) as exc:
            log("ERROR", "cannot read the spec %s: %s" % (args.spec, exc))
            return EX_ERROR
        try:
            generation, devices, instances, cdi_runtimes, env_allow = nodespec_from_data(data, args.spec,
                                                                                         generation_required=False)
        except StateFileError as exc:
            log("ERROR", "cannot read the spec %s" % exc)
            return EX_ERROR
    result = run_pass(host, generation, devices, instances, state_dir=args.state_dir, check_mode=args.check,
                      store_input=not args.stored, cdi_runtimes=cdi_runtimes, env_allow=env_allow)
    for warning in result.warnings:
        log("WARNING", warning)
    section = result.section
    if section["state"] == PROGRESSING:
        log("WARNING", "retrying: %s" % section["message"])
    elif section["state"] == FAILED:
        # ERROR when this pass reported the refusals; a later pass of the same generation only repeats them
        reported_now = any(isinstance(action, Refuse) for action in result.plan.actions) and not args.check
        log("ERROR" if reported_now else "INFO", "refused: %s" % section["message"])
    if args.json:
        out(json.dumps(result.to_dict(), indent=2, sort_keys=True))
    else:
        out("plan (check mode, nothing written):" if args.check else "plan:")
        # an action's text may name a pod or a file: escaped to one line each (a newline in it is no new line)
        lines = [printable(action.text) for action in result.plan.actions] or ["nothing to do"]
        out("\n".join("  " + line for line in lines))
        # FAILED is the API's word for "something was refused": the counts say how much of the pass stands
        counts = ("%d held, %d refused: " % (len(result.holds), len(result.plan.failures))
                  if section["state"] == FAILED else "")
        out("section: %s at generation %s (observed %s)%s" % (
            section["state"], section["generation"], section["observed_generation"],
            ": " + counts + printable(section["message"]) if section["message"] else ""))
    return EX_RETRY if section["state"] == PROGRESSING else EX_OK


def cmd_status(args: argparse.Namespace) -> int:
    host = _host(args, args.helper_socket)
    status = node_status(host, args.state_dir, _stored_runtimes(host, args))
    if args.json:
        out(json.dumps(status, indent=2, sort_keys=True))
    else:
        out(status_table(status))
    return EX_OK


def cmd_doctor(args: argparse.Namespace) -> int:
    host = _host(args)
    checks = run_checks(host, args.state_dir, args.helper_socket,
                        node_runtimes(host, _stored_runtimes(host, args, strict=False)))
    if args.json:
        out(json.dumps(checks, indent=2, sort_keys=True))
    else:
        for line in doctor_lines(checks):
            out(line)
    return EX_CHECK if any(check["level"] != "OK" for check in checks) else EX_OK


def cmd_busy(args: argparse.Namespace) -> int:
    try:
        entries = busy_check(_host(args), args.gpus, args.state_dir, args.lock_timeout)
    except BusyError as exc:
        log("ERROR", str(exc))
        return EX_ERROR
    if args.json:
        out(json.dumps(entries, indent=2, sort_keys=True))
    else:
        out("\n".join(busy_lines(entries)))
    return EX_BUSY if any(entry["busy"] for entry in entries) else EX_OK


def cmd_metrics(args: argparse.Namespace) -> int:
    text = node_metrics(_host(args), args.state_dir)
    if args.textfile:
        try:
            write_textfile(args.textfile, text)
        except ValueError as exc:
            log("ERROR", str(exc))
            return EX_ERROR
    else:
        sys.stdout.write(text)
    return EX_OK


def cmd_events(args: argparse.Namespace) -> int:
    state = _state(_host(args), args)
    events, acknowledged = state.list_and_acknowledge(args.ack_through)
    for warning in state.warnings():
        log("WARNING", warning)
    if args.ack_through is not None:
        log("INFO", "acknowledged %d events" % acknowledged)
    for event in events:
        # ensure_ascii (json's default): every control, format and non-ASCII character is a \u escape
        out(json.dumps(event, sort_keys=True, ensure_ascii=True))
    return EX_OK


def cmd_deliver(args: argparse.Namespace) -> int:
    result = run_delivery(args.root, args.state_dir, args.config, os.environ, ignore_backoff=args.now,
                          lock_timeout=args.lock_timeout)
    for warning in result.pop("warnings"):
        log("WARNING", warning)
    code: int = result.pop("code")
    if args.json:
        out(json.dumps(result, indent=2, sort_keys=True))
    if code != EX_OK:
        log("WARNING" if code == EX_RETRY else "ERROR", result["message"])
    elif not args.json:
        (out_quiet if result["skipped"] or not result["events"] else out)(result["message"])
    return code


def cmd_installed(args: argparse.Namespace) -> int:
    try:
        if args.record:
            count = installed.record(args.root, args.manifest, sys.stdin.buffer.read(installed.MAX_RECORD_BYTES + 1))
            out("recorded %d entries of the install in %s" % (count, args.manifest))
            return EX_OK
        ok, message = installed.check(args.root, args.manifest)
    except (BcdError, ValueError, OSError) as exc:
        log("ERROR", "the install record %s: %s" % (args.manifest, exc))
        return EX_ERROR
    out(message)
    return EX_OK if ok else EX_CHECK


def read_layout_file(path: str) -> object:
    """The data of a layout file, JSON or else YAML (PyYAML's safe loader, a key given twice refused); ValueError
    naming the file for one that cannot be read, is too long, or is neither."""
    try:
        with open(path, "rb") as handle:
            content = handle.read(MAX_LAYOUT_BYTES + 1)
    except OSError as exc:
        raise ValueError("cannot read the layout %s: %s" % (path, exc.strerror or exc))
    if len(content) > MAX_LAYOUT_BYTES:
        raise ValueError("the layout %s is longer than %d bytes" % (path, MAX_LAYOUT_BYTES))
    try:
        return bounded_json.loads(content, path)
    except StateFileError as exc:
        raise ValueError(str(exc))
    except ValueError as json_exc:
        problem = structure_problem(content)  # before PyYAML reads ahead
        if problem is not None:
            raise ValueError("the layout %s: %s" % (path, problem))
        try:
            from ansible_collections.bcd.devices.plugins.module_utils.node.fakehw_yaml import strict_loader  # pylint: disable=import-outside-toplevel
            yaml, loader = strict_loader()
        except ImportError:
            raise ValueError("the layout %s is not JSON (%s), and PyYAML is not installed to read it as YAML"
                             % (path, json_exc))
        try:
            return yaml.load(content.decode("utf-8"), Loader=loader)  # a SafeLoader
        except (yaml.YAMLError, UnicodeDecodeError, ValueError, TypeError, OverflowError, RecursionError) as exc:
            raise ValueError("the layout %s is neither JSON nor YAML: %s" % (path, str(exc).replace("\n", " ")))


def mig_lines(done: Dict[str, Any]) -> List[str]:
    """One line per GPU the layout names (what changed, or why not), each change below it indented; a GPU whose
    held MIG instances the layout lacks says so, on its line or on one of its own."""
    missing: Dict[str, List[str]] = {}
    for item in done["held_missing"]:
        missing.setdefault(item["device_id"].split("/", 1)[0], []).append(
            "%s (held by %s)" % (item["device_id"], item["allocation_id"]))
    lines: List[str] = []
    for gpu in done["gpus"]:
        made = sum(len(op["compute"]) or 1 for op in gpu["ops"] if op["kind"] == "create")
        destroyed = len(gpu["before"]) - len(gpu["kept"])
        if gpu["refused"]:
            what = "not changed: %s" % gpu["refused"]
        elif gpu["error"]:
            what = "stopped: %s" % gpu["error"]
        elif gpu["reset_needed"]:
            what = "its MIG mode change waits for a GPU reset (bcd.devices.gpu_reset) or a reboot"
        elif gpu["ops"]:
            what = "%s %d change%s: %d MIG instance%s destroyed, %d made, %d kept" % (
                "would make" if done["check_mode"] else "made", len(gpu["ops"]), "" if len(gpu["ops"]) == 1 else "s",
                destroyed, "" if destroyed == 1 else "s", made, len(gpu["kept"]))
        else:
            what = "as wanted: MIG %s, %d MIG instance%s" % (
                "on" if gpu["mig_enabled"] else "off", len(gpu["before"]), "" if len(gpu["before"]) == 1 else "s")
        held = missing.pop(gpu["uuid"], [])
        lines.append(printable("%s (GPU %d): %s%s" % (gpu["uuid"], gpu["index"], what,
                                                      "; held but missing: " + ", ".join(held) if held else "")))
        if not gpu["refused"]:
            lines.extend("  " + printable(op["text"]) for op in gpu["ops"])
    lines.extend(printable("%s: held but missing: %s" % (uuid, ", ".join(held))) for uuid, held in sorted(missing.items()))
    return lines


def cmd_mig_layout(args: argparse.Namespace) -> int:
    host = _host(args, args.helper_socket)
    if args.boot:
        if args.mig_config is not None:
            log("ERROR", "--mig-config names a config of a --layout file; --boot makes the recorded layout")
            return EX_ERROR
        record, problem = _state(host, args).load_mig_record()
        if problem is None and not record.gpus:
            out("no MIG layout is recorded in %s/mig-layout.json: nothing to make" % args.state_dir)
            return EX_OK
        done = converge_layout(host, None, args.state_dir, args.check, args.lock_timeout)
    else:
        try:
            data = read_layout_file(args.layout)
            if data is None:
                raise ValueError("the layout %s is empty" % args.layout)
            if isinstance(data, dict):
                if args.mig_config is None:
                    raise ValueError("the layout %s is a mig-parted document: --mig-config names the config to "
                                     "apply" % args.layout)
                wanted = wanted_of(host, mig_parted=data, mig_config=args.mig_config)
            else:
                if args.mig_config is not None:
                    raise ValueError("--mig-config names a config of a mig-parted document; the layout %s is a "
                                     "list of layout entries" % args.layout)
                wanted = wanted_of(host, layout=data)
            done = converge_layout(host, wanted, args.state_dir, args.check, args.lock_timeout)
        except (ValueError, MigLayoutError) as exc:
            log("ERROR", str(exc))
            return EX_ERROR
    if args.json:
        out(json.dumps(done, indent=2, sort_keys=True))
    else:
        out("\n".join(mig_lines(done) or ["no GPU named: nothing to do"]))
    return EX_CHECK if done["failed"] else EX_OK


def cmd_helper(args: argparse.Namespace) -> int:
    if os.geteuid() != 0 and not args.fakehw:
        log("ERROR", "the root helper must run as root")
        return EX_ERROR
    host = make_host(args.root, args.fakehw)
    try:
        policy = Policy(args.allow_user, args.allow_group)
        server = listen(args.socket, args.allow_user, args.allow_group)
    except KeyError as exc:
        log("ERROR", "no such user or group: %s" % exc)
        return EX_ERROR
    log("INFO", "bcd-holds helper listening on %s for root%s" % (
        args.socket, "".join(", %s" % who for who in args.allow_user + ["group " + g for g in args.allow_group])))
    stop = threading.Event()
    try:
        serve(host, server, policy, log=lambda line: log("INFO", line), stop=stop)
    except KeyboardInterrupt:
        stop.set()
    finally:
        server.close()
    return EX_OK


COMMANDS: Dict[str, Callable[[argparse.Namespace], int]] = {
    "converge": cmd_converge, "status": cmd_status, "doctor": cmd_doctor, "busy": cmd_busy, "metrics": cmd_metrics,
    "events": cmd_events, "deliver": cmd_deliver, "installed": cmd_installed, "mig-layout": cmd_mig_layout,
    "helper": cmd_helper}


def main(argv: Optional[Sequence[str]] = None) -> int:
    args = build_parser().parse_args(argv)
    try:
        return COMMANDS[args.command](args)
    except (BcdError, OSError) as exc:
        log("ERROR", str(exc))
        return EX_ERROR
