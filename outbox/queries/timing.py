"""When a relay may find work: the next due moment of its queues (or of each of its bots),
counting chats that may not receive yet, the bot's pause and budget, and delivery windows.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import NamedTuple

from outbox.queries._common import AsyncConn, _sql
from outbox.queries.claim import _BOT_ROWS, PLAN_ROWS
from outbox.queries.pause import not_paused
from outbox.ratelimit import MAX_FLOOD_PAUSE
from outbox.schema import DEFAULT_BOT


class QueueTiming(NamedTuple):
    next_due: float | None  # seconds until a claim may find work (<= 0: now); None: no work
    paused: float  # seconds the bot is paused for, as its state row says (0: not paused)
    due_now: bool = False  # a row is due by its own time (it may wait for its chat or the bot)


# Per queue: the earliest pending row (or its chat's next free moment), but not before the pause
# ends nor before the bot's budget has a free slot within the claim's horizon. Through epochs (a
# due time of +-infinity gives +-inf here instead of an error in every idle relay).
# A queue's windowed rows ahead, in deadline order, numbered (what the claim's plan reads), and
# the moment the k-th of them must start by: deadline_k - k / rate, not before its window opens.
_WINDOWED = """(SELECT keyingi_urinish, eng_erta,
                 row_number() OVER (ORDER BY keyingi_urinish, id) AS k
          FROM {outbox} r
          WHERE holat = {pending} AND navbat = q.navbat {rows_of_bot} AND eng_erta IS NOT NULL
            {not_paused}
            AND keyingi_urinish > now()
            AND keyingi_urinish <= now() + make_interval(secs => %(lookahead)s)
          ORDER BY keyingi_urinish, id
          LIMIT {plan_rows}) w"""
_WINDOW_START = """greatest(extract(epoch FROM w.eng_erta),
                    extract(epoch FROM w.keyingi_urinish) - w.k / %(rate)s)"""


def _with_windows(statement: str, rows_of_bot: str) -> str:
    return statement.replace("{windowed}", _WINDOWED.replace("{rows_of_bot}", rows_of_bot)).replace(
        "{window_start}", _WINDOW_START
    )


_QUEUE_TIMING = _with_windows(
    """
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
          WHERE holat = {pending} AND navbat = q.navbat {bot_rows} {not_paused}
          ORDER BY keyingi_urinish, id LIMIT 64) p
    LEFT JOIN {chat_navbati} c ON c.bot = %(bot)s AND c.chat = p.chat
) d0
CROSS JOIN LATERAL (
    -- A windowed row may be due before its time: when the plan of the claim (its k-th row
    -- must start by deadline_k - k / rate) says so, once its window is open.
    SELECT least(d0.due, min({window_start})) AS due, d0.first_due
    FROM {windowed}
    WHERE %(rate)s > 0
) d
LEFT JOIN {bot_holati} h ON h.bot = %(bot)s
""",
    "{bot_rows}",
).replace("{not_paused}", not_paused("r", queue="q.navbat").strip())
# Paused rows are no work: an idle relay does not wake for them, and a drain ends without them.


async def queue_timing(
    conn: AsyncConn,
    queues: Sequence[str],
    *,
    schema: str,
    horizon: float,
    bot: str = DEFAULT_BOT,
    rate: float = 0.0,
) -> QueueTiming:
    """When ``queues`` may have work for a claim, and how long their bot is paused; with the
    bot's ``rate``, a windowed row counts from when the claim's plan may send it early."""
    params = {
        "queues": list(queues),
        "horizon": float(horizon),
        "bot": bot,
        "rate": float(rate),
        "lookahead": PLAN_ROWS / rate if rate > 0 else 0.0,
    }
    statement = _QUEUE_TIMING.replace("{plan_rows}", str(PLAN_ROWS))
    statement = _sql(statement.replace("{bot_rows}", _BOT_ROWS[False]), schema)
    cursor = await conn.execute(statement, params)
    row = await cursor.fetchone()
    if row is None:
        return QueueTiming(None, 0.0)
    due, paused, due_now = row
    # A pause written by the outbox's own code is believed up to the cap.
    paused = min(max(paused, 0.0), MAX_FLOOD_PAUSE)
    return QueueTiming(None if due is None else float(due), paused, bool(due_now))


# The same for many bots at once (a relay with a folder of tokens), one row per bot that has
# pending rows in ``queues``. For each bot and queue, one probe of outbox_bot_kutmoqda_idx finds
# its first pending row; only when that one is due are its first rows matched against their
# chats (a one-time filter on the inner scan). So a bot with nothing pending costs a round one
# index probe per queue, and one whose rows are all for later, two.
_BOTS_TIMING = _with_windows(
    """
