"""Every SQL statement the outbox issues, each named by what it does.

Nothing else in the package writes SQL. Two kinds of caller, two placeholder styles:

* the app and the operator commands run through SQLAlchemy (sync or async sessions and
  connections, any driver: psycopg, asyncpg), so their statements are ``text()`` with
  ``:name`` parameters and explicit casts that every driver accepts;
* the relay's hot path runs on its own psycopg async connections with ``%(name)s``.

Every statement names its tables through ``{outbox}`` and ``{yuborilgan}``, filled in once per
schema (see ``outbox.schema``). Times that decide behaviour come from the database clock
(``now()``), so many relay hosts agree on what is due.
"""

from __future__ import annotations

import functools
import json
import os
import secrets
import socket
from collections.abc import Callable, Generator, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import datetime
from typing import TYPE_CHECKING, Any, NamedTuple

import psycopg
import sqlalchemy as sa
from sqlalchemy import Connection
from sqlalchemy.orm import Session

from outbox.classify import MAX_FLOOD_PAUSE
from outbox.payload import UnreadablePayload, read_json
from outbox.schema import (
    DEFAULT_BOT,
    DEFAULT_QUEUE,
    maintenance_lock_key,
    notify_channel,
    pause_channel,
)

__all__ = [
    "Activity",
    "ClaimLimits",
    "ClaimedRow",
    "Message",
    "Outcome",
    "QueueFigures",
    "QueueStatus",
    "QueueTiming",
    "ReplayResult",
    "SentMarker",
    "SyncConn",
    "announce_pause",
    "backlog",
    "cancel",
    "cancel_by_operator",
    "claim_due",
    "claim_holder",
    "count_by_state",
    "count_failed",
    "count_prunable",
    "enqueue",
    "ensure_bot",
    "failed_kinds",
    "failed_queues",
    "finished_per_minute",
    "forget_idle_chats",
    "get_message",
    "list_messages",
    "prune",
    "queue_status",
    "queue_timing",
    "reap_stale",
    "record_outcomes",
    "replay",
    "run_async",
    "run_sync",
    "schema_facts",
    "schema_facts_sync",
    "search_messages",
    "seconds_until_next_due",
    "still_claimed",
    "try_maintenance_lock",
    "update_pending",
]

if TYPE_CHECKING:
    from sqlalchemy.ext.asyncio import AsyncConnection, AsyncSession

    AsyncAppConn = AsyncConnection | AsyncSession

AsyncConn = psycopg.AsyncConnection[Any]
SyncConn = Connection | Session


@functools.cache
def _sql(template: str, schema: str) -> str:
    """The statement with its tables qualified by ``schema`` (a validated identifier)."""
    return template.format(
        outbox=f'"{schema}".outbox',
        yuborilgan=f'"{schema}".yuborilgan',
        bot_holati=f'"{schema}".bot_holati',
        chat_navbati=f'"{schema}".chat_navbati',
        notify_channel=notify_channel(schema),
        pause_channel=pause_channel(schema),
    )


@functools.cache
def _text(template: str, schema: str) -> sa.TextClause:
    return sa.text(_sql(template, schema))


def _execute(
    conn: SyncConn, schema: str, template: str, params: Mapping[str, Any] | None = None
) -> Any:
    """Run one statement on the caller's sync connection or session, in its transaction."""
    return conn.execute(_text(template, schema), params or {})


# An app-side operation is a generator of (statement, parameters) pairs that receives each
# statement's result: one implementation serves sync and async sessions alike.
Step = tuple[sa.TextClause, Mapping[str, Any]]
Steps = Generator[Step, Any, Any]


def run_sync(conn: SyncConn, steps: Steps) -> Any:
    """Run an operation's statements on a sync connection or session, in its transaction."""
    try:
        statement, params = next(steps)
        while True:
            statement, params = steps.send(conn.execute(statement, params))
    except StopIteration as done:
        return done.value


async def run_async(conn: AsyncAppConn, steps: Steps) -> Any:
    """Run an operation's statements on an async connection or session, in its transaction."""
    try:
        statement, params = next(steps)
        while True:
            statement, params = steps.send(await conn.execute(statement, params))
    except StopIteration as done:
        return done.value


# --- enqueue: runs inside the caller's transaction, never commits ---------------------------

_ENQUEUE = """
WITH inserted AS (
    INSERT INTO {outbox} (tur, kalit, payload, keyingi_urinish, navbat)
    VALUES (:tur, :kalit, CAST(:payload AS jsonb), coalesce(CAST(:run_at AS timestamptz), now()),
            :navbat)
    ON CONFLICT (kalit) DO NOTHING
    RETURNING id
)
SELECT id, true FROM inserted
UNION ALL
SELECT id, false FROM {outbox} WHERE kalit = :kalit AND NOT EXISTS (SELECT 1 FROM inserted)
"""

_FIND_BY_KEY = "SELECT id FROM {outbox} WHERE kalit = :kalit"


def enqueue(
    *,
    schema: str,
    kind: str,
    key: str,
    payload: Mapping[str, Any],
    run_at: datetime | None,
    queue: str = DEFAULT_QUEUE,
) -> Steps:
    """Insert one message; the result is ``(id, created)``. An existing key returns its row."""
    params = {
        "tur": kind,
        "kalit": key,
        "payload": json.dumps(payload),
        "run_at": run_at,
        "navbat": queue,
    }
    row = (yield _text(_ENQUEUE, schema), params).first()
    if row is None:
        # The conflicting row was committed by another transaction after this statement's
        # snapshot was taken; a fresh statement sees it.
        found = (yield _text(_FIND_BY_KEY, schema), {"kalit": key}).scalar_one()
        return int(found), False
    return int(row[0]), bool(row[1])


# Claimed rows go too: a relay that waited before sending asks whether its claim still exists
# (still_claimed). Failed rows go so that a later bulk replay cannot send a withdrawn message.
_CANCEL = """
DELETE FROM {outbox}
WHERE kalit = ANY(CAST(:keys AS text[])) AND holat IN ('kutmoqda', 'bajarilmoqda', 'xato')
"""


def cancel(*, schema: str, keys: Sequence[str]) -> Steps:
    """Delete unsent messages by key (pending, claimed or failed); sent rows stay."""
    if not keys:
        return 0
    result = yield _text(_CANCEL, schema), {"keys": list(keys)}
    return int(result.rowcount)


# Claimed and failed rows change too: a relay sends from the copy it claimed, so a message
# being sent right now goes out as it was, and any later attempt (a retry, a replay) sends the
# new text.
_UPDATE_PENDING = """
UPDATE {outbox} SET payload = CAST(:payload AS jsonb), yangilangan = now()
WHERE kalit = :kalit AND holat IN ('kutmoqda', 'bajarilmoqda', 'xato')
"""


