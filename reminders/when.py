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
from reminders.messages import printable, shorten
from reminders.parsing import parse_due, parse_duration

__all__ = ["EXAMPLES", "parse_title_and_when"]

EXAMPLES = "/add Hisobot ertaga 09:00, /add Hisobot 2026-12-01 09:00, /add Non 30m"
TODAY = frozenset({"bugun", "today"})
TOMORROW = frozenset({"ertaga", "tomorrow"})
# ASCII digits only ([0-9], not \d: that takes '٣' too). A duration's parts have at most four
# digits, so even a message full of them stays far inside timedelta's range.
_DURATION = re.compile(r"(?:[0-9]{1,4}[dhms])+")
_CLOCK = re.compile(r"([0-9]{1,2}):([0-9]{2})")
_DATE = re.compile(r"[0-9]{4}-[0-9]{2}-[0-9]{2}")
_MAX_AHEAD = timedelta(days=5 * 366)
_TOO_FAR = "besh yildan uzoq"


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


def _at_clock(
    words: list[str], clock: re.Match[str], time_zone: str, now: datetime
) -> tuple[list[str], datetime]:
    """``[DAY] HH:MM`` at the end of ``words``: the words before it and the due time."""
    shown = shorten(words[-1])
    hour, minute = int(clock.group(1)), int(clock.group(2))
    if hour > 23 or minute > 59:
        raise InvalidInput(f"{shown}: bunday soat yo'q (00:00 dan 23:59 gacha)")
    today = now.astimezone(ZoneInfo(time_zone)).date()
    day = _day(words[-2], today) if len(words) > 1 else None
    title_words = words[:-2] if day is not None else words[:-1]
    day = day or today
    # The day is checked before it becomes a moment: year 1 or 9999 may have no UTC value.
    if day < today:
        raise InvalidInput(f"{day.isoformat()} {shown} o'tib ketdi")
    if day - today > _MAX_AHEAD:
        raise InvalidInput(_TOO_FAR)
    due = parse_due(f"{day.isoformat()} {hour:02d}:{minute:02d}", time_zone)
    if due <= now:
        raise InvalidInput(f"{day.isoformat()} {shown} o'tib ketdi")
    return title_words, due


def parse_title_and_when(words: list[str], time_zone: str, now: datetime) -> tuple[str, datetime]:
    """Split ``/add``'s words into the title and the due time.

    ``InvalidInput`` says, in Uzbek (the bot's language), what is wrong.
    """
    if not words:
        raise InvalidInput("nima va qachon ekanini yozing")
    last, shown = words[-1].lower(), shorten(words[-1])
    if _DURATION.fullmatch(last):
        title_words, delay = words[:-1], parse_duration(last)
        if delay <= timedelta(0):
            raise InvalidInput(f"{shown}: bu vaqt emas")
        if delay > _MAX_AHEAD:  # before the addition, which could leave datetime's range
            raise InvalidInput(_TOO_FAR)
        due = now + delay
    elif clock := _CLOCK.fullmatch(last):
        title_words, due = _at_clock(words, clock, time_zone, now)
    else:
        raise InvalidInput(f"oxirida vaqt yo'q ({shown} vaqt emas)")
    title = " ".join(title_words).strip()
    if not title:
        raise InvalidInput("vazifa nomi yo'q")
    if printable(title) != title:
        raise InvalidInput("vazifa nomida ko'rinmas belgi bor")
    if due - now > _MAX_AHEAD:
        raise InvalidInput(_TOO_FAR)
    return title, due
