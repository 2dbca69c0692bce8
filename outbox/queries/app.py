"""What the host app calls inside its own transaction: enqueue, cancel, update_pending.

Each is an operation (a generator of statements, see ``run_sync`` and ``run_async``) that the
app's SQLAlchemy session or connection runs, sync or async, with any driver: ``text()``
statements with ``:name`` parameters and explicit casts. None of them commits.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from datetime import datetime
from typing import Any, NamedTuple

from outbox.queries._common import Steps, _text
from outbox.schema import DEFAULT_QUEUE
from outbox.tracing import NO_TRACE, TraceContext

# --- enqueue: runs inside the caller's transaction, never commits ---------------------------


class Lane(NamedTuple):
    """A message's place among its bot's others (outbox_0009's columns)."""

    priority: int = 0  # ustuvorlik
    earliest: datetime | None = None  # eng_erta
    expires_at: datetime | None = None  # eskirish
    # A place in its chat's order (tartib, outbox_0016): False lets it go as soon as it can.
    ordered: bool = True


_ENQUEUE = """
WITH inserted AS (
    INSERT INTO {outbox} (tur, kalit, payload, keyingi_urinish, navbat, partiya, ustuvorlik,
                          eng_erta, eskirish, bot, traceparent, tracestate, tartib)
    VALUES (:tur, :kalit, CAST(:payload AS jsonb),
            -- A follow-up is due no sooner than its original, if that still waits (nor
            -- later than its own expiry: the claim then fails it as expired).
            least(greatest(coalesce(CAST(:run_at AS timestamptz), now()),
                           CASE WHEN CAST(:payload AS jsonb) ? 'message_key' THEN
                               (SELECT w.keyingi_urinish FROM {outbox} w
                                WHERE w.kalit = CAST(:payload AS jsonb) ->> 'message_key'
                                  AND w.holat = {pending}) END),
                  CAST(:eskirish AS timestamptz)),
            :navbat, CAST(:partiya AS text), :ustuvorlik, CAST(:eng_erta AS timestamptz),
            CAST(:eskirish AS timestamptz), CAST(:bot AS text), CAST(:traceparent AS text),
            CAST(:tracestate AS text),
            -- NULL: the row trigger gives it its first due time; 'infinity': no place.
            CASE WHEN CAST(:ordered AS boolean) THEN NULL ELSE CAST('infinity' AS timestamptz) END)
    ON CONFLICT (kalit) DO NOTHING
    RETURNING id
)
SELECT id, true FROM inserted
UNION ALL
SELECT id, false FROM {outbox} WHERE kalit = :kalit AND NOT EXISTS (SELECT 1 FROM inserted)
"""

# A claim takes a follow-up only once its original is done (queries.claim); due no sooner than
# the original, it does not keep relays asking (or a drain waiting) meanwhile.
_FIND_BY_KEY = "SELECT id FROM {outbox} WHERE kalit = :kalit"


def enqueue(
    *,
    schema: str,
    kind: str,
    key: str,
    payload: Mapping[str, Any],
    run_at: datetime | None,
    queue: str = DEFAULT_QUEUE,
    batch: str | None = None,
    lane: Lane = Lane(),  # noqa: B008 - an immutable tuple
    bot: str | None = None,
    trace: TraceContext = NO_TRACE,
) -> Steps:
    """Insert one message; the result is ``(id, created)``. An existing key returns its row.
    ``trace``: the enqueuing span's context, kept for the relay's span of the send."""
    params = {
        "ustuvorlik": lane.priority,
        "eng_erta": lane.earliest,
        "eskirish": lane.expires_at,
        "ordered": lane.ordered,
        "tur": kind,
        "kalit": key,
        "payload": json.dumps(payload),
        "run_at": run_at,
        "navbat": queue,
        "partiya": batch,
        "bot": bot,
        "traceparent": trace.traceparent,
        "tracestate": trace.tracestate,
    }
    row = (yield _text(_ENQUEUE, schema), params).first()
    if row is None:
        # The conflicting row was committed by another transaction after this statement's
        # snapshot was taken; a fresh statement sees it.
        found = (yield _text(_FIND_BY_KEY, schema), {"kalit": key}).scalar_one()
        return int(found), False
    return int(row[0]), bool(row[1])


# Claimed rows go too: a relay that waited before sending asks whether its claim still exists
# (still_claimed). Failed rows go so that a later bulk replay cannot send a withdrawn message.
_CANCEL = """
DELETE FROM {outbox}
WHERE kalit = ANY(CAST(:keys AS text[])) AND holat IN ({pending}, {in_progress}, {failed})
"""


def cancel(*, schema: str, keys: Sequence[str]) -> Steps:
    """Delete unsent messages by key (pending, claimed or failed); sent rows stay."""
    if not keys:
        return 0
    result = yield _text(_CANCEL, schema), {"keys": list(keys)}
    return int(result.rowcount)


# Claimed and failed rows change too: a relay sends from the copy it claimed, so a message
# being sent right now goes out as it was, and any later attempt (a retry, a replay) sends the
# new text.
_UPDATE_PENDING = """
UPDATE {outbox} SET payload = CAST(:payload AS jsonb), yangilangan = now()
WHERE kalit = :kalit AND holat IN ({pending}, {in_progress}, {failed})
"""


def update_pending(*, schema: str, key: str, payload: Mapping[str, Any]) -> Steps:
    """Replace the payload of an unsent message; False if there is none (or it was sent)."""
    params = {"kalit": key, "payload": json.dumps(payload)}
    result = yield _text(_UPDATE_PENDING, schema), params
    return bool(result.rowcount)


# A message the outbox sent has a sent marker: a follow-up (an edit, a delete) can act on it.
_SENT_KEYS = "SELECT kalit FROM {yuborilgan} WHERE kalit = ANY(CAST(:keys AS text[]))"


def sent_keys(*, schema: str, keys: Sequence[str]) -> Steps:
    """Which of ``keys`` name a message the outbox sent (its sent marker exists)."""
    if not keys:
        return []
    result = yield _text(_SENT_KEYS, schema), {"keys": list(keys)}
    found = {str(key) for key in result.scalars()}
    return [key for key in keys if key in found]
