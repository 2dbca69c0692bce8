"""Quiet hours from the app: set and clear a chat's hours in the app's transaction.

A change moves the chat's messages held by the old hours back to when they were due, for the
next claim to judge again (``outbox.quiet`` decides). It locks the chat's waiting quiet-hours
rows: a claim running meanwhile skips them and the change waits for a claim that holds them,
so no claim judges them by the hours the change replaced.
"""

from __future__ import annotations

from datetime import time
from typing import TYPE_CHECKING

from outbox import sql
from outbox.api import bot_column, chat_column
from outbox.errors import InvalidInput
from outbox.queries import app_twins
from outbox.quiet import QuietHours, zone
from outbox.schema import resolve_schema

if TYPE_CHECKING:
    from outbox.queries import Steps

__all__ = [
    "clear_quiet_hours",
    "clear_quiet_hours_async",
    "get_quiet_hours",
    "get_quiet_hours_async",
    "set_quiet_hours",
    "set_quiet_hours_async",
]


def _wall_clock(value: object, name: str) -> time:
    if not isinstance(value, time):
        raise InvalidInput(f"{name} must be a datetime.time, got {type(value).__name__}")
    if value.tzinfo is not None:
        raise InvalidInput(f"{name} must be a wall-clock time, without tzinfo: tz is the zone")
    return value.replace(microsecond=0)


def _checked(start: object, end: object, tz: object) -> QuietHours:
    wall_start, wall_end = _wall_clock(start, "start"), _wall_clock(end, "end")
    if not isinstance(tz, str):
        raise InvalidInput(f"tz must be an IANA zone name, got {type(tz).__name__}")
    zone(tz)
    return QuietHours(wall_start, wall_end, tz)


def _whose(chat_id: object, bot: int | str | None) -> dict[str, object]:
    # The chat as the outbox keys it (suhbat): "007" and 7 are one chat.
    return {"chat": chat_column(chat_id), "bot": bot_column(bot) or ""}


def _set_steps(
    chat_id: int | str,
    *,
    start: time,
    end: time,
    tz: str,
    bot: int | str | None = None,
    schema: str | None = None,
) -> Steps:
    """Set a chat's quiet hours for ``bot`` (None: the rows naming no bot) in the caller's
    transaction: its messages enqueued with ``quiet_hours=True`` wait while they last.
    ``start`` and ``end`` are wall-clock times in the IANA zone ``tz`` (22:00-07:00 runs across
    midnight; microseconds do not count); ``start == end`` clears the hours."""
    hours = _checked(start, end, tz)
    yield from _change(chat_id, bot, schema, None if hours.start == hours.end else hours)


def _clear_steps(
    chat_id: int | str, *, bot: int | str | None = None, schema: str | None = None
) -> Steps:
    """Remove a chat's quiet hours, in the caller's transaction (never commits); its held
    messages are due again from the moment they were due before."""
    yield from _change(chat_id, bot, schema, None)


def _change(
    chat_id: object, bot: int | str | None, schema: str | None, hours: QuietHours | None
) -> Steps:
    start, end, tz = (None, None, None) if hours is None else hours
    params = {**_whose(chat_id, bot), "boshi": start, "oxiri": end, "tz": tz}
    yield sql.sa_sql("set_quiet_hours", resolve_schema(schema)), params


def _get_steps(
    chat_id: int | str, *, bot: int | str | None = None, schema: str | None = None
) -> Steps:
    """A chat's quiet hours (``start``, ``end``, ``tz``) for ``bot`` (None: the rows naming no
    bot), or None if it has none; read in the caller's transaction."""
    query = sql.sa_sql("quiet_hours_of", resolve_schema(schema))
    found = (yield query, _whose(chat_id, bot)).first()
    return None if found is None else QuietHours(found[0], found[1], found[2])


def _found_hours(found: QuietHours | None) -> QuietHours | None:
    return found


def _nothing(_result: object) -> None:
    return None


set_quiet_hours, set_quiet_hours_async = app_twins("set_quiet_hours", _set_steps, _nothing)
clear_quiet_hours, clear_quiet_hours_async = app_twins("clear_quiet_hours", _clear_steps, _nothing)
get_quiet_hours, get_quiet_hours_async = app_twins("get_quiet_hours", _get_steps, _found_hours)
