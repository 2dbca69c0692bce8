"""The operator's statements: read messages, replay failures, and the web page's queries.

Run through SQLAlchemy on a sync connection or session, in the caller's transaction.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from sqlalchemy import Row, RowMapping

from outbox.payload import UnreadablePayload, read_json
from outbox.queries._common import SyncConn, _execute
from outbox.schema import DEFAULT_QUEUE
from outbox.states import FailureCode, State
from outbox.vocabulary import entry_key, select

# --- operator commands ---------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class SentMarker:
    chat_id: int
    message_id: int  # Telegram's id of the delivered message
    sent_at: datetime
    message_ids: tuple[int, ...] = ()  # an album's messages (message_id is the first)


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
    error_code: str | None = None  # xato_turi: a FailureCode; None before outbox_0004
    failed_at: datetime | None = None  # xato_vaqti: when it went to xato (failed rows only)
    batch: str | None = None  # partiya: the broadcast it belongs to (outbox_0006)
    priority: int = 0  # ustuvorlik: higher goes first within the bot's budget
    earliest: datetime | None = None  # eng_erta: may go from then (its window opens)
    expires_at: datetime | None = None  # eskirish: never sent after then
    bot: str | None = None  # the public id of the bot that sends it (outbox_0011)

    @property
    def method(self) -> str:
        """The Bot API method the payload names (absent: sendMessage)."""
        found = self.payload.get("method") if isinstance(self.payload, dict) else None
        return found if isinstance(found, str) else "sendMessage"

    @property
    def original(self) -> str | None:
        """A follow-up's original: the key of the message it acts on (payload.message_key)."""
        found = self.payload.get("message_key") if isinstance(self.payload, dict) else None
        return found if isinstance(found, str) else None


def _marker(fields: RowMapping) -> SentMarker | None:
    """The sent marker of a row read with ``_MARKER_COLUMNS`` (None without one)."""
    if fields["marker_message_id"] is None:
        return None
    return SentMarker(
        int(fields["marker_chat_id"]),
        int(fields["marker_message_id"]),
        fields["marker_sent_at"],
        tuple(fields["marker_message_ids"] or ()),
    )


def _history(text: str) -> list[Any]:
    history = read_json(text)
    if isinstance(history, UnreadablePayload):
        return [{entry_key("error"): f"tarix is unreadable: {history.reason}"}]
    return history if isinstance(history, list) else [history]


def _message(row: Row[Any]) -> Message:
    """A row of ``_MESSAGE_COLUMNS``, read by name: the select list's order does not matter."""
    fields = row._mapping
    return Message(
        id=fields["id"],
        kind=fields["kind"],
        key=fields["key"],
        payload=read_json(fields["payload"]),
        state=fields["state"],
        attempts=fields["attempts"],
        next_attempt_at=fields["next_attempt_at"],
        claimed_at=fields["claimed_at"],
        last_error=fields["last_error"],
        history=_history(fields["history"]),
        created_at=fields["created_at"],
        updated_at=fields["updated_at"],
        marker=_marker(fields),
        queue=fields["queue"],
        error_code=fields["error_code"],
        failed_at=fields["failed_at"],
        batch=fields["batch"],
        priority=fields["priority"],
        earliest=fields["earliest"],
        expires_at=fields["expires_at"],
        bot=fields["bot"],
    )


# Times as NULL where the row holds +-infinity (see Message).
_FINITE = "CASE WHEN isfinite({0}) THEN {0} END"

# The key's sent marker, from ``y`` (yuborilgan joined on the key).
_MARKER_COLUMNS = """y.chat_id AS marker_chat_id, y.message_id AS marker_message_id,
    y.yuborilgan_vaqt AS marker_sent_at, y.message_ids AS marker_message_ids"""

# When a failed row failed: xato_vaqti, or for a row put in xato by hand, its last change.
_FAILED_AT = "CASE WHEN o.holat = {failed} THEN coalesce(o.xato_vaqti, o.yangilangan) END"

# Payload and tarix come as text, decoded with a fallback (read_json): any row can be shown.
_MESSAGE_COLUMNS = f"""
    {select("o", "id", "kind", "queue", "key", "state", "attempts", "last_error", "error_code",
            "batch", "priority", "bot",
            payload="{}::text", history="{}::text", next_attempt_at=_FINITE,
            claimed_at=_FINITE, created_at=_FINITE, updated_at=_FINITE, failed_at=_FINITE,
            earliest=_FINITE, expires_at=_FINITE)},
    {_MARKER_COLUMNS}
"""  # fmt: skip

