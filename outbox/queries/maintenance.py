"""Maintenance: the lock of a round, the reaper, retention, and forgetting idle chats.

The relay runs them every round (``outbox.relay.maintenance``); ``outbox reap`` and
``outbox prune`` run the same named queries (``outbox/sql/maintenance.sql``).
"""

from __future__ import annotations

from collections.abc import Callable, Collection
from dataclasses import dataclass

from outbox import sql
from outbox.queries._common import AsyncConn
from outbox.schema import maintenance_lock_key
from outbox.states import FailureCode, State


@dataclass(frozen=True, slots=True)
class Reaped:
    """What one reaper round did with the expired claims it found."""

    pending: int = 0  # back to kutmoqda, to be claimed again
    failed: int = 0  # to xato: their attempts were used up

    def __bool__(self) -> bool:
        return bool(self.pending or self.failed)


@dataclass(frozen=True, slots=True)
class Pruned:
    """What one retention run deleted."""

    done_rows: int = 0  # bajarildi rows of the outbox table
    markers: int = 0  # sent markers (yuborilgan)

    def __bool__(self) -> bool:
        return bool(self.done_rows or self.markers)


async def try_maintenance_lock(conn: AsyncConn, *, schema: str, idle_seconds: float = 60.0) -> bool:
    """Take the maintenance lock for the current transaction; False if another relay has it.
    A relay that hangs inside the round is cut off by the server after ``idle_seconds``."""
    params = {"key": maintenance_lock_key(schema), "ms": str(max(1, int(idle_seconds * 1000)))}
    row = await sql.fetch_one(conn, "try_maintenance_lock", schema=schema, params=params)
    return bool(row and row[0])


async def reap_stale(
    conn: AsyncConn,
    *,
    schema: str,
    lease_seconds: float,
    max_attempts: int,
    holder: str | None = None,
    held: Collection[int] = (),
) -> Reaped:
    """Return expired claims to the queue (or to xato once ``max_attempts``, the retry
    policy's, are used up); how many went where. The rows ``held`` by ``holder`` (the
    reaping process) are not reaped: their outcomes are on their way."""
    params = {
        "holder": holder,
        "held": sorted(held),
        "lease": float(lease_seconds),
        "max_attempts": max_attempts,
        "too_many": FailureCode.TOO_MANY_ATTEMPTS.value,
        "expired": FailureCode.CLAIM_EXPIRED.value,
    }
    states = [
        state for (state,) in await sql.fetch(conn, "reap_stale", schema=schema, params=params)
    ]
    return Reaped(pending=states.count(State.PENDING), failed=states.count(State.FAILED))


async def forget_idle_chats(conn: AsyncConn, *, schema: str) -> int:
    """Delete the chat rows no claim needs any more; return how many."""
    return await sql.execute(conn, "forget_idle_chats", schema=schema)


# --- retention -------------------------------------------------------------------------------


async def prune(
    conn: AsyncConn,
    *,
    schema: str,
    done_older_than_seconds: float | None,
    markers_older_than_seconds: float,
    batch_size: int,
    on_batch: Callable[[int], None] | None = None,
) -> Pruned:
    """Retention (relay maintenance, ``outbox prune``): batch after batch, each in its own
    short transaction so a long delete neither locks the table nor bloats it, until one comes
    up short. Returns how many done rows and markers went; ``on_batch`` hears each batch's
    count (a progress line). ``done_older_than_seconds`` None keeps every done row."""

    async def delete(name: str, older_than: float | None) -> int:
        if older_than is None:
            return 0
        params = {"older_than": float(older_than), "batch": batch_size}
        total = 0
        while True:
            async with conn.transaction():
                n = await sql.execute(conn, name, schema=schema, params=params)
            total += n
            if on_batch is not None:
                on_batch(n)
            if n < batch_size:
                return total

    return Pruned(
        done_rows=await delete("prune_done", done_older_than_seconds),
        markers=await delete("prune_markers", markers_older_than_seconds),
    )


async def count_prunable(
    conn: AsyncConn,
    *,
    schema: str,
    done_older_than_seconds: float | None,
    markers_older_than_seconds: float,
) -> int:
    """How many rows and markers ``prune`` would delete now (its progress line's total)."""
    done = None if done_older_than_seconds is None else float(done_older_than_seconds)
    params = {"done": done, "markers": float(markers_older_than_seconds)}
    row = await sql.fetch_one(conn, "count_prunable", schema=schema, params=params)
    return 0 if row is None else int(row[0])
