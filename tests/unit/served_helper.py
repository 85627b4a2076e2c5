# -*- coding: utf-8 -*-
# Copyright: contributors to bcd.devices
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""The root helper served in a thread of the test: the real ``listen`` and ``serve`` of
``entry/helper/server.py`` on a real unix socket, without a second process. (A helper process played
against by another account is ``attackers.World``.)"""

from __future__ import annotations

import socket
import threading

from ansible_collections.bcd.devices.plugins.module_utils.entry.helper.limits import LogLimit
from ansible_collections.bcd.devices.plugins.module_utils.entry.helper.server import Policy, listen, serve


class ServedHelper(object):
    """``serve`` for ``host`` (a host, or a ``NodeView`` of one) on ``socket_path`` in a daemon thread
    until ``close``: the peers it allows are ``users`` (besides root), what they ask for is limited by
    ``limiter`` (``RateLimits`` or a ``RateLimit``; serve's own by default), and what it logs is in
    ``log``, limited by a ``LogLimit`` on ``log_clock`` (serve's own, on the real clock, by default)."""

    def __init__(self, host, socket_path, users=(), limiter=None, log_clock=None):
        self.socket = socket_path
        self.log = []
        self.server = listen(self.socket, list(users))
        self.stop = threading.Event()
        lines = self.log.append if log_clock is None else LogLimit(self.log.append, clock=log_clock)
        self.thread = threading.Thread(target=serve, args=(host, self.server, Policy(users), lines, self.stop),
                                       kwargs={"limiter": limiter})
        self.thread.daemon = True
        self.thread.start()

    def close(self):
        self.stop.set()
        try:  # wake the accept loop so that it sees the stop at once
            with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as wake:
                wake.connect(self.socket)
        except OSError:
            pass
        self.thread.join(5)
        self.server.close()
