# -*- coding: utf-8 -*-
# Copyright: contributors to bcd.devices
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""The unprivileged end of the root helper's socket (``bcd-holds helper``).

One JSON request per connection, one JSON reply, with a deadline on each. An
unreachable or silent helper, or a refusal its reply marks ``"retryable": true``
(what the node has now: a full quota, a running workload, the helper busy, the
peer's rate spent, for a write, a release or a look alike), is a ``HelperError``,
which a pass retries like any failed write; any other refusal is
a ``HelperRefused``: the request is at fault, and sending it again would fail
again, so it is not retried. The protocol is described with the server,
``entry/helper/request.py``.
"""

from __future__ import annotations

import json
import socket
import time
from typing import TYPE_CHECKING, Any, Dict, Optional

from ansible_collections.bcd.devices.plugins.module_utils.domain.mig.model import MigDone, MigNode
from ansible_collections.bcd.devices.plugins.module_utils.support.errors import BcdError, RetryableError

if TYPE_CHECKING:
    from ansible_collections.bcd.devices.plugins.module_utils.domain.mig.model import MigOp

IO_TIMEOUT = 30.0
MAX_PROBE_REPLY = 64 * 1024  # a probe's reply is one short line; more is not the helper talking
PROBE = {"op": "ping"}  # answered without touching the node: an unknown op, refused as such


class HelperError(RetryableError):
    """The helper could not be reached or answered, or refused an operation for what the node has now;
    retryable. ``reason``: the helper's own words, where it refused."""

    def __init__(self, message: str, reason: Optional[str] = None) -> None:
        super().__init__(message)
        self.reason = reason


class HelperRefused(BcdError):
    """The helper refused a request as it is (malformed, or never carried out as asked); permanent.
    ``reason``: the helper's own words."""

    def __init__(self, message: str, reason: Optional[str] = None) -> None:
        super().__init__(message)
        self.reason = reason


class Probe:
    """What ``HelperClient.probe`` found: the helper's ``answer`` (a JSON object), or why there is none
    (``why``), with the ``error`` of the socket call (its ``errno`` says which) or ``timed_out``."""

    def __init__(self, answer: Optional[Dict[str, Any]] = None, why: Optional[str] = None, error: Optional[OSError] = None,
                 timed_out: bool = False) -> None:
        self.answer = answer
        self.why = why
        self.error = error
        self.timed_out = timed_out

    @property
    def errno(self) -> Optional[int]:
        return self.error.errno if self.error is not None else None


class HelperClient:
    """The unprivileged end: one request per connection, a deadline on each."""

    def __init__(self, socket_path: str, timeout: float = IO_TIMEOUT) -> None:
        self.socket_path = socket_path
        self.timeout = timeout

    def request(self, message: Dict[str, Any]) -> Dict[str, Any]:
        data = (json.dumps(message) + "\n").encode("utf-8")
        try:
            with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as connection:
                connection.settimeout(self.timeout)
                connection.connect(self.socket_path)
                connection.sendall(data)
                reply = b""
                while b"\n" not in reply:
                    chunk = connection.recv(65536)
                    if not chunk:
                        break
                    reply += chunk
        except (OSError, socket.timeout) as exc:
            raise HelperError("the root helper at %s cannot be reached: %s" % (self.socket_path, exc))
        try:
            answer: object = json.loads(reply.split(b"\n", 1)[0].decode("utf-8"))
        except ValueError:
            raise HelperError("the root helper at %s gave no answer" % self.socket_path)
        if not isinstance(answer, dict):
            raise HelperError("the root helper at %s gave no answer" % self.socket_path)
        if answer.get("ok") is not True:
            reason = str(answer.get("error") or "no reason given")
            text = "the root helper refused %s: %s" % (message.get("op"), reason)
            raise HelperError(text, reason) if answer.get("retryable") is True else HelperRefused(text, reason)
        return answer

    def probe(self) -> Probe:
        """Whether the helper answers, within ``timeout`` seconds in all and ``MAX_PROBE_REPLY`` bytes: it is
        sent ``PROBE``, which it answers without touching the node (``unknown op 'ping'``), and logs nothing.
        Never raises; ``Probe.answer`` is the reply when there is one."""
        deadline = time.monotonic() + self.timeout
        data = (json.dumps(PROBE) + "\n").encode("utf-8")
        reply = b""
        try:
            with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as connection:
                connection.settimeout(self.timeout)
                connection.connect(self.socket_path)
                try:
                    connection.sendall(data)
                except OSError:  # a busy helper answers at once and hangs up: its answer is still there to read
                    pass
                while b"\n" not in reply and len(reply) <= MAX_PROBE_REPLY:
                    left = deadline - time.monotonic()
                    if left <= 0:
                        raise socket.timeout("timed out")
                    connection.settimeout(left)
                    chunk = connection.recv(4096)
                    if not chunk:
                        break
                    reply += chunk
        except socket.timeout:
            return Probe(timed_out=True, why="the root helper at %s did not answer within %gs"
                         % (self.socket_path, self.timeout))
        except OSError as exc:
            return Probe(error=exc, why="the root helper at %s cannot be reached: %s" % (self.socket_path, exc))
        try:
            found: object = json.loads(reply.split(b"\n", 1)[0].decode("utf-8")) if b"\n" in reply else None
        except ValueError:
            found = None
        if not isinstance(found, dict):
            return Probe(why="the root helper at %s gave no answer" % self.socket_path)
        return Probe(answer=found)

    def reachable(self) -> Optional[str]:
        """Why this process cannot use the helper now, or None (bounded as ``probe``: an answer to ``PROBE``
        other than ``unknown op``, such as ``may not use this helper`` or ``busy``, is a reason)."""
        found = self.probe()
        if found.answer is None:
            return found.why
        if found.answer.get("ok") is True or "unknown op" in str(found.answer.get("error")):
            return None
        return "the root helper refused %s: %s" % (PROBE["op"], found.answer.get("error") or "no reason given")

    def kube_look(self) -> Dict[str, Any]:
        """The kube side as the root helper sees it (``_kubelet.view_to_json`` data)."""
        return self.request({"op": "kube.look"}).get("view") or {}


class HelperMigSide:
    """The MIG side of a pass that is not root (``node/mig_side.MigSide``): root reads and changes the GPUs' MIG
    layout. ``read`` asks ``mig.look``; ``apply`` asks ``mig.change``, which root carries out only once the claims
    it reads itself (holds, pending releases, VMs, the processes on the GPU) allow the op
    (``domain/mig/guard.op_refusal``). Root's replies are read as strictly as root reads the op
    (``domain/mig/wire.py``); neither method raises for what the helper said or could not say."""

    def __init__(self, client: HelperClient) -> None:
        self.client = client

    def read(self) -> MigNode:
        from ansible_collections.bcd.devices.plugins.module_utils.domain.mig.wire import WireError, node_from_data  # pylint: disable=import-outside-toplevel
        try:
            return node_from_data(self.client.request({"op": "mig.look"}).get("mig"))
        except (HelperError, HelperRefused) as exc:
            return MigNode(source="helper", error=str(exc))
        except WireError as exc:
            return MigNode(source="helper", error="the root helper's answer to mig.look is malformed: %s" % exc)

    def apply(self, op: MigOp) -> MigDone:
        from ansible_collections.bcd.devices.plugins.module_utils.domain.mig.wire import WireError, done_from_data  # pylint: disable=import-outside-toplevel
        try:
            answer = self.client.request({"op": "mig.change", "change": op.as_data()})
        except (HelperError, HelperRefused) as exc:
            if exc.reason is None:  # not reached, or no answer: nothing is known of the op
                return MigDone(op=op, error=str(exc))
            return MigDone(op=op, error="the root helper refused it: %s" % exc.reason)
        try:
            return done_from_data(answer.get("done"), op)
        except WireError as exc:
            return MigDone(op=op, error="the root helper's answer to mig.change is malformed: %s" % exc)
