"""One database connection of the relay that comes back after the database went away."""

from __future__ import annotations

import asyncio
import contextlib
import logging
from typing import Any

import psycopg

from outbox.db import async_connect
from outbox.errors import OutboxError

__all__ = ["DB_LOST", "Connection"]

log = logging.getLogger("outbox.relay")

# Errors that mean "the database connection is gone": reconnect and carry on.
# A failover can leave the relay on a read-only replica, and a connection pooler can lose the
# server's prepared statements: a fresh connection mends both.
DB_LOST = (
    psycopg.OperationalError,
    psycopg.InterfaceError,
    psycopg.errors.ReadOnlySqlTransaction,
    psycopg.errors.InvalidSqlStatementName,
    psycopg.errors.DuplicatePreparedStatement,
    psycopg.errors.IdleInTransactionSessionTimeout,  # the server cut off a hung round
)


class Connection:
    """One psycopg connection shared by many tasks, reconnecting with backoff when lost.

    One reconnect at a time: the tasks that find the connection gone while another reconnects
    wait for that connection instead of opening one each (after a failover, a relay's waiting
    sends would otherwise all hit the recovering server, and all but one connection would be
    left open and unused).
    """

    def __init__(
        self, url: str, name: str, stopping: asyncio.Event, *, prepare: bool = True
    ) -> None:
        self._url = url
        self._prepare = prepare
        self._name = name
        self._stopping = stopping
        self._conn: psycopg.AsyncConnection[Any] | None = None
        self._connecting = asyncio.Lock()
        self._closing: set[asyncio.Task[None]] = set()

    async def get(self) -> psycopg.AsyncConnection[Any]:
        conn = self._conn
        if conn is not None and not conn.closed:
            return conn
        async with self._connecting:
            if self._conn is None or self._conn.closed:
                self._conn = await self._connect_with_backoff()
            return self._conn

    async def _connect_with_backoff(self) -> psycopg.AsyncConnection[Any]:
        from tenacity import (  # noqa: PLC0415 - keeps import time of the CLI low
            AsyncRetrying,
            retry_if_exception,
            retry_if_exception_type,
            wait_exponential,
        )

        stopping = self._stopping
        async for attempt in AsyncRetrying(
            wait=wait_exponential(multiplier=0.1, max=5.0),
            # While stopping, one try: the reaper covers what cannot be written now.
            retry=retry_if_exception_type(OutboxError)
            & retry_if_exception(lambda _err: not stopping.is_set()),
            reraise=True,
        ):
            with attempt:
                conn = await async_connect(self._url, prepare=self._prepare)
                log.info("%s connection to the database is up", self._name)
                return conn
        raise AssertionError("unreachable")

    @property
    def backend_pid(self) -> int | None:
        """The server process of the current connection (NOTIFY names its sender by it)."""
        return None if self._conn is None or self._conn.closed else self._conn.info.backend_pid

    def lost(self, err: BaseException, conn: psycopg.AsyncConnection[Any] | None = None) -> None:
        """``conn`` failed with ``err``: drop it, unless another task has already replaced it
        (then the connection in use now is a fresh one, and stays)."""
        if conn is not None and conn is not self._conn:
            return
        log.warning("%s connection lost (%s); reconnecting", self._name, err)
        if self._conn is not None:
            old, self._conn = self._conn, None
            with contextlib.suppress(Exception):
                # Referenced until done: the event loop keeps only weak references to tasks.
                closing = asyncio.get_running_loop().create_task(old.close())
                self._closing.add(closing)
                closing.add_done_callback(self._closing.discard)

    async def close(self) -> None:
        if self._conn is not None:
            with contextlib.suppress(Exception):
                await self._conn.close()
            self._conn = None
        await asyncio.gather(*self._closing, return_exceptions=True)
