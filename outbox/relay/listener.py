"""The listener: LISTEN for new rows and for flood control announced by other relays."""

from __future__ import annotations

import asyncio
from collections.abc import Callable

import psycopg

from outbox.relay.connection import DB_LOST, Connection
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
    ) -> None:
        self._connection = Connection(url, "listen", stopping)
        self._schema = schema
        self._on_new_rows = on_new_rows
        self._on_pause = on_pause

    async def run(self) -> None:
        """Listen until cancelled."""
        pause = pause_channel(self._schema)
        try:
            while True:
                conn = await self._connection.get()
                try:
                    await conn.execute(f'LISTEN "{pause}"')
                    await conn.execute(f'LISTEN "{notify_channel(self._schema)}"')
                    self._on_new_rows()
                    async for notify in conn.notifies():
                        if notify.channel == pause:
                            self._on_pause(notify)
                        else:
                            self._on_new_rows()
                except DB_LOST as err:
                    self._connection.lost(err, conn)
                    await asyncio.sleep(0.1)
        finally:
            await self._connection.close()
