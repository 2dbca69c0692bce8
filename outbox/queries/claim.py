"""The claim: the relay's due rows with their send slots, for every relay of the bot together
(docs/how-it-works.md, "The claim"). The statements of ``outbox/sql/claim.sql`` run in one
transaction with plain Python between them: the lock ``claim_rows`` takes on the bot's budget row
serialises the claims of every relay of the bot, so :func:`plan_claim` sees what the others booked.
"""

from __future__ import annotations

import functools
import json
import math
import os
import secrets
import socket
import time
import weakref
from collections.abc import Mapping, Sequence
from datetime import UTC, datetime
from enum import StrEnum
from typing import Any, NamedTuple

from outbox import sql
from outbox.payload import read_json
from outbox.queries._common import AsyncConn
from outbox.quiet import quiet_until, read_hours
from outbox.schema import DEFAULT_BOT, DEFAULT_QUEUE


class ClaimedRow(NamedTuple):
    # Named tuples, not dataclasses: the hot path builds two records a message.
    id: int
    kind: str
    key: str
    payload: Any  # decoded JSON, or an UnreadablePayload that send_message_args refuses
    attempts: int  # urinish after this claim
    already_sent: bool  # a sent marker exists for the key
    claimed_at: datetime  # band_vaqti of this claim: with attempts, the fencing token
    wait: float = 0.0  # seconds from the claim until the row's booked send slot
    queue: str = DEFAULT_QUEUE
    # A follow-up's original (payload.message_key): its sent marker as decoded JSON
    # [chat_id, message_id, message_ids or null], and its state (with its failure code) when
    # it has no marker; both None for every other row.
    original: Any = None
    original_state: str | None = None
    expires_in: float | None = None  # seconds from the claim until its expiry (<= 0: expired)
    # The W3C trace context of the span that enqueued it (outbox.tracing); None: no trace.
    traceparent: str | None = None
    tracestate: str | None = None


class ClaimLimits(NamedTuple):
    """The bot's limits as the claim applies them to the whole fleet (0: off)."""

    per_bot: float = 0.0  # messages/s
    chat_gap: float = 0.0  # seconds between two messages to one private chat
    group_gap: float = 0.0  # seconds between two messages to one group
    horizon: float = 1.0  # seconds of send slots a claim may book ahead
    # The paid lane's messages/s (allow_paid_broadcast rows, on a clock of their own); 0: no
    # paid lane, such rows share the free budget (per_bot).
    paid: float = 0.0


class ClaimLane(StrEnum):
    """Which rows a claim takes, on which of the bot's two slot clocks."""

    ALL = "all"  # every row, on the free clock: no paid lane
    FREE = "free"  # the rows without allow_paid_broadcast, on the free clock
    PAID = "paid"  # the rows with it, on the paid clock (bot_holati.pullik_slot)


def claim_lanes(limits: ClaimLimits) -> tuple[ClaimLane, ...]:
    """The lanes a bot's claims take, in the order they claim: the free one first (replies,
    of the highest priority, are free rows), then the paid one if there is one."""
    return (ClaimLane.FREE, ClaimLane.PAID) if limits.paid > 0 else (ClaimLane.ALL,)


# What makes a row one of the paid lane: its payload contains this (the claim's :mark).
_PAID_MARK = '{"allow_paid_broadcast": true}'
# The rows each lane takes, by their allow_paid_broadcast (the claim's :lanes).
_LANE_ROWS = {ClaimLane.ALL: [True, False], ClaimLane.FREE: [False], ClaimLane.PAID: [True]}


def lane_limits(limits: ClaimLimits, lane: ClaimLane) -> ClaimLimits:
    """The limits one lane's claim applies: the paid lane's rate is its own; chat spacing and
    the horizon are the bot's, for both."""
    return limits._replace(per_bot=limits.paid) if lane is ClaimLane.PAID else limits


# One send slot in RESERVED_SHARE goes to the oldest due row whatever its priority: a row with
# k rows due before it waits at most about (k + 1) * RESERVED_SHARE / rate seconds, however many
# higher-priority rows keep coming.
RESERVED_SHARE = 10
# The priorities the table accepts (outbox_0009's check); enqueue refuses others.
MIN_PRIORITY, MAX_PRIORITY = -10, 10
# A claim that found no chat with quiet hours at all trusts that answer on its connection for
# this long (seconds): rows asking for quiet hours then cost no round trip of their own, and new
# hours take effect within it.
QUIET_RECHECK = 2.0
_no_quiet_hours_until: weakref.WeakKeyDictionary[AsyncConn, float] = weakref.WeakKeyDictionary()
# The windows' plan looks at this many windowed rows ahead (about 3 minutes at 28/s).
PLAN_ROWS = 5000
# A claim's transaction idle this long (its relay lost the link between two round trips) is
# ended by the server: its lock on the bot's budget row would hold every claim of the bot back
# until the server's own TCP gave up on the silent client.
CLAIM_IDLE_LIMIT_MS = 10_000


