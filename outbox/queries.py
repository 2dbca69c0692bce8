"""Every SQL statement the outbox issues, each named by what it does.

Nothing else in the package writes SQL. Statements use psycopg's ``%(name)s`` placeholders so
that one text serves both callers: the relay's psycopg async connections and the app's
SQLAlchemy sessions and connections (through ``exec_driver_sql``). Times that decide behaviour
come from the database clock (``now()``), so many relay hosts agree on what is due.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Any

import psycopg
from sqlalchemy import Connection
from sqlalchemy.orm import Session

__all__ = [
    "ClaimedRow",
    "Outcome",
    "cancel",
    "claim_due",
    "count_by_state",
    "enqueue",
    "reap_stale",
    "reap_stale_async",
    "record_outcomes",
    "seconds_until_next_due",
    "try_maintenance_lock",
]

AsyncConn = psycopg.AsyncConnection[Any]
SyncConn = Connection | Session

NOTIFY_CHANNEL = "outbox"  # new rows (statement trigger in the migration)
CANCEL_CHANNEL = "outbox_cancel"  # ids of claimed rows the app withdrew
# Advisory lock key for maintenance (reaper, retention): one relay at a time does it.
MAINTENANCE_LOCK_KEY = 0x6F7574626F78  # "outbox"


def _execute(conn: SyncConn, sql: str, params: Mapping[str, Any] | None = None) -> Any:
    """Run ``sql`` on the caller's connection or session, inside its transaction."""
    connection = conn.connection() if isinstance(conn, Session) else conn
    return connection.exec_driver_sql(sql, params or {})


# --- enqueue: runs inside the caller's transaction, never commits ---------------------------

_ENQUEUE = """
WITH inserted AS (
    INSERT INTO outbox (tur, kalit, payload, keyingi_urinish)
    VALUES (%(tur)s, %(kalit)s, %(payload)s::jsonb, coalesce(%(run_at)s, now()))
    ON CONFLICT (kalit) DO NOTHING
    RETURNING id
)
SELECT id, true FROM inserted
UNION ALL
SELECT id, false FROM outbox WHERE kalit = %(kalit)s AND NOT EXISTS (SELECT 1 FROM inserted)
"""

_FIND_BY_KEY = "SELECT id FROM outbox WHERE kalit = %(kalit)s"


def enqueue(
    conn: SyncConn,
    *,
    kind: str,
    key: str,
    payload: Mapping[str, Any],
    run_at: datetime | None,
) -> tuple[int, bool]:
    """Insert one message; return ``(id, created)``. An existing key returns its row."""
    params = {"tur": kind, "kalit": key, "payload": json.dumps(payload), "run_at": run_at}
    row = _execute(conn, _ENQUEUE, params).first()
    if row is None:
        # The conflicting row was committed by another transaction after this statement's
        # snapshot was taken; a fresh statement sees it.
        row = (_execute(conn, _FIND_BY_KEY, params).scalar_one(), False)
    return int(row[0]), bool(row[1])


# The notification reaches the relays when the caller commits, so a relay that already claimed
# one of these rows drops it before sending.
_CANCEL = """
WITH deleted AS (
    DELETE FROM outbox
    WHERE kalit = ANY(%(keys)s) AND holat IN ('kutmoqda', 'bajarilmoqda')
    RETURNING id, holat
)
SELECT count(*),
       pg_notify('outbox_cancel', string_agg(id::text, ',') FILTER (WHERE holat = 'bajarilmoqda'))
FROM deleted
"""


def cancel(conn: SyncConn, keys: Sequence[str]) -> int:
    """Delete unsent messages by key (pending or claimed); sent and failed rows stay."""
    if not keys:
        return 0
    return int(_execute(conn, _CANCEL, {"keys": list(keys)}).scalar_one())


# --- the relay's hot path ----------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class ClaimedRow:
    id: int
    kind: str
    key: str
    payload: dict[str, Any]
    attempts: int  # urinish after this claim: the fencing token for recording the result
    already_sent: bool  # a sent marker exists for the key


