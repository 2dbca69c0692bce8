"""The operator's statements: read messages, replay failures, and the web page's queries.

Run through SQLAlchemy on a sync connection or session, in the caller's transaction.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from outbox.payload import UnreadablePayload, read_json
from outbox.queries._common import SyncConn, _execute
from outbox.schema import DEFAULT_QUEUE

# --- operator commands ---------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class SentMarker:
    chat_id: int
    message_id: int  # Telegram's id of the delivered message
    sent_at: datetime


@dataclass(frozen=True, slots=True)
class Message:
    """One outbox row in full, with the sent marker of its key if there is one."""

    id: int
    kind: str
    key: str
    payload: Any  # decoded JSON; an UnreadablePayload when Python cannot decode it
    state: str
    attempts: int
    # Times are None when the row holds +-infinity there (written by hand): Python has no such
    # datetime, and reading a row must not fail on one.
    next_attempt_at: datetime | None
    claimed_at: datetime | None
    last_error: str | None
    history: list[Any]
    created_at: datetime | None
    updated_at: datetime | None
    marker: SentMarker | None
    queue: str = DEFAULT_QUEUE  # navbat: the bot that sends it


def _marker(chat_id: Any, message_id: Any, sent_at: Any) -> SentMarker | None:
    return None if message_id is None else SentMarker(int(chat_id), int(message_id), sent_at)


def _history(text: str) -> list[Any]:
    history = read_json(text)
    if isinstance(history, UnreadablePayload):
        return [{"xato": f"tarix is unreadable: {history.reason}"}]
    return history if isinstance(history, list) else [history]


def _message(row: Sequence[Any]) -> Message:
    (
        row_id, kind, queue, key, payload, state, attempts, run_at, claimed_at, error, history,
        created_at, updated_at, *marker,
    ) = row  # fmt: skip
    return Message(
        id=row_id,
        kind=kind,
        key=key,
        payload=read_json(payload),
        state=state,
        attempts=attempts,
        next_attempt_at=run_at,
        claimed_at=claimed_at,
        last_error=error,
        history=_history(history),
        created_at=created_at,
        updated_at=updated_at,
        marker=_marker(*marker),
        queue=queue,
    )


def _finite(column: str) -> str:
    return f"CASE WHEN isfinite({column}) THEN {column} END"


# Payload and tarix come as text, decoded with a fallback (read_json): any row can be shown.
_MESSAGE_COLUMNS = f"""
    o.id, o.tur, o.navbat, o.kalit, o.payload::text, o.holat, o.urinish,
    {_finite("o.keyingi_urinish")}, {_finite("o.band_vaqti")}, o.oxirgi_xato, o.tarix::text,
    {_finite("o.yaratilgan")}, {_finite("o.yangilangan")}, y.chat_id, y.message_id,
    y.yuborilgan_vaqt
"""

_LIST_MESSAGES = f"""
SELECT {_MESSAGE_COLUMNS}
FROM {{outbox}} o LEFT JOIN {{yuborilgan}} y ON y.kalit = o.kalit
WHERE (CAST(:holat AS text) IS NULL OR o.holat = CAST(:holat AS text))
  AND (CAST(:tur AS text) IS NULL OR o.tur = CAST(:tur AS text))
  AND (CAST(:navbat AS text) IS NULL OR o.navbat = CAST(:navbat AS text))
  AND (CAST(:since AS float8) IS NULL OR o.yangilangan >= now() - make_interval(secs => :since))
