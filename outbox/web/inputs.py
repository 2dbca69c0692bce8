"""What the page accepts from an address or a form, checked before anything reaches the database.

Each reader returns a plain value or raises ``InvalidInput`` / ``NotFound`` with a sentence the
error page shows as is: an id beyond PostgreSQL's bigint, a duration of centuries, a NUL byte
(PostgreSQL's text cannot hold one) or a lone surrogate (not UTF-8) never becomes a server error.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from typing import Any

from outbox.api import MAX_PRIORITY, MIN_PRIORITY
from outbox.durations import parse_duration
from outbox.errors import InvalidInput, NotFound

__all__ = [
    "MAX_ID",
    "MAX_SINCE_SECONDS",
    "MAX_TEXT",
    "duration_seconds",
    "field",
    "message_id",
    "message_ids",
    "priority",
]

MAX_ID = 2**63 - 1  # PostgreSQL's bigint, the type of outbox.id
MAX_SINCE_SECONDS = 10 * 365 * 86400  # "failed within" longer than ten years means "ever"
MAX_TEXT = 500  # a key, a kind or a search; longer is a mistake or an attack


def field(values: Mapping[str, Any], name: str, what: str) -> str:
    """One text field of the address or a form, stripped; '' when absent (a file sent in a
    multipart form is not text: refused like any other wrong value)."""
    value = values.get(name, "")
    if not isinstance(value, str):
        raise InvalidInput(f"the {what} must be text")
    value = value.strip()
    if len(value) > MAX_TEXT:
        raise InvalidInput(f"the {what} is longer than {MAX_TEXT} characters")
    if "\x00" in value:
        raise InvalidInput(f"the {what} holds a NUL character, which no message can have")
    try:
        value.encode("utf-8")
    except UnicodeEncodeError:
        raise InvalidInput(f"the {what} is not valid text (a broken character)") from None
    return value


def _bigint(raw: str) -> int | None:
    """The number if ``raw`` is ASCII digits within bigint ('²' is a digit to Python, not here)."""
    text = raw.strip()
    if not (text.isascii() and text.isdigit()) or len(text) > len(str(MAX_ID)):
        return None
    number = int(text)
    return number if 1 <= number <= MAX_ID else None


def message_id(raw: str) -> int:
    """A message id from the address; anything else is a page that does not exist."""
    number = _bigint(raw)
    if number is None:
        shown = raw if len(raw) <= 40 else raw[:40] + "…"
        raise NotFound(f"{shown!r} is not a message id")
    return number


def message_ids(raw: str, limit: int) -> list[int]:
    """The confirmed selection: comma-separated ids, 1 to ``limit`` of them."""
    parts = [part for part in raw.split(",") if part.strip()]
    if not parts or len(parts) > limit:
        raise InvalidInput(f"the selection is empty or longer than {limit}")
    ids = [_bigint(part) for part in parts]
    if None in ids:
        raise InvalidInput("the selection is not a list of message ids")
    return [number for number in ids if number is not None]


_PRIORITY = re.compile(r"[+-]?[0-9]{1,3}")  # ASCII digits only, as everywhere


def priority(text: str) -> int:
    """A priority (ustuvorlik) for the filter, within the table's range."""
    if not _PRIORITY.fullmatch(text) or not MIN_PRIORITY <= int(text) <= MAX_PRIORITY:
        shown = text if len(text) <= 40 else text[:40] + "…"
        raise InvalidInput(
            f"the priority {shown!r} is not a whole number from {MIN_PRIORITY} to {MAX_PRIORITY}"
        )
    return int(text)


def duration_seconds(text: str, what: str) -> float:
    """A duration as typed (``30m``, ``7d``), at most ten years."""
    seconds = parse_duration(text).total_seconds()  # refuses nan, inf and beyond a timedelta
    if seconds > MAX_SINCE_SECONDS:
        raise InvalidInput(f"the {what} {text!r} is longer than ten years (3650d)")
    return seconds