def update_pending(*, schema: str, key: str, payload: Mapping[str, Any]) -> Steps:
    """Replace the payload of an unsent message; False if there is none (or it was sent)."""
    params = {"kalit": key, "payload": json.dumps(payload)}
    result = yield _text(_UPDATE_PENDING, schema), params
    return bool(result.rowcount)


# --- the relay's hot path ----------------------------------------------------------------------


# The two records of the hot path are named tuples: a relay builds two per message, and a
# tuple is built several times faster than a frozen dataclass.
class ClaimedRow(NamedTuple):
    id: int
    kind: str
    key: str
    payload: Any  # decoded JSON, or an UnreadablePayload that send_message_args refuses
    attempts: int  # urinish after this claim
    already_sent: bool  # a sent marker exists for the key
    claimed_at: datetime  # band_vaqti of this claim: with attempts, the fencing token
    wait: float = 0.0  # seconds from the claim until the row's reserved send slot
    queue: str = DEFAULT_QUEUE


class ClaimLimits(NamedTuple):
    """The bot's limits as the claim applies them to the whole fleet (0: off)."""

    per_bot: float = 0.0  # messages/s
    chat_gap: float = 0.0  # seconds between two messages to one private chat
    group_gap: float = 0.0  # seconds between two messages to one group
    horizon: float = 1.0  # seconds of send slots a claim may reserve ahead


# Rows whose claim expired while their relay held other rows too (``yakka``: "alone") are
# suspects: one of them may be what killed the relay. A process holds such a row alone: it is
# claimed only by a process that holds nothing (``egasi``, the claiming process), and while it
# is held, or due, that process claims nothing else. So a row that keeps killing relays dies
# alone, is charged for it (reap_stale), and ends xato, while its batch mates go out.
_CLAIM_DUE = """
WITH q AS (
    -- The bot's shared state (all its queues). With a per-bot limit it is locked, so that the
    -- claims of every relay of the bot take their send slots one after the other.
    -- The clock, not now(): a claim that waited for another's lock counts from when it got it.
    SELECT greatest(clock_timestamp(), keyingi_slot) AS base, pauza_tugashi > now() AS paused,
           clock_timestamp() AS t0
    FROM {bot_holati} WHERE bot = %(bot)s
    {lock}
),
room AS (
    -- Rows that may be claimed: none while the bot is paused; with a per-bot limit, no more
    -- than the slots free within the horizon (what a relay that dies can hold back).
    SELECT CASE WHEN coalesce((SELECT paused FROM q), false) THEN 0
                WHEN %(rate)s <= 0 THEN %(limit)s
                -- Slots base, base + 1/rate, ... up to now + horizon.
                ELSE least(%(limit)s, greatest(0, 1 + floor((%(horizon)s
                    - extract(epoch FROM (SELECT base - t0 FROM q)))
                    * %(rate)s)::int))
           END AS n
),
alone AS (
    SELECT id, keyingi_urinish, payload ->> 'chat_id' AS chat FROM {outbox}
    WHERE yakka AND holat = 'kutmoqda' AND keyingi_urinish <= now() AND navbat = %(navbat)s
      -- Asked first, so that the common case (no suspect due) skips the second question.
      AND EXISTS (SELECT 1 FROM {outbox}
                  WHERE yakka AND holat = 'kutmoqda' AND keyingi_urinish <= now())
      AND NOT EXISTS (SELECT 1 FROM {outbox}
                      WHERE egasi = %(holder)s AND holat = 'bajarilmoqda')
    ORDER BY keyingi_urinish, id
    LIMIT 1
    FOR UPDATE SKIP LOCKED
),
batch AS (
    SELECT o.id, o.keyingi_urinish, o.payload ->> 'chat_id' AS chat FROM {outbox} o
    WHERE o.holat = 'kutmoqda' AND o.keyingi_urinish <= now() AND NOT o.yakka
      AND o.navbat = %(navbat)s
      AND NOT EXISTS (SELECT 1 FROM {outbox}
                      WHERE yakka AND ((holat = 'kutmoqda' AND keyingi_urinish <= now())
                                       OR (holat = 'bajarilmoqda' AND egasi = %(holder)s)))
    ORDER BY o.keyingi_urinish, o.id
    -- A plain limit, so that the planner walks the index of pending rows; the room is kept
    -- below (rows locked beyond it are let go at commit).
    LIMIT %(limit)s
    FOR UPDATE OF o SKIP LOCKED
),
found AS (
    SELECT *, row_number() OVER (PARTITION BY chat ORDER BY keyingi_urinish, id) AS in_chat
    FROM (SELECT * FROM alone UNION ALL SELECT * FROM batch) f
    {busy_chats}
),
slotted AS (
    -- One message per chat per claim; each takes the next send slot of the bot.
    SELECT id, chat, row_number() OVER (ORDER BY keyingi_urinish, id) - 1 AS slot
    FROM found WHERE in_chat = 1 OR chat IS NULL OR NOT %(chat_on)s
),
timed AS (
    SELECT id, chat,
           coalesce((SELECT base FROM q), clock_timestamp()) + CASE WHEN %(rate)s > 0
               THEN make_interval(secs => slot / %(rate)s) ELSE interval '0' END AS send_at
    FROM slotted WHERE slot < (SELECT n FROM room)
),
chats AS (
    -- Each chat's next free moment. The condition is checked against the newest version of
    -- the chat's row: a claim that waited for another relay's does not double-book the chat.
    INSERT INTO {chat_navbati} AS c (bot, chat, keyingi)
    SELECT %(bot)s, chat, send_at + make_interval(secs => CASE WHEN chat ~ '^[0-9]+$'
                                                          THEN %(chat_gap)s ELSE %(group_gap)s END)
    FROM timed WHERE chat IS NOT NULL AND %(chat_on)s
    ON CONFLICT (bot, chat) DO UPDATE SET keyingi = excluded.keyingi
    WHERE c.keyingi <= excluded.keyingi - make_interval(
        secs => CASE WHEN c.chat ~ '^[0-9]+$' THEN %(chat_gap)s ELSE %(group_gap)s END)
    RETURNING chat
),
taken AS (
    SELECT * FROM timed
    WHERE chat IS NULL OR NOT %(chat_on)s OR chat IN (SELECT chat FROM chats)
),
bump AS (
    UPDATE {bot_holati} h
    SET keyingi_slot = (SELECT base FROM q)
                       + make_interval(secs => (SELECT count(*) FROM timed) / %(rate)s)
    WHERE h.bot = %(bot)s AND %(rate)s > 0 AND EXISTS (SELECT 1 FROM timed)
)
UPDATE {outbox} o
SET holat = 'bajarilmoqda', urinish = least(o.urinish, 999) + 1, band_vaqti = now(),
    egasi = %(holder)s, yangilangan = now()
FROM taken t
WHERE o.id = t.id
RETURNING o.id, o.tur, o.kalit, o.payload::text, o.urinish,
          (SELECT true FROM {yuborilgan} y WHERE y.kalit = o.kalit) IS NOT NULL, o.band_vaqti,
          extract(epoch FROM t.send_at - clock_timestamp())::float8
"""
# Send slots are reserved in the claim itself: no extra round trip. Each claimed row comes back
# with the seconds until its slot; a slot taken by a row that is not sent stays unused (the
# bot sends a little less, never more). A relay that dies holding slots holds back the others
# at most ``horizon`` seconds: no claim reserves further ahead.
# The marker check is a scalar subquery on purpose: it is always one primary-key probe per
# claimed row. Postgres may run an EXISTS as a hash of the whole marker table instead, which
# grows with every message ever sent.
# The payload comes as text and is decoded row by row (read_json): a payload that Python
# cannot decode fails its own row, not the claim that has already committed.
# urinish stays within the table's 0..1000 (outbox_0002): an absurd count written by hand
# (or a table without the constraint) cannot make the claim itself fail, for every relay.


