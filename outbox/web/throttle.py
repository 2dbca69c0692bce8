"""How many wrong passwords the page listens to, per client and from everyone together (the
figures: docs/web.md, "Sign-in limits"; everyone's is a bucket refilled as time passes).

While locked out, the password is not even compared: the right one is refused too, so a lock
tells a guesser nothing.
"""

from __future__ import annotations

import ipaddress
import logging
import math
import time
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass, field

__all__ = [
    "FAILURES_ALLOWED",
    "FIRST_LOCK",
    "LONGEST_LOCK",
    "OVERALL_PER_SECOND",
    "WINDOW",
    "SignInThrottle",
    "client_key",
]

log = logging.getLogger("outbox.web")

FAILURES_ALLOWED = 5
WINDOW = 60.0
FIRST_LOCK = 60.0
LONGEST_LOCK = 3600.0
OVERALL_PER_SECOND = 10.0
FORGIVE_AFTER = 24 * 3600.0  # a day without a wrong password: the lockouts are forgotten
MAX_CLIENTS = 10_000  # clients remembered at once; beyond, the longest quiet are forgotten
_OVERALL_LOG_EVERY = 60.0


def client_key(address: str | None) -> str:
    """The unit of the per-client limit: the address, or for IPv6 its /64 (one person usually
    has a whole one)."""
    if not address:
        return "unknown"
    try:
        ip = ipaddress.ip_address(address)
    except ValueError:
        return address
    if isinstance(ip, ipaddress.IPv6Address):
        if ip.ipv4_mapped is not None:
            return str(ip.ipv4_mapped)
        return str(ipaddress.IPv6Network((ip, 64), strict=False))
    return str(ip)


@dataclass(slots=True)
class _Client:
    failures: deque[float] = field(default_factory=deque)  # recent wrong passwords (clock)
    locked_until: float = 0.0
    lockouts: int = 0  # since the last sign-in: the next lock lasts 2**lockouts x FIRST_LOCK
    last_failure: float = 0.0


class SignInThrottle:
    """The page's memory of wrong passwords (it ends with the process)."""

    def __init__(
        self,
        *,
        overall_per_second: float = OVERALL_PER_SECOND,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.overall_per_second = overall_per_second
        self._clock = clock
        self._clients: dict[str, _Client] = {}
        self._tokens = overall_per_second
        self._refilled = clock()
        self._overall_logged = -math.inf
        self._overall_refused = 0

    def wait_seconds(self, client: str) -> int:
        """Whole seconds before ``client`` may try a password; 0: it may now."""
        now = self._clock()
        known = self._clients.get(client)
        if known is not None and known.locked_until > now:
            return math.ceil(known.locked_until - now)
        self._refill(now)
        if self._tokens >= 1:
            return 0
        self._overall_refused += 1
        if now - self._overall_logged >= _OVERALL_LOG_EVERY:
            log.warning(
                "web: more than %g wrong passwords a second from all clients together: "
                "password checks wait (%d refused since the last such line)",
                self.overall_per_second,
                self._overall_refused,
            )
            self._overall_logged, self._overall_refused = now, 0
        return max(1, math.ceil((1 - self._tokens) / self.overall_per_second))

    def failed(self, client: str) -> None:
        now = self._clock()
        self._refill(now)
        self._tokens = max(self._tokens - 1, 0.0)
        known = self._clients.pop(client, None)
        if known is None or now - known.last_failure > FORGIVE_AFTER:
            known = _Client()
        self._clients[client] = known  # the most recently failing last: evicted last
        known.last_failure = now
        known.failures.append(now)
        while known.failures and known.failures[0] <= now - WINDOW:
            known.failures.popleft()
        if known.lockouts or len(known.failures) >= FAILURES_ALLOWED:
            seconds = min(FIRST_LOCK * 2**known.lockouts, LONGEST_LOCK)
            known.locked_until = now + seconds
            known.lockouts += 1
            known.failures.clear()
            log.warning(
                "web: sign-in locked for %d s for client %s after %s",
                seconds,
                client,
                f"{FAILURES_ALLOWED} wrong passwords within {WINDOW:g} s"
                if known.lockouts == 1
                else "another wrong password after a lockout",
            )
        self._forget_quiet(now)

    def succeeded(self, client: str) -> None:
        self._clients.pop(client, None)

    def _refill(self, now: float) -> None:
        elapsed = max(now - self._refilled, 0.0)
        self._tokens = min(
            self._tokens + elapsed * self.overall_per_second, self.overall_per_second
        )
        self._refilled = now

    def _forget_quiet(self, now: float) -> None:
        if len(self._clients) <= MAX_CLIENTS:
            return
        # Those quiet for a whole longest lock first, then the longest quiet (dict order).
        quiet = now - LONGEST_LOCK
        for key, known in list(self._clients.items()):
            if known.last_failure < quiet and known.locked_until < now:
                del self._clients[key]
        while len(self._clients) > MAX_CLIENTS:
            del self._clients[next(iter(self._clients))]
