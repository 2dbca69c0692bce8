"""Broadcasts and pauses from Python: enqueue many messages at once as a batch, follow a
batch's progress, pause, resume and cancel (``outbox pause``, ``resume`` and ``batch`` call
these). Each takes the app's SQLAlchemy connection or session and never commits: a pause
holds from the caller's commit on, for every relay.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from datetime import datetime, timedelta
from typing import Any

from outbox import queries
from outbox.api import REMINDER, _checked_message, _checked_sending
from outbox.queries import BatchProgress, Pause, Scope, SyncConn
from outbox.queries.pause import check_batch_name
from outbox.schema import DEFAULT_QUEUE, resolve_schema

__all__ = [
    "BatchProgress",
    "Pause",
    "Scope",
    "batch_progress",
    "cancel_batch",
    "enqueue_many",
    "enqueue_many_async",
    "pause",
    "pauses",
    "resume",
]


def _enqueue_many_steps(
    messages: Iterable[tuple[str, Mapping[str, Any]]],
    *,
    batch: str | None = None,
    kind: str = REMINDER,
    run_at: datetime | None = None,
    schema: str | None = None,
    queue: str = DEFAULT_QUEUE,
    priority: int = 0,
    early: timedelta | None = None,
    expires_at: datetime | None = None,
    bot: int | None = None,
    ordered: bool = True,
    quiet_hours: bool = False,
) -> queries.Steps:
    """Add ``(key, payload)`` pairs in one statement, in the caller's transaction (never
    commits); return how many were new (a key already in the outbox is left as it is).

    Each payload is checked as ``enqueue`` checks it, and one refused payload refuses the
    list; the other arguments are ``enqueue``'s, for every message. The list goes to the
    database as one JSON document: split a list of millions into chunks of some ten thousand.
    """
    schema_name, route = _checked_sending(
        schema=schema,
        kind=kind,
        queue=queue,
        batch=batch,
        bot=bot,
        run_at=run_at,
        priority=priority,
        early=early,
        expires_at=expires_at,
        ordered=ordered,
        quiet_hours=quiet_hours,
    )
    checked = [
        _checked_message(key, payload, f"message {number} of the list")
        for number, (key, payload) in enumerate(messages)
    ]
    return queries.enqueue_many(schema=schema_name, messages=checked, route=route)


enqueue_many, enqueue_many_async = queries.app_twins("enqueue_many", _enqueue_many_steps, int)


def pause(conn: SyncConn, scope: Scope, value: str, *, schema: str | None = None) -> bool:
    """Stop every relay claiming the rows of ``scope`` = ``value`` (a queue, a bot's public
    id, a kind, a batch); the rows stay kutmoqda. False if it was paused already."""
    return queries.pause(conn, scope, value, schema=resolve_schema(schema))


def resume(conn: SyncConn, scope: Scope, value: str, *, schema: str | None = None) -> bool:
    """Lift a pause (the relays are woken at commit); False if it was not paused."""
    return queries.resume(conn, scope, value, schema=resolve_schema(schema))


def pauses(conn: SyncConn, *, schema: str | None = None) -> list[Pause]:
    """The pauses in force."""
    return queries.list_pauses(conn, schema=resolve_schema(schema))


def batch_progress(conn: SyncConn, name: str, *, schema: str | None = None) -> BatchProgress:
    """Where batch ``name`` stands (``total`` 0: no such batch, or its rows are gone)."""
    resolved = resolve_schema(schema)
    found = queries.list_pauses(conn, schema=resolved)
    return queries.batch_progress(conn, check_batch_name(name), found, schema=resolved)


def cancel_batch(conn: SyncConn, name: str, *, schema: str | None = None) -> int:
    """Move every waiting row of batch ``name`` to xato (code ``cancelled``, replayable); rows
    being sent now finish. Return how many were cancelled."""
    return queries.cancel_batch(conn, check_batch_name(name), schema=resolve_schema(schema))
