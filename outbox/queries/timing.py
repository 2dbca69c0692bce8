"""When a relay's bots may find work: the named query ``lanes_timing`` of
``outbox/sql/timing.sql``, one statement for every bot of the relay."""

from __future__ import annotations

from collections.abc import Sequence
from typing import NamedTuple

from outbox import sql
from outbox.queries._common import AsyncConn
from outbox.queries.claim import PLAN_ROWS  # the windowed rows ahead, as the claim plans them
from outbox.ratelimit import MAX_FLOOD_PAUSE


class QueueTiming(NamedTuple):
    next_due: float | None  # seconds until a claim may find work (<= 0: now); None: no work
    paused: float  # seconds the bot is paused for, as its state row says (0: not paused)
    due_now: bool = False  # a row is due by its own time (it may wait for its chat or the bot)


async def bots_timing(
    conn: AsyncConn,
    bots: Sequence[str],
    queues: Sequence[str],
    *,
    schema: str,
    horizon: float,
    rate: float = 0.0,
    unnamed: Sequence[bool] | None = None,
    paid: bool = False,
) -> dict[str, QueueTiming]:
    """When each of ``bots`` may have work in ``queues`` (its own rows, and with its
    ``unnamed`` flag also the rows that name no bot), and how long it is paused; with the
    bots' ``rate``, a windowed row counts from when the claim's plan may send it early; with
    ``paid`` (a paid lane), a slot of either of the bot's clocks is room."""
    params = {
        "bots": list(bots),
        "unnamed": list(unnamed) if unnamed is not None else [False] * len(bots),
        "queues": list(queues),
        "horizon": float(horizon),
        "rate": float(rate),
        "paid": paid,
        "lookahead": PLAN_ROWS / rate if rate > 0 else 0.0,
        "plan_rows": PLAN_ROWS,
    }
    found: dict[str, QueueTiming] = {}
    for bot, due, paused, due_now in await sql.fetch(
        conn, "lanes_timing", schema=schema, params=params
    ):
        # A pause written by the outbox's own code is believed up to the cap.
        pause = min(max(paused, 0.0), MAX_FLOOD_PAUSE)
        found[str(bot)] = QueueTiming(None if due is None else float(due), pause, bool(due_now))
    return found
