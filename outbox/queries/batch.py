"""Batches (broadcasts): many rows enqueued in one statement, a batch's progress, its cancel.

A batch is the rows that share a ``partiya`` (outbox_0006); its index holds those rows only,
by state and last change, which is what the progress counts and the cancel walks. The bulk
enqueue is an app operation (see ``run_sync``/``run_async``); progress and cancel are operator
statements on a sync connection or session.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any

from outbox.queries._common import Steps, SyncConn, _execute, _text
from outbox.queries.app import Lane
from outbox.queries.operator import CANCELLED_BY_OPERATOR
from outbox.queries.pause import Pause, Scope
from outbox.schema import DEFAULT_QUEUE
from outbox.states import FailureCode

__all__ = ["BatchProgress", "batch_progress", "cancel_batch", "enqueue_many"]

# --- the bulk enqueue: inside the caller's transaction, never commits --------------------------

# One statement for the whole list: one JSON document (json.dumps builds it in C), one insert,
# one NOTIFY from the statement trigger. Keys already present are left as they are.
_ENQUEUE_MANY = """
WITH inserted AS (
    INSERT INTO {outbox} (tur, kalit, payload, keyingi_urinish, navbat, partiya, ustuvorlik,
                          eng_erta, eskirish, bot)
    SELECT :tur, r.kalit, r.payload, coalesce(CAST(:run_at AS timestamptz), now()), :navbat,
           CAST(:partiya AS text), :ustuvorlik, CAST(:eng_erta AS timestamptz),
           CAST(:eskirish AS timestamptz), CAST(:bot AS text)
    FROM json_to_recordset(CAST(:rows AS json)) AS r(kalit text, payload jsonb)
    ON CONFLICT (kalit) DO NOTHING
    RETURNING 1
)
SELECT count(*) FROM inserted
"""


def enqueue_many(
    *,
    schema: str,
    kind: str,
    messages: Sequence[tuple[str, dict[str, Any]]],
    run_at: datetime | None,
    queue: str = DEFAULT_QUEUE,
    batch: str | None = None,
    lane: Lane = Lane(),  # noqa: B008 - an immutable tuple
    bot: str | None = None,
) -> Steps:
    """Insert ``(key, payload)`` pairs in one statement; the result is how many were new."""
    if not messages:
        return 0
    rows = json.dumps(
        [{"kalit": key, "payload": payload} for key, payload in messages],
        separators=(",", ":"),
        ensure_ascii=False,
    )
    params = {
        "tur": kind,
        "rows": rows,
        "run_at": run_at,
        "navbat": queue,
        "partiya": batch,
        "ustuvorlik": lane.priority,
        "eng_erta": lane.earliest,
        "eskirish": lane.expires_at,
        "bot": bot,
    }
    result = yield _text(_ENQUEUE_MANY, schema), params
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

    @property
    def finished(self) -> bool:
        return self.total > 0 and self.waiting + self.paused + self.sending == 0


RATE_WINDOW_SECONDS = 60.0

# Served by the batch index (partiya, holat, yangilangan). A row is paused if its batch, its
# queue or its kind is: the pauses are read first and passed in (a handful of names).
_BATCH_PROGRESS = """
SELECT count(*) AS total,
       count(*) FILTER (WHERE holat = {done}) AS sent,
       count(*) FILTER (WHERE holat = {failed}) AS failed,
       count(*) FILTER (WHERE holat = {failed} AND xato_turi = :cancelled) AS cancelled,
       count(*) FILTER (WHERE holat = {in_progress}) AS sending,
       count(*) FILTER (WHERE holat = {pending} AND (CAST(:batch_paused AS boolean)
                        OR navbat = ANY(CAST(:queues AS text[]))
                        OR tur = ANY(CAST(:kinds AS text[])))) AS paused,
       count(*) FILTER (WHERE holat = {pending}) AS pending,
       count(*) FILTER (WHERE holat = {done}
                        AND yangilangan > now() - make_interval(secs => :window)) AS recent,
       min(yangilangan) FILTER (WHERE holat = {done}
                        AND yangilangan > now() - make_interval(secs => :window)) AS recent_from,
       min(yaratilgan) AS started,
       max(yangilangan) FILTER (WHERE holat = {done}) AS last_sent,
       now() AS now
FROM {outbox}
WHERE partiya = :partiya
"""


def batch_progress(
    conn: SyncConn, name: str, pauses: Sequence[Pause], *, schema: str
) -> BatchProgress:
    """The figures of batch ``name`` (all zero if it has no rows), given the pauses in force."""

    def named(scope: Scope) -> list[str]:
        return [p.value for p in pauses if p.scope == scope]

    params = {
        "partiya": name,
        "cancelled": FailureCode.CANCELLED.value,
        "batch_paused": name in named(Scope.BATCH),
        "queues": named(Scope.QUEUE),
        "kinds": named(Scope.KIND),
        "window": RATE_WINDOW_SECONDS,
    }
    r = _execute(conn, schema, _BATCH_PROGRESS, params).one()
    waiting = int(r.pending) - int(r.paused)
    rate = 0.0
    if r.recent and r.recent_from is not None:
        # Over the window, or since the first send in it if sending began less than a window
        # ago (a second at least, so that the first few sends do not promise a wild rate).
        span = max(1.0, min(RATE_WINDOW_SECONDS, (r.now - r.recent_from).total_seconds()))
        rate = int(r.recent) / span
    expected_end = None
    left = waiting + int(r.sending)
    if left == 0 and int(r.paused) == 0:
        expected_end = r.last_sent
    elif rate > 0 and int(r.paused) == 0:
        expected_end = r.now + timedelta(seconds=left / rate)
    held = tuple(
        p
        for p in pauses
        if (p.scope == Scope.BATCH and p.value == name)
        or (int(r.paused) and p.scope in (Scope.QUEUE, Scope.KIND))
    )
    return BatchProgress(
        name=name,
        total=int(r.total),
        sent=int(r.sent),
        failed=int(r.failed),
        cancelled=int(r.cancelled),
        sending=int(r.sending),
        waiting=waiting,
        paused=int(r.paused),
        rate=rate,
        expected_end=expected_end,
        started=r.started,
        last_sent=r.last_sent,
        paused_by=held,
    )


# An operator's cancel of a whole batch, as the web page cancels one message: the waiting rows
# move to xato with the reason, replayable. Rows a relay holds now are on their way to Telegram
# and are left to finish.
_CANCEL_BATCH = CANCELLED_BY_OPERATOR + "WHERE partiya = :partiya AND holat = {pending}\n"


def cancel_batch(conn: SyncConn, name: str, *, schema: str) -> int:
    """Every waiting row of batch ``name`` -> xato ('cancelled by operator'); how many."""
    params = {"partiya": name, "code": FailureCode.CANCELLED.value}
    return int(_execute(conn, schema, _CANCEL_BATCH, params).rowcount)
