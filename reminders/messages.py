"""The reminder's Telegram message: pure functions of the task, the user and the send time."""

from __future__ import annotations

import html
from datetime import datetime, timedelta
from typing import Literal, TypedDict
from zoneinfo import ZoneInfo

__all__ = [
    "TELEGRAM_TEXT_LIMIT",
    "ReminderPayload",
    "format_time_left",
    "reminder_payload",
    "reminder_text",
    "telegram_length",
]

# sendMessage accepts 1-4096 characters of text.
TELEGRAM_TEXT_LIMIT = 4096
ELLIPSIS = "…"


class ReminderPayload(TypedDict):
    """sendMessage's parameters, stored as the outbox row's payload."""

    chat_id: int
    text: str
    parse_mode: Literal["HTML"]


def telegram_length(text: str) -> int:
    """Length as Telegram counts it: UTF-16 code units, so an emoji counts twice.

    Counting the raw HTML (tags and entities included) over-estimates the length Telegram
    measures after parsing, which keeps the limit safe.
    """
    return len(text.encode("utf-16-le")) // 2


def format_time_left(left: timedelta) -> str:
    """``"1 kun 2 soat qoldi"``, rounded to the minute; ``"Muddat keldi"`` when none is left."""
    if left <= timedelta(0):
        return "Muddat keldi"
    minutes = round(left.total_seconds() / 60)
    if minutes == 0:
        return "1 daqiqadan kam qoldi"
    days, minutes = divmod(minutes, 24 * 60)
    hours, minutes = divmod(minutes, 60)
    # Uzbek keeps the noun singular after a number: "2 soat", "5 daqiqa".
    parts = [
        f"{count} {unit}"
        for count, unit in ((days, "kun"), (hours, "soat"), (minutes, "daqiqa"))
        if count
    ]
    return " ".join(parts) + " qoldi"


def _format_due(due: datetime, time_zone: str) -> str:
    local = due.astimezone(ZoneInfo(time_zone))
    return f"{local:%d.%m.%Y, %H:%M} ({time_zone})"


def _fit_escaped(title: str, budget: int) -> str:
    """The HTML-escaped title, shortened with an ellipsis to at most ``budget`` units.

    Characters are escaped one at a time, so a cut never falls inside an entity like
    ``&amp;``.
    """
    escaped = html.escape(title, quote=False)
    if telegram_length(escaped) <= budget:
        return escaped
    room = budget - telegram_length(ELLIPSIS)
    kept: list[str] = []
    for char in title:
        piece = html.escape(char, quote=False)
        room -= telegram_length(piece)
        if room < 0:
            break
        kept.append(piece)
    return "".join(kept).rstrip() + ELLIPSIS


def reminder_text(
    *,
    title: str,
    due: datetime,
    time_zone: str,
    send_at: datetime,
    limit: int = TELEGRAM_TEXT_LIMIT,
) -> str:
    """The reminder in Uzbek (HTML): title, due time in the user's zone, time left at send_at."""
    before_title = "⏰ Eslatma: <b>"
    after_title = (
        "</b>\n"
        f"Muddat: {html.escape(_format_due(due, time_zone), quote=False)}\n"
        f"{format_time_left(due - send_at)}"
    )
    budget = limit - telegram_length(before_title + after_title)
    return before_title + _fit_escaped(title, budget) + after_title


def reminder_payload(
    *, chat_id: int, title: str, due: datetime, time_zone: str, send_at: datetime
) -> ReminderPayload:
    """The outbox payload for one reminder (sendMessage with parse mode HTML)."""
    text = reminder_text(title=title, due=due, time_zone=time_zone, send_at=send_at)
    return {"chat_id": chat_id, "text": text, "parse_mode": "HTML"}
