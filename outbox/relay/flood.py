"""Flood control: Telegram's 429 pauses the whole bot, in this relay and in the others."""

from __future__ import annotations

import logging

import psycopg

from outbox import queries
from outbox.errors import OutboxError
from outbox.ratelimit import RateLimiter
from outbox.relay.connection import DB_LOST, Connection

__all__ = ["MAX_PEER_PAUSE", "FloodControl"]

log = logging.getLogger("outbox.relay")

# A pause announced by another relay longer than this is not believed (a garbled payload).
MAX_PEER_PAUSE = 3600.0


class FloodControl:
    """The bot's pause, kept in the rate limiter that every send books its slot with.

    A 429 pauses this relay at once and is announced to the other relays (NOTIFY on the pause
    channel) with the next write; a pause another relay announces pauses this one too.
    """

    def __init__(self, limiter: RateLimiter, *, schema: str) -> None:
        self._limiter = limiter
        self._schema = schema
        self._to_announce = 0.0  # seconds, not yet told to the other relays

    def paused_for(self, now: float) -> float:
        return self._limiter.paused_for(now)

    def flooded(self, retry_after: float, now: float) -> None:
        """Telegram answered 429: every send of this bot waits, and the other relays are told."""
        self._limiter.pause(retry_after, now)
        self._to_announce = max(self._to_announce, retry_after)

    def heard(self, payload: str, now: float) -> bool:
        """Another relay announced a pause (``payload``: seconds); True if it was taken."""
        try:
            seconds = float(payload)
        except ValueError:
            return False
        if not 0 < seconds <= MAX_PEER_PAUSE:  # also refuses nan
            return False
        self._limiter.pause(seconds, now)
        log.warning("flood control: another relay must wait %g s; this one waits too", seconds)
        return True

    async def announce(self, connection: Connection) -> None:
        """Tell the other relays about a pause this relay got, if there is one to tell."""
        if not self._to_announce:
            return
        seconds, self._to_announce = self._to_announce, 0.0
        conn = None
        try:
            conn = await connection.get()
            await queries.announce_pause(conn, seconds, schema=self._schema)
        except (psycopg.Error, OutboxError) as err:
            # Best effort: the other relays find out from Telegram instead, one 429 each.
            log.warning("could not tell the other relays about flood control: %s", err)
            if isinstance(err, DB_LOST):
                connection.lost(err, conn)
