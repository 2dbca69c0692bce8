"""The listener: LISTEN for new rows and for flood control announced by other relays."""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Callable, Collection
from typing import Any

import psycopg

from outbox.relay.store import DatabaseLost, OutageLog, Store
from outbox.schema import notify_channel, pause_channel

__all__ = ["Listener"]


class Listener:
    """Wakes the claimer on NOTIFY; after a reconnect it wakes it at once (notes may be lost).

    A pause announced for one of ``bots`` by another relay wakes it too, so that it reads the
    bot's state row at once; the payload itself is not believed (only the state row pauses), and the
    relay's own announcements, made on ``announcer``'s connection, are not news.
    """

    def __init__(
        self,
        url: str,
        *,
        schema: str,
        bots: Callable[[], Collection[str]],
        announcer: Store,
        stopping: asyncio.Event,
        wakeup: asyncio.Event,
        outage: OutageLog | None = None,
    ) -> None:
        self.name = "listener"
        self._store = Store(url, "listen", stopping, outage=outage)
        self._schema = schema
        self._bots = bots  # the bots whose pauses are news here (the lanes', which change)
        self._announcer = announcer
        self._wakeup = wakeup
        self._stop = asyncio.Event()

    async def run(self) -> None:
        """Listen until ``stop()``; then close the connection and return."""
        stop = asyncio.create_task(self._stop.wait())
        try:
            while not self._stop.is_set():
                # A stop gives up the wait for the next notification (or for the database),
                # nothing half done: hearing holds no transaction.
                listening = asyncio.create_task(self._listen(), name="outbox-listen")
                try:
                    done, _ = await asyncio.wait(
                        {listening, stop}, return_when=asyncio.FIRST_COMPLETED
                    )
                    if listening in done:
                        listening.result()  # a bug surfaces (the relay logs it); else go on
                finally:
                    listening.cancel()
                    await asyncio.gather(listening, return_exceptions=True)
        finally:
            stop.cancel()
            await self._store.close()

    def stop(self) -> None:
        self._stop.set()

    async def _listen(self) -> None:
        """Subscribe, then hear until the connection is lost (the store backs off before the
        next connect)."""
        with contextlib.suppress(DatabaseLost):
            await self._store.run(self._subscribe, retry=True)
            # Hearing waits for notifications as long as there are none: no answer timeout
            # (the connection's keepalives find a silent link).
            await self._store.run(self._hear, bounded=False)

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
        return pause.payload in self._bots() and pause.pid != self._announcer.backend_pid
