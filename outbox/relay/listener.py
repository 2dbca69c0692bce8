"""The listener: LISTEN for new rows and for flood control announced by other relays."""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from typing import Any

import psycopg

from outbox.relay.store import DatabaseLost, OutageLog, Store
from outbox.schema import notify_channel, pause_channel

__all__ = ["Listener"]


class Listener:
    """Wakes the claimer on NOTIFY; after a reconnect it wakes it at once (notes may be lost)."""

    def __init__(
        self,
        url: str,
        *,
        schema: str,
        stopping: asyncio.Event,
        on_new_rows: Callable[[], None],
        on_pause: Callable[[psycopg.Notify], None],
        outage: OutageLog | None = None,
    ) -> None:
        self._store = Store(url, "listen", stopping, outage=outage)
        self._schema = schema
        self._on_new_rows = on_new_rows
        self._on_pause = on_pause

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
        self._on_new_rows()  # what was notified while this connection was down is lost

    async def _hear(self, conn: psycopg.AsyncConnection[Any]) -> None:
        pause = pause_channel(self._schema)
        async for notify in conn.notifies():
            if notify.channel == pause:
                self._on_pause(notify)
            else:
                self._on_new_rows()