_CLAIM_DUE = """
UPDATE outbox o
SET holat = 'bajarilmoqda', urinish = o.urinish + 1, band_vaqti = now(), yangilangan = now()
WHERE o.id IN (
    SELECT id FROM outbox
    WHERE holat = 'kutmoqda' AND keyingi_urinish <= now()
    ORDER BY keyingi_urinish, id
    LIMIT %(limit)s
    FOR UPDATE SKIP LOCKED
)
RETURNING o.id, o.tur, o.kalit, o.payload, o.urinish,
          EXISTS (SELECT 1 FROM yuborilgan y WHERE y.kalit = o.kalit)
"""


async def claim_due(conn: AsyncConn, limit: int) -> list[ClaimedRow]:
    """Claim up to ``limit`` due rows in one statement; other relays skip them."""
    cursor = await conn.execute(_CLAIM_DUE, {"limit": limit})
    return [ClaimedRow(*row) for row in await cursor.fetchall()]


@dataclass(frozen=True, slots=True)
class Outcome:
    """What to write for one claimed row; built by the relay from the retry policy."""

    id: int
    attempts: int  # the claim's urinish: the write happens only if it still matches
    state: str
    delay_seconds: float = 0.0  # keyingi_urinish = now() + delay (pending rows only)
    error: str | None = None
    refund_attempt: bool = False  # released without a real attempt (shutdown, rate limit)
    key: str | None = None  # with chat_id and message_id: write a sent marker
    chat_id: int | None = None
    message_id: int | None = None
    new_chat_id: int | None = None  # the group moved: rewrite payload.chat_id


# One statement records a whole batch: the sent markers and the state changes commit together,
# and each state change is fenced on the claim (holat and urinish) so that a relay which lost
# its claim to the reaper cannot overwrite the new owner's result. Markers are written even
# then: the message did reach Telegram, and the marker stops the new owner from sending again.
_RECORD_OUTCOMES = """
WITH r AS (
    SELECT * FROM unnest(
        %(ids)s::bigint[], %(attempts)s::int[], %(states)s::text[], %(delays)s::float8[],
        %(errors)s::text[], %(refunds)s::bool[], %(keys)s::text[], %(chat_ids)s::bigint[],
        %(message_ids)s::bigint[], %(new_chat_ids)s::bigint[]
    ) AS r(id, urinish, holat, delay, xato, refund, kalit, chat_id, message_id, new_chat_id)
),
markers AS (
    INSERT INTO yuborilgan (kalit, chat_id, message_id)
    SELECT kalit, chat_id, message_id FROM r WHERE message_id IS NOT NULL
    ON CONFLICT (kalit) DO NOTHING
)
UPDATE outbox o
SET holat = r.holat,
    urinish = CASE WHEN r.refund THEN o.urinish - 1 ELSE o.urinish END,
    keyingi_urinish = CASE WHEN r.holat = 'kutmoqda'
                           THEN now() + make_interval(secs => r.delay)
                           ELSE o.keyingi_urinish END,
    band_vaqti = NULL,
    oxirgi_xato = coalesce(r.xato, o.oxirgi_xato),
    tarix = CASE WHEN r.xato IS NULL THEN o.tarix
                 ELSE o.tarix || jsonb_build_array(jsonb_build_object(
                     'vaqt', now(), 'urinish', o.urinish, 'xato', r.xato)) END,
    payload = CASE WHEN r.new_chat_id IS NULL THEN o.payload
                   ELSE jsonb_set(o.payload, '{chat_id}', to_jsonb(r.new_chat_id)) END,
    yangilangan = now()
FROM r
WHERE o.id = r.id AND o.holat = 'bajarilmoqda' AND o.urinish = r.urinish
"""


