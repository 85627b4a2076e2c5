# -*- coding: utf-8 -*-
# Copyright: contributors to bcd.devices
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""How much the root helper does for a peer: token buckets for its requests and for its log lines.

Each peer other than root gets a token bucket for every operation (``RATE_CLASSES``, ``RateLimits``),
so no account makes root work without end; a peer's log lines are limited, and what was dropped is
counted (``LogLimit``). A refused request costs a reply and nothing else, and the refusal names its
numbers (docs/security.md, "Quotas on what root creates").
"""

from __future__ import annotations

import threading
import time
from typing import Callable, Dict, Iterable, List, Optional, Protocol, Sequence, Tuple

from ansible_collections.bcd.devices.plugins.module_utils.domain.input.assignment import MAX_ASSIGNMENTS
from ansible_collections.bcd.devices.plugins.module_utils.entry.helper.request import Refused

Clock = Callable[[], float]
# Every operation, limited per peer uid by a token bucket of its class (RateLimits); root is not limited
# (it can write /etc/cdi without the helper). A refused request costs a reply and nothing else.
# - writes (what creates or changes what root keeps): a burst of a whole pass of the most holds there
#   are, each set aside, written (spec and env file) and given a slice, four requests a hold, so no pass
#   is limited into failing; then 16 a second (a whole burst again in about two minutes).
# - releases (hold.remove, slice.stop): a bucket of their own, so that a pass releasing every hold (a spec,
#   an env file and a slice each: 1 536 requests) is never starved by writes, and generous: 2 048 at once,
#   then 32 a second. They only shrink what root keeps, but each costs root a look at the node
#   (slice.stop: systemd's view of the slice).
# - looks (kube.look, mig.look): a pass asks a few times; 32 at once, then 2 a second. kube.look's answer comes
#   from the node's view (NodeView), read at most once a VIEW_SECONDS whoever asks; mig.look reads the GPUs'
#   MIG layout anew (nvidia-smi), one reading or change at a time.
# - MIG changes (mig.change): each runs nvidia-smi (a mode change, a destroy, a create), one at a time; a
#   bucket of its own, so that a layout never starves the holds' writes nor they it. 256 at once (a layout of
#   8 GPUs changed whole is at most 8 x 22 ops: 7 compute and 7 GPU instances destroyed, the mode, 7 made),
#   then 4 a second.
# A malformed request or an unknown op is in no class: it is refused before the node is touched, costs
# the parse of one bounded line (MAX_REQUEST, MAX_CONNECTIONS at once) and is not logged.
RATED_OPS = ("hold.write", "hold.set_aside", "slice.apply")
RATE_BURST = 4 * MAX_ASSIGNMENTS
RATE_PER_SECOND = 16.0
RELEASE_OPS = ("hold.remove", "slice.stop")
RELEASE_BURST = 4 * MAX_ASSIGNMENTS
RELEASE_PER_SECOND = 32.0
LOOK_OPS = ("kube.look", "mig.look")
LOOK_BURST = 32
LOOK_PER_SECOND = 2.0
MIG_OPS = ("mig.change",)
MIG_BURST = 256
MIG_PER_SECOND = 4.0
RATE_CLASSES: Tuple[Tuple[Tuple[str, ...], int, float], ...] = (
    (RATED_OPS, RATE_BURST, RATE_PER_SECOND), (RELEASE_OPS, RELEASE_BURST, RELEASE_PER_SECOND),
    (LOOK_OPS, LOOK_BURST, LOOK_PER_SECOND), (MIG_OPS, MIG_BURST, MIG_PER_SECOND))
RATE_PEERS = 4096  # buckets kept; beyond it, those of peers that have waited long enough to be full go
RATE_LOG_EVERY = 60.0  # seconds: a limited peer is logged once in this long, not once a refusal
# A peer's log lines: a whole pass of the most holds logs every line (four a hold), then 4 a second; what
# is dropped is counted and said once a LOG_WINDOW (LogLimit).
LOG_BURST = 4 * MAX_ASSIGNMENTS
LOG_PER_SECOND = 4.0
LOG_WINDOW = 60.0


class Limiter(Protocol):
    """What limits a peer's requests (``RateLimits``, or one ``RateLimit``)."""

    def check(self, uid: int, request: object) -> None:
        """Raise ``Refused`` when ``uid`` may not have ``request`` carried out now."""


class RateLimited(Refused):
    """A peer past its rate; ``first`` for the first refusal in ``RATE_LOG_EVERY`` seconds (the helper logs it)."""

    def __init__(self, message: str, first: bool = False) -> None:
        super().__init__(message, retryable=True)
        self.first = first