@functools.cache
def _holder_of(pid: int) -> str:
    return f"{socket.gethostname()[:60]}:{pid}:{secrets.token_hex(4)}"


def claim_holder() -> str:
    """Who claims: this process (everything it holds dies with it), named for operators."""
    return _holder_of(os.getpid())


# With a per-bot limit, a chat that may not receive yet is left out before it takes a send slot
# (a slot taken and not used is the bot's loss). Without one, the check in ``chats`` is
# enough, and this probe per row would cost a third of the claim.
_BUSY_CHATS = """
    WHERE NOT EXISTS (SELECT 1 FROM {chat_navbati} c
                      WHERE c.bot = %(bot)s AND c.chat = f.chat AND c.keyingi > now())
"""


@functools.cache
def _claim_sql(schema: str, *, locked: bool, busy_chats: bool) -> str:
    template = _CLAIM_DUE.replace("{lock}", "FOR UPDATE" if locked else "")
    template = template.replace("{busy_chats}", _BUSY_CHATS if busy_chats else "")
    return _sql(template, schema)


async def claim_due(
    conn: AsyncConn,
    limit: int,
    *,
    schema: str,
    queue: str = DEFAULT_QUEUE,
    bot: str = DEFAULT_BOT,
    limits: ClaimLimits = ClaimLimits(),  # noqa: B008 - an immutable tuple
) -> list[ClaimedRow]:
    """Claim up to ``limit`` due rows of ``queue`` in one statement; other relays skip them.

    With ``limits``, each row comes with its send slot (``wait``), reserved in the budget of
    ``bot`` (shared by every queue and relay of that bot).
    """
    params = {
        "limit": limit,
        "holder": claim_holder(),
        "navbat": queue,
        "bot": bot,
        "rate": float(limits.per_bot),
        "chat_on": bool(limits.chat_gap or limits.group_gap),
        "chat_gap": float(limits.chat_gap),
        "group_gap": float(limits.group_gap),
        "horizon": float(limits.horizon),
    }
    statement = _claim_sql(
        schema, locked=limits.per_bot > 0, busy_chats=limits.per_bot > 0 and params["chat_on"]
    )
    cursor = await conn.execute(statement, params)
    return [
        ClaimedRow(row_id, kind, key, read_json(payload), attempts, sent, claimed_at, wait, queue)
        for row_id, kind, key, payload, attempts, sent, claimed_at, wait in await cursor.fetchall()
    ]


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
    refund_attempt: bool = False  # released without a real attempt (shutdown, rate limit)
    key: str | None = None  # with chat_id and message_id: write a sent marker
    chat_id: int | None = None
    message_id: int | None = None
    new_chat_id: int | None = None  # the group moved: rewrite payload.chat_id
    # The claim's band_vaqti. urinish alone can repeat (a replay resets it, a release refunds
    # it); the claim time cannot, so a stale relay's write never matches a newer claim.
    claimed_at: datetime | None = None

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
        AS r(id bigint, urinish int, holat text, delay float8, xato text, refund bool,
             kalit text, chat_id bigint, message_id bigint, new_chat_id bigint,
             band_vaqti timestamptz)
),
markers AS (
    INSERT INTO {yuborilgan} (kalit, chat_id, message_id)
    SELECT kalit, chat_id, message_id FROM r WHERE message_id IS NOT NULL
    ON CONFLICT (kalit) DO NOTHING
)
UPDATE {outbox} o
SET holat = r.holat,
    urinish = CASE WHEN r.refund THEN o.urinish - 1 ELSE o.urinish END,
    keyingi_urinish = CASE WHEN r.holat = 'kutmoqda'
                           THEN now() + make_interval(secs => r.delay)
                           ELSE o.keyingi_urinish END,
    band_vaqti = NULL,
    egasi = NULL,
    yakka = false,
    oxirgi_xato = coalesce(r.xato, o.oxirgi_xato),
    tarix = CASE WHEN r.xato IS NULL THEN o.tarix
                 ELSE o.tarix || jsonb_build_array(jsonb_build_object(
                     'vaqt', now(), 'urinish', o.urinish, 'xato', r.xato)) END,
    payload = CASE WHEN r.new_chat_id IS NULL THEN o.payload
                   ELSE jsonb_set(o.payload, ARRAY['chat_id'], to_jsonb(r.new_chat_id)) END,
    yangilangan = now()
FROM r
WHERE o.id = r.id AND o.holat = 'bajarilmoqda' AND o.urinish = r.urinish
  AND (r.band_vaqti IS NULL OR o.band_vaqti = r.band_vaqti)
"""


async def record_outcomes(conn: AsyncConn, outcomes: Sequence[Outcome], *, schema: str) -> int:
    """Write a batch of outcomes in one statement; return how many rows were still ours."""
    if not outcomes:
        return 0
    # One JSON document for the batch: json.dumps builds it in C, where eleven typed arrays
    # cost psycopg a Python call per element (half the relay's CPU per write, measured).
    batch = json.dumps([_outcome_fields(o) for o in outcomes], separators=(",", ":"))
    cursor = await conn.execute(_sql(_RECORD_OUTCOMES, schema), {"batch": batch})
    return cursor.rowcount


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
    if o.key is not None:
        fields["kalit"] = o.key
    if o.message_id is not None:
        fields.update(chat_id=o.chat_id, message_id=o.message_id)
    if o.new_chat_id is not None:
        fields["new_chat_id"] = o.new_chat_id
    if o.claimed_at is not None:
        fields["band_vaqti"] = o.claimed_at.isoformat()  # microseconds kept: exact match
    return fields


_STILL_CLAIMED = """
SELECT true FROM {outbox}
WHERE id = %(id)s AND holat = 'bajarilmoqda' AND urinish = %(urinish)s AND band_vaqti = %(at)s
"""


async def still_claimed(conn: AsyncConn, row: ClaimedRow, *, schema: str) -> bool:
    """Is this claim still the relay's? False once the app withdrew the row (cancel)."""
    params = {"id": row.id, "urinish": row.attempts, "at": row.claimed_at}
    cursor = await conn.execute(_sql(_STILL_CLAIMED, schema), params)
    return await cursor.fetchone() is not None


