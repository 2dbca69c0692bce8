"""A transactional outbox relay for Telegram messages on PostgreSQL."""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
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

# Each public name is imported from its module on first use, so that a command that needs none
# of them (``outbox status``, ``outbox --version``) starts without loading SQLAlchemy for them.
_HOMES = {
    "Enqueued": "outbox.api",
    "FailureCode": "outbox.states",
    "InvalidPayload": "outbox.errors",
    "OutboxError": "outbox.errors",
    "State": "outbox.states",
    "cancel": "outbox.api",
    "cancel_async": "outbox.api",
    "clear_quiet_hours": "outbox.quiet_hours",
    "clear_quiet_hours_async": "outbox.quiet_hours",
    "configure": "outbox.schema",
    "enqueue": "outbox.api",
    "enqueue_async": "outbox.api",
    "enqueue_many": "outbox.broadcast",
    "enqueue_many_async": "outbox.broadcast",
    "failed_messages": "outbox.api",
    "get_message": "outbox.api",
    "get_quiet_hours": "outbox.quiet_hours",
    "get_quiet_hours_async": "outbox.quiet_hours",
    "list_messages": "outbox.api",
    "queue_status": "outbox.api",
    "replay": "outbox.api",
    "sent_keys": "outbox.api",
    "set_quiet_hours": "outbox.quiet_hours",
    "set_quiet_hours_async": "outbox.quiet_hours",
    "unblock_chat": "outbox.api",
    "unblock_chat_async": "outbox.api",
    "update_pending": "outbox.api",
    "update_pending_async": "outbox.api",
}


def __getattr__(name: str) -> Any:
    home = _HOMES.get(name)
    if home is None:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    value = getattr(importlib.import_module(home), name)
    globals()[name] = value  # found directly from now on
    return value


def __dir__() -> list[str]:
    return sorted({*globals(), *__all__})