_LIST_MESSAGES = f"""
SELECT {_MESSAGE_COLUMNS}
FROM {{outbox}} o LEFT JOIN {{yuborilgan}} y ON y.kalit = o.kalit
WHERE (CAST(:holat AS text) IS NULL OR o.holat = CAST(:holat AS text))
  AND (CAST(:tur AS text) IS NULL OR o.tur = CAST(:tur AS text))
  AND (CAST(:navbat AS text) IS NULL OR o.navbat = CAST(:navbat AS text))
  AND (CAST(:ustuvorlik AS smallint) IS NULL OR o.ustuvorlik = CAST(:ustuvorlik AS smallint))
  AND (CAST(:bot AS text) IS NULL OR o.bot = CAST(:bot AS text))
  AND (CAST(:since AS float8) IS NULL OR ({_FAILED_AT}) >= now() - make_interval(secs => :since))
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
    failed_within_seconds: float | None = None,
    queue: str | None = None,
    priority: int | None = None,
    bot: str | None = None,
) -> list[Message]:
    """Newest first, optionally only one state, kind, queue, priority and/or bot, and/or failed
    (gone to xato, ``xato_vaqti``) within the last ``failed_within_seconds``: only failed rows
    then.
    """
    params = {
        "holat": state,
        "tur": kind,
        "limit": limit,
        "since": failed_within_seconds,
        "navbat": queue,
        "ustuvorlik": priority,
        "bot": bot,
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
    # A follow-up refused because its original was never sent: the original's key and what it
    # is ('xato', or None when no message has that key).
    original: str | None = None
    original_state: str | None = None


# A follow-up's original (payload.message_key): 'sent' when its marker exists, else its row's
# state, NULL when no message has the key. A follow-up is replayed only while its original may
# still be sent: the relay would fail it again at once otherwise.
_ORIGINAL_COLUMNS = """o.payload ->> 'message_key' AS original,
    CASE WHEN o.payload ? 'message_key' THEN coalesce(
        (SELECT 'sent' FROM {yuborilgan} w WHERE w.kalit = o.payload ->> 'message_key'),
        (SELECT w.holat FROM {outbox} w WHERE w.kalit = o.payload ->> 'message_key')) END
        AS original_state"""

# Replay happens in one transaction: lock the rows, decide, then change them. The lock keeps
# the state seen by the decision until the change commits (relays only ever touch pending and
# claimed rows, but a second operator may replay the same rows at the same time: they wait
# here, then see the row pending and are refused). Locking in id order avoids deadlocks
# between two bulk replays.
_LOCK_FOR_REPLAY = f"""
SELECT o.id AS id, o.holat AS state, o.kalit AS key, {_MARKER_COLUMNS}, {_ORIGINAL_COLUMNS}
FROM {{outbox}} o LEFT JOIN {{yuborilgan}} y ON y.kalit = o.kalit
WHERE o.id = ANY(CAST(:ids AS bigint[]))
ORDER BY o.id
FOR UPDATE OF o
"""

_LOCK_FAILED_FOR_REPLAY = f"""
SELECT o.id AS id, o.holat AS state, o.kalit AS key, {_MARKER_COLUMNS}, {_ORIGINAL_COLUMNS}
FROM {{outbox}} o LEFT JOIN {{yuborilgan}} y ON y.kalit = o.kalit
WHERE o.holat = {{failed}}
  AND (CAST(:tur AS text) IS NULL OR o.tur = CAST(:tur AS text))
  AND (CAST(:navbat AS text) IS NULL OR o.navbat = CAST(:navbat AS text))
  AND (CAST(:ustuvorlik AS smallint) IS NULL OR o.ustuvorlik = CAST(:ustuvorlik AS smallint))
  AND (CAST(:bot AS text) IS NULL OR o.bot = CAST(:bot AS text))
  AND (CAST(:since AS float8) IS NULL OR ({_FAILED_AT}) >= now() - make_interval(secs => :since))
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
    SET holat = {pending},
        urinish = 0,
        keyingi_urinish = now(),
        -- Sent now: its window is over, and an expiry that has passed is lifted (the operator
        -- asked for it; one still ahead stays).
        eng_erta = NULL,
        eskirish = CASE WHEN o.eskirish > now() THEN o.eskirish END,
        band_vaqti = NULL,
        egasi = NULL,
        yakka = false,
        oxirgi_xato = NULL,
        xato_turi = NULL,
        xato_vaqti = NULL,
        tarix = o.tarix || jsonb_build_array(jsonb_strip_nulls(jsonb_build_object(
            'vaqt', now(),
            'urinish', o.urinish,
            'hodisa', CASE WHEN :force THEN 'replay --force' ELSE 'replay' END,
            'oxirgi_xato', o.oxirgi_xato,
            'xato_turi', o.xato_turi,
            'yuborilgan', (SELECT to_jsonb(y) - 'kalit' FROM {yuborilgan} y
                           WHERE :force AND y.kalit = o.kalit)))),
        yangilangan = now()
    WHERE o.id = ANY(CAST(:ids AS bigint[])) AND o.holat = {failed}
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
    priority: int | None = None,
    bot: str | None = None,
) -> list[ReplayResult]:
    """Move failed rows back to the queue: the given ids, or (``ids=None``) every xato row
    matching ``kind``, ``queue``, ``priority`` and ``failed_within_seconds``. A row whose key
    has a sent marker is refused unless ``force``. Runs in the caller's transaction; the caller
    commits.
    """
    if ids is None:
        params: dict[str, Any] = {
            "tur": kind,
            "since": failed_within_seconds,
            "navbat": queue,
            "ustuvorlik": priority,
            "bot": bot,
        }
        found = _execute(conn, schema, _LOCK_FAILED_FOR_REPLAY, params).fetchall()
        wanted = [int(row.id) for row in found]
    else:
        wanted = list(dict.fromkeys(ids))
        found = _execute(conn, schema, _LOCK_FOR_REPLAY, {"ids": wanted}).fetchall()
    seen = {int(row.id): (row.state, _marker(row._mapping)) for row in found}
    accepted = [
        row_id
        for row_id, (state, marker) in seen.items()
        if state == State.FAILED and (marker is None or force)
    ]
    # A follow-up goes back only with an original that may still be sent: sent, waiting, or
    # replayed by this same call.
    replaying = {row.key for row in found if int(row.id) in accepted}
    stranded = {
        int(row.id): (row.original, row.original_state)
        for row in found
        if row.original is not None
        and row.original_state not in ("sent", State.PENDING, State.IN_PROGRESS)
        and row.original not in replaying
    }
    accepted = [row_id for row_id in accepted if row_id not in stranded]
    replayed: set[int] = set()
    if accepted:
        rows = _execute(conn, schema, _REPLAY, {"ids": accepted, "force": force}).fetchall()
        replayed = {int(row[0]) for row in rows}
    results = []
    for row_id in wanted:
        state, marker = seen.get(row_id, (None, None))
        original, original_state = stranded.get(row_id, (None, None))
        results.append(
            ReplayResult(row_id, row_id in replayed, state, marker, original, original_state)
        )
    return results