# Through epochs, not a timestamp difference: a due time of +-infinity (which the table
# refuses since outbox_0002) gives +-inf here instead of an error in every idle relay.
_SECONDS_UNTIL_NEXT_DUE = """
SELECT (extract(epoch FROM min(keyingi_urinish)) - extract(epoch FROM now()))::float8
FROM {outbox} WHERE holat = 'kutmoqda'
"""


async def seconds_until_next_due(conn: AsyncConn, *, schema: str) -> float | None:
    """Seconds until the earliest pending row is due (<= 0: due now); None if none pending."""
    cursor = await conn.execute(_sql(_SECONDS_UNTIL_NEXT_DUE, schema))
    row = await cursor.fetchone()
    return None if row is None or row[0] is None else float(row[0])


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


class QueueTiming(NamedTuple):
    next_due: float | None  # seconds until a claim may find work (<= 0: now); None: no work
    paused: float  # seconds the bot is paused for, as its state row says (0: not paused)
    due_now: bool = False  # a row is due by its own time (it may wait for its chat or the bot)


# Per queue: the earliest pending row (or its chat's next free moment), but not before the pause
# ends nor before the bot's budget has a free slot within the claim's horizon. Through epochs (a
# due time of +-infinity gives +-inf here instead of an error in every idle relay).
_QUEUE_TIMING = """
SELECT min(greatest(d.due, extract(epoch FROM h.pauza_tugashi),
                    extract(epoch FROM h.keyingi_slot) - %(horizon)s))
       - extract(epoch FROM now()),
       coalesce(max(extract(epoch FROM h.pauza_tugashi) - extract(epoch FROM now())), 0)::float8,
       coalesce(bool_or(d.first_due <= extract(epoch FROM now())), false)
FROM unnest(%(queues)s::text[]) AS q(navbat)
CROSS JOIN LATERAL (
    -- A row whose chat may not receive yet is due when its chat may (the first rows only).
    SELECT min(greatest(extract(epoch FROM p.keyingi_urinish), extract(epoch FROM c.keyingi)))
           AS due,
           min(extract(epoch FROM p.keyingi_urinish)) AS first_due
    FROM (SELECT keyingi_urinish, payload ->> 'chat_id' AS chat FROM {outbox}
          WHERE holat = 'kutmoqda' AND navbat = q.navbat
          ORDER BY keyingi_urinish, id LIMIT 64) p
    LEFT JOIN {chat_navbati} c ON c.bot = %(bot)s AND c.chat = p.chat
) d
LEFT JOIN {bot_holati} h ON h.bot = %(bot)s
"""


async def queue_timing(
    conn: AsyncConn, queues: Sequence[str], *, schema: str, horizon: float, bot: str = DEFAULT_BOT
) -> QueueTiming:
    """When ``queues`` may have work for a claim, and how long their bot is paused."""
    params = {"queues": list(queues), "horizon": float(horizon), "bot": bot}
    cursor = await conn.execute(_sql(_QUEUE_TIMING, schema), params)
    row = await cursor.fetchone()
    if row is None:
        return QueueTiming(None, 0.0)
    due, paused, due_now = row
    # A pause written by the outbox's own code is believed up to the cap.
    paused = min(max(paused, 0.0), MAX_FLOOD_PAUSE)
    return QueueTiming(None if due is None else float(due), paused, bool(due_now))


# Chats whose next free moment is long past are forgotten (run with the reaper, every minute):
# the table holds the chats of the last minute or so, not every chat ever sent to.
_FORGET_IDLE_CHATS = "DELETE FROM {chat_navbati} WHERE keyingi < now() - interval '1 minute'"


async def forget_idle_chats(conn: AsyncConn, *, schema: str) -> int:
    """Delete the chat rows no claim needs any more; return how many."""
    cursor = await conn.execute(_sql(_FORGET_IDLE_CHATS, schema))
    return cursor.rowcount


# --- maintenance ---------------------------------------------------------------------------------

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
# next time (see _CLAIM_DUE), so that a poison row narrows down to itself. egasi stays on a
# reaped row until its next claim: the rows of one dead process are counted together even when
# their claims expire in different rounds.
_REAP_STALE = """
WITH expired AS (
    SELECT id, egasi FROM {outbox}
    WHERE holat = 'bajarilmoqda'
      AND (band_vaqti IS NULL OR band_vaqti = 'infinity'
           OR band_vaqti < now() - make_interval(secs => %(lease)s))
),
held AS (
    SELECT egasi, count(*) AS rows FROM {outbox}
    WHERE egasi IN (SELECT egasi FROM expired) AND holat IN ('bajarilmoqda', 'kutmoqda')
    GROUP BY egasi
),
r AS (
    SELECT e.id, coalesce(h.rows, 1) > 1 AS shared, coalesce(h.rows, 1) AS rows
    FROM expired e LEFT JOIN held h USING (egasi)
)
UPDATE {outbox} o
SET holat = CASE WHEN NOT r.shared AND o.urinish >= %(max_attempts)s THEN 'xato'
                 ELSE 'kutmoqda' END,
    urinish = CASE WHEN r.shared THEN greatest(o.urinish - 1, 0) ELSE o.urinish END,
    yakka = true,
    keyingi_urinish = now(),
    band_vaqti = NULL,
    oxirgi_xato = CASE
        WHEN r.shared THEN 'claim expired after ' || %(lease)s || ' s while its relay held '
            || r.rows || ' rows (relay died or hung); retrying alone, attempt not counted'
        WHEN o.urinish >= %(max_attempts)s
        THEN 'claim expired after ' || %(lease)s || ' s and all attempts are used up'
        ELSE 'claim expired after ' || %(lease)s || ' s (relay died or hung); retrying' END,
    tarix = o.tarix || jsonb_build_array(jsonb_build_object(
        'vaqt', now(), 'urinish', o.urinish, 'xato', 'claim expired (reaped)')),
    yangilangan = now()
FROM r
WHERE o.id = r.id AND o.holat = 'bajarilmoqda'
  AND (o.band_vaqti IS NULL OR o.band_vaqti = 'infinity'
       OR o.band_vaqti < now() - make_interval(secs => %(lease)s))
RETURNING o.holat
"""


async def reap_stale(
    conn: AsyncConn, *, schema: str, lease_seconds: float, max_attempts: int
) -> dict[str, int]:
    """Return expired claims to the queue (or to xato); counts per new state."""
    params = {"lease": float(lease_seconds), "max_attempts": max_attempts}
    cursor = await conn.execute(_sql(_REAP_STALE, schema), params)
    counts = {"kutmoqda": 0, "xato": 0}
    for (state,) in await cursor.fetchall():
        counts[state] += 1
    return counts


# --- reading -------------------------------------------------------------------------------------

_COUNT_BY_STATE = "SELECT holat, count(*) FROM {outbox} GROUP BY holat"


