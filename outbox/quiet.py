"""Quiet hours: a chat's hours, in its own time zone, during which the messages that ask for
them (``enqueue(..., quiet_hours=True)``) wait. :func:`quiet_until` decides, a pure function
the claim asks for each flagged row it locks; ``outbox.quiet_hours`` changes a chat's hours.

Wall-clock rules: hours with ``start > end`` run across midnight (22:00-07:00). An end that
does not exist that day (clocks go forward) moves to the end of the skipped hour; an end that
exists twice (clocks go back) is its first occurrence, so the hours never last longer than
written.
"""

from __future__ import annotations

import functools
from datetime import UTC, date, datetime, time, timedelta
from typing import NamedTuple
from zoneinfo import ZoneInfo, ZoneInfoNotFoundError

from outbox.errors import InvalidInput

__all__ = ["QuietHours", "quiet_until", "read_hours", "zone"]

# A zone's name as the claim's text carries it: IANA names hold no spaces.
_MAX_ZONE_CHARS = 64


class QuietHours(NamedTuple):
    start: time  # wall-clock, in ``tz``
    end: time
    tz: str  # an IANA zone name


@functools.lru_cache(maxsize=512)
def zone(tz: str) -> ZoneInfo:
    """The IANA zone ``tz``; an unknown name is refused in one line."""
    unknown = InvalidInput(f"unknown time zone {tz!r}: give an IANA name such as 'Asia/Tashkent'")
    if not isinstance(tz, str) or not tz or len(tz) > _MAX_ZONE_CHARS or " " in tz:
        raise unknown
    try:
        return ZoneInfo(tz)
    except (ZoneInfoNotFoundError, ValueError):
        raise unknown from None


def _instant(day: date, wall: time, zi: ZoneInfo) -> datetime:
    """The first moment (UTC) from which the clock of ``zi`` shows ``wall`` or later on ``day``:
    the wall time itself, its first occurrence when it repeats, or the end of the skipped hour
    when the clocks jump over it."""
    local = datetime.combine(day, wall, tzinfo=zi)  # fold=0: the first occurrence
    # A wall time exists when it survives the trip to UTC and back.
    if local.astimezone(UTC).astimezone(zi).replace(tzinfo=zi) == local:
        return local.astimezone(UTC)
    # In a gap: fold=1 reads the wall time with the offset after the jump (an instant before
    # the jump), fold=0 with the one before (an instant after it). The jump lies between.
    low = local.replace(fold=1).astimezone(UTC)
    high = local.replace(fold=0).astimezone(UTC)
    if low > high:
        low, high = high, low
    after = high.astimezone(zi).utcoffset()
    while high - low > timedelta(seconds=1):
        mid = low + (high - low) / 2
        if mid.astimezone(zi).utcoffset() == after:
            high = mid
        else:
            low = mid
    # Transitions fall on whole seconds: ``high`` is the first moment of the new offset.
    return high.replace(microsecond=0)


def quiet_until(now: datetime, hours: QuietHours) -> datetime | None:
    """When the quiet hours that hold ``now`` (timezone-aware) end, in UTC; None outside them.
    Inside: from ``start`` (included) to ``end`` (excluded) on the zone's wall clock; start ==
    end: no quiet hours at all."""
    start, end, tz = hours
    if start == end:
        return None
    zi = zone(tz)
    local = now.astimezone(zi)
    wall = local.time().replace(tzinfo=None)
    if not (start <= wall < end if start < end else wall >= start or wall < end):
        return None
    # Hours across midnight that began today end tomorrow.
    day = local.date() + timedelta(days=1) if end < start <= wall else local.date()
    ends = _instant(day, end, zi)
    # A wall time just before a skipped end reads as inside until the jump: never in the past.
    return ends if ends > now else None


def read_hours(text: str) -> QuietHours | None:
    """The hours as the claim returns them ('HH:MM:SS HH:MM:SS zone'); None for hours written
    by hand that no clock keeps (an unknown zone): such hours hold nothing."""
    try:
        start, end, tz = text.split(" ")
        hours = QuietHours(time.fromisoformat(start), time.fromisoformat(end), tz)
        zone(tz)
    except (ValueError, InvalidInput):
        return None
    return hours
