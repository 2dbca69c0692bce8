"""What a relay answers on ``/healthz`` (alive: its heartbeat's loop runs; an outage of the
database or of Telegram is no reason for a restart) and ``/readyz`` (it claims now), as
docs/operations.md says. The relay's event loop writes these facts and the metrics thread
reads them: each is one attribute assignment, so a reader sees the old fact or the new one.
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