def count_by_state(conn: SyncConn, *, schema: str) -> dict[str, int]:
    counts = {"kutmoqda": 0, "bajarilmoqda": 0, "bajarildi": 0, "xato": 0}
    for state, count in _execute(conn, schema, _COUNT_BY_STATE).fetchall():
        counts[state] = int(count)
    return counts


# --- operator commands ---------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class SentMarker:
    chat_id: int
    message_id: int  # Telegram's id of the delivered message
    sent_at: datetime


@dataclass(frozen=True, slots=True)
class Message:
    """One outbox row in full, with the sent marker of its key if there is one."""

    id: int
    kind: str
    key: str
    payload: Any  # decoded JSON; an UnreadablePayload when Python cannot decode it
    state: str
    attempts: int
    # Times are None when the row holds +-infinity there (written by hand): Python has no such
    # datetime, and reading a row must not fail on one.
    next_attempt_at: datetime | None
    claimed_at: datetime | None
    last_error: str | None
    history: list[Any]
    created_at: datetime | None
    updated_at: datetime | None
    marker: SentMarker | None
    queue: str = DEFAULT_QUEUE  # navbat: the bot that sends it


def _marker(chat_id: Any, message_id: Any, sent_at: Any) -> SentMarker | None:
    return None if message_id is None else SentMarker(int(chat_id), int(message_id), sent_at)


def _history(text: str) -> list[Any]:
    history = read_json(text)
    if isinstance(history, UnreadablePayload):
        return [{"xato": f"tarix is unreadable: {history.reason}"}]
    return history if isinstance(history, list) else [history]


def _message(row: Sequence[Any]) -> Message:
    (
        row_id, kind, queue, key, payload, state, attempts, run_at, claimed_at, error, history,
        created_at, updated_at, *marker,
    ) = row  # fmt: skip
    return Message(
        id=row_id,
        kind=kind,
        key=key,
        payload=read_json(payload),
        state=state,
        attempts=attempts,
        next_attempt_at=run_at,
        claimed_at=claimed_at,
        last_error=error,
        history=_history(history),
        created_at=created_at,
        updated_at=updated_at,
        marker=_marker(*marker),
        queue=queue,
    )


def _finite(column: str) -> str:
    return f"CASE WHEN isfinite({column}) THEN {column} END"


# Payload and tarix come as text, decoded with a fallback (read_json): any row can be shown.
_MESSAGE_COLUMNS = f"""
    o.id, o.tur, o.navbat, o.kalit, o.payload::text, o.holat, o.urinish,
    {_finite("o.keyingi_urinish")}, {_finite("o.band_vaqti")}, o.oxirgi_xato, o.tarix::text,
    {_finite("o.yaratilgan")}, {_finite("o.yangilangan")}, y.chat_id, y.message_id,
    y.yuborilgan_vaqt
"""

_LIST_MESSAGES = f"""
SELECT {_MESSAGE_COLUMNS}
FROM {{outbox}} o LEFT JOIN {{yuborilgan}} y ON y.kalit = o.kalit
WHERE (CAST(:holat AS text) IS NULL OR o.holat = CAST(:holat AS text))
  AND (CAST(:tur AS text) IS NULL OR o.tur = CAST(:tur AS text))
  AND (CAST(:navbat AS text) IS NULL OR o.navbat = CAST(:navbat AS text))
  AND (CAST(:since AS float8) IS NULL OR o.yangilangan >= now() - make_interval(secs => :since))
ORDER BY o.id DESC
LIMIT :limit
"""


def list_messages(
    conn: SyncConn,
    *,
    schema: str,
    state: str | None = None,
    kind: str | None = None,
    limit: int = 50,
    changed_within_seconds: float | None = None,
    queue: str | None = None,
) -> list[Message]:
    """Newest first, optionally only one state and/or kind and/or queue, and/or changed (for a
    failed row: failed) within the last ``changed_within_seconds``."""
    params = {
        "holat": state,
        "tur": kind,
        "limit": limit,
        "since": changed_within_seconds,
        "navbat": queue,
    }
    return [_message(row) for row in _execute(conn, schema, _LIST_MESSAGES, params).fetchall()]


_GET_MESSAGE = f"""
SELECT {_MESSAGE_COLUMNS}
FROM {{outbox}} o LEFT JOIN {{yuborilgan}} y ON y.kalit = o.kalit
WHERE o.id = :id
"""


def get_message(conn: SyncConn, message_id: int, *, schema: str) -> Message | None:
    row = _execute(conn, schema, _GET_MESSAGE, {"id": message_id}).first()
    return None if row is None else _message(row)


@dataclass(frozen=True, slots=True)
class QueueFigures:
    """One queue's share of a status: what an operator with a bot per queue looks at."""

    # Rows per holat. bajarildi is None when the outbox is too large to count done rows (the
    # status then estimates their total from the planner's statistics, which know no queues).
    counts: dict[str, int | None]
    lag_seconds: float
    stuck_claims: int = 0
    never_due: int = 0

    @property
    def stuck(self) -> int:
        return self.stuck_claims + self.never_due


@dataclass(frozen=True, slots=True)
class QueueStatus:
    counts: dict[str, int]  # rows per holat
    lag_seconds: float  # age of the oldest due pending row; 0 when none is due
    stuck: int  # rows that do not move on: stuck_claims + never_due
    markers: int
    # Figures read from the planner's statistics instead of counted: "bajarildi", "markers".
    estimated: tuple[str, ...] = ()
    # Claims older than the lease or without a claim time (the reaper returns them).
    stuck_claims: int = 0
    # Pending rows due at infinity: no relay ever claims them (the table refuses them since
    # outbox_0002, but a table migrated before may hold some).
    never_due: int = 0
    # The same figures per queue (navbat), by name: the queue asked for, or every queue that
    # holds rows to send, being sent or failed (and done rows, when they are counted).
    queues: dict[str, QueueFigures] = field(default_factory=dict)


# A status is a health check, run often: the live states are counted through their partial
# indexes (as large as the backlog), while done rows and sent markers, which grow with every
# message ever sent until retention removes them, are counted only in small tables and
# otherwise read from the planner's statistics (kept fresh by autovacuum).
EXACT_COUNT_BELOW = 200_000  # rows, by the statistics: above this, estimate

