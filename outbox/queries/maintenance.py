"""Maintenance: the lock of a round, the reaper, retention, and forgetting idle chats.

The relay runs them every round (``outbox.relay.maintenance``); ``outbox reap`` and
``outbox prune`` run the same statements. All on psycopg async connections.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from outbox.queries._common import AsyncConn, _sql
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


# A transaction-level lock: it ends with the round's transaction, so it works through PgBouncer
# in transaction pooling and cannot outlive a relay that dies mid-round. A relay that hangs
# inside the round is cut off by the server after ``idle_seconds`` (SET LOCAL: this
# transaction only, never the pooled session).
_TRY_MAINTENANCE_LOCK = """
SELECT pg_try_advisory_xact_lock(%(key)s),
       set_config('idle_in_transaction_session_timeout', %(ms)s, true)
"""


async def try_maintenance_lock(conn: AsyncConn, *, schema: str, idle_seconds: float = 60.0) -> bool:
    """Take the maintenance lock for the current transaction; False if another relay has it."""
    params = {"key": maintenance_lock_key(schema), "ms": str(max(1, int(idle_seconds * 1000)))}
    cursor = await conn.execute(_sql(_TRY_MAINTENANCE_LOCK, schema), params)
    row = await cursor.fetchone()
    return bool(row and row[0])


# A claim older than the lease (or without a claim time) belongs to a relay that died or
# hangs. When the relay held this row alone, the attempt counts: the message may have gone out,
# or the row itself may be what kills relays. When it held other rows too, nothing says which
# row was at fault: the attempt is given back and the row becomes a suspect, claimed alone
# next time (see _CLAIM_DUE in outbox.queries.claim), so that a poison row narrows down to
# itself. egasi stays on a reaped row until its next claim: the rows of one dead process are
# counted together even when their claims expire in different rounds.
# The row's attempts are used up and it was held alone: it goes to xato.
_GIVES_UP = "(NOT r.shared AND o.urinish >= %(max_attempts)s)"
_REAP_STALE = """
WITH expired AS (
    SELECT id, egasi FROM {outbox}
    WHERE holat = {in_progress}
      AND (band_vaqti IS NULL OR band_vaqti = 'infinity'
           OR band_vaqti < now() - make_interval(secs => %(lease)s))
),
held AS (
    SELECT egasi, count(*) AS rows FROM {outbox}
    -- A pending row keeps its holder only as a reaped suspect (yakka), which is what lets
    -- the indexes of claimed rows and of pending suspects answer this.
    WHERE egasi IN (SELECT egasi FROM expired)
      AND (holat = {in_progress} OR (holat = {pending} AND yakka))
    GROUP BY egasi
),
r AS (
    SELECT e.id, coalesce(h.rows, 1) > 1 AS shared, coalesce(h.rows, 1) AS rows
    FROM expired e LEFT JOIN held h USING (egasi)
)
UPDATE {outbox} o
SET holat = CASE WHEN {gives_up} THEN {failed} ELSE {pending} END,
    urinish = CASE WHEN r.shared THEN greatest(o.urinish - 1, 0) ELSE o.urinish END,
    yakka = true,
    keyingi_urinish = least(now(), coalesce(o.eskirish, 'infinity')),  -- the claim fails it
    band_vaqti = NULL,
    oxirgi_xato = CASE
        WHEN r.shared THEN 'claim expired after ' || %(lease)s || ' s while its relay held '
            || r.rows || ' rows (relay died or hung); retrying alone, attempt not counted'
        WHEN {gives_up}
        THEN 'claim expired after ' || %(lease)s || ' s and all attempts are used up'
        ELSE 'claim expired after ' || %(lease)s || ' s (relay died or hung); retrying' END,
    xato_turi = CASE WHEN {gives_up} THEN %(too_many)s ELSE %(expired)s END,
    xato_vaqti = CASE WHEN {gives_up} THEN now() END,
    tarix = o.tarix || jsonb_build_array(jsonb_build_object(
        'vaqt', now(), 'urinish', o.urinish, 'xato', 'claim expired (reaped)',
        'xato_turi', CASE WHEN {gives_up} THEN %(too_many)s ELSE %(expired)s END)),
    yangilangan = now()
FROM r
WHERE o.id = r.id AND o.holat = {in_progress}
  AND (o.band_vaqti IS NULL OR o.band_vaqti = 'infinity'
       OR o.band_vaqti < now() - make_interval(secs => %(lease)s))
