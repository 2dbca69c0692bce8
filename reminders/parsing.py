"""Reading what people type: ids, chat ids, durations like ``1h30m``, due times."""

from __future__ import annotations

import re
from collections.abc import Iterable
from datetime import UTC, datetime, timedelta
from zoneinfo import ZoneInfo

from outbox.durations import format_duration, parse_duration
from outbox.errors import InvalidInput

__all__ = [
    "BIGINT_MAX",
    "format_duration",
    "parse_chat_id",
    "parse_due",
    "parse_duration",
    "parse_durations",
    "parse_id",
    "whole_number",
]

BIGINT_MAX = 2**63 - 1
# ASCII digits only: int() and str.isdigit() also take '٣' and '²' (and int() takes '1_0').
_WHOLE = re.compile(r"[+-]?[0-9]+")
_DATE_ONLY = re.compile(r"\d{4}-?\d{2}-?\d{2}")
_DUE_FORMATS = "'YYYY-MM-DD HH:MM' (in the user's time zone) or ISO 8601 with an offset"


def whole_number(text: str) -> int | None:
    """A whole number in ASCII digits (an optional sign); None for anything else.

    The digits are checked before ``int()``, so a long string costs no big-number conversion.
    """
    stripped = text.strip()
    if len(stripped) > 40 or not _WHOLE.fullmatch(stripped):
        return None
    return int(stripped)


def parse_id(what: str, text: str) -> int:
    """A row id: a positive whole number within bigint."""
    value = whole_number(text)
    if value is None:
        raise InvalidInput(f"{what} id must be a whole number, got {text!r}")
    if not 1 <= value <= BIGINT_MAX:
        raise InvalidInput(f"{what} id must be a positive whole number, got {text!r}")
    return value


def parse_chat_id(text: str) -> int:
    """A Telegram chat id: a whole number, negative for groups and channels."""
    value = whole_number(text)
    if value is None:
        raise InvalidInput(
            f"the chat id must be a number (Telegram's numeric chat id), got {text!r}"
        )
    if not -BIGINT_MAX <= value <= BIGINT_MAX:
        raise InvalidInput(f"the chat id {text!r} is out of range")
    return value


def parse_durations(texts: Iterable[str]) -> list[timedelta]:
    """Several durations, each text possibly a comma-separated list (``1d,1h``)."""
    return [parse_duration(part) for text in texts for part in text.split(",") if part.strip()]


def parse_due(text: str, time_zone: str) -> datetime:
    """A due time; one without an offset is a wall-clock time in ``time_zone``."""
    stripped = text.strip()
    if _DATE_ONLY.fullmatch(stripped):
        raise InvalidInput(f"the due time {text!r} has no time of day: use {_DUE_FORMATS}")
    try:
        parsed = datetime.fromisoformat(stripped)
    except ValueError:
        raise InvalidInput(f"cannot read the due time {text!r}: use {_DUE_FORMATS}") from None
    local = parsed if parsed.tzinfo is not None else parsed.replace(tzinfo=ZoneInfo(time_zone))
    try:
        # In UTC and back: a moment at the edge of datetime's range (year 1 or 9999) has no
        # UTC value, and a wall time inside a spring-forward gap does not exist (zoneinfo
        # would quietly shift it).
        back = local.astimezone(UTC).astimezone(local.tzinfo)
    except OverflowError:
        raise InvalidInput(f"the due time {text!r} is out of range") from None
    if parsed.tzinfo is None and back.replace(tzinfo=None) != parsed:
        raise InvalidInput(
            f"{stripped} does not exist in {time_zone} (the clocks skip it when they change)"
        )
    return local
