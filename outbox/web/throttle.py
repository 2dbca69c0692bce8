"""How many wrong passwords the page listens to: per client, and from everyone together.

* A client (an IP address; an IPv6 /64, which one person usually has whole) that gives
  ``FAILURES_ALLOWED`` wrong passwords within ``WINDOW`` seconds is locked out for ``FIRST_LOCK``
  seconds; each wrong password after that, until it signs in, locks it again for twice as long,
  up to ``LONGEST_LOCK`` (a day without a wrong password forgets the lockouts).
* Everyone together may give ``OVERALL_PER_SECOND`` wrong passwords a second (a bucket of that
  many, refilled as time passes); when it is empty, every password check waits, so that many
  addresses together guess no faster than that.

While locked out, the password is not even compared: the right one is refused too, so a lock
tells a guesser nothing. A signed-in session needs no password and is never throttled. Every
lockout is one log line, without the password; the overall cap logs at most once a minute.
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
    """The unit of the per-client limit: the address, or its /64 for IPv6."""
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
        failures_allowed: int = FAILURES_ALLOWED,
        window: float = WINDOW,
        first_lock: float = FIRST_LOCK,
        longest_lock: float = LONGEST_LOCK,
        overall_per_second: float = OVERALL_PER_SECOND,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.failures_allowed = failures_allowed
        self.window = window
        self.first_lock = first_lock
        self.longest_lock = longest_lock
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
        """A wrong password from ``client``: count it, and lock the client out if it is time."""
        now = self._clock()
        self._refill(now)
        self._tokens = max(self._tokens - 1, 0.0)
        known = self._clients.pop(client, None)
        if known is None or now - known.last_failure > FORGIVE_AFTER:
            known = _Client()
        self._clients[client] = known  # the most recently failing last: evicted last
        known.last_failure = now
        known.failures.append(now)
        while known.failures and known.failures[0] <= now - self.window:
            known.failures.popleft()
        if known.lockouts or len(known.failures) >= self.failures_allowed:
            seconds = min(self.first_lock * 2**known.lockouts, self.longest_lock)
            known.locked_until = now + seconds
            known.lockouts += 1
            known.failures.clear()
            log.warning(
                "web: sign-in locked for %d s for client %s after %s",
                seconds,
                client,
                f"{self.failures_allowed} wrong passwords within {self.window:g} s"
                if known.lockouts == 1
                else "another wrong password after a lockout",
            )
        self._forget_quiet(now)

    def succeeded(self, client: str) -> None:
        """The right password: the client's count starts again."""
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
        quiet = now - self.longest_lock
        for key, known in list(self._clients.items()):
            if known.last_failure < quiet and known.locked_until < now:
                del self._clients[key]
        while len(self._clients) > MAX_CLIENTS:
            del self._clients[next(iter(self._clients))]