ORDER BY o.id DESC
LIMIT :limit
"""


def list_messages(
    conn: SyncConn,
    *,
    schema: str,
    state: str | None = None,
    kind: str | None = None,
    limit: int = 50,
    changed_within_seconds: float | None = None,
    queue: str | None = None,
) -> list[Message]:
    """Newest first, optionally only one state and/or kind and/or queue, and/or changed (for a
    failed row: failed) within the last ``changed_within_seconds``."""
    params = {
        "holat": state,
        "tur": kind,
        "limit": limit,
        "since": changed_within_seconds,
        "navbat": queue,
    }
    return [_message(row) for row in _execute(conn, schema, _LIST_MESSAGES, params).fetchall()]


_GET_MESSAGE = f"""
SELECT {_MESSAGE_COLUMNS}
FROM {{outbox}} o LEFT JOIN {{yuborilgan}} y ON y.kalit = o.kalit
WHERE o.id = :id
"""


def get_message(conn: SyncConn, message_id: int, *, schema: str) -> Message | None:
    row = _execute(conn, schema, _GET_MESSAGE, {"id": message_id}).first()
    return None if row is None else _message(row)


@dataclass(frozen=True, slots=True)
class ReplayResult:
    id: int
    replayed: bool
    state: str | None  # the state found before the replay; None: no message with this id
    marker: SentMarker | None  # the key's sent marker (deleted when forced)


# Replay happens in one transaction: lock the rows, decide, then change them. The lock keeps
# the state seen by the decision until the change commits (relays only ever touch pending and
# claimed rows, but a second operator may replay the same rows at the same time: they wait
# here, then see the row pending and are refused). Locking in id order avoids deadlocks
# between two bulk replays.
_LOCK_FOR_REPLAY = """
SELECT o.id, o.holat, y.chat_id, y.message_id, y.yuborilgan_vaqt
FROM {outbox} o LEFT JOIN {yuborilgan} y ON y.kalit = o.kalit
WHERE o.id = ANY(CAST(:ids AS bigint[]))
ORDER BY o.id
FOR UPDATE OF o
"""

_LOCK_FAILED_FOR_REPLAY = """
SELECT o.id, o.holat, y.chat_id, y.message_id, y.yuborilgan_vaqt
FROM {outbox} o LEFT JOIN {yuborilgan} y ON y.kalit = o.kalit
WHERE o.holat = 'xato'
  AND (CAST(:tur AS text) IS NULL OR o.tur = CAST(:tur AS text))
  AND (CAST(:navbat AS text) IS NULL OR o.navbat = CAST(:navbat AS text))
  AND (CAST(:since AS float8) IS NULL OR o.yangilangan >= now() - make_interval(secs => :since))
ORDER BY o.id
FOR UPDATE OF o
"""

# The failure stays in tarix, with an entry for the replay itself (and, when forced, the
# marker that was removed). A forced replay deletes the key's marker in the same transaction:
# a relay completes a row whose key has a marker without sending it. The NOTIFY reaches the
# listening relays at commit, so the rows go out at once rather than at the next poll.
_REPLAY = """
WITH replayed AS (
    UPDATE {outbox} o
    SET holat = 'kutmoqda',
        urinish = 0,
        keyingi_urinish = now(),
        band_vaqti = NULL,
        egasi = NULL,
        yakka = false,
        oxirgi_xato = NULL,
        tarix = o.tarix || jsonb_build_array(jsonb_strip_nulls(jsonb_build_object(
            'vaqt', now(),
            'urinish', o.urinish,
            'hodisa', CASE WHEN :force THEN 'replay --force' ELSE 'replay' END,
            'oxirgi_xato', o.oxirgi_xato,
            'yuborilgan', (SELECT to_jsonb(y) - 'kalit' FROM {yuborilgan} y
                           WHERE :force AND y.kalit = o.kalit)))),
        yangilangan = now()
    WHERE o.id = ANY(CAST(:ids AS bigint[])) AND o.holat = 'xato'
    RETURNING o.id, o.kalit
),
forgotten AS (
    DELETE FROM {yuborilgan} y USING replayed r WHERE :force AND y.kalit = r.kalit
)
SELECT r.id, pg_notify('{notify_channel}', '') FROM replayed r
"""


def replay(
    conn: SyncConn,
    ids: Sequence[int] | None = None,
    *,
    schema: str,
    force: bool = False,
    kind: str | None = None,
    failed_within_seconds: float | None = None,
    queue: str | None = None,
) -> list[ReplayResult]:
    """Move failed rows back to the queue: the given ids, or (``ids=None``) every xato row
    matching ``kind`` and ``failed_within_seconds``. A row whose key has a sent marker is
    refused unless ``force``. Runs in the caller's transaction; the caller commits.
    """
    if ids is None:
        params: dict[str, Any] = {"tur": kind, "since": failed_within_seconds, "navbat": queue}
        found = _execute(conn, schema, _LOCK_FAILED_FOR_REPLAY, params).fetchall()
        wanted = [int(row[0]) for row in found]
    else:
        wanted = list(dict.fromkeys(ids))
        found = _execute(conn, schema, _LOCK_FOR_REPLAY, {"ids": wanted}).fetchall()
    seen = {int(row[0]): (row[1], _marker(*row[2:])) for row in found}
    accepted = [
        row_id
        for row_id, (state, marker) in seen.items()
        if state == "xato" and (marker is None or force)
    ]
    replayed: set[int] = set()
    if accepted:
        rows = _execute(conn, schema, _REPLAY, {"ids": accepted, "force": force}).fetchall()
        replayed = {int(row[0]) for row in rows}
    results = []
    for row_id in wanted:
        state, marker = seen.get(row_id, (None, None))
        results.append(ReplayResult(row_id, row_id in replayed, state, marker))
    return results


_COUNT_FAILED = "SELECT count(*) FROM {outbox} WHERE holat = 'xato'"


def count_failed(conn: SyncConn, *, schema: str) -> int:
    return int(_execute(conn, schema, _COUNT_FAILED).scalar_one())


# --- the operator's web page ---------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class Activity:
    """Rows that reached bajarildi and xato, per minute, oldest minute first."""

    delivered: list[int]
    failed: list[int]


# Read from the rows as they stand: a replayed failure leaves the failed count, and retention
# (a week by default) the delivered one. Done rows are found through their partial index on
# yangilangan, failed ones through theirs.
_FINISHED_PER_MINUTE = """
SELECT floor(extract(epoch FROM now() - yangilangan) / 60)::int, holat, count(*)
FROM {outbox}
WHERE holat IN ('bajarildi', 'xato')
  AND yangilangan > now() - make_interval(mins => CAST(:minutes AS int))
