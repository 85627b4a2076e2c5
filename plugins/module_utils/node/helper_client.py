# -*- coding: utf-8 -*-
# Copyright: contributors to bcd.devices
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""The unprivileged end of the root helper's socket (``bcd-holds helper``).

One JSON request per connection, one JSON reply, with a deadline on each. An
unreachable or silent helper, or a refusal its reply marks ``"retryable": true``
(what the node has now: a full quota, a running workload, the helper busy), is a
``HelperError``, which a pass retries like any failed write; any other refusal is
a ``HelperRefused``: the request is at fault, and sending it again would fail
again, so it is not retried. The protocol is described with the server,
``entry/helper.py``.
"""

from __future__ import annotations

import json
import socket

from ansible_collections.bcd.devices.plugins.module_utils.domain.errors import BcdError, RetryableError

IO_TIMEOUT = 30.0


class HelperError(RetryableError):
    """The helper could not be reached or answered, or refused an operation for what the node has now;
    retryable."""


class HelperRefused(BcdError):
    """The helper refused a request as it is (malformed, or never carried out as asked); permanent."""


class HelperClient:
    """The unprivileged end: one request per connection, a deadline on each."""

    def __init__(self, socket_path, timeout=IO_TIMEOUT):
        self.socket_path = socket_path
        self.timeout = timeout

    def request(self, message):
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
            answer = json.loads(reply.split(b"\n", 1)[0].decode("utf-8"))
        except ValueError:
            raise HelperError("the root helper at %s gave no answer" % self.socket_path)
        if not isinstance(answer, dict):
            raise HelperError("the root helper at %s gave no answer" % self.socket_path)
        if answer.get("ok") is not True:
            text = "the root helper refused %s: %s" % (message.get("op"), answer.get("error") or "no reason given")
            raise HelperError(text) if answer.get("retryable") is True else HelperRefused(text)
        return answer

    def reachable(self):
        """Why the helper cannot be used now, or None (an empty request is answered as malformed)."""
        try:
            self.request({"op": "ping"})
        except (HelperError, HelperRefused) as exc:
            return None if "unknown op" in str(exc) else str(exc)
        return None

    def kube_look(self):
        """The kube side as the root helper sees it (``_kubelet.view_to_json`` data)."""
        return self.request({"op": "kube.look"}).get("view") or {}