# :navbat NULL: every queue. The plain (holat) conditions first keep the partial indexes usable.
_QUEUE_STATUS = """
WITH q AS (SELECT CAST(:navbat AS text) AS navbat)
SELECT
    (SELECT count(*) FROM {outbox}
     WHERE holat = 'kutmoqda' AND navbat = coalesce((SELECT navbat FROM q), navbat)),
    (SELECT count(*) FROM {outbox}
     WHERE holat = 'bajarilmoqda' AND navbat = coalesce((SELECT navbat FROM q), navbat)),
    (SELECT count(*) FROM {outbox}
     WHERE holat = 'xato' AND navbat = coalesce((SELECT navbat FROM q), navbat)),
    (SELECT coalesce(extract(epoch FROM now() - min(keyingi_urinish)), 0)::float8
     FROM {outbox} WHERE holat = 'kutmoqda' AND keyingi_urinish <= now()
                     AND keyingi_urinish > '-infinity'
                     AND navbat = coalesce((SELECT navbat FROM q), navbat)),
    (SELECT count(*) FROM {outbox} WHERE holat = 'bajarilmoqda'
        AND navbat = coalesce((SELECT navbat FROM q), navbat)
        AND (band_vaqti IS NULL OR band_vaqti = 'infinity'
             OR band_vaqti < now() - make_interval(secs => :lease))),
    (SELECT count(*) FROM {outbox} WHERE holat = 'kutmoqda' AND keyingi_urinish = 'infinity'
        AND navbat = coalesce((SELECT navbat FROM q), navbat)),
    (SELECT reltuples::float8 FROM pg_class WHERE oid = '{outbox}'::regclass),
    (SELECT reltuples::float8 FROM pg_class WHERE oid = '{yuborilgan}'::regclass)
"""

# The figures per queue, in a second statement (under load they may differ from the totals by
# the rows that moved in between). Each state is read on its own, so that its partial index
# serves it: pending rows from (navbat, keyingi_urinish, id) alone. Done rows only in a table
# small enough to count them.
_STATUS_PER_QUEUE = """
SELECT navbat,
       count(*) FILTER (WHERE holat = 'kutmoqda'),
       count(*) FILTER (WHERE holat = 'bajarilmoqda'),
       count(*) FILTER (WHERE holat = 'bajarildi'),
       count(*) FILTER (WHERE holat = 'xato'),
       coalesce(extract(epoch FROM now() - min(keyingi_urinish) FILTER (
           WHERE holat = 'kutmoqda' AND keyingi_urinish <= now()
             AND keyingi_urinish > '-infinity')), 0)::float8,
       count(*) FILTER (WHERE holat = 'bajarilmoqda' AND (band_vaqti IS NULL
           OR band_vaqti = 'infinity' OR band_vaqti < now() - make_interval(secs => :lease))),
       count(*) FILTER (WHERE holat = 'kutmoqda' AND keyingi_urinish = 'infinity')
FROM (
    SELECT navbat, 'kutmoqda' AS holat, keyingi_urinish, NULL::timestamptz AS band_vaqti
    FROM {outbox} WHERE holat = 'kutmoqda'
    UNION ALL
    SELECT navbat, 'bajarilmoqda', NULL, band_vaqti FROM {outbox} WHERE holat = 'bajarilmoqda'
    UNION ALL
    SELECT navbat, 'xato', NULL, NULL FROM {outbox} WHERE holat = 'xato'
    UNION ALL
    SELECT navbat, 'bajarildi', NULL, NULL FROM {outbox}
    WHERE holat = 'bajarildi' AND CAST(:count_done AS boolean)
) r
GROUP BY navbat
ORDER BY navbat
"""

_COUNT_DONE = (
    "SELECT count(*) FROM {outbox} WHERE holat = 'bajarildi' AND "
    "(CAST(:navbat AS text) IS NULL OR navbat = CAST(:navbat AS text))"
)
_COUNT_MARKERS = "SELECT count(*) FROM {yuborilgan}"


def queue_status(
    conn: SyncConn,
    *,
    schema: str,
    lease_seconds: float,
    exact_below: int | None = None,
    queue: str | None = None,
) -> QueueStatus:
    """Counts and health, of every queue or of ``queue`` (its done rows then counted exactly;
    sent markers are the whole outbox's)."""
    threshold = EXACT_COUNT_BELOW if exact_below is None else exact_below
    params = {"lease": float(lease_seconds), "navbat": queue}
    row = _execute(conn, schema, _QUEUE_STATUS, params).one()
    pending, in_progress, failed, lag, stuck, never_due, outbox_rows, marker_rows = row
    estimated: list[str] = []
    # reltuples is -1 until a table is first vacuumed or analyzed: below any threshold.
    count_done = queue is not None or outbox_rows < threshold
    per_queue: dict[str, QueueFigures] = {}
    if queue is None:
        per_queue = _status_per_queue(conn, schema, params, count_done)
    if not count_done:
        done = max(0, round(outbox_rows) - int(pending) - int(in_progress) - int(failed))
        estimated.append("bajarildi")
    elif queue is None:
        done = sum(figures.counts["bajarildi"] or 0 for figures in per_queue.values())
    else:
        done = _execute(conn, schema, _COUNT_DONE, {"navbat": queue}).scalar_one()
    if marker_rows >= threshold:
        markers = max(0, round(marker_rows))
        estimated.append("markers")
    else:
        markers = _execute(conn, schema, _COUNT_MARKERS).scalar_one()
    counts = {"kutmoqda": pending, "bajarilmoqda": in_progress, "bajarildi": done, "xato": failed}
    totals = {state: int(n) for state, n in counts.items()}
    lag_seconds = max(float(lag), 0.0)
    if queue is not None:
        per_queue = {queue: QueueFigures(dict(totals), lag_seconds, int(stuck), int(never_due))}
    return QueueStatus(
        counts=totals,
        lag_seconds=lag_seconds,
        stuck=int(stuck) + int(never_due),
        markers=int(markers),
        estimated=tuple(estimated),
        stuck_claims=int(stuck),
        never_due=int(never_due),
        queues=per_queue,
    )


def _status_per_queue(
    conn: SyncConn, schema: str, params: Mapping[str, Any], count_done: bool
) -> dict[str, QueueFigures]:
    rows = _execute(conn, schema, _STATUS_PER_QUEUE, {**params, "count_done": count_done})
    per_queue = {}
    for queue, pending, in_progress, done, failed, lag, stuck, never_due in rows:
        counts = {
            "kutmoqda": int(pending),
            "bajarilmoqda": int(in_progress),
            "bajarildi": int(done) if count_done else None,
            "xato": int(failed),
        }
        per_queue[str(queue)] = QueueFigures(
            counts, max(float(lag), 0.0), int(stuck), int(never_due)
        )
    return per_queue


@dataclass(frozen=True, slots=True)
class ReplayResult:
    id: int
    replayed: bool
    state: str | None  # the state found before the replay; None: no message with this id
    marker: SentMarker | None  # the key's sent marker (deleted when forced)


# Replay happens in one transaction: lock the rows, decide, then change them. The lock keeps
# the state seen by the decision until the change commits (relays only ever touch pending and
# claimed rows, but a second operator may replay the same rows at the same time: they wait
# here, then see the row pending and are refused). Locking in id order avoids deadlocks
# between two bulk replays.
_LOCK_FOR_REPLAY = """
SELECT o.id, o.holat, y.chat_id, y.message_id, y.yuborilgan_vaqt
FROM {outbox} o LEFT JOIN {yuborilgan} y ON y.kalit = o.kalit
WHERE o.id = ANY(CAST(:ids AS bigint[]))
ORDER BY o.id
FOR UPDATE OF o
"""

