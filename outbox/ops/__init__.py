"""The operator's operations, one layer for the command line and the web page alike: each an
:class:`~outbox.queries.Operation`, run in the caller's transaction (sync, or ``.run_async``)."""

from __future__ import annotations

import itertools
from collections.abc import AsyncIterator, Iterator
from dataclasses import dataclass, field
from typing import Any

from outbox import sql
from outbox.db import operator_connection as connect
from outbox.db import operator_connection_async as connect_async
from outbox.queries import (
    Activity,
    BatchProgress,
    BotFigures,
    Message,
    PaidStop,
    Pause,
    QueueStatus,
    RelayRecord,
    ReplayResult,
    Scope,
    batch_progress,
    bot_status,
    cancel_waiting,
    count_failed,
    failed_filters,
    finished_per_minute,
    get_message,
    list_messages,
    list_pauses,
    list_relays,
    paid_lane_stops,
    pause,
    queue_status,
    replay,
    resume,
    resume_paid_lane,
    search_messages,
    unpaused_lag,
    unserved_queues,
)
from outbox.queries._common import Reading, operation
from outbox.queries.chats import BlockedChat, blocked_chats, unblock
from outbox.queries.pause import check_batch_name
from outbox.states import State

__all__ = [
    "BlockedChat",
    "Overview",
    "StatusReport",
    "batch",
    "batch_report",
    "batch_report_async",
    "blocked_chats",
    "cancel_message",
    "connect",
    "connect_async",
    "count_failed",
    "front_page",
    "get_message",
    "list_messages",
    "list_pauses",
    "list_relays",
    "overview",
    "paid_lane_stops",
    "pause",
    "replay",
    "replay_message",
    "resume",
    "resume_paid_lane",
    "search_messages",
    "status",
    "unblock",
]


@dataclass(frozen=True, slots=True)
class StatusReport:
    status: QueueStatus
    unserved: dict[str, int]  # queues no live relay serves (paused ones left out), due rows
    bots: list[BotFigures]
    paused: list[Pause]
    lags: dict[str, float]  # per queue, the lag that counts: a paused row waits on purpose
    paid_stops: list[PaidStop] = field(default_factory=list)  # bots whose paid lane stopped


@operation
def status(
    *,
    schema: str,
    lease_seconds: float,
    max_lag: float,
    queue: str | None = None,
    bot: str | None = None,
) -> Reading[StatusReport]:
    found = yield from queue_status.steps(schema=schema, lease_seconds=lease_seconds, queue=queue)
    unserved = yield from unserved_queues.steps(schema=schema)
    bots = yield from bot_status.steps(schema=schema, bot=bot)
    paused = yield from list_pauses.steps(schema=schema)
    lags = {name: figures.lag_seconds for name, figures in found.queues.items()}
    # Without a pause, or with no lag over max_lag, the status's own lags are the answer.
    if paused and found.lag_seconds > max_lag:
        lags = yield from unpaused_lag.steps(schema=schema, queue=queue)
    # A paused queue has no relay at work on purpose: that is no warning either.
    paused_queues = {p.value for p in paused if p.scope is Scope.QUEUE}
    unserved = {
        name: due
        for name, due in unserved.items()
        if name not in paused_queues and (queue is None or name == queue)
    }
    stops = yield from paid_lane_stops.steps(schema=schema)
    return StatusReport(found, unserved, bots, paused, lags, stops)


@dataclass(frozen=True, slots=True)
class Overview:
    status: QueueStatus
    activity: Activity
    relays: list[RelayRecord]
    unserved: dict[str, int]
    bots: list[BotFigures]


@operation
def overview(*, schema: str, lease_seconds: float) -> Reading[Overview]:
    return Overview(
        (yield from queue_status.steps(schema=schema, lease_seconds=lease_seconds)),
        (yield from finished_per_minute.steps(schema=schema)),
        (yield from list_relays.steps(schema=schema)),
        (yield from unserved_queues.steps(schema=schema)),
        (yield from bot_status.steps(schema=schema)),
    )


@dataclass(frozen=True, slots=True)
class FrontPage:
    overview: Overview
    failed: list[Message]  # newest first, one more than asked for when there are more
    kinds: list[str]  # among failed rows, for the filter
    priorities: list[int]  # among failed rows, highest first
    pauses: list[Pause]


@operation
def front_page(
    *,
    schema: str,
    lease_seconds: float,
    limit: int,
    kind: str | None = None,
    queue: str | None = None,
    failed_within_seconds: float | None = None,
    priority: int | None = None,
) -> Reading[FrontPage]:
    shown = yield from overview.steps(schema=schema, lease_seconds=lease_seconds)
    failed = yield from list_messages.steps(
        schema=schema,
        state=State.FAILED,
        kind=kind,
        queue=queue,
        failed_within_seconds=failed_within_seconds,
        priority=priority,
        limit=limit,
    )
    kinds, priorities = yield from failed_filters.steps(schema=schema)
    pauses = yield from list_pauses.steps(schema=schema)
    return FrontPage(shown, failed, kinds, priorities, pauses)


# The page's buttons: the action, then the message as it left it (None: no such message).
@operation
def replay_message(
    message_id: int, *, schema: str, force: bool = False
) -> Reading[tuple[ReplayResult, Message | None]]:
    (result,) = yield from replay.steps([message_id], schema=schema, force=force)
    return result, (yield from get_message.steps(message_id, schema=schema))


@operation
def cancel_message(message_id: int, *, schema: str) -> Reading[tuple[bool, Message | None]]:
    cancelled = yield from cancel_waiting.steps(schema=schema, message_id=message_id)
    return cancelled > 0, (yield from get_message.steps(message_id, schema=schema))


@operation
def batch(
    name: str, *, schema: str, cancel: bool = False
) -> Reading[tuple[int | None, BatchProgress]]:
    """A batch's progress, after cancelling its waiting rows (how many) when ``cancel``."""
    name = check_batch_name(name)
    cancelled = (yield from cancel_waiting.steps(schema=schema, batch=name)) if cancel else None
    pauses = yield from list_pauses.steps(schema=schema)
    return cancelled, (yield from batch_progress.steps(name, pauses, schema=schema))


# Rows of a batch's report handed to the caller at a time: a file of a million lines is written
# as it is read, never held whole.
REPORT_PAGE = 500


def batch_report(conn: sql.SyncConn, name: str, *, schema: str) -> Iterator[list[tuple[Any, ...]]]:
    """Batch ``name``'s rows (``views.batch.REPORT_COLUMNS``), in pages, from one snapshot."""
    params = {"partiya": check_batch_name(name)}
    rows = sql.stream_sync(conn, "batch_report", schema=schema, params=params)
    while page := list(itertools.islice(rows, REPORT_PAGE)):
        yield page


async def batch_report_async(
    conn: sql.AsyncConn, name: str, *, schema: str
) -> AsyncIterator[list[tuple[Any, ...]]]:
    page: list[tuple[Any, ...]] = []
    params = {"partiya": check_batch_name(name)}
    async for row in sql.stream(conn, "batch_report", schema=schema, params=params):
        page.append(row)
        if len(page) == REPORT_PAGE:
            yield page
            page = []
    if page:
        yield page
