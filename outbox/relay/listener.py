"""The listener: LISTEN for new rows and for flood control announced by other relays."""

from __future__ import annotations

import asyncio
from typing import Any

import psycopg

from outbox.relay.store import DatabaseLost, OutageLog, Store
from outbox.schema import notify_channel, pause_channel

__all__ = ["Listener"]


class Listener:
    """Wakes the claimer on NOTIFY; after a reconnect it wakes it at once (notes may be lost).

    A pause announced for ``bot`` by another relay wakes it too, so that it reads the bot's
    state row at once; the payload itself is not believed (only the state row pauses), and the
    relay's own announcements, made on ``announcer``'s connection, are not news.
    """

    def __init__(
        self,
        url: str,
        *,
        schema: str,
        bot: str,
        announcer: Store,
        stopping: asyncio.Event,
        wakeup: asyncio.Event,
        outage: OutageLog | None = None,
    ) -> None:
        self._store = Store(url, "listen", stopping, outage=outage)
        self._schema = schema
        self._bot = bot
        self._announcer = announcer
        self._wakeup = wakeup

    async def run(self) -> None:
        """Listen until cancelled."""
        try:
            while True:
                try:
                    await self._store.run(self._subscribe, retry=True)
                    await self._store.run(self._hear)
                except DatabaseLost:
                    continue  # the store waits before it connects again
        finally:
            await self._store.close()

    async def _subscribe(self, conn: psycopg.AsyncConnection[Any]) -> None:
        await conn.execute(f'LISTEN "{pause_channel(self._schema)}"')
        await conn.execute(f'LISTEN "{notify_channel(self._schema)}"')
        self._wakeup.set()  # what was notified while this connection was down is lost

    async def _hear(self, conn: psycopg.AsyncConnection[Any]) -> None:
        pause = pause_channel(self._schema)
        async for notify in conn.notifies():
            if notify.channel != pause or self._is_news(notify):
                self._wakeup.set()

    def _is_news(self, pause: psycopg.Notify) -> bool:
        return pause.payload == self._bot and pause.pid != self._announcer.backend_pid
