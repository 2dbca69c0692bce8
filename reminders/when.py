"""When a task is due, as a person types it to the bot after the title.

The grammar (words in Uzbek or English; times in the user's time zone)::

    WHEN  := DURATION            from now: 30m, 2h, 1h30m, 1d (and 45s, for trying it out)
           | [DAY] HH:MM         DAY: bugun/today (the default), ertaga/tomorrow, YYYY-MM-DD

``/add Hisobot ertaga 09:00``, ``/add Hisobot 2026-12-01 09:00``, ``/add Non 30m``.
"""

from __future__ import annotations

import re
from datetime import date, datetime, timedelta
from zoneinfo import ZoneInfo

from outbox.errors import InvalidInput
from reminders.parsing import parse_due, parse_duration

__all__ = ["EXAMPLES", "parse_title_and_when"]

EXAMPLES = "/add Hisobot ertaga 09:00, /add Hisobot 2026-12-01 09:00, /add Non 30m"
TODAY = frozenset({"bugun", "today"})
TOMORROW = frozenset({"ertaga", "tomorrow"})
_DURATION = re.compile(r"(?:\d{1,4}[dhms])+")
_CLOCK = re.compile(r"(\d{1,2}):(\d{2})")
_DATE = re.compile(r"\d{4}-\d{2}-\d{2}")
_MAX_AHEAD = timedelta(days=5 * 366)


def _day(word: str, today: date) -> date | None:
    lowered = word.lower()
    if lowered in TODAY:
        return today
    if lowered in TOMORROW:
        return today + timedelta(days=1)
    if _DATE.fullmatch(word):
        try:
            return date.fromisoformat(word)
        except ValueError:
            raise InvalidInput(f"{word}: bunday sana yo'q") from None
    return None


def parse_title_and_when(words: list[str], time_zone: str, now: datetime) -> tuple[str, datetime]:
    """Split ``/add``'s words into the title and the due time.

    ``InvalidInput`` says, in Uzbek (the bot's language), what is wrong.
    """
    if not words:
        raise InvalidInput("nima va qachon ekanini yozing")
    last = words[-1].lower()
    if _DURATION.fullmatch(last):
        title_words, delay = words[:-1], parse_duration(last)
        if delay <= timedelta(0):
            raise InvalidInput(f"{words[-1]}: bu vaqt emas")
        due = now + delay
    elif clock := _CLOCK.fullmatch(last):
        hour, minute = int(clock.group(1)), int(clock.group(2))
        if hour > 23 or minute > 59:
            raise InvalidInput(f"{words[-1]}: bunday soat yo'q (00:00 dan 23:59 gacha)")
        today = now.astimezone(ZoneInfo(time_zone)).date()
        day = _day(words[-2], today) if len(words) > 1 else None
        title_words = words[:-2] if day is not None else words[:-1]
        day = day or today
        due = parse_due(f"{day.isoformat()} {hour:02d}:{minute:02d}", time_zone)
        if due <= now:
            raise InvalidInput(f"{day.isoformat()} {words[-1]} o'tib ketdi")
    else:
        raise InvalidInput(f"oxirida vaqt yo'q ({words[-1]} vaqt emas)")
    title = " ".join(title_words).strip()
    if not title:
        raise InvalidInput("vazifa nomi yo'q")
    if due - now > _MAX_AHEAD:
        raise InvalidInput("besh yildan uzoq")
    return title, due