async def record_outcomes(conn: AsyncConn, outcomes: Sequence[Outcome]) -> int:
    """Write a batch of outcomes in one statement; return how many rows were still ours."""
    if not outcomes:
        return 0
    params = {
        "ids": [o.id for o in outcomes],
        "attempts": [o.attempts for o in outcomes],
        "states": [o.state for o in outcomes],
        "delays": [o.delay_seconds for o in outcomes],
        "errors": [o.error for o in outcomes],
        "refunds": [o.refund_attempt for o in outcomes],
        "keys": [o.key for o in outcomes],
        "chat_ids": [o.chat_id for o in outcomes],
        "message_ids": [o.message_id for o in outcomes],
        "new_chat_ids": [o.new_chat_id for o in outcomes],
    }
    cursor = await conn.execute(_RECORD_OUTCOMES, params)
    return cursor.rowcount


_SECONDS_UNTIL_NEXT_DUE = """
SELECT extract(epoch FROM min(keyingi_urinish) - now())::float8
FROM outbox WHERE holat = 'kutmoqda'
"""


async def seconds_until_next_due(conn: AsyncConn) -> float | None:
    """Seconds until the earliest pending row is due (<= 0: due now); None if none pending."""
    cursor = await conn.execute(_SECONDS_UNTIL_NEXT_DUE)
    row = await cursor.fetchone()
    return None if row is None or row[0] is None else float(row[0])


# --- maintenance ---------------------------------------------------------------------------------

_TRY_MAINTENANCE_LOCK = "SELECT pg_try_advisory_lock(%(key)s)"


async def try_maintenance_lock(conn: AsyncConn) -> bool:
    """Session-level lock: held by one relay's connection until it closes."""
    cursor = await conn.execute(_TRY_MAINTENANCE_LOCK, {"key": MAINTENANCE_LOCK_KEY})
    row = await cursor.fetchone()
    return bool(row and row[0])


# A claim older than the lease belongs to a relay that died or hangs. The attempt it made
# counts: the message may have gone out before the relay vanished.
_REAP_STALE = """
UPDATE outbox
SET holat = CASE WHEN urinish >= %(max_attempts)s THEN 'xato' ELSE 'kutmoqda' END,
    keyingi_urinish = now(),
    band_vaqti = NULL,
    oxirgi_xato = CASE WHEN urinish >= %(max_attempts)s
        THEN 'claim expired after ' || %(lease)s || ' s and all attempts are used up'
        ELSE 'claim expired after ' || %(lease)s || ' s (relay died or hung); retrying' END,
    tarix = tarix || jsonb_build_array(jsonb_build_object(
        'vaqt', now(), 'urinish', urinish, 'xato', 'claim expired (reaped)')),
    yangilangan = now()
WHERE holat = 'bajarilmoqda' AND band_vaqti < now() - make_interval(secs => %(lease)s)
RETURNING holat
"""


def _reap_params(lease_seconds: float, max_attempts: int) -> dict[str, Any]:
    return {"lease": float(lease_seconds), "max_attempts": max_attempts}


def _reap_counts(rows: Iterable[Sequence[Any]]) -> dict[str, int]:
    counts = {"kutmoqda": 0, "xato": 0}
    for (state,) in rows:
        counts[state] += 1
    return counts


def reap_stale(conn: SyncConn, *, lease_seconds: float, max_attempts: int) -> dict[str, int]:
    """Return expired claims to the queue (or to xato); counts per new state."""
    result = _execute(conn, _REAP_STALE, _reap_params(lease_seconds, max_attempts))
    return _reap_counts(result.fetchall())


async def reap_stale_async(
    conn: AsyncConn, *, lease_seconds: float, max_attempts: int
) -> dict[str, int]:
    cursor = await conn.execute(_REAP_STALE, _reap_params(lease_seconds, max_attempts))
    return _reap_counts(await cursor.fetchall())


# --- reading -------------------------------------------------------------------------------------

_COUNT_BY_STATE = "SELECT holat, count(*) FROM outbox GROUP BY holat"


def count_by_state(conn: SyncConn) -> dict[str, int]:
    counts = {"kutmoqda": 0, "bajarilmoqda": 0, "bajarildi": 0, "xato": 0}
    for state, count in _execute(conn, _COUNT_BY_STATE).fetchall():
        counts[state] = int(count)
    return counts
