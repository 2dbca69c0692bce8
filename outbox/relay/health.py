"""What a relay answers on ``/healthz`` and ``/readyz``: whether it can work, and whether it is
claiming now.

Healthy means the database answers (the heartbeat's statement, every few seconds, is the
probe) and the Bot API accepted the token. A heartbeat that fails makes the relay unhealthy at
once; one that hangs does after ``stale_after`` seconds without a success. Ready means healthy,
running its claim loop, not stopping, and not held back by Telegram's flood control or by a
Bot API that none of its bots can reach (``outbox.relay.reach``).

The relay's event loop writes these facts; the metrics thread reads them. Each is one
attribute assignment, so a reader sees either the old fact or the new one.
"""

from __future__ import annotations

import time
from collections.abc import Callable

__all__ = ["Health"]


class Health:
    def __init__(self, *, stale_after: float, clock: Callable[[], float] = time.monotonic):
        self._stale_after = stale_after
        self._clock = clock
        self._database_ok_at: float | None = None
        self._database_problem: str | None = "starting: the database has not answered yet"
        self._bot_api_problem: str | None = "starting: the Bot API has not accepted the token yet"
        self._fatal: str | None = None
        # Every bot of the relay is cut off from the Bot API: not ready, still healthy (a
        # restart cannot bring Telegram back).
        self._telegram_problem: str | None = None
        self._running = False
        self._stopping = False

    # --- written by the relay --------------------------------------------------------------

    def database_ok(self) -> None:
        self._database_ok_at = self._clock()
        self._database_problem = None

    def database_failed(self, reason: str) -> None:
        self._database_problem = f"database unavailable: {_one_line(reason)}"

    def token_ok(self) -> None:
        self._bot_api_problem = None

    def token_pending(self, reason: str) -> None:
        self._bot_api_problem = f"the Bot API cannot be reached yet: {_one_line(reason)}"

    def telegram_unreachable(self, reason: str) -> None:
        self._telegram_problem = f"cannot reach Telegram: {_one_line(reason)}"

    def telegram_reachable(self) -> None:
        self._telegram_problem = None

    def fatal(self, reason: str) -> None:
        """The relay cannot go on (a rejected token, a writer that died): it is stopping."""
        self._fatal = _one_line(reason)

    def running(self) -> None:
        self._running = True

    def stopping(self) -> None:
        self._stopping = True

    # --- read by the probes ----------------------------------------------------------------

    def problem(self) -> str | None:
        """Why the relay cannot work now, in one line; None while it can."""
        if self._fatal is not None:
            return self._fatal
        if self._database_problem is not None:
            return self._database_problem
        if self._database_ok_at is not None:
            silent = self._clock() - self._database_ok_at
            if silent > self._stale_after:
                return f"database unavailable: no answer for {silent:.0f} s"
        return self._bot_api_problem

    def not_ready(self, paused_seconds: float = 0.0) -> str | None:
        """Why the relay does not claim now, in one line; None while it does."""
        problem = self.problem()
        if problem is not None:
            return problem
        if self._stopping:
            return "stopping: no new claims"
        if not self._running:
            return "starting: not claiming yet"
        if self._telegram_problem is not None:
            return self._telegram_problem
        if paused_seconds > 0:
            return f"flood control: Telegram asked to wait {paused_seconds:.0f} s more"
        return None


def _one_line(text: str) -> str:
    lines = text.strip().splitlines()
    return lines[0] if lines else "unknown error"
