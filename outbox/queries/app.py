"""What the host app runs inside its own transaction, never committing: the named queries of
``outbox/sql/app.sql`` as operations (generators of statements, see ``run_sync`` and
``run_async``) that its SQLAlchemy session or connection runs, sync or async, with any driver.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from datetime import datetime
from typing import Any, NamedTuple

from outbox import sql
from outbox.queries._common import Steps
from outbox.schema import DEFAULT_QUEUE
from outbox.tracing import NO_TRACE, TraceContext


class Lane(NamedTuple):
    """A message's place among its bot's others (outbox_0009's columns)."""

    priority: int = 0  # ustuvorlik
    earliest: datetime | None = None  # eng_erta
    expires_at: datetime | None = None  # eskirish
    # A place in its chat's order (tartib, outbox_0016): False lets it go as soon as it can.
    ordered: bool = True
    # Waits while its chat's quiet hours last (tinch, outbox_0018).
    quiet_hours: bool = False


class Route(NamedTuple):
    """Where and how a message goes: what ``enqueue`` and ``enqueue_many`` write beside the
    messages themselves."""

    kind: str
    run_at: datetime | None
    queue: str = DEFAULT_QUEUE
    batch: str | None = None
    lane: Lane = Lane()
    bot: str | None = None
    # The enqueuing span's context, kept for the relay's span of the send (the same for every
    # row of an enqueue_many: one request's).
    trace: TraceContext = NO_TRACE

    def params(self) -> dict[str, Any]:
        """Its columns, named as both enqueue statements name them."""
        lane, trace = self.lane, self.trace
        return {
            "tur": self.kind,
            "run_at": self.run_at,
            "navbat": self.queue,
            "partiya": self.batch,
            "ustuvorlik": lane.priority,
            "eng_erta": lane.earliest,
            "eskirish": lane.expires_at,
            "ordered": lane.ordered,
            "tinch": lane.quiet_hours,
            "bot": self.bot,
            "traceparent": trace.traceparent,
            "tracestate": trace.tracestate,
        }


def enqueue(*, schema: str, key: str, payload: Mapping[str, Any], route: Route) -> Steps:
    """Insert one message; the result is ``(id, created)``. An existing key returns its row."""
    params = {**route.params(), "kalit": key, "payload": json.dumps(payload)}
    row = (yield sql.sa_sql("enqueue", schema), params).first()
    if row is None:
        # The conflicting row was committed by another transaction after this statement's
        # snapshot was taken; a fresh statement sees it.
        found = (yield sql.sa_sql("find_by_key", schema), {"kalit": key}).scalar_one()
        return int(found), False
    return int(row[0]), bool(row[1])


def cancel(*, schema: str, keys: Sequence[str]) -> Steps:
    """Delete unsent messages by key (pending, claimed or failed); sent rows stay."""
    if not keys:
        return 0
    result = yield sql.sa_sql("cancel", schema), {"keys": list(keys)}
    return int(result.rowcount)


def update_pending(*, schema: str, key: str, payload: Mapping[str, Any]) -> Steps:
    """Replace the payload of an unsent message; False if there is none (or it was sent)."""
    params = {"kalit": key, "payload": json.dumps(payload)}
    result = yield sql.sa_sql("update_pending", schema), params
    return bool(result.rowcount)


def sent_keys(*, schema: str, keys: Sequence[str]) -> Steps:
    """Which of ``keys`` name a message the outbox sent (its sent marker exists)."""
    if not keys:
        return []
    result = yield sql.sa_sql("sent_keys", schema), {"keys": list(keys)}
    found = {str(key) for key in result.scalars()}
    return [key for key in keys if key in found]
