"""What a relay answers on ``/healthz`` and ``/readyz``: whether it is alive, and whether it
is claiming now.

Alive (``/healthz``, and the systemd watchdog) means the relay's own loop runs: its heartbeat
tried the database within ``live_after`` seconds, whatever the answer, and nothing fatal stops
it. An outage of the database or of Telegram is not a reason to restart a relay (a restart
brings neither back, and the relay rides it out by itself), so a liveness probe does not fail
for one. Ready (``/readyz``) means it can work and claims: the database answers its heartbeat
(one that fails makes it not ready at once; one that hangs after ``stale_after`` seconds
without a success), the Bot API accepted the token, the claim loop runs, it is not stopping,
and it is not held back by Telegram's flood control or by a Bot API that none of its bots can
reach (``outbox.relay.reach``).

The relay's event loop writes these facts; the metrics thread reads them. Each is one
attribute assignment, so a reader sees either the old fact or the new one.
"""

from __future__ import annotations

import time
from collections.abc import Callable

__all__ = ["LIVE_AFTER", "Health"]

# A relay whose heartbeat has not even tried the database for this long is stuck: its loop does
# not run. Above a connect timeout plus an answer timeout (``outbox.relay.store``), so that a
# try that waits for a silent server does not count as stuck.
LIVE_AFTER = 60.0


class Health:
    def __init__(
        self,
        *,
        stale_after: float,
        live_after: float = LIVE_AFTER,
        clock: Callable[[], float] = time.monotonic,
    ):
        self._stale_after = stale_after
        self._live_after = live_after
        self._clock = clock
        self._tried_at = clock()  # the heartbeat's last try, answered or not
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

    def heartbeat_tried(self) -> None:
        """The heartbeat's loop went round (the database answered or not): alive."""
        self._tried_at = self._clock()

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

    def stuck(self) -> str | None:
        """Why the relay is not alive, in one line (``/healthz``); None while it is."""
        if self._fatal is not None:
            return self._fatal
        silent = self._clock() - self._tried_at
        if silent > self._live_after:
            return f"stuck: the heartbeat has not run for {silent:.0f} s"
        return None

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
