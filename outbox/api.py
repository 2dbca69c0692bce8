"""What the app calls: enqueue, cancel and change messages in its own transaction, and the
operator's actions (status, the failed list, replay) from Python.

Every function takes the app's SQLAlchemy session or connection, never commits, and works in
the configured schema (``outbox.configure(schema=...)``, ``OUTBOX_SCHEMA``, or ``schema=``).
The ``*_async`` twins take an ``AsyncSession`` or ``AsyncConnection`` (psycopg or asyncpg).
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import Any

from outbox import queries
from outbox.errors import InvalidInput, InvalidPayload, Refused
from outbox.ops.views.message import blocked_refusal
from outbox.payload import MAX_KEY_BYTES, MalformedPayload, check_text, request_of
from outbox.queries import Message, QueueStatus, ReplayResult, SyncConn
from outbox.queries.chats import unblock
from outbox.queries.pause import check_batch_name
from outbox.schema import DEFAULT_QUEUE, checked_queue, resolve_schema
from outbox.states import State
from outbox.tracing import trace_context

__all__ = [
    "Enqueued",
    "bot_status",
    "cancel",
    "cancel_async",
    "enqueue",
    "enqueue_async",
    "failed_messages",
    "get_message",
    "list_messages",
    "queue_status",
    "relays",
    "replay",
    "unblock_chat",
    "unblock_chat_async",
    "unserved_queues",
    "update_pending",
    "update_pending_async",
]

REMINDER = "eslatma"
MIN_PRIORITY, MAX_PRIORITY = queries.claim.MIN_PRIORITY, queries.claim.MAX_PRIORITY
DEFAULT_LEASE_SECONDS = 300.0


@dataclass(frozen=True, slots=True)
class Enqueued:
    id: int
    created: bool  # False: a message with this key already existed and was returned as is


def _checked_payload(payload: Mapping[str, Any]) -> dict[str, Any]:
    """The relay's own payload check, run now so that a mistake fails the app's request."""
    try:
        request_of(payload)
    except MalformedPayload as err:
        raise InvalidPayload(f"outbox payload refused: {err}") from None
    return dict(payload)


def _check_label(value: str, field: str) -> None:
    try:
        check_text(value, field)
    except MalformedPayload as err:
        raise InvalidPayload(f"outbox message refused: {err}") from None
    if len(value.encode()) > MAX_KEY_BYTES:
        raise InvalidPayload(
            f"outbox message refused: {field} takes {len(value.encode())} bytes; "
            f"at most {MAX_KEY_BYTES}"
        )


# The bot column holds at most 20 digits (outbox_0011): Telegram's bot ids are far shorter.
_MAX_BOT_ID = 10**20 - 1


def bot_column(bot: int | str | None) -> str | None:
    """The ``bot`` column for a bot's public id (an int, or its digits); a token is refused
    without being repeated."""
    if bot is None:
        return None
    if isinstance(bot, str) and ":" in bot:
        raise InvalidInput(
            "bot= takes the bot's public id (the digits before the token's colon), never the token"
        )
    if isinstance(bot, str) and bot.isascii() and bot.isdigit():
        bot = int(bot)
    if isinstance(bot, bool) or not isinstance(bot, int) or not 0 < bot <= _MAX_BOT_ID:
        raise InvalidInput("bot= takes the bot's public id, a positive whole number")
    return str(bot)


def _aware(value: object, field: str) -> datetime | None:
    if value is None:
        return None
    if not isinstance(value, datetime):
        raise InvalidInput(f"{field} must be a datetime, got {type(value).__name__}")
    if value.tzinfo is None or value.utcoffset() is None:
        raise InvalidInput(f"{field} must be timezone-aware (a naive time is ambiguous)")
    return value


def _checked_lane(
    *,
    run_at: object,
    priority: object,
    early: object,
    expires_at: object,
    ordered: object = True,
    quiet_hours: object = False,
) -> queries.Lane:
    """The message's place among the bot's others (the table's checks say the same for SQL)."""
    moment = _aware(run_at, "run_at")
    expiry = _aware(expires_at, "expires_at")
    if isinstance(priority, bool) or not isinstance(priority, int):
        raise InvalidInput(f"priority must be a whole number, got {priority!r}")
    if not MIN_PRIORITY <= priority <= MAX_PRIORITY:
        raise InvalidInput(
            f"priority {priority} is out of range: from {MIN_PRIORITY} to {MAX_PRIORITY}"
        )
    earliest = None
    if early is not None:
        if not isinstance(early, timedelta):
            raise InvalidInput(f"early must be a timedelta, got {type(early).__name__}")
        if early < timedelta(0):
            raise InvalidInput(f"early must not be negative, got {early}")
        if moment is None:
            raise InvalidInput("early needs run_at: the moment the message may go early for")
        try:
            earliest = moment - early
        except OverflowError:
            raise InvalidInput(f"early {early} reaches before the year 1") from None
    if expiry is not None:
        if moment is not None and expiry < moment:
            raise InvalidInput(f"expires_at {expiry} is before run_at {moment}")
        if moment is None and expiry <= datetime.now(UTC):
            raise InvalidInput(f"expires_at {expiry} has already passed")
    if not isinstance(ordered, bool):
        raise InvalidInput(f"ordered must be True or False, got {ordered!r}")
    if not isinstance(quiet_hours, bool):
        raise InvalidInput(f"quiet_hours must be True or False, got {quiet_hours!r}")
    return queries.Lane(priority, earliest, expiry, ordered, quiet_hours)


def _checked_sending(
    *,
    schema: str | None,
    kind: object,
    queue: str,
    batch: str | None,
    bot: int | str | None,
    run_at: datetime | None,
    **lane: object,
) -> tuple[str, queries.Route]:
    """The schema and route of ``enqueue`` and ``enqueue_many``: all but keys and payloads."""
    checked_queue(queue)
    if batch is not None:
        check_batch_name(batch)
    bot_id = bot_column(bot)
    if not isinstance(kind, str):
        raise InvalidInput("an outbox message's kind must be a string")
    _check_label(kind, "kind")
    return resolve_schema(schema), queries.Route(
        kind=kind,
        run_at=run_at,
        queue=queue,
        batch=batch,
        lane=_checked_lane(run_at=run_at, **lane),
        bot=bot_id,
        trace=trace_context(),
    )


def _checked_message(
    key: object, payload: Mapping[str, Any], which: str = "an outbox message"
) -> tuple[str, dict[str, Any]]:
    """A message's key and payload as ``enqueue`` and ``enqueue_many`` take them."""
    if not isinstance(key, str) or not key:
        raise InvalidInput(f"{which} needs a non-empty key")
    _check_label(key, "key")
    return key, _checked_payload(payload)


def _enqueue_steps(
    *,
    key: str,
    payload: Mapping[str, Any],
    kind: str = REMINDER,
    run_at: datetime | None = None,
    schema: str | None = None,
    queue: str = DEFAULT_QUEUE,
    batch: str | None = None,
    priority: int = 0,
    early: timedelta | None = None,
    expires_at: datetime | None = None,
    bot: int | None = None,
    ordered: bool = True,
    quiet_hours: bool = False,
) -> queries.Steps:
    """Add a message to the outbox in the caller's transaction (never commits); it exists
    exactly when that transaction commits. The same ``key`` again returns the existing row;
    ``payload`` (the Bot API request) is checked now, ``InvalidPayload`` naming the field.
    docs/sending.md and docs/lanes.md tell the other arguments.
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
    key, checked = _checked_message(key, payload)
    return queries.enqueue(schema=schema_name, key=key, payload=checked, route=route)


enqueue, enqueue_async = queries.app_twins(
    "enqueue", _enqueue_steps, lambda found: Enqueued(*found)
)


def _keys(keys: str | Sequence[str]) -> list[str]:
    # A str is a Sequence[str] too: cancel(session, "order-5") must not mean its characters.
    return [keys] if isinstance(keys, str) else list(keys)


def _cancel_steps(keys: str | Sequence[str], *, schema: str | None = None) -> queries.Steps:
    """Withdraw unsent messages (pending, claimed or failed) by key, in the caller's
    transaction; return how many. A send already on its way cannot be called back: reuse
    no cancelled key at once (docs/sending.md)."""
    return queries.cancel(schema=resolve_schema(schema), keys=_keys(keys))


cancel, cancel_async = queries.app_twins("cancel", _cancel_steps, int)


def sent_keys(conn: SyncConn, keys: Sequence[str], *, schema: str | None = None) -> list[str]:
    """Which of ``keys`` name messages the outbox sent: those a follow-up can act on."""
    steps = queries.sent_keys(schema=resolve_schema(schema), keys=_keys(keys))
    return list(queries.run_sync(conn, steps))


def _update_pending_steps(
    key: str, payload: Mapping[str, Any], *, schema: str | None = None
) -> queries.Steps:
    """Replace the payload of an unsent message (waiting, claimed or failed); False if none.
    A send already under way goes with the old text; a retry or replay sends the new one."""
    _check_label(key, "key")
    return queries.update_pending(
        schema=resolve_schema(schema), key=key, payload=_checked_payload(payload)
    )


update_pending, update_pending_async = queries.app_twins(
    "update_pending", _update_pending_steps, bool
)


# Telegram's chat ids are whole numbers (at most 20 characters) and a channel's @username at
# most 33: outbox_0016 keys a chat by its payload text, at most 64 characters.
_MAX_CHAT_CHARS = 64
_CHAT_ID = re.compile(r"-?[0-9]{1,20}")


def chat_column(chat_id: object) -> str:
    """The ``suhbat`` of a chat id (a whole number, or a channel's ``@username``)."""
    if isinstance(chat_id, str) and _CHAT_ID.fullmatch(chat_id):
        chat_id = int(chat_id)
    if isinstance(chat_id, int) and not isinstance(chat_id, bool) and abs(chat_id) < 10**20:
        return str(chat_id)
    if (
        isinstance(chat_id, str)
        and chat_id.startswith("@")
        and 1 < len(chat_id) <= _MAX_CHAT_CHARS
        and chat_id.isprintable()
        and " " not in chat_id
    ):
        return chat_id
    raise InvalidInput(
        f"chat_id takes a Telegram chat id (a whole number) or a channel's @username, "
        f"got {chat_id!r:.80}"
    )


def _unblock_chat_steps(
    chat_id: int | str, *, bot: int | str | None = None, schema: str | None = None
) -> queries.Steps:
    """Let ``bot`` (None: the rows naming no bot) send to ``chat_id`` again after a 403 that
    recorded the chat as gone; whether it was blocked. Rows ended before need ``replay``."""
    schema, bot_id = resolve_schema(schema), bot_column(bot)
    return queries.app_steps(unblock.steps(schema=schema, chat=chat_column(chat_id), bot=bot_id))


unblock_chat, unblock_chat_async = queries.app_twins("unblock_chat", _unblock_chat_steps, bool)


# --- the operator's actions (``outbox status``, ``list``, ``show`` and ``replay`` call these) --


def queue_status(
    conn: SyncConn,
    *,
    lease_seconds: float = DEFAULT_LEASE_SECONDS,
    schema: str | None = None,
    queue: str | None = None,
) -> QueueStatus:
    """Rows per state, the age of the oldest due row and claims older than the lease, of
    every queue or of ``queue``; ``.queues`` per queue, ``.lanes`` per priority and window."""
    return queries.queue_status(
        conn, schema=resolve_schema(schema), lease_seconds=lease_seconds, queue=queue
    )


def failed_messages(
    conn: SyncConn,
    *,
    kind: str | None = None,
    limit: int = 50,
    failed_within_seconds: float | None = None,
    schema: str | None = None,
    queue: str | None = None,
    priority: int | None = None,
) -> list[Message]:
    """Failed (xato) messages, newest first, each with its history and sent marker."""
    return queries.list_messages(
        conn,
        schema=resolve_schema(schema),
        state=State.FAILED,
        kind=kind,
        limit=limit,
        failed_within_seconds=failed_within_seconds,
        queue=queue,
        priority=priority,
    )


def list_messages(
    conn: SyncConn,
    *,
    state: str | None = None,
    kind: str | None = None,
    limit: int = 50,
    schema: str | None = None,
    queue: str | None = None,
    priority: int | None = None,
    bot: int | str | None = None,
) -> list[Message]:
    """Messages newest first, optionally of one state, kind, queue, priority and/or bot."""
    return queries.list_messages(
        conn,
        schema=resolve_schema(schema),
        state=state,
        kind=kind,
        limit=limit,
        queue=queue,
        priority=priority,
        bot=bot_column(bot),
    )


def get_message(conn: SyncConn, message_id: int, *, schema: str | None = None) -> Message | None:
    """One message in full, or None."""
    return queries.get_message(conn, message_id, schema=resolve_schema(schema))


def replay(
    conn: SyncConn,
    ids: Sequence[int] | None = None,
    *,
    force: bool = False,
    kind: str | None = None,
    failed_within_seconds: float | None = None,
    schema: str | None = None,
    queue: str | None = None,
    priority: int | None = None,
    bot: int | str | None = None,
) -> list[ReplayResult]:
    """Send failed messages again (xato -> kutmoqda) in the caller's transaction: ``ids``, or
    with ``ids=None`` every failed one matching the filters.

    A message already sent (it has a sent marker) is refused unless ``force``. A given id whose
    chat is gone for its bot refuses the whole call (``Refused``) until ``unblock_chat``; with
    ``ids=None`` such rows are left out (``ReplayResult.blocked_chat`` names their chat).
    """
    results = queries.replay(
        conn,
        ids,
        all_or_none=True,
        schema=resolve_schema(schema),
        force=force,
        kind=kind,
        failed_within_seconds=failed_within_seconds,
        queue=queue,
        priority=priority,
        bot=bot_column(bot),
    )
    if ids is not None:
        for result in results:
            if result.blocked_chat is not None:
                raise Refused(f"message {result.id} not replayed: {blocked_refusal(result)}")
    return results


# --- the fleet (``outbox relays``, ``outbox status``, the web page) ------------------------------


def relays(conn: SyncConn, *, schema: str | None = None) -> list[queries.RelayRecord]:
    """The relays in the fleet's register, alive or gone (until maintenance forgets them)."""
    return queries.list_relays(conn, schema=resolve_schema(schema))


def bot_status(
    conn: SyncConn, *, schema: str | None = None, bot: int | str | None = None
) -> list[queries.BotFigures]:
    """Each bot's rows per live state, lag, pauses, and whether a live relay holds its token."""
    return queries.bot_status(conn, schema=resolve_schema(schema), bot=bot_column(bot))


def unserved_queues(conn: SyncConn, *, schema: str | None = None) -> dict[str, int]:
    """Queues whose due rows no live relay serves, with how many rows are due in each."""
    return queries.unserved_queues(conn, schema=resolve_schema(schema))
