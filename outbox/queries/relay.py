"""The relay's hot path after the claim: its outcomes with their fencing, the claim check, a
lost claim's rows, the bot's state row and pause, a drain's backlog (``outbox/sql/relay.sql``)."""

from __future__ import annotations

import json
from collections.abc import Collection, Sequence
from datetime import UTC, datetime, timedelta
from typing import Any, NamedTuple

from outbox import sql
from outbox.queries._common import AsyncConn
from outbox.queries.claim import ClaimedRow
from outbox.schema import DEFAULT_BOT, pause_channel
from outbox.states import State

_EPOCH = datetime(1970, 1, 1, tzinfo=UTC)
_MICROSECOND = timedelta(microseconds=1)


async def ensure_bot(conn: AsyncConn, bot: str, *, schema: str) -> None:
    """Create the shared state row of ``bot`` (a claim finds the bot's budget there)."""
    await sql.execute(conn, "ensure_bot", schema=schema, params={"bot": bot})


class Outcome(NamedTuple):
    """What to write for one claimed row; its state, attempts and delay are the retry
    policy's decision (``outbox.retry``)."""

    id: int
    attempts: int  # the claim's urinish: the write happens only if it still matches
    state: str
    delay_seconds: float | None = None  # pending rows: due in this long; None keeps its time
    error: str | None = None
    error_code: str | None = None  # xato_turi (a FailureCode), written with ``error``
    new_attempts: int | None = None  # urinish to write; None: the claim's (the attempt counts)
    key: str | None = None  # with chat_id and message_id: write a sent marker
    chat_id: int | None = None
    message_id: int | None = None
    new_chat_id: int | None = None  # the group moved: rewrite payload.chat_id
    # The claim's band_vaqti. urinish alone can repeat (a replay resets it, a release gives it
    # back); the claim time cannot, so a stale relay's write never matches a newer claim.
    claimed_at: datetime | None = None
    message_ids: tuple[int, ...] = ()  # an album's messages, for its marker
    chat_gone: bool = False  # record the row's (bot, chat) in bloklangan, with ``error``

    @classmethod
    def for_row(cls, row: ClaimedRow, state: str, **details: Any) -> Outcome:
        return cls(row.id, row.attempts, state, claimed_at=row.claimed_at, **details)

    @classmethod
    def delivered(
        cls,
        row: ClaimedRow,
        chat_id: int | None,
        message_id: int | None,
        message_ids: tuple[int, ...] = (),
        new_chat_id: int | None = None,
    ) -> Outcome:
        """Done with its sent marker: ``for_row`` without keywords, on every delivery."""
        return cls(
            row.id, row.attempts, State.DONE, None, None, None, None, row.key, chat_id,
            message_id, new_chat_id, row.claimed_at, message_ids,
        )  # fmt: skip


async def record_outcomes(conn: AsyncConn, outcomes: Sequence[Outcome], *, schema: str) -> int:
    """Write a batch of outcomes in one statement; return how many rows were still ours."""
    if not outcomes:
        return 0
    name, params = record_statement(outcomes)
    return await sql.execute(conn, name, schema=schema, params=params)


def record_statement(outcomes: Sequence[Outcome]) -> tuple[str, dict[str, Any]]:
    """The named query of ``record_outcomes`` and its parameters (tests read its plan). One
    JSON document for the batch: json.dumps builds it in C, where typed arrays would cost
    psycopg a Python call per element."""
    batch = json.dumps([_outcome_fields(o) for o in outcomes], separators=(",", ":"))
    moved = any(o.new_chat_id is not None for o in outcomes)
    name = "record_outcomes_moved" if moved else "record_outcomes"
    return name, {"batch": batch, "count": len(outcomes)}


def _outcome_fields(o: Outcome) -> dict[str, Any]:
    """One element of the batch document; absent fields read as NULL."""
    fields: dict[str, Any] = {
        "id": o.id,
        "urinish": o.attempts,
        "attempts": o.attempts if o.new_attempts is None else o.new_attempts,
        "holat": o.state,
    }
    if o.delay_seconds is not None:
        fields["delay"] = o.delay_seconds
    if o.error is not None:
        fields["xato"] = o.error
        fields["xato_turi"] = o.error_code
        if o.chat_gone:
            fields["gone"] = True
    if o.key is not None:
        fields["kalit"] = o.key
    if o.message_id is not None:
        fields.update(chat_id=o.chat_id, message_id=o.message_id)
        if o.message_ids:
            fields["message_ids"] = o.message_ids
    if o.new_chat_id is not None:
        fields["new_chat_id"] = o.new_chat_id
    if o.claimed_at is not None:
        fields["band_us"] = (o.claimed_at - _EPOCH) // _MICROSECOND  # exact: the fence matches
    return fields


async def still_claimed(conn: AsyncConn, row: ClaimedRow, *, schema: str) -> bool:
    """Is this claim still the relay's? False once the app withdrew the row (cancel)."""
    params = {"id": row.id, "urinish": row.attempts, "at": row.claimed_at}
    return await sql.fetch_one(conn, "still_claimed", schema=schema, params=params) is not None


async def release_unheard_claims(
    conn: AsyncConn, *, schema: str, holder: str, held: Collection[int]
) -> int:
    """Rows ``holder`` claimed whose claim's answer was lost, back to the queue (all of its
    claimed rows but ``held``); how many."""
    params = {"holder": holder, "held": sorted(held)}
    return len(await sql.fetch(conn, "release_unheard_claims", schema=schema, params=params))


async def announce_pause(
    conn: AsyncConn, seconds: float, *, schema: str, bot: str = DEFAULT_BOT
) -> None:
    """Pause ``bot`` for every relay: Telegram asked this bot to wait ``seconds``."""
    params = {"seconds": float(seconds), "bot": bot, "channel": pause_channel(schema)}
    await sql.execute(conn, "announce_pause", schema=schema, params=params)


async def backlog(conn: AsyncConn, *, schema: str) -> int:
    """Rows due or claimed now (the progress line of ``relay --drain``)."""
    row = await sql.fetch_one(conn, "backlog", schema=schema)
    return 0 if row is None else int(row[0])
