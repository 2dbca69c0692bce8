"""The relay's hot path: claims, their fencing, outcomes, the bot's pause and queue timing.

It runs on the relay's own psycopg async connections with ``%(name)s`` parameters. Times that
decide behaviour come from the database clock (``now()``), so many relay hosts agree on what is
due.
"""

from __future__ import annotations

import functools
import json
import operator
import os
import re
import secrets
import socket
from collections.abc import Sequence
from datetime import datetime
from typing import Any, NamedTuple

import psycopg
from psycopg.rows import RowMaker

from outbox.payload import read_json
from outbox.queries._common import AsyncConn, _sql
from outbox.queries.pause import not_paused
from outbox.ratelimit import MAX_FLOOD_PAUSE
from outbox.schema import DEFAULT_BOT, DEFAULT_QUEUE

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
    # A follow-up's original (payload.message_key): its sent marker as decoded JSON
    # [chat_id, message_id, message_ids or null], and its state (with its failure code) when
    # it has no marker; both None for every other row.
    original: Any = None
    original_state: str | None = None


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
    SELECT id, keyingi_urinish, {chat} AS chat, {weight} AS w FROM {outbox} o
    WHERE yakka AND holat = {pending} AND keyingi_urinish <= now() AND navbat = %(navbat)s
      {not_paused_o}
      -- Asked first, so that the common case (no suspect due) skips the second question.
      AND EXISTS (SELECT 1 FROM {outbox}
                  WHERE yakka AND holat = {pending} AND keyingi_urinish <= now()
                    AND navbat = %(navbat)s)
      AND NOT EXISTS (SELECT 1 FROM {outbox}
                      WHERE egasi = %(holder)s AND holat = {in_progress})
    ORDER BY keyingi_urinish, id
    LIMIT 1
    FOR UPDATE SKIP LOCKED
),
batch AS (
    SELECT o.id, o.keyingi_urinish, {chat} AS chat, {weight} AS w
    FROM {outbox} o
    WHERE o.holat = {pending} AND o.keyingi_urinish <= now() AND NOT o.yakka
      AND o.navbat = %(navbat)s
      {not_paused_o}
      -- A follow-up (message_key) waits while its original is still to be sent.
      AND (NOT o.payload ? 'message_key'
           OR NOT EXISTS (SELECT 1 FROM {outbox} w WHERE w.kalit = o.payload ->> 'message_key'
                          AND w.holat IN ({pending}, {in_progress})))
      -- A suspect of this queue due, or one this process holds (of any queue), waits alone;
      -- a paused suspect does not hold back the queue.
      AND NOT EXISTS (SELECT 1 FROM {outbox} s
                      WHERE yakka AND ((holat = {pending} AND keyingi_urinish <= now()
                                        AND navbat = %(navbat)s {not_paused_s})
                                       OR (holat = {in_progress} AND egasi = %(holder)s)))
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
    -- One message per chat per claim; each takes the next send slot of the bot (an album
    -- takes one slot per item: Telegram counts each).
    SELECT id, chat, w, sum(w) OVER (ORDER BY keyingi_urinish, id) - w AS slot
    FROM found WHERE in_chat = 1 OR chat IS NULL OR NOT %(chat_on)s
),
timed AS (
    SELECT id, chat, w,
           coalesce((SELECT base FROM q), clock_timestamp()) + CASE WHEN %(rate)s > 0
               THEN make_interval(secs => slot / %(rate)s) ELSE interval '0' END AS send_at
    FROM slotted WHERE slot < (SELECT n FROM room)
),
chats AS (
    -- Each chat's next free moment. The condition is checked against the newest version of
    -- the chat's row: a claim that waited for another relay's does not double-book the chat.
    INSERT INTO {chat_navbati} AS c (bot, chat, keyingi)
    -- An album of N keeps its chat for N gaps (Telegram counts each item).
    SELECT %(bot)s, chat, send_at + make_interval(secs => w * CASE WHEN chat ~ '^[0-9]+$'
                                                          THEN %(chat_gap)s ELSE %(group_gap)s END)
    FROM timed WHERE chat IS NOT NULL AND %(chat_on)s
    ON CONFLICT (bot, chat) DO UPDATE SET keyingi = excluded.keyingi
    -- The chat is free by this row's own moment (its row in timed: one per chat per claim).
    WHERE c.keyingi <= (SELECT t.send_at FROM timed t WHERE t.chat = excluded.chat)
    RETURNING chat
),
taken AS (
    SELECT * FROM timed
    WHERE chat IS NULL OR NOT %(chat_on)s OR chat IN (SELECT chat FROM chats)
),
bump AS (
    UPDATE {bot_holati} h
    SET keyingi_slot = (SELECT base FROM q)
                       + make_interval(secs => (SELECT sum(w) FROM timed) / %(rate)s)
    WHERE h.bot = %(bot)s AND %(rate)s > 0 AND EXISTS (SELECT 1 FROM timed)
)
UPDATE {outbox} o
SET holat = {in_progress}, urinish = least(o.urinish, 999) + 1, band_vaqti = now(),
    egasi = %(holder)s, yangilangan = now()