class Candidate(NamedTuple):
    """A row ``claim_rows`` locked, with what the slot arithmetic needs."""

    id: int
    part: str  # 'alone' (a suspect), 'walk' (priority order) or 'oldest' (starvation bound)
    priority: int
    due: float  # seconds since the epoch (a row written by hand may hold an infinity)
    expired: bool | None
    chat: str | None
    weight: int  # the messages it counts as: an album's items
    quiet: bool = False  # it asks for its chat's quiet hours


class Booking(NamedTuple):
    """A row to take, its send slot, and when its chat is next free (None: not booked)."""

    id: int
    chat: str | None
    send_at: float  # seconds since the epoch
    chat_free: float | None


class ClaimPlan(NamedTuple):
    bookings: list[Booking]
    next_slot: float | None  # the bot's next free slot after this claim (None: no rate)


def hold_quiet(
    candidates: Sequence[Candidate], hours: Mapping[int, str], at: float
) -> tuple[list[Candidate], list[tuple[int, float]]]:
    """The candidates to plan, and those inside their chat's quiet hours (``hours``: by row
    id, as claim_quiet returns them) at ``at`` (the claim's first slot, seconds since the
    epoch), each with the moment its hours end: a pure function. An expired row is never held
    (it is failed, not sent)."""
    if not hours:
        return list(candidates), []
    try:
        moment = datetime.fromtimestamp(at, UTC)
    except (OverflowError, ValueError, OSError):
        moment = datetime.now(UTC)
    ends: dict[str, float | None] = {}
    kept: list[Candidate] = []
    held: list[tuple[int, float]] = []
    for c in candidates:
        text = hours.get(c.id)
        if text is not None and not c.expired:
            if text not in ends:
                found = read_hours(text)
                until = quiet_until(moment, found) if found is not None else None
                ends[text] = until.timestamp() if until is not None else None
            until_ts = ends[text]
            if until_ts is not None:
                held.append((c.id, until_ts))
                continue
        kept.append(c)
    return kept, held


def plan_claim(
    candidates: Sequence[Candidate],
    *,
    room: int,
    base: float,
    limits: ClaimLimits,
) -> ClaimPlan:
    """Which candidates to take, in order, and the slot of each: a pure function.

    Order: a suspect first (it goes alone), then priority order, with every RESERVED_SHARE-th
    slot (counted on the bot's slot clock, so fleet-wide) given to the oldest row a lower
    priority holds back. An expired row is taken without a slot or a chat (it is failed, not
    sent). With chat spacing, one message per chat per claim. At most ``room`` slots.
    """
    rate = limits.per_bot
    share = RESERVED_SHARE
    first_reserved = (
        (share - 1 - math.floor(base * rate + 0.5) % share) % share
        if rate > 0 and math.isfinite(base)
        else share - 1
    )
    walk = sorted(
        (c for c in candidates if c.part == "walk"), key=lambda c: (-c.priority, c.due, c.id)
    )
    oldest = sorted((c for c in candidates if c.part == "oldest"), key=lambda c: (c.due, c.id))
    placed = walk
    if len(walk) < len(candidates):  # a suspect, or the starvation bound's rows: interleaved
        ranked = [(-1.0, c) for c in candidates if c.part == "alone"]
        ranked += [(float(i), c) for i, c in enumerate(walk)]
        ranked += [(first_reserved + j * (share - 1) - 0.5, c) for j, c in enumerate(oldest)]
        ranked.sort(key=lambda pc: pc[0])
        placed = [c for _, c in ranked]

    chat_on = bool(limits.chat_gap or limits.group_gap)
    bookings: list[Booking] = []
    chats: set[str] = set()
    slot = 0
    for c in placed:
        if c.expired:
            bookings.append(Booking(c.id, c.chat, base, None))
            continue
        if chat_on and c.chat is not None:
            if c.chat in chats:
                continue
            chats.add(c.chat)
        if slot >= room:
            continue
        send_at = base + slot / rate if rate > 0 else base
        chat_free = None
        if chat_on and c.chat is not None:
            # A private chat's id is all digits; groups and channels are negative or @names.
            gap = limits.chat_gap if c.chat.isdigit() else limits.group_gap
            chat_free = send_at + c.weight * gap
        bookings.append(Booking(c.id, c.chat, send_at, chat_free))
        slot += c.weight
    next_slot = base + slot / rate if rate > 0 and slot else None
    return ClaimPlan(bookings, next_slot)


@functools.cache
def _holder_of(pid: int) -> str:
    return f"{socket.gethostname()[:60]}:{pid}:{secrets.token_hex(4)}"


def claim_holder() -> str:
    """Who claims: this process (everything it holds dies with it), named for operators."""
    return _holder_of(os.getpid())