_LOCK_FAILED_FOR_REPLAY = """
SELECT o.id, o.holat, y.chat_id, y.message_id, y.yuborilgan_vaqt
FROM {outbox} o LEFT JOIN {yuborilgan} y ON y.kalit = o.kalit
WHERE o.holat = 'xato'
  AND (CAST(:tur AS text) IS NULL OR o.tur = CAST(:tur AS text))
  AND (CAST(:navbat AS text) IS NULL OR o.navbat = CAST(:navbat AS text))
  AND (CAST(:since AS float8) IS NULL OR o.yangilangan >= now() - make_interval(secs => :since))
ORDER BY o.id
FOR UPDATE OF o
"""

# The failure stays in tarix, with an entry for the replay itself (and, when forced, the
# marker that was removed). A forced replay deletes the key's marker in the same transaction:
# a relay completes a row whose key has a marker without sending it. The NOTIFY reaches the
# listening relays at commit, so the rows go out at once rather than at the next poll.
_REPLAY = """
WITH replayed AS (
    UPDATE {outbox} o
    SET holat = 'kutmoqda',
        urinish = 0,
        keyingi_urinish = now(),
        band_vaqti = NULL,
        egasi = NULL,
        yakka = false,
        oxirgi_xato = NULL,
        tarix = o.tarix || jsonb_build_array(jsonb_strip_nulls(jsonb_build_object(
            'vaqt', now(),
            'urinish', o.urinish,
            'hodisa', CASE WHEN :force THEN 'replay --force' ELSE 'replay' END,
            'oxirgi_xato', o.oxirgi_xato,
            'yuborilgan', (SELECT to_jsonb(y) - 'kalit' FROM {yuborilgan} y
                           WHERE :force AND y.kalit = o.kalit)))),
        yangilangan = now()
    WHERE o.id = ANY(CAST(:ids AS bigint[])) AND o.holat = 'xato'
    RETURNING o.id, o.kalit
),
forgotten AS (
    DELETE FROM {yuborilgan} y USING replayed r WHERE :force AND y.kalit = r.kalit
)
SELECT r.id, pg_notify('{notify_channel}', '') FROM replayed r
"""


def replay(
    conn: SyncConn,
    ids: Sequence[int] | None = None,
    *,
    schema: str,
    force: bool = False,
    kind: str | None = None,
    failed_within_seconds: float | None = None,
    queue: str | None = None,
) -> list[ReplayResult]:
    """Move failed rows back to the queue: the given ids, or (``ids=None``) every xato row
    matching ``kind`` and ``failed_within_seconds``. A row whose key has a sent marker is
    refused unless ``force``. Runs in the caller's transaction; the caller commits.
    """
    if ids is None:
        params: dict[str, Any] = {"tur": kind, "since": failed_within_seconds, "navbat": queue}
        found = _execute(conn, schema, _LOCK_FAILED_FOR_REPLAY, params).fetchall()
        wanted = [int(row[0]) for row in found]
    else:
        wanted = list(dict.fromkeys(ids))
        found = _execute(conn, schema, _LOCK_FOR_REPLAY, {"ids": wanted}).fetchall()
    seen = {int(row[0]): (row[1], _marker(*row[2:])) for row in found}
    accepted = [
        row_id
        for row_id, (state, marker) in seen.items()
        if state == "xato" and (marker is None or force)
    ]
    replayed: set[int] = set()
    if accepted:
        rows = _execute(conn, schema, _REPLAY, {"ids": accepted, "force": force}).fetchall()
        replayed = {int(row[0]) for row in rows}
    results = []
    for row_id in wanted:
        state, marker = seen.get(row_id, (None, None))
        results.append(ReplayResult(row_id, row_id in replayed, state, marker))
    return results


# Done rows leave oldest first through the partial index on (yangilangan) of done rows, a batch
# per statement, so each delete is a short transaction that locks few rows and lets vacuum
# keep up. SKIP LOCKED: two pruners (a relay and an operator) share the work.
_PRUNE_DONE = """
DELETE FROM {outbox}
WHERE id IN (
    SELECT id FROM {outbox}
    WHERE holat = 'bajarildi' AND yangilangan < now() - make_interval(secs => %(older_than)s)
    ORDER BY yangilangan
    LIMIT %(batch)s
    FOR UPDATE SKIP LOCKED
) AND holat = 'bajarildi'
"""

# A marker outlives its row: it stops a re-enqueued key from being sent twice. It is kept while
# a row with its key could still be sent (pending, claimed, or failed and replayable).
_PRUNE_MARKERS = """
DELETE FROM {yuborilgan}
WHERE kalit IN (
    SELECT y.kalit FROM {yuborilgan} y
    WHERE y.yuborilgan_vaqt < now() - make_interval(secs => %(older_than)s)
      AND NOT EXISTS (SELECT 1 FROM {outbox} o WHERE o.kalit = y.kalit AND o.holat <> 'bajarildi')
    ORDER BY y.yuborilgan_vaqt
    LIMIT %(batch)s
    FOR UPDATE SKIP LOCKED
)
"""


async def prune(
    conn: AsyncConn,
    *,
    schema: str,
    done_older_than_seconds: float,
    markers_older_than_seconds: float,
    batch_size: int,
    on_batch: Callable[[int], None] | None = None,
) -> dict[str, int]:
    """Retention (relay maintenance, ``outbox prune``): batch after batch, each in its own
    short transaction so a long delete neither locks the table nor bloats it, until one comes
    up short. Returns how many done rows and markers went; ``on_batch`` hears each batch's
    count (a progress line)."""
    removed = {"bajarildi": 0, "yuborilgan": 0}
    steps = (
        ("bajarildi", _PRUNE_DONE, done_older_than_seconds),
        ("yuborilgan", _PRUNE_MARKERS, markers_older_than_seconds),
    )
    for name, statement, older_than in steps:
        params = {"older_than": float(older_than), "batch": batch_size}
        while True:
            async with conn.transaction():
                n = (await conn.execute(_sql(statement, schema), params)).rowcount
            removed[name] += n
            if on_batch is not None:
                on_batch(n)
            if n < batch_size:
                break
    return removed


_COUNT_FAILED = "SELECT count(*) FROM {outbox} WHERE holat = 'xato'"


def count_failed(conn: SyncConn, *, schema: str) -> int:
    return int(_execute(conn, schema, _COUNT_FAILED).scalar_one())


# --- the operator's web page and progress lines ---------------------------------------------


@dataclass(frozen=True, slots=True)
class Activity:
    """Rows that reached bajarildi and xato, per minute, oldest minute first."""

    delivered: list[int]
    failed: list[int]


