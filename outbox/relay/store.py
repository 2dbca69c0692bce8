"""One store per relay connection: it owns the connection and is the one place that deals
with a database that went away or cannot be used (docs/operations.md, database outages).

A failed connect and a first statement that fails (PostgreSQL down behind PgBouncer, which
still takes the login; a read-only standby after a failover) are handled alike: the connection
is dropped and the next connect waits out a backoff, capped near a second so that delivery
resumes within about a second of the database being usable again. A step that gets no answer
for ``ANSWER_TIMEOUT`` seconds (a hung server, a silent link) has its connection cut by the
relay's own clock, not the kernel's.
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import logging
import os
import socket
import time
from collections.abc import Awaitable, Callable
from typing import TYPE_CHECKING, Any, TypeVar

import psycopg

from outbox.db import async_connect
from outbox.errors import DatabaseUnavailable, OutboxError

if TYPE_CHECKING:
    from tenacity.wait import wait_base

__all__ = [
    "ANSWER_TIMEOUT",
    "DB_LOST",
    "DatabaseLost",
    "NoAnswer",
    "OutageLog",
    "Store",
    "backoff_seconds",
]

log = logging.getLogger("outbox.relay")

T = TypeVar("T")

# Errors that mean "this connection cannot be used": drop it and connect again after a backoff.
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

# Seconds a step may wait for the database's answer. The relay's statements take milliseconds;
# a claim or a write that waits this long is not coming back (a hung server, a silent link).
ANSWER_TIMEOUT = 10.0

# A summary of an outage first after this many seconds, then twice as long each time, up to
# _SUMMARY_MAX: a long outage costs a line a minute, not a line per attempt.
_SUMMARY_FIRST = 5.0
_SUMMARY_MAX = 60.0


class DatabaseLost(DatabaseUnavailable):
    """The store could not run a step now: the database cannot be reached or used."""


class NoAnswer(psycopg.OperationalError):
    """The database did not answer a step within the store's answer timeout."""


@functools.cache
def _backoff() -> wait_base:
    from tenacity import wait_exponential, wait_random  # noqa: PLC0415 - CLI import time

    # 0.05, 0.1, 0.2, 0.4, then 0.75 s, each plus up to 0.25 s of jitter: a few connects per
    # second at most, and never more than a second between two while the database is away.
    return wait_exponential(multiplier=0.05, max=0.75) + wait_random(0, 0.25)


def backoff_seconds(failures: int) -> float:
    """Seconds to wait before the next connect after ``failures`` failures in a row."""
    from tenacity import AsyncRetrying, RetryCallState  # noqa: PLC0415 - CLI import time

    state = RetryCallState(AsyncRetrying(), None, (), {})
    state.attempt_number = max(1, failures)
    return float(_backoff()(state))


def _reason(err: BaseException) -> str:
    text = str(err).strip()
    return text.splitlines()[0] if text else type(err).__name__


class OutageLog:
    """What a relay says while its database cannot be used: the cause once, then a summary
    now and then ("still unavailable for 30 s, 12 attempts"), then the recovery; and once per
    outage that the database is read-only."""

    def __init__(self, clock: Callable[[], float] = time.monotonic) -> None:
        self._clock = clock
        self._since: float | None = None
        self._attempts = 0
        self._next_summary = 0.0
        self._summary_every = _SUMMARY_FIRST
        self._said_read_only = False

    def failed(self, store: str, err: BaseException) -> None:
        now = self._clock()
        self._attempts += 1
        if self._since is None:
            self._since, self._next_summary = now, now + _SUMMARY_FIRST
            self._summary_every = _SUMMARY_FIRST
            log.warning("%s connection lost (%s); reconnecting with backoff", store, _reason(err))
        elif now >= self._next_summary:
            self._summary_every = min(self._summary_every * 2, _SUMMARY_MAX)
            self._next_summary = now + self._summary_every
            log.warning(
                "database still unavailable for %.0f s, %d attempts (last: %s)",
                now - self._since,
                self._attempts,
                _reason(err),
            )
        else:
            log.debug("%s connection failed (%s)", store, _reason(err))
        if isinstance(err, psycopg.errors.ReadOnlySqlTransaction) and not self._said_read_only:
            self._said_read_only = True
            log.warning(
                "the database is read-only: is this a standby? The relay waits until it "
                "takes writes (point the URL at the primary, or add target_session_attrs="
                "read-write to a URL that lists every host)"
            )

    def recovered(self) -> None:
        if self._since is None:
            return
        log.info(
            "the database is usable again after %.0f s, %d attempts",
            self._clock() - self._since,
            self._attempts,
        )
        self._since, self._attempts, self._said_read_only = None, 0, False


class _Watch:
    """Calls ``on_silence`` once ``timeout`` seconds pass without ``heard``."""

    def __init__(self, timeout: float, on_silence: Callable[[], None]) -> None:
        self._timeout = timeout
        self._on_silence = on_silence
        self._loop = asyncio.get_running_loop()
        self._deadline = time.monotonic() + timeout
        self._handle = self._loop.call_later(timeout, self._check)

    def heard(self) -> None:
        self._deadline = time.monotonic() + self._timeout

    def cancel(self) -> None:
        self._handle.cancel()

    def _check(self) -> None:
        left = self._deadline - time.monotonic()
        if left > 0:
            self._handle = self._loop.call_later(left, self._check)
        else:
            self._on_silence()