async def claim_due(
    conn: AsyncConn,
    limit: int,
    *,
    schema: str,
    queue: str = DEFAULT_QUEUE,
    bot: str = DEFAULT_BOT,
    limits: ClaimLimits = ClaimLimits(),  # noqa: B008 - an immutable tuple
    bot_rows: bool = False,
    lane: ClaimLane = ClaimLane.ALL,
) -> list[ClaimedRow]:
    """Claim up to ``limit`` due rows of ``queue`` for ``bot``; other relays skip them.

    With ``limits``, each row comes with its send slot (``wait``), booked in the budget of
    ``bot`` (shared by every queue and relay of that bot). With ``bot_rows``, only the rows
    whose ``bot`` column names ``bot``; else also the rows that name no bot. ``lane`` picks
    the rows and the slot clock (:func:`claim_lanes`): the paid lane books at ``limits.paid``.
    """
    limits = lane_limits(limits, lane)
    rate = float(limits.per_bot)
    lane_params = {
        "lanes": _LANE_ROWS[lane],
        "paid": lane is ClaimLane.PAID,
        "mark": _PAID_MARK,
        "bot": bot,
        "unnamed": not bot_rows,
        "queue": queue,
        "chat_on": bool(limits.chat_gap or limits.group_gap),
    }
    reserve = 1 + limit // RESERVED_SHARE
    async with conn.transaction():
        found = await sql.fetch(
            conn,
            "claim_rows",
            schema=schema,
            params={
                **lane_params,
                "holder": claim_holder(),
                "limit": limit,
                "rate": rate,
                "horizon": float(limits.horizon),
                "lookahead": PLAN_ROWS / rate if rate > 0 else 0.0,
                "plan_rows": PLAN_ROWS,
                "idle_ms": str(CLAIM_IDLE_LIMIT_MS),
            },
        )
        room, base, until, found_priorities = found[0][:4]
        # The priorities present as PostgreSQL writes an array ('{0,5}'): text, read once.
        present = [int(v) for v in (found_priorities or "{}").strip("{}").split(",") if v]
        candidates = [Candidate(r[5], r[4], *r[6:]) for r in found if r[5] is not None]
        walk = [c for c in candidates if c.part == "walk"]
        if len(walk) >= room and walk and min(present) < min(c.priority for c in walk):
            # The claim is full and a lower priority waits: the starvation bound's candidates.
            reached = [v for v in present if v <= min(c.priority for c in walk)]
            oldest = await sql.fetch(
                conn,
                "claim_oldest",
                schema=schema,
                params={
                    **lane_params,
                    "priorities": reached,
                    "taken": [c.id for c in walk],
                    "until": until,
                    "reserve": reserve,
                },
            )
            candidates += [Candidate(r[1], r[0], *r[2:]) for r in oldest]
        if not candidates:
            return []
        # Rows inside their chat's quiet hours take no slot: claim_take moves them to the end.
        quiet = [c.id for c in candidates if c.quiet]
        hours: dict[int, str] = {}
        if quiet and _no_quiet_hours_until.get(conn, 0.0) <= time.monotonic():
            found_hours = await sql.fetch(conn, "claim_quiet", schema=schema, params={"ids": quiet})
            hours = {r[0]: r[1] for r in found_hours if r[0] is not None}
            if any(r[0] is None for r in found_hours):
                _no_quiet_hours_until[conn] = time.monotonic() + QUIET_RECHECK
        candidates, held = hold_quiet(candidates, hours, base)
        plan = plan_claim(candidates, room=room, base=base, limits=limits)
        if not plan.bookings and not held:
            return []
        taken = await sql.fetch(
            conn,
            "claim_take",
            schema=schema,
            params={
                # One JSON text, not four arrays: psycopg quotes an array's items one by one.
                "bookings": json.dumps([_in_micros(b) for b in plan.bookings]),
                "paid": lane is ClaimLane.PAID,
                "bot": bot,
                "next_slot": plan.next_slot,
                "holder": claim_holder(),
                "held": json.dumps(held),
            },
        )
        return [_claimed(r) for r in taken]


def _in_micros(b: Booking) -> tuple[int, str | None, float | None, float | None]:
    # claim_take's form of a booking: its times as whole microseconds, rounded (None, and a
    # time that is not finite, as they are).
    return b.id, b.chat, _micros(b.send_at), _micros(b.chat_free)


def _micros(t: float | None) -> float | None:
    return round(t * 1e6) if t is not None and math.isfinite(t) else t


def _claimed(r: Sequence[Any]) -> ClaimedRow:
    # The RETURNING list is in ClaimedRow's order, under its names. The payload comes as text,
    # decoded row by row: a payload Python cannot decode fails its own row, not the claim.
    original = r[9]
    return ClaimedRow(
        r[0], r[1], r[2], read_json(r[3]), r[4], r[5], r[6], r[7], r[8],
        None if original is None else read_json(original), r[10], r[11], r[12], r[13],
    )  # fmt: skip