# Read from the rows as they stand: a replayed failure leaves the failed count, and retention
# (a week by default) the delivered one. Done rows are found through their partial index on
# yangilangan, failed ones through theirs.
_FINISHED_PER_MINUTE = """
SELECT floor(extract(epoch FROM now() - yangilangan) / 60)::int, holat, count(*)
FROM {outbox}
WHERE holat IN ('bajarildi', 'xato')
  AND yangilangan > now() - make_interval(mins => CAST(:minutes AS int))
GROUP BY 1, 2
"""


def finished_per_minute(conn: SyncConn, *, schema: str, minutes: int = 60) -> Activity:
    delivered, failed = [0] * minutes, [0] * minutes
    for ago, state, count in _execute(conn, schema, _FINISHED_PER_MINUTE, {"minutes": minutes}):
        slot = minutes - 1 - min(max(int(ago), 0), minutes - 1)
        (delivered if state == "bajarildi" else failed)[slot] += int(count)
    return Activity(delivered, failed)


_FAILED_KINDS = "SELECT DISTINCT tur FROM {outbox} WHERE holat = 'xato' ORDER BY tur"


def failed_kinds(conn: SyncConn, *, schema: str) -> list[str]:
    """The kinds (tur) among failed rows, for the page's filter."""
    return [str(kind) for (kind,) in _execute(conn, schema, _FAILED_KINDS)]


_FAILED_QUEUES = "SELECT DISTINCT navbat FROM {outbox} WHERE holat = 'xato' ORDER BY navbat"


def failed_queues(conn: SyncConn, *, schema: str) -> list[str]:
    """The queues (navbat) among failed rows, for the page's filter."""
    return [str(queue) for (queue,) in _execute(conn, schema, _FAILED_QUEUES)]


# A number may be a row id or a chat id (payload's or the sent marker's); anything else is a
# key or the start of one. Chat ids are not indexed: an operator's search reads the table.
_SEARCH_MESSAGES = f"""
SELECT {_MESSAGE_COLUMNS}
FROM {{outbox}} o LEFT JOIN {{yuborilgan}} y ON y.kalit = o.kalit
WHERE o.kalit = :text
   OR starts_with(o.kalit, :text)
   OR (CAST(:number AS bigint) IS NOT NULL
       AND (o.id = CAST(:number AS bigint)
            OR o.payload ->> 'chat_id' = CAST(:number AS text)
            OR y.chat_id = CAST(:number AS bigint)))
ORDER BY o.id DESC
LIMIT :limit
"""


def search_messages(conn: SyncConn, text: str, *, schema: str, limit: int = 100) -> list[Message]:
    """Messages in any state whose key is or starts with ``text``, or, for a number, whose id
    or chat id it is; newest first."""
    text = text.strip()
    try:
        number: int | None = int(text)
    except ValueError:
        number = None
    params = {"text": text, "number": number, "limit": limit}
    return [_message(row) for row in _execute(conn, schema, _SEARCH_MESSAGES, params)]


# An operator's cancel keeps the row, unlike the app's (which deletes): it moves to xato with
# the reason in oxirgi_xato and tarix, so the page still shows what was withdrawn, by whom and
# when, and a replay undoes it. Only a waiting row: a claimed one may be on its way to Telegram.
_CANCEL_BY_OPERATOR = """
UPDATE {outbox}
SET holat = 'xato',
    oxirgi_xato = 'cancelled by operator',
    tarix = tarix || jsonb_build_array(jsonb_build_object(
        'vaqt', now(), 'urinish', urinish, 'hodisa', 'cancelled by operator')),
    yangilangan = now()
WHERE id = :id AND holat = 'kutmoqda'
RETURNING id
"""


def cancel_by_operator(conn: SyncConn, message_id: int, *, schema: str) -> bool:
    """kutmoqda -> xato ('cancelled by operator'); False if the row is not waiting."""
    return _execute(conn, schema, _CANCEL_BY_OPERATOR, {"id": message_id}).first() is not None


# What a drain still has to do: due rows and rows being sent.
_BACKLOG = """
SELECT (SELECT count(*) FROM {outbox} WHERE holat = 'kutmoqda' AND keyingi_urinish <= now())
     + (SELECT count(*) FROM {outbox} WHERE holat = 'bajarilmoqda')
"""


async def backlog(conn: AsyncConn, *, schema: str) -> int:
    """Rows due or claimed now (the progress line of ``relay --drain``)."""
    cursor = await conn.execute(_sql(_BACKLOG, schema))
    row = await cursor.fetchone()
    return 0 if row is None else int(row[0])


_COUNT_PRUNABLE = """
SELECT
    (SELECT count(*) FROM {outbox}
     WHERE holat = 'bajarildi' AND yangilangan < now() - make_interval(secs => %(done)s)),
    (SELECT count(*) FROM {yuborilgan} y
     WHERE y.yuborilgan_vaqt < now() - make_interval(secs => %(markers)s)
       AND NOT EXISTS (SELECT 1 FROM {outbox} o
                       WHERE o.kalit = y.kalit AND o.holat <> 'bajarildi'))
"""


async def count_prunable(
    conn: AsyncConn,
    *,
    schema: str,
    done_older_than_seconds: float,
    markers_older_than_seconds: float,
) -> int:
    """How many rows and markers ``prune`` would delete now (its progress line's total)."""
    params = {"done": float(done_older_than_seconds), "markers": float(markers_older_than_seconds)}
    cursor = await conn.execute(_sql(_COUNT_PRUNABLE, schema), params)
    row = await cursor.fetchone()
    return 0 if row is None else int(row[0]) + int(row[1])


# --- the schema itself -------------------------------------------------------------------------

# Every outbox migration writes "outbox-telegram <revision>" into the outbox table's comment,
# which the relay and the commands check (``outbox.schema.schema_problem``) whichever way the
# migrations ran: ``outbox migrate`` or the host's own Alembic history.
# (the table's comment or '' if it has none, the names of its columns); no row: no table.
_SCHEMA_FACTS = """
SELECT coalesce(obj_description(c.oid, 'pg_class'), ''),
       array(SELECT attname::text FROM pg_attribute
             WHERE attrelid = c.oid AND attnum > 0 AND NOT attisdropped)
FROM (SELECT to_regclass(%(table)s) AS oid) c
WHERE c.oid IS NOT NULL
"""


def _schema_facts(row: Sequence[Any] | None) -> tuple[str, frozenset[str]] | None:
    return None if row is None else (str(row[0]), frozenset(row[1]))


async def schema_facts(conn: AsyncConn, *, schema: str) -> tuple[str, frozenset[str]] | None:
    """The outbox table's comment and columns; None if there is no outbox table."""
    cursor = await conn.execute(_SCHEMA_FACTS, {"table": f'"{schema}".outbox'})
    return _schema_facts(await cursor.fetchone())


def schema_facts_sync(conn: SyncConn, *, schema: str) -> tuple[str, frozenset[str]] | None:
    """``schema_facts`` on an app or operator connection."""
    statement = sa.text(_SCHEMA_FACTS.replace("%(table)s", ":table"))
    return _schema_facts(conn.execute(statement, {"table": f'"{schema}".outbox'}).first())
