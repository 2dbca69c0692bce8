"""Flood control: Telegram's 429 pauses the whole bot, in this relay and in the others.

The pause is shared through the bot's state row (``bot_holati.pauza_tugashi``), which every
relay reads when it claims. NOTIFY on the pause channel only wakes the listening relays so that
they read it at once: its payload is never believed, so whoever can connect cannot pause the
bot with a forged one. Pauses are capped at ``MAX_FLOOD_PAUSE``, ``retry_after`` included.
"""

from __future__ import annotations

import asyncio
import functools
import logging

import psycopg

from outbox import queries
from outbox.classify import MAX_FLOOD_PAUSE
from outbox.errors import OutboxError
from outbox.relay.store import Store
from outbox.schema import DEFAULT_BOT

__all__ = ["MAX_FLOOD_PAUSE", "FloodControl"]

log = logging.getLogger("outbox.relay")

_NEWS = 0.5  # seconds: a pause read back this much longer than the one kept is another's


class FloodControl:
    """The bot's pause: while it lasts, claims wait and no send goes out. A 429 pauses this
    relay at once, and ``run()`` writes it to the bot's state row on ``store`` (without one, in
    tests, nobody is told); a pause read there pauses this relay too."""

    def __init__(self, *, schema: str, bot: str = DEFAULT_BOT, store: Store | None = None) -> None:
        self.name = "flood control"
        self._paused_until = 0.0  # loop time
        self._schema = schema
        self.bot = bot
        self._store = store
        self._to_announce = 0.0  # seconds, not yet told to the other relays
        self._announce_now = asyncio.Event()
        self._stop = asyncio.Event()
        # Telegram refused a paid broadcast (Stars balance, audience): Telegram's words, until
        # the bot's paid lane is stopped in its state row; meanwhile this relay holds it.
        self._paid_refusal: str | None = None

    def paused_for(self, now: float) -> float:
        return max(0.0, self._paused_until - now)

    def _pause(self, seconds: float, now: float) -> None:
        self._paused_until = max(self._paused_until, now + seconds)

    def flooded(self, retry_after: float, now: float) -> None:
        """Telegram answered 429: every send of this bot waits, and the other relays are told."""
        seconds = min(retry_after, MAX_FLOOD_PAUSE)
        self._pause(seconds, now)
        self._to_announce = max(self._to_announce, seconds)
        self._announce_now.set()

    def read(self, seconds: float, now: float) -> bool:
        """The bot's state row says it is paused for ``seconds``; True if that is news."""
        if not 0 < seconds <= MAX_FLOOD_PAUSE:  # also refuses nan
            return False
        # This relay's own pause reads back a moment longer (written after it began).
        news = self.paused_for(now) < seconds - _NEWS
        self._pause(seconds, now)
        if news:
            log.warning("flood control: the bot must wait %.1f s (shared by its relays)", seconds)
        return news

    def paid_refused(self, reason: str) -> None:
        """Telegram refused a paid broadcast for the bot's Stars balance or audience: its paid
        lane stops, here at once and for the other relays as soon as ``run()`` writes it."""
        if self._paid_refusal is None:
            self._paid_refusal = reason
            self._announce_now.set()

    @property
    def paid_held(self) -> bool:
        """The paid lane is stopped here and the stop is not written yet: no paid claims."""
        return self._paid_refusal is not None

    # --- telling the other relays ----------------------------------------------------------

    async def run(self) -> None:
        """Announce each pause as it comes, until ``stop()``; then the last one, and return."""
        while not self._stop.is_set():
            await self._announce_now.wait()
            self._announce_now.clear()
            await self.announce()
        await self.announce()

    def stop(self) -> None:
        self._stop.set()
        self._announce_now.set()

    async def announce(self) -> None:
        """Write the pause this relay got to the bot's state row (and any that came meanwhile);
        ``run`` does it as pauses come, ``Relay.run_once`` after its batch."""
        store = self._store
        if self._paid_refusal is not None:
            await self._stop_paid(self._paid_refusal)
        while self._to_announce and store is not None:
            seconds, self._to_announce = self._to_announce, 0.0
            try:
                await store.run(
                    functools.partial(
                        queries.announce_pause, seconds=seconds, schema=self._schema, bot=self.bot
                    )
                )
            except (psycopg.Error, OutboxError) as err:
                # Best effort: the other relays find out from Telegram instead, a 429 each.
                log.warning("could not tell the other relays about flood control: %s", err)

    async def _stop_paid(self, reason: str) -> None:
        until = None
        if self._store is not None:
            try:
                until = await self._store.run(
                    lambda conn: queries.stop_paid_lane.run_async(
                        conn, self.bot, reason, schema=self._schema
                    )
                )
            except (psycopg.Error, OutboxError) as err:
                # The next paid send is refused again, and says it again.
                log.warning("could not stop the bot's paid lane for the other relays: %s", err)
        self._paid_refusal = None
        if until is not None or self._store is None:
            log.warning(
                "bot %s: paid broadcasts stopped for an hour, its paid rows wait (the free lane "
                "goes on; `outbox resume --paid %s` starts them again): %s",
                self.bot,
                self.bot,
                reason,
            )
