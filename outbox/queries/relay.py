"""The relay's hot path after the claim (outbox.queries.claim): its outcomes with their
fencing, the claim check, the bot's state row and pause, and a drain's backlog.

It runs on the relay's own psycopg async connections with ``%(name)s`` parameters.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from datetime import datetime
from typing import Any, NamedTuple

from outbox.queries._common import AsyncConn, _sql
from outbox.queries.claim import ClaimedRow
from outbox.schema import DEFAULT_BOT

# --- outcomes, the bot's state row and pause -------------------------------------------


_ENSURE_BOT = "INSERT INTO {bot_holati} (bot) VALUES (%(bot)s) ON CONFLICT (bot) DO NOTHING"


async def ensure_bot(conn: AsyncConn, bot: str, *, schema: str) -> None:
    """Create the shared state row of ``bot`` (a claim finds the bot's budget there)."""
    await conn.execute(_sql(_ENSURE_BOT, schema), {"bot": bot})


class Outcome(NamedTuple):
    """What to write for one claimed row; built by the relay from the retry policy."""

    id: int
    attempts: int  # the claim's urinish: the write happens only if it still matches
    state: str
    delay_seconds: float = 0.0  # keyingi_urinish = now() + delay (pending rows only)
    error: str | None = None
    error_code: str | None = None  # xato_turi (a FailureCode), written with ``error``
    refund_attempt: bool = False  # released without a real attempt (shutdown, rate limit)
    key: str | None = None  # with chat_id and message_id: write a sent marker
    chat_id: int | None = None
    message_id: int | None = None
    new_chat_id: int | None = None  # the group moved: rewrite payload.chat_id
    # The claim's band_vaqti. urinish alone can repeat (a replay resets it, a release refunds
    # it); the claim time cannot, so a stale relay's write never matches a newer claim.
    claimed_at: datetime | None = None
    message_ids: tuple[int, ...] = ()  # an album's messages, for its marker

    @classmethod
    def for_row(cls, row: ClaimedRow, state: str, **details: Any) -> Outcome:
        return cls(row.id, row.attempts, state, claimed_at=row.claimed_at, **details)


# One statement records a whole batch: the sent markers and the state changes commit together,
# and each state change is fenced on the claim (holat and urinish) so that a relay which lost
# its claim to the reaper cannot overwrite the new owner's result. Markers are written even
# then: the message did reach Telegram, and the marker stops the new owner from sending again.
_RECORD_OUTCOMES = """
WITH r AS (
    SELECT * FROM json_to_recordset(%(batch)s::json)
        AS r(id bigint, urinish int, holat text, delay float8, xato text, xato_turi text,
             refund bool, kalit text, chat_id bigint, message_id bigint, new_chat_id bigint,
             band_vaqti timestamptz, message_ids bigint[])
    -- The batch's own length: it cuts nothing, and tells the planner how few rows come (it
    -- assumes 100 of a function, and beside a table of some 10,000 rows would scan it all).
    LIMIT %(count)s
),
markers AS (
    INSERT INTO {yuborilgan} (kalit, chat_id, message_id, message_ids)
    SELECT kalit, chat_id, message_id, message_ids FROM r WHERE message_id IS NOT NULL
    ON CONFLICT (kalit) DO NOTHING
)
UPDATE {outbox} o
SET holat = r.holat,
    urinish = CASE WHEN r.refund THEN o.urinish - 1 ELSE o.urinish END,
    -- A row handed back unsent for a moment keeps its time, so it keeps its place in line;
    -- a retry's time is capped at the row's expiry (where the claim fails it).
    keyingi_urinish = CASE WHEN r.holat <> {pending} OR (r.refund AND r.delay <= 0)
                           THEN o.keyingi_urinish
                           ELSE least(now() + make_interval(secs => r.delay),
                                      coalesce(o.eskirish, 'infinity')) END,
    band_vaqti = NULL,
    egasi = NULL,
    yakka = false,
    oxirgi_xato = coalesce(r.xato, o.oxirgi_xato),
    xato_turi = CASE WHEN r.xato IS NULL THEN o.xato_turi ELSE r.xato_turi END,
    xato_vaqti = CASE WHEN r.holat = {failed} THEN now() END,
    tarix = CASE WHEN r.xato IS NULL THEN o.tarix
                 ELSE o.tarix || jsonb_build_array(jsonb_strip_nulls(jsonb_build_object(
                     'vaqt', now(), 'urinish', o.urinish, 'xato', r.xato,
                     'xato_turi', r.xato_turi))) END,
    {payload}yangilangan = now()
FROM r
-- The state is compared with a subquery's value, not a literal: a literal lets the planner
-- answer the join from the index of claimed rows, which holds a dead entry for every message
-- completed since the last vacuum (it cannot see them: 19,000 read for 64 rows, measured);
-- this way each outcome is one primary-key probe.
WHERE o.id = r.id AND o.holat = (SELECT {in_progress}) AND o.urinish = r.urinish
  AND (r.band_vaqti IS NULL OR o.band_vaqti = r.band_vaqti)
"""
# A group that became a supergroup: the row's payload gets the new chat id in the same write
# (a host's trigger may follow the group there). Only in a batch that has one: an update that
# sets ``payload`` runs its checks (outbox_0013's trigger), about 3 us a row.
_MOVED_PAYLOAD = """payload = CASE WHEN r.new_chat_id IS NULL THEN o.payload
                   ELSE jsonb_set(o.payload, ARRAY['chat_id'], to_jsonb(r.new_chat_id)) END,
    """
# The write of a batch, by whether it has a moved group.
_RECORD = {
    False: _RECORD_OUTCOMES.replace("{payload}", ""),
    True: _RECORD_OUTCOMES.replace("{payload}", _MOVED_PAYLOAD),
}


async def record_outcomes(conn: AsyncConn, outcomes: Sequence[Outcome], *, schema: str) -> int:
    """Write a batch of outcomes in one statement; return how many rows were still ours."""
    if not outcomes:
        return 0
    # One JSON document for the batch: json.dumps builds it in C, where eleven typed arrays
    # cost psycopg a Python call per element (half the relay's CPU per write, measured).
    cursor = await conn.execute(*record_statement(outcomes, schema=schema))
    return cursor.rowcount


def record_statement(outcomes: Sequence[Outcome], *, schema: str) -> tuple[str, dict[str, Any]]:
    """The write of ``record_outcomes`` and its parameters (tests read its plan)."""
    batch = json.dumps([_outcome_fields(o) for o in outcomes], separators=(",", ":"))
    moved = any(o.new_chat_id is not None for o in outcomes)
    return _sql(_RECORD[moved], schema), {"batch": batch, "count": len(outcomes)}


def _outcome_fields(o: Outcome) -> dict[str, Any]:
    """One element of the batch document; absent fields read as NULL."""
    fields: dict[str, Any] = {
        "id": o.id,
        "urinish": o.attempts,
        "holat": o.state,
        "delay": o.delay_seconds,
        "refund": o.refund_attempt,
    }
    if o.error is not None:
        fields["xato"] = o.error
        fields["xato_turi"] = o.error_code
    if o.key is not None:
        fields["kalit"] = o.key
    if o.message_id is not None:
        fields.update(chat_id=o.chat_id, message_id=o.message_id)
        if o.message_ids:
            fields["message_ids"] = o.message_ids
    if o.new_chat_id is not None:
        fields["new_chat_id"] = o.new_chat_id
    if o.claimed_at is not None:
        fields["band_vaqti"] = o.claimed_at.isoformat()  # microseconds kept: exact match
    return fields


_STILL_CLAIMED = """
SELECT true FROM {outbox}
WHERE id = %(id)s AND holat = {in_progress} AND urinish = %(urinish)s AND band_vaqti = %(at)s
"""


async def still_claimed(conn: AsyncConn, row: ClaimedRow, *, schema: str) -> bool:
    """Is this claim still the relay's? False once the app withdrew the row (cancel)."""
    params = {"id": row.id, "urinish": row.attempts, "at": row.claimed_at}
    cursor = await conn.execute(_sql(_STILL_CLAIMED, schema), params)
    return await cursor.fetchone() is not None


# The pause lives in the bot's state row, which only the outbox's own code writes; the NOTIFY
# after it only wakes the other relays to read it (a forged NOTIFY pauses nothing).
_ANNOUNCE_PAUSE = """
WITH paused AS (
    INSERT INTO {bot_holati} AS h (bot, pauza_tugashi)
    VALUES (%(bot)s, now() + make_interval(secs => %(seconds)s))
    ON CONFLICT (bot) DO UPDATE
    SET pauza_tugashi = greatest(h.pauza_tugashi, excluded.pauza_tugashi)
    RETURNING bot
)
SELECT pg_notify('{pause_channel}', bot) FROM paused
"""


async def announce_pause(
    conn: AsyncConn, seconds: float, *, schema: str, bot: str = DEFAULT_BOT
) -> None:
    """Pause ``bot`` for every relay: Telegram asked this bot to wait ``seconds``."""
    await conn.execute(_sql(_ANNOUNCE_PAUSE, schema), {"seconds": float(seconds), "bot": bot})


# --- the progress line of a drain ------------------------------------------------------------

# What a drain still has to do: due rows and rows being sent.
_BACKLOG = """
SELECT (SELECT count(*) FROM {outbox} WHERE holat = {pending} AND keyingi_urinish <= now())
     + (SELECT count(*) FROM {outbox} WHERE holat = {in_progress})
"""


async def backlog(conn: AsyncConn, *, schema: str) -> int:
    """Rows due or claimed now (the progress line of ``relay --drain``)."""
    cursor = await conn.execute(_sql(_BACKLOG, schema))
    row = await cursor.fetchone()
    return 0 if row is None else int(row[0])
