"""A transactional outbox relay for Telegram messages on PostgreSQL."""

from __future__ import annotations

from outbox.api import (
    Enqueued,
    cancel,
    cancel_async,
    enqueue,
    enqueue_async,
    failed_messages,
    get_message,
    list_messages,
    queue_status,
    replay,
    sent_keys,
    unblock_chat,
    unblock_chat_async,
    update_pending,
    update_pending_async,
)
from outbox.broadcast import enqueue_many, enqueue_many_async
from outbox.errors import InvalidPayload, OutboxError
from outbox.quiet_hours import (
    clear_quiet_hours,
    clear_quiet_hours_async,
    get_quiet_hours,
    get_quiet_hours_async,
    set_quiet_hours,
    set_quiet_hours_async,
)
from outbox.schema import configure
from outbox.states import FailureCode, State

__all__ = [
    "Enqueued",
    "FailureCode",
    "InvalidPayload",
    "OutboxError",
    "State",
    "cancel",
    "cancel_async",
    "clear_quiet_hours",
    "clear_quiet_hours_async",
    "configure",
    "enqueue",
    "enqueue_async",
    "enqueue_many",
    "enqueue_many_async",
    "failed_messages",
    "get_message",
    "get_quiet_hours",
    "get_quiet_hours_async",
    "list_messages",
    "queue_status",
    "replay",
    "sent_keys",
    "set_quiet_hours",
    "set_quiet_hours_async",
    "unblock_chat",
    "unblock_chat_async",
    "update_pending",
    "update_pending_async",
]
