"""Maintenance: the reaper and retention, each a ``run_once`` that says what it did.

The relay runs them in a loop, one relay at a time (the holder of an advisory lock);
``outbox reap`` and ``outbox prune`` run the same ``run_once`` once.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable, Collection
from dataclasses import dataclass, field

from outbox import queries
from outbox.queries import AsyncConn, Pruned, Reaped
from outbox.relay.service import wait_for_stop
from outbox.relay.store import DatabaseLost, OutageLog, Store

__all__ = ["Maintenance", "Reaper", "Retention"]

log = logging.getLogger("outbox.relay")

# A relay silent this long leaves the fleet's register (it is shown as gone long before).
FORGET_GONE_RELAYS_AFTER = 3600.0
# A round that lost its connection is tried again this soon (not a whole interval later), so
# that the outage's log ends when the database is back, not at the next round.
_AGAIN_AFTER_LOST = 5.0


@dataclass(frozen=True, slots=True)
class Reaper:
    """Returns claims older than the lease to the queue (to xato once attempts are used up)."""

    schema: str
    lease_seconds: float
    max_attempts: int
    # The claimed rows this process holds (a relay's), never reaped by it: however late their
    # outcomes are, they come, and a reaped row would be claimed and sent a second time.
    # ``outbox reap`` runs in no relay: nothing is held.
    held: Callable[[], Collection[int]] = field(default=frozenset, compare=False)

    async def run_once(self, conn: AsyncConn) -> Reaped:
        """Rows reaped, by the state they went to."""
        reaped = await queries.reap_stale(
            conn,
            schema=self.schema,
            lease_seconds=self.lease_seconds,
            max_attempts=self.max_attempts,
            holder=queries.claim_holder(),
            held=self.held(),
        )
        await queries.forget_idle_chats(conn, schema=self.schema)
        await queries.forget_gone_relays(
            conn, schema=self.schema, after_seconds=FORGET_GONE_RELAYS_AFTER
        )
        return reaped


@dataclass(frozen=True, slots=True)
class Retention:
    """Keeps the hot table small: deletes old done rows and, later, their sent markers."""

    schema: str
    done_older_than: float | None  # None keeps the done rows (``outbox prune --older-than 0``)
    markers_older_than: float
    batch_size: int

    async def run_once(
        self, conn: AsyncConn, *, on_batch: Callable[[int], None] | None = None
    ) -> Pruned:
        """Rows deleted, by table; xato rows are never deleted. ``on_batch`` hears each
        batch's count (``outbox prune``'s progress line)."""
        return await queries.prune(
            conn,
            schema=self.schema,
            done_older_than_seconds=self.done_older_than,
            markers_older_than_seconds=self.markers_older_than,
            batch_size=self.batch_size,
            on_batch=on_batch,
        )


class _StopAsked(Exception):
    """Not an error: the way out of retention between two batches when the relay stops."""


class Maintenance:
    """Reap expired claims, then apply retention, one relay at a time.

    The advisory lock lasts one round, one transaction: a relay that hangs (a stopped process,
    a frozen VM) must not keep the others from reaping the rows it holds. A stop lets the
    round's statement under way finish: the reaper's transaction, or retention's batch.
    """

    def __init__(
        self,
        url: str,
        *,
        reaper: Reaper,
        retention: Retention | None,
        interval: float,
        stopping: asyncio.Event,
        wakeup: asyncio.Event,
        outage: OutageLog | None = None,
    ) -> None:
        self.name = "maintenance"
        self._store = Store(url, "maintenance", stopping, prepare=False, outage=outage)
        self._reaper = reaper
        self._retention = retention
        # An expired claim waits at most half a lease more, whatever the reap interval.
        self._interval = min(interval, reaper.lease_seconds / 2)
        self._wakeup = wakeup  # the claimer's: reaped rows are due
        self._stop = asyncio.Event()

    async def _round(self, conn: AsyncConn) -> None:
        # A round takes well under a second; one that sits idle much longer inside its
        # transaction belongs to a hung relay, and the server ends it.
        idle_limit = max(2.0, min(30.0, self._interval))
        async with conn.transaction():
            if not await queries.try_maintenance_lock(
                conn, schema=self._reaper.schema, idle_seconds=idle_limit
            ):
                return  # another relay holds the lock: it does the round
            reaped = await self._reaper.run_once(conn)
        if reaped:
            log.warning(
                "reaper: expired claims: %d back to kutmoqda, %d to xato",
                reaped.pending,
                reaped.failed,
            )
            self._wakeup.set()
        if self._retention is not None and not self._stop.is_set():
            # After the round, in short transactions of its own.
            pruned = await self._retention.run_once(conn, on_batch=self._between_batches)
            if pruned:
                log.info(
                    "retention: deleted %d bajarildi rows and %d sent markers",
                    pruned.done_rows,
                    pruned.markers,
                )

    def _between_batches(self, _deleted: int) -> None:
        self._store.answered()  # a long retention is progress, not silence
        if self._stop.is_set():
            raise _StopAsked  # the batch is committed; the rest waits for another round

    async def run(self) -> None:
        """Rounds every interval until ``stop()``; a failed round does not end the loop."""
        try:
            while not self._stop.is_set():
                wait = self._interval
                try:
                    await self._store.run(self._round)
                except DatabaseLost:
                    wait = min(wait, _AGAIN_AFTER_LOST)  # said by the store; connect again
                except _StopAsked:
                    pass  # stopping
                except Exception:  # the reaper must outlive any one bad round
                    log.exception(
                        "maintenance round failed; trying again in %.0f s", self._interval
                    )
                await wait_for_stop(self._stop, wait)
        finally:
            await self._store.close()

    def stop(self) -> None:
        self._stop.set()
