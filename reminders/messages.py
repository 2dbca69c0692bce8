"""The reminder's Telegram message: pure functions of the task, the user and the send time."""

from __future__ import annotations

import html
import os
import re
import unicodedata
from datetime import datetime, timedelta
from typing import Any, Literal, NotRequired, TypedDict
from zoneinfo import ZoneInfo

from outbox.durations import format_duration, parse_duration
from outbox.errors import InvalidInput
from reminders.parsing import BIGINT_MAX

__all__ = [
    "CALLBACK_ANSWER_LIMIT",
    "DEFAULT_SNOOZE",
    "ECHO_LIMIT",
    "EDIT_KIND",
    "ENV_SNOOZE",
    "TELEGRAM_TEXT_LIMIT",
    "ReminderPayload",
    "changed_reminder_text",
    "done_data",
    "duration_words",
    "fit_html",
    "format_time_left",
    "html_length",
    "parse_button",
    "printable",
    "reminder_edit",
    "reminder_keyboard",
    "reminder_payload",
    "reminder_text",
    "shorten",
    "snooze_choices",
    "snooze_data",
    "telegram_length",
]

# sendMessage and editMessageText accept 1-4096 characters of text (after entity parsing),
# answerCallbackQuery 0-200.
TELEGRAM_TEXT_LIMIT = 4096
CALLBACK_ANSWER_LIMIT = 200
# A word of the person's shown back to them (an unknown command, a zone that does not exist):
# enough to recognise it, and short enough that the example after it always fits.
ECHO_LIMIT = 64
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
# 19 digits hold any bigint; more cannot name a task, and int() of them is not needed.
_DONE_DATA = re.compile(r"done:([0-9]{1,19})")
_SNOOZE_DATA = re.compile(r"snooze:([0-9]{1,19}):([0-9]{1,7})")
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

    A client can send any callback data, so nothing here is trusted beyond its shape: ASCII
    digits only, an id within bigint, a delay within the snooze bounds.
    """
    if (done := _DONE_DATA.fullmatch(data)) is not None:
        task_id, seconds = int(done.group(1)), 0
    elif (snooze := _SNOOZE_DATA.fullmatch(data)) is not None:
        task_id, seconds = int(snooze.group(1)), int(snooze.group(2))
        if not 1 <= seconds <= _MAX_SNOOZE.total_seconds():
            return None
    else:
        return None
    if not 1 <= task_id <= BIGINT_MAX:
        return None
    return ("done" if done else "snooze"), task_id, timedelta(seconds=seconds)


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


def printable(text: str) -> str:
    """``text`` with control characters (NUL among them, which PostgreSQL cannot store) and
    lone surrogates replaced by U+FFFD; line breaks and tabs stay."""
    return "".join(
        "\ufffd" if unicodedata.category(c) in ("Cc", "Cs") and c not in "\n\t" else c for c in text
    )


def shorten(text: str, limit: int = ECHO_LIMIT) -> str:
    """Plain ``text`` made printable and cut with an ellipsis to at most ``limit`` units.

    Every echo of a person's input goes through here (and is HTML-escaped afterwards), as does
    every callback answer (``CALLBACK_ANSWER_LIMIT``).
    """
    text = printable(text)
    if telegram_length(text) <= limit:
        return text
    room = limit - telegram_length(ELLIPSIS)
    kept: list[str] = []
    for char in text:
        room -= telegram_length(char)
        if room < 0:
            break
        kept.append(char)
    return "".join(kept).rstrip() + ELLIPSIS


_HTML_PIECE = re.compile(r"<(/?)([A-Za-z][A-Za-z0-9-]*)[^<>]*>|&#?[0-9A-Za-z]{1,8};|.", re.DOTALL)


def _html_pieces(text: str) -> list[tuple[str, str, int]]:
    """``text`` as (piece, tag name or "", closing or not: 1/0); a piece is a tag, an entity
    or one character."""
    return [
        (m.group(), (m.group(2) or "").lower(), int(m.group(1) == "/"))
        for m in _HTML_PIECE.finditer(text)
    ]


def _piece_length(piece: str, tag: str) -> int:
    return 0 if tag else telegram_length(html.unescape(piece))


def html_length(text: str) -> int:
    """The length of Telegram-style HTML as Telegram limits it: of the text after entity
    parsing (tags count nothing, ``&amp;`` one), in UTF-16 units."""
    return sum(_piece_length(piece, tag) for piece, tag, _ in _html_pieces(text))


def fit_html(text: str, limit: int = TELEGRAM_TEXT_LIMIT) -> str:
    """Telegram-style HTML made printable and cut to at most ``limit`` units (``html_length``)
    with an ellipsis; a cut never falls inside a tag or an entity, and the tags open at the cut
    are closed. Every reply and every edit of the bot goes through here.
    """
    text = printable(text)
    if html_length(text) <= limit:
        return text
    room = limit - telegram_length(ELLIPSIS)
    kept: list[str] = []
    open_tags: list[str] = []
    for piece, tag, closing in _html_pieces(text):
        size = _piece_length(piece, tag)
        if size > room:
            break
        room -= size
        kept.append(piece)
        if tag and closing and open_tags and open_tags[-1] == tag:
            open_tags.pop()
        elif tag and not closing:
            open_tags.append(tag)
    return "".join(kept) + ELLIPSIS + "".join(f"</{tag}>" for tag in reversed(open_tags))


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


# The outbox kind (tur) of an edit of a reminder already sent.
EDIT_KIND = "tahrir"
Change = Literal["done", "rescheduled", "deleted"]


def changed_reminder_text(change: Change, *, title: str, due: datetime, time_zone: str) -> str:
    """A sent reminder's new text once its task changed (HTML): done, moved, deleted. "done"
    reads as the bot's own edit after a press of "Bajarildi", so the two agree."""
    bold = f"<b>{html.escape(title, quote=False)}</b>"
    if change == "done":
        text = f"✅ Bajarildi: {bold}"
    elif change == "rescheduled":
        text = f"🔁 Muddat o'zgardi: {bold}\nYangi muddat: {_format_due(due, time_zone)}"
    else:
        text = f"🗑 Vazifa o'chirildi: {bold}"
    return fit_html(text)


def reminder_edit(key: str, text: str, keyboard: dict[str, Any] | None = None) -> dict[str, Any]:
    """The outbox payload that edits the reminder sent under ``key`` (a follow-up by key):
    the new text, and its buttons only where they still make sense."""
    payload: dict[str, Any] = {
        "method": "editMessageText",
        "message_key": key,
        "text": text,
        "parse_mode": "HTML",
    }
    if keyboard is not None:
        payload["reply_markup"] = keyboard
    return payload