GROUP BY 1, 2
"""


def finished_per_minute(conn: SyncConn, *, schema: str, minutes: int = 60) -> Activity:
    delivered, failed = [0] * minutes, [0] * minutes
    for ago, state, count in _execute(conn, schema, _FINISHED_PER_MINUTE, {"minutes": minutes}):
        slot = minutes - 1 - min(max(int(ago), 0), minutes - 1)
        (delivered if state == "bajarildi" else failed)[slot] += int(count)
    return Activity(delivered, failed)


_FAILED_KINDS = "SELECT DISTINCT tur FROM {outbox} WHERE holat = 'xato' ORDER BY tur"


def failed_kinds(conn: SyncConn, *, schema: str) -> list[str]:
    """The kinds (tur) among failed rows, for the page's filter."""
    return [str(kind) for (kind,) in _execute(conn, schema, _FAILED_KINDS)]


# A number may be a row id or a chat id (payload's or the sent marker's); anything else is a
# key or the start of one. Chat ids are not indexed: an operator's search reads the table.
_SEARCH_MESSAGES = f"""
SELECT {_MESSAGE_COLUMNS}
FROM {{outbox}} o LEFT JOIN {{yuborilgan}} y ON y.kalit = o.kalit
WHERE o.kalit = :text
   OR starts_with(o.kalit, :text)
   OR (CAST(:number AS bigint) IS NOT NULL
       AND (o.id = CAST(:number AS bigint)
            OR o.payload ->> 'chat_id' = CAST(:number AS text)
            OR y.chat_id = CAST(:number AS bigint)))
ORDER BY o.id DESC
LIMIT :limit
"""


def search_messages(conn: SyncConn, text: str, *, schema: str, limit: int = 100) -> list[Message]:
    """Messages in any state whose key is or starts with ``text``, or, for a number, whose id
    or chat id it is; newest first."""
    text = text.strip()
    try:
        number: int | None = int(text)
    except ValueError:
        number = None
    if number is not None and not -(2**63) <= number < 2**63:
        number = None  # beyond bigint: no id or chat id can be it, only a key
    params = {"text": text, "number": number, "limit": limit}
    return [_message(row) for row in _execute(conn, schema, _SEARCH_MESSAGES, params)]


# An operator's cancel keeps the row, unlike the app's (which deletes): it moves to xato with
# the reason in oxirgi_xato and tarix, so the page still shows what was withdrawn, by whom and
# when, and a replay undoes it. Only a waiting row: a claimed one may be on its way to Telegram.
_CANCEL_BY_OPERATOR = """
UPDATE {outbox}
SET holat = 'xato',
    oxirgi_xato = 'cancelled by operator',
    tarix = tarix || jsonb_build_array(jsonb_build_object(
        'vaqt', now(), 'urinish', urinish, 'hodisa', 'cancelled by operator')),
    yangilangan = now()
WHERE id = :id AND holat = 'kutmoqda'
RETURNING id
"""


def cancel_by_operator(conn: SyncConn, message_id: int, *, schema: str) -> bool:
    """kutmoqda -> xato ('cancelled by operator'); False if the row is not waiting."""
    return _execute(conn, schema, _CANCEL_BY_OPERATOR, {"id": message_id}).first() is not None
