"""The claim: one statement that takes a relay's due rows, in priority order with the
starvation bound, delivery windows and expiry, and reserves their send slots in the bot's
budget and their chats' spacing, for every relay of the bot together.

It runs on the relay's own psycopg async connections. Times that decide behaviour come from
the database clock (``now()``), so many relay hosts agree on what is due.
"""

from __future__ import annotations

import functools
import operator
import os
import re
import secrets
import socket
import weakref
from collections.abc import Sequence
from datetime import datetime
from typing import Any, NamedTuple

import psycopg
from psycopg.rows import RowMaker

from outbox.payload import read_json
from outbox.queries._common import AsyncConn, _sql
from outbox.queries.pause import not_paused
from outbox.schema import DEFAULT_BOT, DEFAULT_QUEUE
from outbox.states import FailureCode

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
    expires_in: float | None = None  # seconds from the claim until its expiry (eskirish)
    # The priorities pending in the queue at the claim, highest first, as PostgreSQL writes an
    # array ('{10,0}'): text, read for the first row only (claim_due).
    priorities: str | None = None


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
WITH RECURSIVE q AS (
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
           END AS n,
           -- The first slot of this claim reserved for the oldest due row, whatever its
           -- priority (one slot in {share}, counted on the bot's slot clock, fleet-wide).
           CASE WHEN %(rate)s > 0
                THEN ({share} - 1 - floor(extract(epoch FROM (SELECT base FROM q)) * %(rate)s
                                         + 0.5)::bigint %% {share}) %% {share}
                ELSE {share} - 1 END AS first_reserved
),
plan AS (
    -- Delivery windows: with the queue's windowed rows in deadline order, the k-th must
    -- start by deadline_k - k / rate. The rows up to the last one past that moment may go
    -- early (their window open); otherwise a row goes at its own time.
    SELECT greatest(now(), max(d) FILTER (
               WHERE d - make_interval(secs => k / %(rate)s) <= now())) AS until
    FROM (SELECT keyingi_urinish AS d, row_number() OVER (ORDER BY keyingi_urinish, id) AS k
          FROM {outbox} o
          WHERE holat = {pending} AND navbat = %(navbat)s {bot_rows} AND eng_erta IS NOT NULL
            AND keyingi_urinish > now()
            AND keyingi_urinish <= now() + make_interval(secs => %(lookahead)s)
            {not_paused_o}
          ORDER BY keyingi_urinish, id
          LIMIT {plan_rows}) w
    WHERE %(rate)s > 0
),
clear AS (
    -- A suspect of this queue due, or one this process holds (of any queue), waits alone;
    -- a paused suspect does not hold back the queue.
    SELECT NOT EXISTS (SELECT 1 FROM {outbox} s
                       WHERE yakka AND ((holat = {pending} AND keyingi_urinish <= now()
                                         AND navbat = %(navbat)s {bot_rows} {not_paused_s})
                                        OR (holat = {in_progress} AND egasi = %(holder)s)))
           AS ok
),
alone AS (
    SELECT id, keyingi_urinish, eskirish, {chat} AS chat, {weight} AS w, -1::float8 AS place
    FROM {outbox} o
    WHERE yakka AND holat = {pending} AND keyingi_urinish <= now() AND navbat = %(navbat)s
      {bot_rows}
      {not_paused_o}
      -- Asked first, so that the common case (no suspect due) skips the second question.
      AND NOT (SELECT ok FROM clear)
      AND NOT EXISTS (SELECT 1 FROM {outbox}
                      WHERE egasi = %(holder)s AND holat = {in_progress})
    ORDER BY keyingi_urinish, id
    LIMIT 1
    FOR UPDATE SKIP LOCKED
),
present(v) AS (
    -- The priorities that have pending rows in the queue, highest first: one probe of the
    -- priorities' index each, and one more. The relay claims next time with a walk for each
    -- of them (claim_due); a priority it does not know yet goes through the walk "other".
    -- ORDER BY ... LIMIT 1, not max(): the relay's plan is made once, maybe on statistics
    -- that saw the queue empty, and max() was then planned as an aggregate over every pending
    -- row (a claim of 128 beside 150,000 pending rows: 28-30 ms, against 5 ms so).
    (SELECT ustuvorlik FROM {outbox}
     WHERE holat = {pending} AND navbat = %(navbat)s {bot_rows}
     ORDER BY ustuvorlik DESC LIMIT 1)
    UNION ALL
    SELECT (SELECT o.ustuvorlik FROM {outbox} o
            WHERE o.holat = {pending} AND o.navbat = %(navbat)s {bot_rows} AND o.ustuvorlik < p.v
            ORDER BY o.ustuvorlik DESC LIMIT 1)
    FROM present p WHERE p.v IS NOT NULL
),
priorities AS (
    SELECT coalesce(array_agg(v), ARRAY[]::smallint[]) AS found FROM present WHERE v IS NOT NULL
),
{bands},
by_priority AS (
    -- Priority first, then the row's moment: one walk of the index per priority, highest
    -- first, until the claim is full (a CTE runs only as far as it is read: the LIMIT stops
    -- the walks once it has its rows).
    SELECT r.*, row_number() OVER (ORDER BY r.ustuvorlik DESC, r.keyingi_urinish, r.id) - 1
                AS place
    FROM ({band_union}
          LIMIT %(limit)s) r
),
lower AS (
    -- A due row of a lower priority than every row the claim took (one row of each lower
    -- priority's walk is enough to know).
    SELECT EXISTS ({lower_union}) AS waiting
),
oldest AS (
    -- The starvation bound: the reserved slots go to the oldest due rows, in their order.
    -- Asked only when the claim is full and a lower priority waits (else every due row it
    -- would find is in the claim already, or comes in the claim's own order).
    SELECT o.id, o.keyingi_urinish, o.ustuvorlik, o.eskirish, {chat} AS chat, {weight} AS w
    FROM {outbox} o
    WHERE o.holat = {pending} AND o.navbat = %(navbat)s {bot_rows} AND {claimable}
      AND (SELECT count(*) FROM by_priority) >= %(limit)s AND (SELECT waiting FROM lower)
    ORDER BY o.keyingi_urinish, o.id
    LIMIT 1 + %(limit)s / {share}
    FOR UPDATE OF o SKIP LOCKED
),
reserved AS (
    -- The j-th of them comes after first_reserved + j * (share - 1) rows by priority.
    SELECT id, keyingi_urinish, eskirish, chat, w,
           (SELECT first_reserved FROM room)
           + (row_number() OVER (ORDER BY keyingi_urinish, id) - 1) * ({share} - 1) - 0.5
           AS place
    FROM oldest WHERE id NOT IN (SELECT id FROM by_priority)
),
found AS (
    SELECT * FROM alone
    UNION ALL SELECT id, keyingi_urinish, eskirish, chat, w, place FROM by_priority
    UNION ALL SELECT * FROM reserved
),
expired AS (
    -- Never sent after its expiry: failed here, where the claim meets it.
    UPDATE {outbox} o
    SET holat = {failed}, band_vaqti = NULL, egasi = NULL, yakka = false,
        oxirgi_xato = 'expired at ' || o.eskirish || ' before it could be sent',
        xato_turi = '{expired_code}', xato_vaqti = now(),
        tarix = o.tarix || jsonb_build_array(jsonb_build_object(
            'vaqt', now(), 'urinish', o.urinish, 'xato', 'expired before it was sent',
            'xato_turi', '{expired_code}')),
        yangilangan = now()
    FROM found f
    WHERE o.id = f.id AND f.eskirish <= now()
),
live AS (
    SELECT *, row_number() OVER (PARTITION BY chat ORDER BY place) AS in_chat
    FROM found WHERE eskirish IS NULL OR eskirish > now()
),
slotted AS (
    -- One message per chat per claim; each takes the next send slot of the bot (an album
    -- takes one slot per item: Telegram counts each).
    SELECT id, chat, w, sum(w) OVER (ORDER BY place) - w AS slot
    FROM live WHERE in_chat = 1 OR chat IS NULL OR NOT %(chat_on)s
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
    -- An album of N keeps its chat for N gaps (Telegram counts each item). A private chat's
    -- id is all digits; the test is ltrim's, not the regular expression '^[0-9]+$', which
    -- cost the server about 3 us a message (PostgreSQL builds its automaton on every call).
    SELECT %(bot)s, chat, send_at + make_interval(secs => w * CASE
               WHEN chat <> '' AND ltrim(chat, '0123456789') = ''
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
               WHERE w.kalit = o.payload ->> 'message_key') END AS original_state,
          (SELECT found FROM priorities)::text AS priorities,
          CASE WHEN isfinite(o.eskirish)
               THEN extract(epoch FROM o.eskirish - clock_timestamp())::float8 END AS expires_in
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
# One priority's due rows, in order. A branch per priority, each naming its priority as a
# constant: with the priority as a parameter (a LATERAL over the range) the planner walks the
# index of all pending rows instead, filtering, for every priority without due rows.
_BAND = """{name} AS (
    SELECT o.id, o.keyingi_urinish, o.ustuvorlik, o.eskirish, {chat} AS chat, {weight} AS w
    FROM {outbox} o
    WHERE o.holat = {pending} AND o.navbat = %(navbat)s {bot_rows} AND o.ustuvorlik = {band}
      AND {claimable}
    ORDER BY o.keyingi_urinish, o.id
    -- A plain limit, so that the planner walks the index of pending rows; the room is kept
    -- below (rows locked beyond it are let go at commit).
    LIMIT %(limit)s
    FOR UPDATE OF o SKIP LOCKED
)"""
# The rows of every priority the statement has no walk for (a priority the relay did not see
# pending at its last claim), in their order; asked only when the queue has such a row (a
# one-time filter), so that it never walks the rows of the known ones.
_OTHER = """other AS (
    SELECT o.id, o.keyingi_urinish, o.ustuvorlik, o.eskirish, {chat} AS chat, {weight} AS w
    FROM {outbox} o
    WHERE o.holat = {pending} AND o.navbat = %(navbat)s {bot_rows}
      AND NOT ((SELECT found FROM priorities) <@ ARRAY[{known}]::smallint[])
      AND NOT (o.ustuvorlik = ANY(ARRAY[{known}]::smallint[]))
      AND {claimable}
    ORDER BY o.ustuvorlik DESC, o.keyingi_urinish, o.id
    LIMIT %(limit)s
    FOR UPDATE OF o SKIP LOCKED
)"""
# What a row must be to be claimed (by priority or as the oldest): due by its own time, or
# inside its open window while the bot's plan is behind; not a suspect (those go alone); and,
# with a per-bot limit, its chat may receive now. The chat is asked before the LIMIT, so that
# a throttled chat's rows never fill a claim (head-of-line blocking).
_CLAIMABLE = """o.keyingi_urinish <= (SELECT until FROM plan)
                AND coalesce(o.eng_erta, o.keyingi_urinish) <= now()
                AND NOT o.yakka AND (SELECT ok FROM clear)
                {not_paused_o}
                -- A follow-up (message_key) waits while its original is still to be sent.
                AND (NOT o.payload ? 'message_key'
                     OR NOT EXISTS (SELECT 1 FROM {outbox} w
                                    WHERE w.kalit = o.payload ->> 'message_key'
                                      AND w.holat IN ({pending}, {in_progress})))"""
# A scalar subquery on purpose: one probe of the chat's row by its key. As a NOT EXISTS the
# planner, with no statistics of the unlogged chat_navbati, nested-looped over all of its rows
# for every candidate (27 ms a claim beside 2,560 chats).
_BUSY_CHATS = """
                AND coalesce((SELECT c.keyingi FROM {chat_navbati} c
                              WHERE c.bot = %(bot)s AND c.chat = {chat}), '-infinity') <= now()"""
# One send slot in RESERVED_SHARE goes to the oldest due row whatever its priority: a row with
# k rows due before it waits at most about (k + 1) * RESERVED_SHARE / rate seconds, however many
# higher-priority rows keep coming.
RESERVED_SHARE = 10
# The priorities the table accepts (outbox_0005's check); enqueue refuses others.
MIN_PRIORITY, MAX_PRIORITY = -10, 10
# The windows' plan looks at this many windowed rows ahead (about 3 minutes at 28/s).
PLAN_ROWS = 5000
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


# The rows of the claim's bot (``bot`` unqualified: each scope's own outbox row). A relay with a
# folder of tokens claims, for each of its bots, the rows that name it (outbox_bot_ustuvorlik_idx);
# a relay with one token, the rows that name no bot, as before, and those that name its own.
_BOT_ROWS = {True: "AND bot = %(bot)s", False: "AND (bot IS NULL OR bot = %(bot)s)"}


ALL_PRIORITIES = tuple(range(MAX_PRIORITY, MIN_PRIORITY - 1, -1))


@functools.cache
def _claim_sql(
    schema: str,
    *,
    locked: bool,
    busy_chats: bool,
    bot_rows: bool = False,
    priorities: tuple[int, ...] = ALL_PRIORITIES,
) -> str:
    """The claim with a walk for each of ``priorities`` (highest first) and one for the rest."""
    claimable = _CLAIMABLE + (_BUSY_CHATS if busy_chats else "")
    names = [f"band{p}" if p >= 0 else f"band_minus{-p}" for p in priorities]
    walks = [
        _BAND.replace("{name}", name).replace("{band}", str(p))
        for name, p in zip(names, priorities, strict=True)
    ]
    lower = [f"{p} < (SELECT min(ustuvorlik) FROM by_priority)" for p in priorities]
    if priorities != ALL_PRIORITIES:
        # A priority the relay did not know goes first: it may be the highest (a reply); a
        # lower one going first instead costs one claim's order.
        known = ", ".join(map(str, priorities)) or "0"
        walks.insert(0, _OTHER.replace("{known}", known))
        names.insert(0, "other")
        lower.insert(0, "ustuvorlik < (SELECT min(ustuvorlik) FROM by_priority)")
    bands = ",\n".join(walks)
    band_union = "\n          UNION ALL ".join(f"SELECT * FROM {name}" for name in names)
    lower_union = "\n        UNION ALL ".join(
        f"SELECT 1 FROM {name} WHERE {condition}"
        for name, condition in zip(names, lower, strict=True)
    )
    template = (
        _CLAIM_DUE.replace("{lock}", "FOR UPDATE" if locked else "")
        .replace("{bands}", bands)
        .replace("{band_union}", band_union)
        .replace("{lower_union}", lower_union)
        .replace("{claimable}", claimable)
        .replace("{share}", str(RESERVED_SHARE))
        .replace("{plan_rows}", str(PLAN_ROWS))
        .replace("{expired_code}", FailureCode.EXPIRED)
        .replace("{bot_rows}", _BOT_ROWS[bot_rows])
    )
    for alias in ("o", "s"):
        template = template.replace(f"{{not_paused_{alias}}}", not_paused(alias).strip())
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
    bot_rows: bool = False,
) -> list[ClaimedRow]:
    """Claim up to ``limit`` due rows of ``queue`` in one statement; other relays skip them.

    With ``limits``, each row comes with its send slot (``wait``), reserved in the budget of
    ``bot`` (shared by every queue and relay of that bot). With ``bot_rows``, only the rows
    whose ``bot`` column names ``bot``; else also the rows that name no bot.
    """
    seen = _seen_priorities.setdefault(conn, {})
    lane = (schema, queue, bot, bot_rows)
    statement, params = claim_statement(
        limit,
        schema=schema,
        queue=queue,
        bot=bot,
        limits=limits,
        bot_rows=bot_rows,
        priorities=seen.get(lane, ALL_PRIORITIES),
    )
    async with psycopg.AsyncRawCursor(conn, row_factory=_claimed_rows) as cursor:
        await cursor.execute(statement, params)
        rows = await cursor.fetchall()
    if rows and rows[0].priorities is not None:
        seen[lane] = tuple(int(p) for p in rows[0].priorities.strip("{}").split(",") if p)
    return rows


# The priorities each connection's last claim of a queue found pending: its next claim walks
# those (a walk per priority costs the server about 50 us a claim even when it finds nothing:
# 21 of them were a fifth of a message's cost on the database path) and lets "other" catch
# the rest. Per connection, so that a new one starts from all priorities.
_seen_priorities: weakref.WeakKeyDictionary[
    AsyncConn, dict[tuple[str, str, str, bool], tuple[int, ...]]
] = weakref.WeakKeyDictionary()


def claim_statement(
    limit: int,
    *,
    schema: str,
    queue: str,
    bot: str,
    limits: ClaimLimits,
    bot_rows: bool = False,
    priorities: tuple[int, ...] = ALL_PRIORITIES,
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
        "lookahead": PLAN_ROWS / limits.per_bot if limits.per_bot > 0 else 0.0,
    }
    statement, names = _positional(
        _claim_sql(
            schema,
            locked=limits.per_bot > 0,
            busy_chats=chat_on,
            bot_rows=bot_rows,
            priorities=priorities,
        )
    )
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


async def prefer_generic_plans(conn: AsyncConn) -> None:
    """Plan the prepared claim once per connection. Planning it (a CTE per priority) takes
    some milliseconds, and PostgreSQL's plan cache would keep planning it anew for each claim;
    its generic plan is as good (measured beside 50,000 due rows). Not behind a transaction
    pooler: a SET would stay with a server connection another client gets next."""
    await conn.execute("SET plan_cache_mode = force_generic_plan")