class Store:
    """One psycopg connection of the relay, shared by the tasks of one service.

    ``run(step)`` runs ``step`` on the connection and is the only place that handles its loss.
    One reconnect at a time: tasks that find the connection gone while another reconnects wait
    for that connection instead of opening one each, and a failure is counted once per
    connection, however many tasks saw it.
    """

    def __init__(
        self,
        url: str,
        name: str,
        stopping: asyncio.Event,
        *,
        prepare: bool = True,
        outage: OutageLog | None = None,
        answer_timeout: float = ANSWER_TIMEOUT,
    ) -> None:
        self._url = url
        self._answer_timeout = answer_timeout
        self._prepare = prepare
        self.name = name
        self._stopping = stopping
        self._outage = outage or OutageLog()
        self._conn: psycopg.AsyncConnection[Any] | None = None
        self._confirmed = False  # a statement succeeded on the current connection
        self._connecting = asyncio.Lock()
        self._closing: set[asyncio.Task[None]] = set()
        self._failures = 0  # in a row, since the last statement that succeeded
        self._not_before = 0.0  # monotonic time of the next connect allowed
        self.connects = 0  # connections opened (or tried), for tests and figures
        self._cut: psycopg.AsyncConnection[Any] | None = None  # cut for want of an answer
        self._watches: set[_Watch] = set()

    @property
    def backend_pid(self) -> int | None:
        """The server process of the current connection (NOTIFY names its sender by it)."""
        return None if self._conn is None or self._conn.closed else self._conn.info.backend_pid

    async def run(
        self,
        step: Callable[[psycopg.AsyncConnection[Any]], Awaitable[T]],
        *,
        retry: bool = False,
        bounded: bool = True,
    ) -> T:
        """``step``'s result on this store's connection.

        If the database cannot be reached or used, ``DatabaseLost``; with ``retry``, ``step``
        runs again (after the backoff) until it succeeds, and ``DatabaseLost`` only once the
        relay is stopping. Other errors of ``step`` propagate and leave the connection be.
        ``bounded``: a step that hears nothing from the database for the store's answer
        timeout loses its connection (False for a step that waits for notifications).
        """
        while True:
            conn = None
            watch: _Watch | None = None
            try:
                conn = await self._connection()
                if bounded:
                    watch = self._watch(conn)
                result = await step(conn)
            except (*DB_LOST, OutboxError) as err:
                if isinstance(err, OutboxError) and conn is not None:
                    raise  # the step's own error, not the connection's
                if conn is not None and conn is self._cut:
                    err = NoAnswer(f"no answer from the database for {self._answer_timeout:g} s")
                self._failed(err, conn)
                if not retry or self._stopping.is_set():
                    raise DatabaseLost(f"{self.name} connection: {_reason(err)}") from err
                continue
            finally:
                if watch is not None:
                    watch.cancel()
                    self._watches.discard(watch)
            self._succeeded(conn)
            return result

    def answered(self) -> None:
        """The steps running now heard from the database (a long step's progress, such as a
        batch of retention committed): their answer timeout starts again."""
        for watch in self._watches:
            watch.heard()

    def _watch(self, conn: psycopg.AsyncConnection[Any]) -> _Watch:
        watch = _Watch(self._answer_timeout, lambda: self._cut_off(conn))
        self._watches.add(watch)
        return watch

    def _cut_off(self, conn: psycopg.AsyncConnection[Any]) -> None:
        """No answer in time: shut the connection's socket down, which ends psycopg's wait
        on it at once with a lost connection (a cancel request would meet the same silence)."""
        self._cut = conn
        with contextlib.suppress(OSError, psycopg.Error):
            sock = socket.socket(fileno=os.dup(conn.pgconn.socket))
            try:
                sock.shutdown(socket.SHUT_RDWR)
            finally:
                sock.close()

    async def _connection(self) -> psycopg.AsyncConnection[Any]:
        conn = self._conn
        if conn is not None and not conn.closed:
            return conn
        async with self._connecting:
            if self._conn is None or self._conn.closed:
                delay = self._not_before - time.monotonic()
                if delay > 0:
                    await asyncio.sleep(delay)
                self.connects += 1
                self._conn = await async_connect(self._url, prepare=self._prepare)
                self._confirmed = False
            return self._conn

    def _failed(self, err: BaseException, conn: psycopg.AsyncConnection[Any] | None) -> None:
        """``conn`` (None: the connect) failed with ``err``: drop it and back off, unless
        another task has already replaced it (then that failure was counted, and the
        connection in use now is a fresh one)."""
        if conn is not None and conn is not self._conn:
            return
        self._failures += 1
        self._not_before = time.monotonic() + backoff_seconds(self._failures)
        self._outage.failed(self.name, err)
        if self._conn is not None:
            old, self._conn = self._conn, None
            with contextlib.suppress(Exception):
                # Referenced until done: the event loop keeps only weak references to tasks.
                closing = asyncio.get_running_loop().create_task(old.close())
                self._closing.add(closing)
                closing.add_done_callback(self._closing.discard)

    def _succeeded(self, conn: psycopg.AsyncConnection[Any]) -> None:
        if conn is not self._conn or self._confirmed:
            return
        self._confirmed = True
        if self._failures:
            self._failures = 0
            self._outage.recovered()
        log.info("%s connection to the database is up", self.name)

    async def close(self) -> None:
        if self._conn is not None:
            with contextlib.suppress(Exception):
                await self._conn.close()
            self._conn = None
        await asyncio.gather(*self._closing, return_exceptions=True)