class RateLimit:
    """A token bucket per peer uid for the operations ``ops`` (``RATED_OPS`` unless named): ``burst`` requests
    at once, then ``rate`` a second. A refused request costs nothing; the uids in ``exempt`` (root) are never
    limited."""

    def __init__(self, rate: float = RATE_PER_SECOND, burst: float = RATE_BURST, exempt: Iterable[int] = (0,),
                 clock: Clock = time.monotonic, ops: Iterable[str] = RATED_OPS) -> None:
        self.rate, self.burst, self.exempt, self.clock = float(rate), float(burst), frozenset(exempt), clock
        self.ops = tuple(ops)
        self._buckets: Dict[int, Tuple[float, float]] = {}  # uid -> (tokens, when)
        self._logged: Dict[int, float] = {}  # uid -> when its last logged refusal was
        self._lock = threading.Lock()

    def take(self, uid: int) -> Optional[float]:
        """None when ``uid`` may go on (one token taken), else the seconds until it may."""
        return self._take(uid)[0]

    def _take(self, uid: int) -> Tuple[Optional[float], bool]:
        """``(wait, first)``: ``wait`` as ``take`` gives it; ``first`` for the first refusal of ``uid`` in
        ``RATE_LOG_EVERY`` seconds."""
        if uid in self.exempt:
            return None, False
        with self._lock:
            now = self.clock()
            tokens, then = self._buckets.get(uid, (self.burst, now))
            tokens = min(self.burst, tokens + max(0.0, now - then) * self.rate)
            if tokens < 1.0:
                self._buckets[uid] = (tokens, now)
                first = now - self._logged.get(uid, now - RATE_LOG_EVERY) >= RATE_LOG_EVERY
                if first:
                    self._logged[uid] = now
                return (1.0 - tokens) / self.rate, first
            self._buckets[uid] = (tokens - 1.0, now)
            if len(self._buckets) > RATE_PEERS:
                full = [key for key, (left, when) in self._buckets.items()
                        if left + (now - when) * self.rate >= self.burst]
                for key in full:
                    del self._buckets[key]
                    self._logged.pop(key, None)
            return None, False

    def check(self, uid: int, request: object) -> None:
        """Raise ``Refused`` when ``request`` is one of ``ops`` and ``uid`` has used its share."""
        if not isinstance(request, dict) or request.get("op") not in self.ops:
            return
        wait, first = self._take(uid)
        if wait is not None:
            raise RateLimited("rate limited: uid %d asked for more than %d of %s at once, or more than %g a "
                              "second; try again in %.2fs" % (uid, self.burst, ", ".join(self.ops), self.rate, wait),
                              first)


class RateLimits:
    """A ``RateLimit`` for each class of operations (``RATE_CLASSES``: writes, releases, looks), so that every
    operation a peer asks for takes from a bucket, and one class spent never starves another."""

    def __init__(self, classes: Sequence[Tuple[Iterable[str], float, float]] = RATE_CLASSES,
                 exempt: Iterable[int] = (0,), clock: Clock = time.monotonic) -> None:
        self.limits = [RateLimit(rate, burst, exempt, clock, ops) for ops, burst, rate in classes]

    def check(self, uid: int, request: object) -> None:
        """Raise ``Refused`` when ``uid`` has used its share of the class ``request``'s op is in."""
        for limit in self.limits:
            limit.check(uid, request)


class LogLimit:
    """A peer's log lines, limited: ``burst`` at once, then ``rate`` a second, per uid (a token bucket, as
    requests). A line past it is dropped and counted; once ``window`` seconds after the first dropped, one line
    says how many: ``uid 1000: 4711 similar lines dropped in the last 60 s``. ``flush`` says it for every uid
    whose window is over (the helper calls it twice a second, so a flood that stops is still counted)."""

    def __init__(self, log: Callable[[str], object], burst: float = LOG_BURST, rate: float = LOG_PER_SECOND,
                 window: float = LOG_WINDOW, clock: Clock = time.monotonic) -> None:
        self.log, self.window, self.clock = log, float(window), clock
        self._bucket = RateLimit(rate, burst, exempt=(), clock=clock)
        self._dropped: Dict[int, List[float]] = {}  # uid -> [count, when the first was dropped]
        self._lock = threading.Lock()

    def __call__(self, line: str, uid: Optional[int] = None) -> None:
        """Log ``line`` of the peer ``uid`` (None: the helper's own line, never limited)."""
        if uid is None:
            self.log(line)
            return
        self.flush()
        if self._bucket.take(uid) is None:
            self.log(line)
            return
        with self._lock:
            dropped = self._dropped.setdefault(uid, [0, self.clock()])
            dropped[0] += 1

    def flush(self) -> None:
        """Say what was dropped for each uid whose window is over."""
        with self._lock:
            now = self.clock()
            due = sorted((uid, count, now - since) for uid, (count, since) in self._dropped.items()
                         if now - since >= self.window)
            for uid, _count, _seconds in due:
                del self._dropped[uid]
        for uid, count, seconds in due:
            self.log("uid %d: %d similar lines dropped in the last %d s" % (uid, count, round(seconds)))