RETURNING o.holat AS state
""".replace("{gives_up}", _GIVES_UP)


async def reap_stale(
    conn: AsyncConn, *, schema: str, lease_seconds: float, max_attempts: int
) -> Reaped:
    """Return expired claims to the queue (or to xato); how many went where."""
    params = {
        "lease": float(lease_seconds),
        "max_attempts": max_attempts,
        "too_many": FailureCode.TOO_MANY_ATTEMPTS.value,
        "expired": FailureCode.CLAIM_EXPIRED.value,
    }
    cursor = await conn.execute(_sql(_REAP_STALE, schema), params)
    states = [state for (state,) in await cursor.fetchall()]
    return Reaped(pending=states.count(State.PENDING), failed=states.count(State.FAILED))


# Chats whose next free moment is long past are forgotten (run with the reaper, every minute):
# the table holds the chats of the last minute or so, not every chat ever sent to.
_FORGET_IDLE_CHATS = "DELETE FROM {chat_navbati} WHERE keyingi < now() - interval '1 minute'"


async def forget_idle_chats(conn: AsyncConn, *, schema: str) -> int:
    """Delete the chat rows no claim needs any more; return how many."""
    cursor = await conn.execute(_sql(_FORGET_IDLE_CHATS, schema))
    return cursor.rowcount


# --- retention -------------------------------------------------------------------------------

# Done rows leave oldest first through the partial index on (yangilangan) of done rows, a batch
# per statement, so each delete is a short transaction that locks few rows and lets vacuum
# keep up. SKIP LOCKED: two pruners (a relay and an operator) share the work.
_PRUNE_DONE = """
DELETE FROM {outbox}
WHERE id IN (
    SELECT id FROM {outbox}
    WHERE holat = {done} AND yangilangan < now() - make_interval(secs => %(older_than)s)
    ORDER BY yangilangan
    LIMIT %(batch)s
    FOR UPDATE SKIP LOCKED
) AND holat = {done}
"""

# A marker outlives its row: it stops a re-enqueued key from being sent twice. It is kept while
# a row with its key could still be sent (pending, claimed, or failed and replayable).
_PRUNE_MARKERS = """
DELETE FROM {yuborilgan}
WHERE kalit IN (
    SELECT y.kalit FROM {yuborilgan} y
    WHERE y.yuborilgan_vaqt < now() - make_interval(secs => %(older_than)s)
      AND NOT EXISTS (SELECT 1 FROM {outbox} o WHERE o.kalit = y.kalit AND o.holat <> {done})
    ORDER BY y.yuborilgan_vaqt
    LIMIT %(batch)s
    FOR UPDATE SKIP LOCKED
)
"""


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
    removed = []
    for statement, older_than in (
        (_PRUNE_DONE, done_older_than_seconds),
        (_PRUNE_MARKERS, markers_older_than_seconds),
    ):
        if older_than is None:
            removed.append(0)
            continue
        params = {"older_than": float(older_than), "batch": batch_size}
        total = 0
        while True:
            async with conn.transaction():
                n = (await conn.execute(_sql(statement, schema), params)).rowcount
            total += n
            if on_batch is not None:
                on_batch(n)
            if n < batch_size:
                break
        removed.append(total)
    done_rows, markers = removed
    return Pruned(done_rows=done_rows, markers=markers)


_COUNT_PRUNABLE = """
SELECT
    (SELECT count(*) FROM {outbox}
     WHERE holat = {done} AND yangilangan < now() - make_interval(secs => %(done)s)),
    (SELECT count(*) FROM {yuborilgan} y
     WHERE y.yuborilgan_vaqt < now() - make_interval(secs => %(markers)s)
       AND NOT EXISTS (SELECT 1 FROM {outbox} o
                       WHERE o.kalit = y.kalit AND o.holat <> {done}))
"""


async def count_prunable(
    conn: AsyncConn,
    *,
    schema: str,
    done_older_than_seconds: float | None,
    markers_older_than_seconds: float,
) -> int:
    """How many rows and markers ``prune`` would delete now (its progress line's total)."""
    # None keeps the done rows: NULL makes their condition, and their count, nothing.
    done = None if done_older_than_seconds is None else float(done_older_than_seconds)
    params = {"done": done, "markers": float(markers_older_than_seconds)}
    cursor = await conn.execute(_sql(_COUNT_PRUNABLE, schema), params)
    row = await cursor.fetchone()
    return 0 if row is None else int(row[0]) + int(row[1])
