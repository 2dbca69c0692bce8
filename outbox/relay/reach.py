"""Whether this relay can reach the Bot API: a pause of its own, apart from Telegram's flood
pause (shared by a bot's relays) and an operator's pause (docs/operations.md, network cuts).

A send that could not connect (``FailureKind.UNREACHABLE``) is the relay's problem, not its
message's: the row goes back keeping its place and its attempts, and the relay's bots stop
sending in this relay only (another relay may reach Telegram well) until a ``getMe`` probe,
one at a time, is answered.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Awaitable, Callable

from outbox.relay.service import wait_for_stop

__all__ = ["PROBE_MAX_DELAY", "TelegramReach", "probe_delay"]

log = logging.getLogger("outbox.relay")

PROBE_FIRST_DELAY = 0.5
PROBE_MAX_DELAY = 4.0  # the longest wait between two probes: resumes within this of a repair
# A summary of a long cut first after this many seconds, then twice as long each time.
_SUMMARY_FIRST = 30.0
_SUMMARY_MAX = 300.0


def probe_delay(probes: int) -> float:
    """Seconds to wait before the next probe, after ``probes`` failed in a row: 0.5, 1, 2,
    then 4 s."""
    return min(PROBE_FIRST_DELAY * 2.0 ** max(probes, 0), PROBE_MAX_DELAY)


class TelegramReach:
    """The relay's reach of the Bot API. ``down`` while it cannot be reached: its bots' lanes
    claim nothing and send nothing; ``run`` probes until it answers.

    ``bots`` names them in the log ("bot 123456", or a few and how many more); ``probe``
    returns whether the Bot API answered; ``on_change`` is called when ``down`` changes (the
    relay's readiness depends on it).
    """

    def __init__(
        self,
        bots: str | Callable[[], str],
        probe: Callable[[], Awaitable[bool]],
        *,
        on_change: Callable[[], None],
        wakeup: asyncio.Event,
    ) -> None:
        self._bots = bots
        self._probe = probe
        self._on_change = on_change
        self._wakeup = wakeup  # the claimer's: the bot may send again
        self.down = False
        self.reason = ""
        self._since = 0.0
        self._handed_back = 0  # rows sent back to the queue during this cut
        self._retried = 0  # rows whose send was out when the cut began: attempts counted
        self._lost = asyncio.Event()
        self._stop = asyncio.Event()

    @property
    def bots(self) -> str:
        return self._bots if isinstance(self._bots, str) else self._bots()

    def lost(self, reason: str) -> None:
        """A send could not connect: pause the sends and start probing."""
        if self.down:
            return
        self.down, self.reason, self._since = True, reason, time.monotonic()
        self._handed_back = self._retried = 0
        log.warning("cannot reach Telegram for %s: %s; pausing sends", self.bots, reason)
        self._lost.set()
        self._on_change()

    def handed_back(self) -> None:
        """A row went back to the queue unsent because of the cut."""
        self._handed_back += 1

    def retried_in_cut(self) -> bool:
        """A row's send failed and will be retried; True if that happened during a cut (its
        request left as the cut began, no answer came: maybe delivered): the summary counts
        it instead of a line of its own."""
        if self.down:
            self._retried += 1
        return self.down

    # --- the probe -----------------------------------------------------------------------

    async def run(self) -> None:
        """Probe each cut until the Bot API answers again, until ``stop()``."""
        while not self._stop.is_set():
            await self._lost.wait()
            self._lost.clear()
            if self._stop.is_set():
                return
            await self._probe_until_answered()

    def stop(self) -> None:
        self._stop.set()
        self._lost.set()

    async def _probe_until_answered(self) -> None:
        probes = 0
        summary_every = _SUMMARY_FIRST
        next_summary = self._since + summary_every
        while not await wait_for_stop(self._stop, probe_delay(probes)):
            probes += 1
            if await self._probe():
                self._resumed(probes)
                return
            now = time.monotonic()
            if now >= next_summary:
                summary_every = min(summary_every * 2, _SUMMARY_MAX)
                next_summary = now + summary_every
                log.warning(
                    "Telegram still cannot be reached for %s after %.0f s (%d probes, "
                    "%d rows handed back, %d retried)",
                    self.bots,
                    now - self._since,
                    probes,
                    self._handed_back,
                    self._retried,
                )

    def _resumed(self, probes: int) -> None:
        self.down = False
        log.info(
            "Telegram answers again for %s after %.0f s (%d probes); %d rows were handed "
            "back unsent, %d retried (sent as it began: maybe delivered); sending resumes",
            self.bots,
            time.monotonic() - self._since,
            probes,
            self._handed_back,
            self._retried,
        )
        self._on_change()
        self._wakeup.set()