_COUNT_FAILED = "SELECT count(*) FROM {outbox} WHERE holat = {failed}"


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
# yangilangan, failed ones through theirs and counted by when they failed (xato_vaqti).
_FINISHED_PER_MINUTE = f"""
SELECT floor(extract(epoch FROM now() - f.at) / 60)::int, f.holat, count(*)
FROM (SELECT o.holat, CASE WHEN o.holat = {{done}} THEN o.yangilangan ELSE {_FAILED_AT} END AS at
      FROM {{outbox}} o
      WHERE (o.holat = {{done}}
             AND o.yangilangan > now() - make_interval(mins => CAST(:minutes AS int)))
         OR (o.holat = {{failed}}
             AND {_FAILED_AT} > now() - make_interval(mins => CAST(:minutes AS int)))) f
GROUP BY 1, 2
"""


def finished_per_minute(conn: SyncConn, *, schema: str, minutes: int = 60) -> Activity:
    delivered, failed = [0] * minutes, [0] * minutes
    for ago, state, count in _execute(conn, schema, _FINISHED_PER_MINUTE, {"minutes": minutes}):
        slot = minutes - 1 - min(max(int(ago), 0), minutes - 1)
        (delivered if state == State.DONE else failed)[slot] += int(count)
    return Activity(delivered, failed)


_FAILED_KINDS = "SELECT DISTINCT tur FROM {outbox} WHERE holat = {failed} ORDER BY tur"


def failed_kinds(conn: SyncConn, *, schema: str) -> list[str]:
    """The kinds (tur) among failed rows, for the page's filter."""
    return [str(kind) for (kind,) in _execute(conn, schema, _FAILED_KINDS)]


_FAILED_PRIORITIES = (
    "SELECT DISTINCT ustuvorlik FROM {outbox} WHERE holat = {failed} ORDER BY ustuvorlik DESC"
)


def failed_priorities(conn: SyncConn, *, schema: str) -> list[int]:
    """The priorities (ustuvorlik) among failed rows, highest first, for the page's filter."""
    return [int(priority) for (priority,) in _execute(conn, schema, _FAILED_PRIORITIES)]


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
CANCELLED_BY_OPERATOR = """
UPDATE {outbox}
SET holat = {failed},
    oxirgi_xato = 'cancelled by operator',
    xato_turi = :code,
    xato_vaqti = now(),
    tarix = tarix || jsonb_build_array(jsonb_build_object(
        'vaqt', now(), 'urinish', urinish, 'hodisa', 'cancelled by operator',
        'xato_turi', CAST(:code AS text))),
    yangilangan = now()
"""
_CANCEL_BY_OPERATOR = CANCELLED_BY_OPERATOR + "WHERE id = :id AND holat = {pending}\nRETURNING id\n"


def cancel_by_operator(conn: SyncConn, message_id: int, *, schema: str) -> bool:
    """kutmoqda -> xato ('cancelled by operator'); False if the row is not waiting."""
    params = {"id": message_id, "code": FailureCode.CANCELLED.value}
    return _execute(conn, schema, _CANCEL_BY_OPERATOR, params).first() is not None