SELECT b.bot,
       min(greatest(CASE WHEN f.at > now() THEN least(extract(epoch FROM f.at), e.due)
                         ELSE d.due END,
                    extract(epoch FROM h.pauza_tugashi),
                    extract(epoch FROM h.keyingi_slot) - %(horizon)s))
           - extract(epoch FROM now()),
       coalesce(max(extract(epoch FROM h.pauza_tugashi) - extract(epoch FROM now())), 0)::float8,
       bool_or(f.at <= now())
FROM unnest(%(bots)s::text[]) AS b(bot)
CROSS JOIN unnest(%(queues)s::text[]) AS q(navbat)
CROSS JOIN LATERAL (
    SELECT keyingi_urinish AS at FROM {outbox} r
    WHERE holat = {pending} AND r.bot = b.bot AND navbat = q.navbat {not_paused}
    ORDER BY keyingi_urinish, id LIMIT 1
) f
LEFT JOIN LATERAL (
    -- A row whose chat may not receive yet is due when its chat may (the first rows only).
    SELECT min(greatest(extract(epoch FROM p.keyingi_urinish), extract(epoch FROM c.keyingi)))
           AS due
    FROM (SELECT keyingi_urinish, payload ->> 'chat_id' AS chat FROM {outbox} r
          WHERE f.at <= now()
            AND holat = {pending} AND r.bot = b.bot AND navbat = q.navbat {not_paused}
          ORDER BY keyingi_urinish, id LIMIT 64) p
    LEFT JOIN {chat_navbati} c ON c.bot = b.bot AND c.chat = p.chat
) d ON true
LEFT JOIN LATERAL (
    -- While its first row is ahead, a bot's windowed rows may be due before their time, when
    -- the claim's plan says so (see _QUEUE_TIMING).
    SELECT min({window_start}) AS due
    FROM {windowed}
    WHERE %(rate)s > 0 AND f.at > now()
) e ON true
LEFT JOIN {bot_holati} h ON h.bot = b.bot
GROUP BY b.bot
""",
    "AND r.bot = b.bot",
).replace("{not_paused}", not_paused("r", queue="q.navbat", bot="b.bot").strip())


async def bots_timing(
    conn: AsyncConn,
    bots: Sequence[str],
    queues: Sequence[str],
    *,
    schema: str,
    horizon: float,
    rate: float = 0.0,
) -> dict[str, QueueTiming]:
    """``queue_timing`` of each of ``bots`` (their own rows only) in one statement; a bot
    with nothing pending is left out (no work)."""
    params = {
        "bots": list(bots),
        "queues": list(queues),
        "horizon": float(horizon),
        "rate": float(rate),
        "lookahead": PLAN_ROWS / rate if rate > 0 else 0.0,
    }
    statement = _BOTS_TIMING.replace("{plan_rows}", str(PLAN_ROWS))
    cursor = await conn.execute(_sql(statement, schema), params)
    found: dict[str, QueueTiming] = {}
    for bot, due, paused, due_now in await cursor.fetchall():
        pause = min(max(paused, 0.0), MAX_FLOOD_PAUSE)
        found[str(bot)] = QueueTiming(None if due is None else float(due), pause, bool(due_now))
    return found
