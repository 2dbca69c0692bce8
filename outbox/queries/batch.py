"""Batches (broadcasts): the rows that share a ``partiya`` (outbox_0006), enqueued in one
statement (an app operation), and their progress and cancel (operator operations of
``outbox/sql/batch.sql``, on the batch's own index of its rows by state and last change).
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any

from outbox import sql
from outbox.queries._common import AnyConn, Reading, Steps, operation
from outbox.queries.app import Route
from outbox.queries.operator import cancel_waiting
from outbox.queries.pause import Pause, Scope

__all__ = ["BatchProgress", "batch_progress", "cancel_batch", "enqueue_many"]

# --- the bulk enqueue: inside the caller's transaction, never commits --------------------------


def enqueue_many(
    *, schema: str, messages: Sequence[tuple[str, dict[str, Any]]], route: Route
) -> Steps:
    """Insert ``(key, payload)`` pairs in one statement; the result is how many were new."""
    if not messages:
        return 0
    rows = json.dumps(
        [{"kalit": key, "payload": payload} for key, payload in messages],
        separators=(",", ":"),
        ensure_ascii=False,
    )
    result = yield sql.sa_sql("enqueue_many", schema), {**route.params(), "rows": rows}
    return int(result.scalar_one())


# --- a batch's progress ----------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class BatchProgress:
    """Where a batch stands. Retention deletes done rows after their retention, so a batch
    older than that counts fewer sent rows than it had."""

    name: str
    total: int
    sent: int  # bajarildi
    failed: int  # xato, cancelled ones included
    cancelled: int  # of the failed: cancelled by an operator (replayable)
    sending: int  # bajarilmoqda: claimed by a relay now
    waiting: int  # kutmoqda and not paused (some may be due later, or retrying)
    paused: int  # kutmoqda held by a pause (of the batch, its queue or its kind)
    rate: float  # messages sent per second, over the last minute of sending
    expected_end: datetime | None  # when the waiting rows are sent at that rate; None: unknown
    started: datetime | None  # first row enqueued
    last_sent: datetime | None
    paused_by: tuple[Pause, ...] = ()  # the pauses that hold its rows
    paid: int = 0  # rows sent with allow_paid_broadcast (the paid lane)
    paid_sent: int = 0  # of those, bajarildi: each may have cost 0.1 Star
    chat_blocked: int = 0  # of the failed: not sent, the chat is gone for the bot (bloklangan)

    @property
    def finished(self) -> bool:
        return self.total > 0 and self.waiting + self.paused + self.sending == 0


RATE_WINDOW_SECONDS = 60.0


@operation
def batch_progress(name: str, pauses: Sequence[Pause], *, schema: str) -> Reading[BatchProgress]:
    """The figures of batch ``name`` (all zero if it has no rows), given the pauses in force."""

    def named(scope: Scope) -> list[str]:
        return [p.value for p in pauses if p.scope == scope]

    params = {
        "partiya": name,
        "batch_paused": name in named(Scope.BATCH),
        "queues": named(Scope.QUEUE),
        "kinds": named(Scope.KIND),
        "window": RATE_WINDOW_SECONDS,
    }
    (r,) = yield "batch_progress", schema, params
    paused, sending = int(r.paused), int(r.sending)
    waiting = int(r.pending) - paused
    rate = 0.0
    if r.recent and r.recent_from is not None:
        # Over the window, or since the first send in it if sending began less than a window
        # ago (a second at least, so that the first few sends do not promise a wild rate).
        span = max(1.0, min(RATE_WINDOW_SECONDS, (r.now - r.recent_from).total_seconds()))
        rate = int(r.recent) / span
    expected_end = None
    if waiting + sending == 0 and paused == 0:
        expected_end = r.last_sent
    elif rate > 0 and paused == 0:
        expected_end = r.now + timedelta(seconds=(waiting + sending) / rate)
    held = tuple(
        p
        for p in pauses
        if (p.scope == Scope.BATCH and p.value == name)
        or (paused and p.scope in (Scope.QUEUE, Scope.KIND))
    )
    return BatchProgress(
        name=name,
        total=int(r.total),
        sent=int(r.sent),
        failed=int(r.failed),
        cancelled=int(r.cancelled),
        chat_blocked=int(r.chat_blocked),
        sending=sending,
        waiting=waiting,
        paused=paused,
        rate=rate,
        expected_end=expected_end,
        started=r.started,
        last_sent=r.last_sent,
        paused_by=held,
        paid=int(r.paid),
        paid_sent=int(r.paid_sent),
    )


def cancel_batch(conn: AnyConn, name: str, *, schema: str) -> int:
    """Every waiting row of batch ``name`` -> xato ('cancelled by operator'); how many. Rows a
    relay holds now are on their way to Telegram and are left to finish."""
    return cancel_waiting(conn, schema=schema, batch=name)
