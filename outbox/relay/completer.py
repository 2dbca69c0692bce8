"""The completer: writes the outcomes of sends, many per statement, as a group commit.

Sends record their outcomes here and wait until they are written: a send keeps its slot until
then, so a crash finds at most ``concurrency`` messages delivered without their sent marker,
however far behind the writes are. Outcomes are written in the order recorded, so each waiter
waits for a count, and a write wakes exactly the sends it covered.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections import deque
from typing import Any

import psycopg

from outbox import queries
from outbox.relay.store import DB_LOST, DatabaseLost, Store
from outbox.relay.summary import RunSummary
from outbox.states import State

__all__ = ["Completer"]

log = logging.getLogger("outbox.relay")

# While stopping, a write that cannot reach the database is tried this long after the grace
# period: written outcomes (sent markers) are worth a few reconnects.
_FINAL_WRITE_PATIENCE = 5.0


class Completer:
    """Group-commit writes of outcomes, fenced on the claim, with a per-row fallback."""

    def __init__(
        self,
        store: Store,
        *,
        schema: str,
        flush_interval: float,
        grace_seconds: float,
        stopping: asyncio.Event,
        total: RunSummary,
        wakeup: asyncio.Event | None = None,
    ) -> None:
        self.name = "completer"
        self._store = store
        self._schema = schema
        self._flush_interval = flush_interval
        self._grace_seconds = grace_seconds
        self._stopping = stopping
        self._total = total
        self._wakeup = wakeup or asyncio.Event()  # the claimer's
        self._pending: list[queries.Outcome] = []
        self._recorded = 0
        self._written = 0
        self._waiters: deque[tuple[int, asyncio.Future[None]]] = deque()
        self._write_now = asyncio.Event()
        self._lock = asyncio.Lock()
        self._running = False
        self._stop_requested = False
        self._give_up_at: float | None = None

    # --- what the sends and the claimer see ------------------------------------------------

    @property
    def unwritten(self) -> int:
        return self._recorded - self._written

    def record(self, outcome: queries.Outcome) -> None:
        self._pending.append(outcome)
        self._recorded += 1
        # Sends hold their slots until written, so waiting to fill a batch costs throughput:
        # write at once. Batches still form: what is recorded while a write is in flight goes
        # together in the next one, as commits do in a database's group commit.
        self._write_now.set()

    async def until_written(self) -> None:
        """Wait until every outcome recorded so far is written (or the writer has ended)."""
        target = self._recorded
        if self._written >= target or not self._running:
            return
        # Recorded counts only grow, so the queue stays sorted by target.
        future = asyncio.get_running_loop().create_future()
        self._waiters.append((target, future))
        await future

    # --- the writer --------------------------------------------------------------------------

    async def run(self) -> None:
        """Write as outcomes come, until ``stop()``; then write the rest and return. The sends'
        waits end with it."""
        self._running = True
        try:
            while not self._stop_requested:
                with contextlib.suppress(TimeoutError):
                    await asyncio.wait_for(self._write_now.wait(), self._flush_interval)
                self._write_now.clear()
                await self.write_pending()
            await self.write_pending()  # what was recorded during the last write
        finally:
            self._running = False
            self._wake_waiters(everyone=True)  # nobody waits for a writer that ended

    def stop(self) -> None:
        """Ask ``run`` to write what is recorded and return. Asked before the sends have
        finished, their outcomes are left to ``write_pending``."""
        self._stop_requested = True
        self._write_now.set()

    def hurry(self) -> None:
        """Stopping at once: a write that cannot reach the database is not tried again."""
        self._give_up_at = time.monotonic()

    async def write_pending(self) -> None:
        """Write every waiting outcome; while the database is away keep them and try again
        (the store spaces the attempts)."""
        async with self._lock:
            while self._pending:
                try:
                    await self._store.run(self._write_waiting)
                except DatabaseLost:
                    # _write_waiting put back what it did not write.
                    if self._stopping.is_set() and self._past_final_write_deadline():
                        self._give_up()
                        return

    async def _write_waiting(self, conn: psycopg.AsyncConnection[Any]) -> None:
        batch, self._pending = self._pending, []
        try:
            applied = await queries.record_outcomes(conn, batch, schema=self._schema)
        except DB_LOST:
            self._pending[:0] = batch
            raise
        except psycopg.Error as err:
            # The database refused the batch itself, not the connection: write the outcomes
            # one by one so that one bad row cannot cost the others their sent markers.
            log.error("could not record a batch of %d outcomes: %s", len(batch), err)
            await self._write_one_by_one(conn, batch)
            return
        self._written_now(batch, applied)

    async def _write_one_by_one(
        self, conn: psycopg.AsyncConnection[Any], batch: list[queries.Outcome]
    ) -> None:
        for i, outcome in enumerate(batch):
            try:
                applied = await queries.record_outcomes(conn, [outcome], schema=self._schema)
            except DB_LOST:
                # The connection is gone, not the outcome's fault: this outcome and the rest
                # wait for the next write, on a new connection.
                self._pending[:0] = batch[i:]
                raise
            except psycopg.Error as err:
                # Not lost: the reaper returns the row to the queue after the lease.
                log.error(
                    "could not record the outcome of outbox %s: %s",
                    outcome.id,
                    err,
                    extra={"outbox_id": outcome.id, "key": outcome.key},
                )
                applied = 1  # not a fencing discard; do not report it as one
            self._written_now([outcome], applied)

    def _written_now(self, batch: list[queries.Outcome], applied: int) -> None:
        if applied < len(batch):
            self._total.fenced_out += len(batch) - applied
            log.warning(
                "%d outcome(s) discarded: the claim was reaped, the app withdrew it, or a "
                "write whose answer was lost (the link went silent) had written it already",
                len(batch) - applied,
            )
        self._written += len(batch)
        self._wake_waiters()
        if any(o.state == State.PENDING for o in batch):
            self._wakeup.set()  # a retry may now be the earliest due row

    def _past_final_write_deadline(self) -> bool:
        now = time.monotonic()
        if self._give_up_at is None:
            self._give_up_at = now + self._grace_seconds + _FINAL_WRITE_PATIENCE
        return now >= self._give_up_at

    def _give_up(self) -> None:
        log.error(
            "could not record %d outcomes before stopping; the reaper returns those rows to "
            "the queue after the lease",
            len(self._pending),
        )
        self._written += len(self._pending)  # given up: nobody waits for them
        self._pending.clear()
        self._wake_waiters()

    def _wake_waiters(self, *, everyone: bool = False) -> None:
        waiters = self._waiters
        while waiters and (everyone or waiters[0][0] <= self._written):
            future = waiters.popleft()[1]
            if not future.done():  # a cancelled send leaves a cancelled future behind
                future.set_result(None)
