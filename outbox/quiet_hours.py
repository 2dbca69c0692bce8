"""Quiet hours from the app: set and clear a chat's hours in the app's transaction.

A change brings the chat's messages held by its previous hours back to the moment they were
due, so that the next claim judges them again under the new hours (``outbox.quiet`` decides).
The change locks the chat's waiting rows that ask for quiet hours: a claim running meanwhile
skips them, and the change waits for a claim that holds them, so no claim judges them by the
hours the change replaced.
"""

from __future__ import annotations

from datetime import time
from typing import TYPE_CHECKING

from outbox import queries, sql
from outbox.api import bot_column
from outbox.errors import InvalidInput
from outbox.quiet import QuietHours, zone
from outbox.schema import resolve_schema

if TYPE_CHECKING:
    from outbox.queries import AsyncAppConn, Steps, SyncConn

__all__ = [
    "clear_quiet_hours",
    "clear_quiet_hours_async",
    "get_quiet_hours",
    "set_quiet_hours",
    "set_quiet_hours_async",
]


def _checked(start: object, end: object, tz: object) -> QuietHours:
    for name, value in (("start", start), ("end", end)):
        if not isinstance(value, time):
            raise InvalidInput(f"{name} must be a datetime.time, got {type(value).__name__}")
        if value.tzinfo is not None:
            raise InvalidInput(f"{name} must be a wall-clock time, without tzinfo: tz is the zone")
    if not isinstance(tz, str):
        raise InvalidInput(f"tz must be an IANA zone name, got {type(tz).__name__}")
    zone(tz)
    assert isinstance(start, time) and isinstance(end, time)
    return QuietHours(start.replace(microsecond=0), end.replace(microsecond=0), tz)


def _chat(chat_id: object) -> str:
    if isinstance(chat_id, bool) or not isinstance(chat_id, int | str):
        raise InvalidInput(f"chat_id must be a number or an @username, got {chat_id!r}")
    chat = str(chat_id)
    if not chat or len(chat) > 64:
        raise InvalidInput(f"chat_id {chat_id!r} is no chat Telegram knows")
    return chat


def _set_steps(
    chat_id: int | str,
    *,
    start: time,
    end: time,
    tz: str,
    bot: int | str | None,
    schema: str | None,
) -> Steps:
    hours = _checked(start, end, tz)
    params: dict[str, object] = {"chat": _chat(chat_id), "bot": bot_column(bot) or ""}
    if hours.start == hours.end:
        yield sql.sa_sql("clear_quiet_hours", resolve_schema(schema)), params
    else:
        params |= {"boshi": hours.start, "oxiri": hours.end, "tz": hours.tz}
        yield sql.sa_sql("set_quiet_hours", resolve_schema(schema)), params


def _clear_steps(chat_id: int | str, *, bot: int | str | None, schema: str | None) -> Steps:
    params = {"chat": _chat(chat_id), "bot": bot_column(bot) or ""}
    yield sql.sa_sql("clear_quiet_hours", resolve_schema(schema)), params


def set_quiet_hours(
    conn: SyncConn,
    chat_id: int | str,
    *,
    start: time,
    end: time,
    tz: str,
    bot: int | str | None = None,
    schema: str | None = None,
) -> None:
    """Set a chat's quiet hours, in the caller's transaction (never commits).

    ``start`` and ``end`` are wall-clock times in the IANA zone ``tz`` (22:00 to 07:00 runs
    across midnight; seconds count, microseconds do not); ``start == end`` means none (the
    chat's hours are cleared). Messages to the chat enqueued with ``quiet_hours=True`` (by
    ``bot``; None: the rows naming no bot) wait while the hours last. The chat's messages held
    now are judged again by the next claim. An unknown zone is refused (``InvalidInput``).
    """
    queries.run_sync(conn, _set_steps(chat_id, start=start, end=end, tz=tz, bot=bot, schema=schema))


async def set_quiet_hours_async(
    conn: AsyncAppConn,
    chat_id: int | str,
    *,
    start: time,
    end: time,
    tz: str,
    bot: int | str | None = None,
    schema: str | None = None,
) -> None:
    """``set_quiet_hours`` for an ``AsyncSession`` or ``AsyncConnection``."""
    steps = _set_steps(chat_id, start=start, end=end, tz=tz, bot=bot, schema=schema)
    await queries.run_async(conn, steps)


def clear_quiet_hours(
    conn: SyncConn, chat_id: int | str, *, bot: int | str | None = None, schema: str | None = None
) -> None:
    """Remove a chat's quiet hours, in the caller's transaction (never commits); its held
    messages are due again from the moment they were due before."""
    queries.run_sync(conn, _clear_steps(chat_id, bot=bot, schema=schema))


async def clear_quiet_hours_async(
    conn: AsyncAppConn,
    chat_id: int | str,
    *,
    bot: int | str | None = None,
    schema: str | None = None,
) -> None:
    """``clear_quiet_hours`` for an ``AsyncSession`` or ``AsyncConnection``."""
    await queries.run_async(conn, _clear_steps(chat_id, bot=bot, schema=schema))


def _get_steps(chat_id: int | str, *, bot: int | str | None, schema: str | None) -> Steps:
    params = {"chat": _chat(chat_id), "bot": bot_column(bot) or ""}
    found = (yield sql.sa_sql("quiet_hours_of", resolve_schema(schema)), params).first()
    return None if found is None else QuietHours(found[0], found[1], found[2])


def get_quiet_hours(
    conn: SyncConn, chat_id: int | str, *, bot: int | str | None = None, schema: str | None = None
) -> QuietHours | None:
    """A chat's quiet hours (``start``, ``end``, ``tz``), or None if it has none."""
    found: QuietHours | None = queries.run_sync(conn, _get_steps(chat_id, bot=bot, schema=schema))
    return found
