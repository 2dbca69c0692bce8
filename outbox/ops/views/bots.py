"""Each bot's figures as people see them (``outbox status``, the page)."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from outbox.ops.views._text import span, table
from outbox.queries import BotFigures, TokenState
from outbox.states import State

__all__ = ["bot_json", "bot_state", "bots_lines", "unserved_bots_line"]


def bot_state(bot: BotFigures) -> str:
    """One word for where a bot stands: why its rows wait, if they do."""
    if bot.token is not TokenState.SERVED:
        return f"token {bot.token}"
    if bot.operator_paused:
        return "paused"
    if bot.flood_paused:
        return "flood pause"
    if bot.paid_stopped is not None:
        return "paid lane stopped"  # the free lane serves; `outbox resume --paid BOT`
    return "serving"


def bots_lines(bots: Sequence[BotFigures]) -> list[str]:
    rows = [
        (
            bot.bot,
            str(bot.pending),
            str(bot.in_progress),
            str(bot.failed),
            span(bot.lag_seconds),
            str(bot.relays),
            bot_state(bot),
        )
        for bot in bots
    ]
    headers = ("bot", State.PENDING, State.IN_PROGRESS, State.FAILED, "lag", "relays", "state")
    return ["", *table(headers, rows, numeric={1, 2, 3, 4, 5})]


def bot_json(bot: BotFigures) -> dict[str, Any]:
    return {
        "bot": bot.bot,
        "holat": {
            State.PENDING: bot.pending,
            State.IN_PROGRESS: bot.in_progress,
            State.FAILED: bot.failed,
        },
        "lag_seconds": bot.lag_seconds,
        "relays": bot.relays,
        "token": str(bot.token),
        "flood_paused": bot.flood_paused,
        "paused": bot.operator_paused,
        "paid_stopped": bot.paid_stopped,
        "state": bot_state(bot),
    }


def unserved_bots_line(bots: Sequence[BotFigures]) -> str:
    parts = [f"{bot.bot} ({bot.pending} pending, token {bot.token})" for bot in bots]
    return (
        f"rows wait for bots no live relay can send for: {', '.join(parts)} "
        "(put a valid token for each in a relay's --tokens-dir)"
    )
