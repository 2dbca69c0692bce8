"""How far a long command is (``relay --drain``, ``prune``): one line on stderr, rewritten in
place about once a second, only when stderr is a terminal (a log file or a pipe gets nothing).
The drain's figures come from outside the relay (``Relay.snapshot()``, the database).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import sys
import time
from collections.abc import AsyncIterator, Iterator
from typing import TYPE_CHECKING, TextIO

import psycopg

from outbox import queries
from outbox.db import async_connect
from outbox.durations import format_duration
from outbox.errors import OutboxError

if TYPE_CHECKING:
    from outbox.relay import Relay

__all__ = ["ProgressLine", "drain_progress", "on_terminal"]

INTERVAL = 1.0  # seconds between two updates of the line
_CLEAR_TO_END = "\x1b[K"


def on_terminal() -> bool:
    """Whether standard error is a terminal (progress lines are for people, not logs)."""
    try:
        return sys.stderr.isatty()
    except (AttributeError, ValueError):  # a replaced or closed stream
        return False


class ProgressLine:
    """One line on a terminal, rewritten in place: ``what: done, left, rate, time to go``."""

    def __init__(self, what: str, stream: TextIO) -> None:
        self.what = what
        self.stream = stream
        self.started = time.monotonic()
        self._shown_at = float("-inf")

    def text(self, done: int, left: int | None) -> str:
        elapsed = max(time.monotonic() - self.started, 1e-9)
        rate = done / elapsed
        parts = [f"{done:,} done", "? left" if left is None else f"{left:,} left", f"{rate:,.0f}/s"]
        if left and rate > 0:
            parts.append(f"about {format_duration(max(1.0, round(left / rate)))} to go")
        return f"{self.what}: " + ", ".join(parts)

    def show(self, done: int, left: int | None) -> None:
        self.stream.write(f"\r{self.text(done, left)}{_CLEAR_TO_END}")
        self.stream.flush()

    @contextlib.contextmanager
    def above_logs(self) -> Iterator[None]:
        """While it shows, a log line to the same stream first clears it (and the next update
        draws it again below), instead of being glued to its end."""
        line = self

        class ClearLine(logging.Filter):
            def filter(self, record: logging.LogRecord) -> bool:
                line.stream.write("\r" + _CLEAR_TO_END)
                return True

        clear = ClearLine()
        handlers = [
            h for h in logging.getLogger().handlers if getattr(h, "stream", None) is self.stream
        ]
        for handler in handlers:
            handler.addFilter(clear)
        try:
            yield
        finally:
            for handler in handlers:
                handler.removeFilter(clear)

    def update(self, done: int, left: int | None) -> None:
        """``show``, at most once per ``INTERVAL``: for callers that report every batch."""
        now = time.monotonic()
        if now - self._shown_at >= INTERVAL:
            self._shown_at = now
            self.show(done, left)

    def finish(self, done: int, left: int | None) -> None:
        """The last figures, and the line ends: what follows starts on a line of its own."""
        self.show(done, left)
        self.stream.write("\n")
        self.stream.flush()


def _done(relay: Relay) -> int:
    summary = relay.snapshot().summary
    return summary.sent + summary.already_sent + summary.failed


@contextlib.asynccontextmanager
async def drain_progress(
    relay: Relay, url: str, *, schema: str, stream: TextIO
) -> AsyncIterator[None]:
    """While the body runs, show how far the relay's drain is, from its own connection."""
    line = ProgressLine("drain", stream)
    conn: psycopg.AsyncConnection[object] | None = None

    async def left() -> int | None:
        nonlocal conn
        try:
            if conn is None:
                conn = await async_connect(url, prepare=False)
            return await queries.backlog(conn, schema=schema)
        except (psycopg.Error, OutboxError):
            # The figure is a courtesy: the relay itself reports the outage.
            if conn is not None:
                await conn.close()
            conn = None
            return None

    async def report() -> None:
        while True:
            line.show(_done(relay), await left())
            await asyncio.sleep(INTERVAL)

    task = asyncio.create_task(report(), name="drain progress")
    try:
        with line.above_logs():
            yield
    finally:
        task.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await task
        line.finish(_done(relay), await left())
        if conn is not None:
            await conn.close()
