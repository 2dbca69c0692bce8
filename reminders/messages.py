"""The reminder's Telegram message: pure functions of the task, the user and the send time."""

from __future__ import annotations

import html
import os
from datetime import datetime, timedelta
from typing import Any, Literal, NotRequired, TypedDict
from zoneinfo import ZoneInfo

from outbox.durations import format_duration, parse_duration
from outbox.errors import InvalidInput

__all__ = [
    "DEFAULT_SNOOZE",
    "ENV_SNOOZE",
    "TELEGRAM_TEXT_LIMIT",
    "ReminderPayload",
    "done_data",
    "duration_words",
    "format_time_left",
    "parse_button",
    "reminder_keyboard",
    "reminder_payload",
    "reminder_text",
    "snooze_choices",
    "snooze_data",
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
    reply_markup: NotRequired[dict[str, Any]]


# The reminder's buttons: "Bajarildi" (done) and "Keyinroq" (later) for each snooze choice. The
# choices are read when a reminder is built, by whichever process builds it (the bot, the CLI,
# the app), so they are one setting of the environment.
ENV_SNOOZE = "REMINDERS_SNOOZE"
DEFAULT_SNOOZE = "10m,1h"
_MAX_SNOOZE = timedelta(days=7)
DONE_BUTTON = "✅ Bajarildi"
SNOOZE_BUTTON = "⏰ Keyinroq"


def snooze_choices(text: str | None = None) -> tuple[timedelta, ...]:
    """The snooze durations: ``text`` or ``$REMINDERS_SNOOZE`` (comma-separated), else 10m,1h."""
    raw = text if text is not None else (os.environ.get(ENV_SNOOZE) or DEFAULT_SNOOZE)
    choices = tuple(parse_duration(part) for part in raw.split(",") if part.strip())
    if not choices or len(choices) > 3:
        raise InvalidInput(f"{ENV_SNOOZE} must name one to three durations, got {raw!r}")
    for choice in choices:
        if not timedelta(seconds=1) <= choice <= _MAX_SNOOZE:
            raise InvalidInput(
                f"a snooze must be between 1s and 7d, got {format_duration(choice.total_seconds())}"
            )
    return choices


def done_data(task_id: int) -> str:
    return f"done:{task_id}"


def snooze_data(task_id: int, delay: timedelta) -> str:
    return f"snooze:{task_id}:{int(delay.total_seconds())}"


def parse_button(data: str) -> tuple[str, int, timedelta] | None:
    """``(action, task id, delay)`` from a button's data; None if it is not one of ours.

    A client can send any callback data, so nothing here is trusted beyond its shape.
    """
    parts = data.split(":")
    try:
        numbers = [int(part) for part in parts[1:]]
    except ValueError:
        return None
    if parts[0] == "done" and len(numbers) == 1 and numbers[0] > 0:
        return "done", numbers[0], timedelta(0)
    if parts[0] == "snooze" and len(numbers) == 2 and numbers[0] > 0:
        delay = timedelta(seconds=numbers[1])
        if timedelta(seconds=1) <= delay <= _MAX_SNOOZE:
            return "snooze", numbers[0], delay
    return None


def reminder_keyboard(task_id: int) -> dict[str, Any]:
    """The reminder's inline keyboard (Telegram's ``InlineKeyboardMarkup`` as JSON)."""
    later = [
        {
            "text": f"{SNOOZE_BUTTON} ({duration_words(choice)})",
            "callback_data": snooze_data(task_id, choice),
        }
        for choice in snooze_choices()
    ]
    return {
        "inline_keyboard": [[{"text": DONE_BUTTON, "callback_data": done_data(task_id)}], later]
    }


def duration_words(delay: timedelta) -> str:
    """``10 daqiqa``, ``1 soat``, ``1 soat 30 daqiqa``, ``45 soniya``."""
    seconds = int(delay.total_seconds())
    if seconds < 60:
        return f"{seconds} soniya"
    return format_time_left(delay).removesuffix(" qoldi")


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
    *,
    chat_id: int,
    title: str,
    due: datetime,
    time_zone: str,
    send_at: datetime,
    task_id: int | None = None,
) -> ReminderPayload:
    """The outbox payload for one reminder (sendMessage with parse mode HTML).

    With ``task_id`` the message carries the "Bajarildi" and "Keyinroq" buttons.
    """
    text = reminder_text(title=title, due=due, time_zone=time_zone, send_at=send_at)
    payload: ReminderPayload = {"chat_id": chat_id, "text": text, "parse_mode": "HTML"}
    if task_id is not None:
        payload["reply_markup"] = reminder_keyboard(task_id)
    return payload
