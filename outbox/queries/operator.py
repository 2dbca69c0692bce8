"""The operator's reads and actions on messages: list, show, search, replay, cancel, and the
web page's activity and filters. Operations of named queries (``outbox/sql/operator.sql``)."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, fields, replace
from datetime import datetime
from typing import Any

from outbox.payload import UnreadablePayload, read_json
from outbox.queries._common import Reading, operation
from outbox.queries.registry import MISSED_BEATS
from outbox.schema import DEFAULT_QUEUE, notify_channel
from outbox.states import State
from outbox.vocabulary import entry_key

__all__ = [
    "Activity",
    "Hold",
    "Message",
    "ReplayResult",
    "SentMarker",
    "cancel_waiting",
    "count_failed",
    "failed_filters",
    "finished_per_minute",
    "get_message",
    "list_messages",
    "replay",
    "search_messages",
]


@dataclass(frozen=True, slots=True)
class Hold:
    """One thing a pending row waits for (``message_holds``): ``reason`` is 'earlier' (an
    earlier message of its chat, ``row_id``), 'original' (a follow-up's original, ``row_id``),
    'pause', 'flood' (its bot's 429 pause), 'chat' (its chat's next free moment), 'window',
    'quiet' (its chat's quiet hours, ``detail`` their zone) or 'due' (its own time)."""

    reason: str
    row_id: int | None = None
    detail: str | None = None  # the earlier row's state, the pause's scope, the chat...
    at: datetime | None = None  # until when, as far as the database knows
    opens: datetime | None = None  # a window's start


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
    # None where the row holds +-infinity (written by hand): Python has no such datetime.
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
    traceparent: str | None = None  # the enqueuing span's W3C trace context (outbox_0015)
    holds: tuple[Hold, ...] = ()  # what holds it, when pending (get_message only)

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


def _marker(row: Any) -> SentMarker | None:
    """The sent marker of a row with the ``marker_*`` columns (None without one)."""
    if row.marker_message_id is None:
        return None
    return SentMarker(
        int(row.marker_chat_id),
        int(row.marker_message_id),
        row.marker_sent_at,
        tuple(row.marker_message_ids or ()),
    )


def _history(text: str) -> list[Any]:
    history = read_json(text)
    if isinstance(history, UnreadablePayload):
        return [{entry_key("error"): f"tarix is unreadable: {history.reason}"}]
    return history if isinstance(history, list) else [history]


# The fields of a Message that the ``messages`` query gives as they are (the others are read).
_AS_SELECTED = tuple(
    f.name for f in fields(Message) if f.name not in {"payload", "history", "marker", "holds"}
)


def _message(row: Any) -> Message:
    """A row of the ``messages`` query, read by name: the select list's order does not matter."""
    return Message(
        **{name: getattr(row, name) for name in _AS_SELECTED},
        payload=read_json(row.payload),
        history=_history(row.history),
        marker=_marker(row),
    )


_NO_FILTER: dict[str, Any] = dict.fromkeys(
    ("id", "holat", "tur", "navbat", "ustuvorlik", "bot", "since", "search", "number")
)


def _messages(schema: str, limit: int, **filters: Any) -> Reading[list[Message]]:
    rows = yield "messages", schema, {**_NO_FILTER, **filters, "limit": limit}
    return [_message(row) for row in rows]


@operation
def list_messages(
    *,
    schema: str,
    state: str | None = None,
    kind: str | None = None,
    limit: int = 50,
    failed_within_seconds: float | None = None,
    queue: str | None = None,
    priority: int | None = None,
    bot: str | None = None,
) -> Reading[list[Message]]:
    """Newest first, optionally only one state, kind, queue, priority and/or bot, and/or failed
    (gone to xato) within the last ``failed_within_seconds``: only failed rows then."""
    return (
        yield from _messages(
            schema,
            limit,
            holat=state,
            tur=kind,
            since=failed_within_seconds,
            navbat=queue,
            ustuvorlik=priority,
            bot=bot,
        )
    )


@operation
def get_message(message_id: int, *, schema: str) -> Reading[Message | None]:
    """One message; a pending one with what holds it back (``Message.holds``)."""
    found = yield from _messages(schema, 1, id=message_id)
    if not found:
        return None
    if found[0].state != State.PENDING:
        return found[0]
    rows = yield "message_holds", schema, {"id": message_id, "missed_beats": MISSED_BEATS}
    holds = tuple(Hold(r.reason, r.row_id, r.detail, r.at, r.opens) for r in rows)
    return replace(found[0], holds=holds)


@operation
def search_messages(text: str, *, schema: str, limit: int = 100) -> Reading[list[Message]]:
    """Messages in any state whose key is or starts with ``text``, or, for a number, whose id
    or chat id it is; newest first. Chat ids are not indexed: a search reads the table."""
    text = text.strip()
    try:
        number: int | None = int(text)
    except ValueError:
        number = None
    if number is not None and not -(2**63) <= number < 2**63:
        number = None  # beyond bigint: no id or chat id can be it, only a key
    return (yield from _messages(schema, limit, search=text, number=number))


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
    superseded: bool = False  # done without a request: a newer edit or a delete made it pointless
    # Refused because its chat is gone for its bot (bloklangan) until unblocked: the chat, and
    # the row's bot (None: the rows naming none).
    blocked_chat: str | None = None
    bot: str | None = None


@operation
def replay(
    ids: Sequence[int] | None = None,
    *,
    schema: str,
    force: bool = False,
    kind: str | None = None,
    failed_within_seconds: float | None = None,
    queue: str | None = None,
    priority: int | None = None,
    bot: str | None = None,
    all_or_none: bool = False,
) -> Reading[list[ReplayResult]]:
    """Move failed rows back to the queue: the given ids, or (``ids=None``) every xato row
    matching the filters. A row whose key has a sent marker is refused unless ``force``; a
    row whose chat is gone for its bot (``bloklangan``) is refused until the chat is
    unblocked, and with ``all_or_none`` (given ids only) then none goes back."""
    wanted = None if ids is None else list(dict.fromkeys(ids))
    params = {
        "ids": wanted,
        "tur": kind,
        "since": failed_within_seconds,
        "navbat": queue,
        "ustuvorlik": priority,
        "bot": bot,
    }
    found = yield "lock_for_replay", schema, params
    if wanted is None:
        wanted = [int(row.id) for row in found]
    seen = {int(row.id): (row.state, _marker(row)) for row in found}
    superseded = {int(row.id) for row in found if row.superseded}
    accepted = [
        row_id
        for row_id, (state, marker) in seen.items()
        if state == State.FAILED and (marker is None or force)
    ]
    # A follow-up goes back only with an original that may still be sent: sent, waiting, or
    # replayed by this same call (the relay would fail it again at once otherwise).
    replaying = {row.key for row in found if int(row.id) in accepted}
    stranded = {
        int(row.id): (row.original, row.original_state)
        for row in found
        if row.original is not None
        and row.original_state not in ("sent", State.PENDING, State.IN_PROGRESS)
        and row.original not in replaying
    }
    blocked = {
        int(row.id): (row.blocked_chat, row.bot)
        for row in found
        if row.blocked_chat and row.state == State.FAILED
    }
    accepted = [row_id for row_id in accepted if row_id not in stranded and row_id not in blocked]
    if all_or_none and ids is not None and any(row_id in blocked for row_id in wanted):
        accepted = []  # the API's replay: a refused chat refuses the call (outbox.api.replay)
    replayed: set[int] = set()
    if accepted:
        params = {"ids": accepted, "force": force, "channel": notify_channel(schema)}
        replayed = {int(row.id) for row in (yield "replay", schema, params)}
    return [
        ReplayResult(
            row_id,
            row_id in replayed,
            *seen.get(row_id, (None, None)),
            *stranded.get(row_id, (None, None)),
            row_id in superseded,
            *blocked.get(row_id, (None, None)),
        )
        for row_id in wanted
    ]


@operation
def cancel_waiting(
    *, schema: str, message_id: int | None = None, batch: str | None = None
) -> Reading[int]:
    """kutmoqda -> xato ('cancelled by operator', replayable) for one message or a whole
    batch's waiting rows; how many moved."""
    rows = yield "cancel_waiting", schema, {"id": message_id, "partiya": batch}
    return int(rows[0].cancelled)


@operation
def count_failed(*, schema: str) -> Reading[int]:
    rows = yield "count_failed", schema, {}
    return int(rows[0].failed)


@dataclass(frozen=True, slots=True)
class Activity:
    """Rows that reached bajarildi and xato, per minute, oldest minute first."""

    delivered: list[int]
    failed: list[int]


@operation
def finished_per_minute(*, schema: str, minutes: int = 60) -> Reading[Activity]:
    delivered, failed = [0] * minutes, [0] * minutes
    for row in (yield "finished_per_minute", schema, {"minutes": minutes}):
        slot = minutes - 1 - min(max(int(row.ago), 0), minutes - 1)
        (delivered if row.state == State.DONE else failed)[slot] += int(row.finished)
    return Activity(delivered, failed)


@operation
def failed_filters(*, schema: str) -> Reading[tuple[list[str], list[int]]]:
    """The kinds (sorted) and priorities (highest first) among failed rows."""
    rows = yield "failed_filters", schema, {}
    kinds = sorted({str(row.kind) for row in rows})
    priorities = sorted({int(row.priority) for row in rows}, reverse=True)
    return kinds, priorities
