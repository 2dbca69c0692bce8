"""Each bot's figures (``outbox status``, the web page): the rows that name it, per state, its
lag, whether it is paused, and whether a live relay holds its token.

Operator statements, run through SQLAlchemy on a sync connection or session. The token itself
is never in the database: what a relay holds is the bots' public ids in the register
(``relaylar.botlar``), and those whose token Telegram rejected (``relaylar.rad_botlar``).
"""

from __future__ import annotations

from dataclasses import dataclass
from enum import StrEnum

from outbox.queries._common import SyncConn, _execute
from outbox.queries.registry import _ALIVE

__all__ = ["BotFigures", "TokenState", "bot_status"]


class TokenState(StrEnum):
    SERVED = "served"  # a live relay holds a token Telegram accepts
    REJECTED = "rejected"  # every live relay that holds it was told 401
    MISSING = "missing"  # no live relay holds its token: its rows wait


@dataclass(frozen=True, slots=True)
class BotFigures:
    bot: str
    pending: int
    in_progress: int
    failed: int
    lag_seconds: float  # age of its oldest due pending row; 0 when none is due
    relays: int  # live relays that hold its token
    token: TokenState
    flood_paused: bool  # Telegram's flood control (bot_holati.pauza_tugashi)
    operator_paused: bool  # outbox pause --bot


# The live states only, each through its own partial index (pending rows through
# outbox_bot_kutmoqda_idx); bots without live rows show when a live relay holds their token.
_BOT_STATUS = f"""
WITH live_rows AS (
    SELECT bot, {{pending}} AS holat, keyingi_urinish FROM {{outbox}}
    WHERE holat = {{pending}} AND bot IS NOT NULL
    UNION ALL
    SELECT bot, {{in_progress}}, NULL FROM {{outbox}}
    WHERE holat = {{in_progress}} AND bot IS NOT NULL
    UNION ALL
    SELECT bot, {{failed}}, NULL FROM {{outbox}} WHERE holat = {{failed}} AND bot IS NOT NULL
),
counted AS (
    SELECT bot,
           count(*) FILTER (WHERE holat = {{pending}}) AS pending,
           count(*) FILTER (WHERE holat = {{in_progress}}) AS in_progress,
           count(*) FILTER (WHERE holat = {{failed}}) AS failed,
           coalesce(extract(epoch FROM now() - min(keyingi_urinish) FILTER (
               WHERE keyingi_urinish <= now() AND keyingi_urinish > '-infinity')), 0)::float8
               AS lag
    FROM live_rows GROUP BY bot
),
held AS (
    SELECT b.bot, count(*) AS relays, count(*) FILTER (WHERE b.bot = ANY (r.rad_botlar))
           AS rejected
    FROM {{relaylar}} r CROSS JOIN LATERAL unnest(r.botlar) AS b(bot)
    WHERE {_ALIVE}
    GROUP BY b.bot
)
SELECT coalesce(c.bot, h.bot) AS bot,
       coalesce(c.pending, 0) AS pending, coalesce(c.in_progress, 0) AS in_progress,
       coalesce(c.failed, 0) AS failed, coalesce(c.lag, 0) AS lag,
       coalesce(h.relays, 0) AS relays, coalesce(h.rejected, 0) AS rejected,
       coalesce((SELECT s.pauza_tugashi > now() FROM {{bot_holati}} s
                 WHERE s.bot = coalesce(c.bot, h.bot)), false) AS flood_paused,
       EXISTS (SELECT 1 FROM {{pauza}} p WHERE p.doira = 'bot'
               AND p.qiymat = coalesce(c.bot, h.bot)) AS operator_paused
FROM counted c FULL JOIN held h ON h.bot = c.bot
ORDER BY length(coalesce(c.bot, h.bot)), coalesce(c.bot, h.bot)
"""


def bot_status(conn: SyncConn, *, schema: str, bot: str | None = None) -> list[BotFigures]:
    """The figures of every bot that rows name or a live relay serves (or of ``bot``)."""
    found = []
    for row in _execute(conn, schema, _BOT_STATUS).fetchall():
        if bot is not None and row.bot != bot:
            continue
        if not row.relays:
            token = TokenState.MISSING
        elif row.rejected >= row.relays:
            token = TokenState.REJECTED
        else:
            token = TokenState.SERVED
        found.append(
            BotFigures(
                bot=str(row.bot),
                pending=int(row.pending),
                in_progress=int(row.in_progress),
                failed=int(row.failed),
                lag_seconds=max(float(row.lag), 0.0),
                relays=int(row.relays),
                token=token,
                flood_paused=bool(row.flood_paused),
                operator_paused=bool(row.operator_paused),
            )
        )
    return found