FROM taken t
WHERE o.id = t.id
RETURNING o.id AS id, o.tur AS kind, o.kalit AS key, o.payload::text AS payload,
          o.urinish AS attempts, o.band_vaqti AS claimed_at, o.navbat AS queue,
          (SELECT true FROM {yuborilgan} y WHERE y.kalit = o.kalit) IS NOT NULL AS already_sent,
          extract(epoch FROM t.send_at - clock_timestamp())::float8 AS wait,
          CASE WHEN o.payload ? 'message_key' THEN
              (SELECT json_build_array(y.chat_id, y.message_id, y.message_ids)::text
               FROM {yuborilgan} y WHERE y.kalit = o.payload ->> 'message_key') END AS original,
          CASE WHEN o.payload ? 'message_key' THEN
              (SELECT w.holat || coalesce(':' || w.xato_turi, '') FROM {outbox} w
               WHERE w.kalit = o.payload ->> 'message_key') END AS original_state
"""
# The chat a row goes to; a follow-up's is its original's (edits share the chat's limits). The
# marker is looked up only for a row without chat_id.
_CHAT = """coalesce(o.payload ->> 'chat_id',
                  (SELECT y.chat_id::text FROM {yuborilgan} y
                   WHERE y.kalit = o.payload ->> 'message_key'))"""
# The messages a row counts as against the limits: an album's items (outbox.payload_methods
# refuses more than 10; anything else written by hand counts as one).
_WEIGHT = """CASE WHEN jsonb_typeof(o.payload -> 'media') = 'array'
                AND lower(o.payload ->> 'method') = 'sendmediagroup'
           THEN least(greatest(jsonb_array_length(o.payload -> 'media'), 1), 10) ELSE 1 END"""
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
    for alias in ("o", "s"):
        template = template.replace(f"{{not_paused_{alias}}}", not_paused(alias).strip())
    template = template.replace("{busy_chats}", _BUSY_CHATS if busy_chats else "")
    template = template.replace("{weight}", _WEIGHT).replace("{chat}", _CHAT)
    return _sql(template, schema)


_NAMED_PARAMETER = re.compile(r"%\((\w+)\)s")


@functools.cache
def _positional(statement: str) -> tuple[str, tuple[str, ...]]:
    """``statement`` with ``$n`` placeholders, and the parameter names in their order.

    psycopg parses a statement's ``%(name)s`` placeholders on every execution once it is
    longer than 4 KiB (it caches only shorter ones): 0.4 ms for the claim, a sixth of the
    relay's CPU per claimed row. A raw cursor sends the statement as it is.
    """
    names: list[str] = []

    def number(match: re.Match[str]) -> str:
        if match.group(1) not in names:
            names.append(match.group(1))
        return f"${names.index(match.group(1)) + 1}"

    return _NAMED_PARAMETER.sub(number, statement).replace("%%", "%"), tuple(names)


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
    statement, params = claim_statement(limit, schema=schema, queue=queue, bot=bot, limits=limits)
    async with psycopg.AsyncRawCursor(conn, row_factory=_claimed_rows) as cursor:
        await cursor.execute(statement, params)
        return await cursor.fetchall()


def claim_statement(
    limit: int, *, schema: str, queue: str, bot: str, limits: ClaimLimits
) -> tuple[str, list[Any]]:
    """The claim as ``claim_due`` sends it: ``$n`` placeholders and their values (tests read
    its plan)."""
    chat_on = bool(limits.chat_gap or limits.group_gap)
    values = {
        "limit": limit,
        "holder": claim_holder(),
        "navbat": queue,
        "bot": bot,
        "rate": float(limits.per_bot),
        "chat_on": chat_on,
        "chat_gap": float(limits.chat_gap),
        "group_gap": float(limits.group_gap),
        "horizon": float(limits.horizon),
    }
    locked = limits.per_bot > 0
    statement, names = _positional(_claim_sql(schema, locked=locked, busy_chats=locked and chat_on))
    return statement, [values[name] for name in names]


def _claimed_rows(cursor: psycopg.AsyncCursor[Any]) -> RowMaker[ClaimedRow]:
    """Claimed rows by the names of the RETURNING list (its aliases are ClaimedRow's fields),
    matched once per statement, the payload decoded on the way. As fast as the positional
    unpacking it replaces (about 1.4 us a row); psycopg's kwargs_row, a dict per row, took
    twice as long."""
    names = [column.name for column in cursor.description or ()]
    pick = operator.itemgetter(*(names.index(field) for field in ClaimedRow._fields))

    def make(values: Sequence[Any]) -> ClaimedRow:
        r = pick(values)
        row = _make_claimed((*r[:_PAYLOAD], read_json(r[_PAYLOAD]), *r[_PAYLOAD + 1 :]))
        if row.original is not None:
            row = row._replace(original=read_json(row.original))
        return row

    return make


_PAYLOAD = ClaimedRow._fields.index("payload")
_make_claimed = ClaimedRow._make


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
    keyingi_urinish = CASE WHEN r.holat = {pending}
                           THEN now() + make_interval(secs => r.delay)
                           ELSE o.keyingi_urinish END,
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
    payload = CASE WHEN r.new_chat_id IS NULL THEN o.payload
                   ELSE jsonb_set(o.payload, ARRAY['chat_id'], to_jsonb(r.new_chat_id)) END,
    yangilangan = now()
FROM r
-- The state is compared with a subquery's value, not a literal: a literal lets the planner
-- answer the join from the index of claimed rows, which holds a dead entry for every message
-- completed since the last vacuum (it cannot see them: 19,000 read for 64 rows, measured);
-- this way each outcome is one primary-key probe.
WHERE o.id = r.id AND o.holat = (SELECT {in_progress}) AND o.urinish = r.urinish
  AND (r.band_vaqti IS NULL OR o.band_vaqti = r.band_vaqti)
"""


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
    return _sql(_RECORD_OUTCOMES, schema), {"batch": batch, "count": len(outcomes)}


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
           -- No row (greatest() skips a NULL): no work, not the bot's '-infinity' defaults.
           FILTER (WHERE d.due IS NOT NULL)
       - extract(epoch FROM now()),
       coalesce(max(extract(epoch FROM h.pauza_tugashi) - extract(epoch FROM now())), 0)::float8,
       coalesce(bool_or(d.first_due <= extract(epoch FROM now())), false)
FROM unnest(%(queues)s::text[]) AS q(navbat)
CROSS JOIN LATERAL (
    -- A row whose chat may not receive yet is due when its chat may (the first rows only).
    SELECT min(greatest(extract(epoch FROM p.keyingi_urinish), extract(epoch FROM c.keyingi)))
           AS due,
           min(extract(epoch FROM p.keyingi_urinish)) AS first_due
    FROM (SELECT keyingi_urinish, payload ->> 'chat_id' AS chat FROM {outbox} r
          WHERE holat = {pending} AND navbat = q.navbat {not_paused}
          ORDER BY keyingi_urinish, id LIMIT 64) p
    LEFT JOIN {chat_navbati} c ON c.bot = %(bot)s AND c.chat = p.chat
) d
LEFT JOIN {bot_holati} h ON h.bot = %(bot)s
""".replace("{not_paused}", not_paused("r", queue="q.navbat").strip())
# Paused rows are no work: an idle relay does not wake for them, and a drain ends without them.


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
