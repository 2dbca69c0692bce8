"""Reading what people type: ids, chat ids, durations like ``1h30m``, due times."""

from __future__ import annotations

import re
from collections.abc import Iterable
from datetime import UTC, datetime, timedelta
from zoneinfo import ZoneInfo

from outbox.durations import format_duration, parse_duration
from outbox.errors import InvalidInput

__all__ = [
    "format_duration",
    "parse_chat_id",
    "parse_due",
    "parse_duration",
    "parse_durations",
    "parse_id",
]

_BIGINT_MAX = 2**63 - 1
_DATE_ONLY = re.compile(r"\d{4}-?\d{2}-?\d{2}")
_DUE_FORMATS = "'YYYY-MM-DD HH:MM' (in the user's time zone) or ISO 8601 with an offset"


def parse_id(what: str, text: str) -> int:
    """A row id: a positive whole number."""
    try:
        value = int(text.strip())
    except ValueError:
        raise InvalidInput(f"{what} id must be a whole number, got {text!r}") from None
    if not 1 <= value <= _BIGINT_MAX:
        raise InvalidInput(f"{what} id must be a positive whole number, got {text!r}")
    return value


def parse_chat_id(text: str) -> int:
    """A Telegram chat id: a whole number, negative for groups and channels."""
    try:
        value = int(text.strip())
    except ValueError:
        raise InvalidInput(
            f"the chat id must be a number (Telegram's numeric chat id), got {text!r}"
        ) from None
    if not -_BIGINT_MAX <= value <= _BIGINT_MAX:
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
    if parsed.tzinfo is not None:
        return parsed
    zone = ZoneInfo(time_zone)
    local = parsed.replace(tzinfo=zone)
    # A wall time inside a spring-forward gap does not exist; zoneinfo would quietly shift it.
    if local.astimezone(UTC).astimezone(zone).replace(tzinfo=None) != parsed:
        raise InvalidInput(
            f"{stripped} does not exist in {time_zone} (the clocks skip it when they change)"
        )
    return local
