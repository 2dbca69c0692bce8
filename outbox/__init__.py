"""A transactional outbox relay for Telegram messages on PostgreSQL."""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

from outbox.errors import InvalidPayload, OutboxError
from outbox.schema import configure
from outbox.states import FailureCode, State

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
    from outbox.quiet_hours import (
        clear_quiet_hours,
        clear_quiet_hours_async,
        get_quiet_hours,
        get_quiet_hours_async,
        set_quiet_hours,
        set_quiet_hours_async,
    )

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

# The app's functions are imported from their modules on first use, so that a command that
# needs none of them (``outbox status``) starts without SQLAlchemy; all three share its cost.
_LAZY_HOMES = ("outbox.api", "outbox.broadcast", "outbox.quiet_hours")


def __getattr__(name: str) -> Any:
    if name in __all__:
        for home in _LAZY_HOMES:
            module = importlib.import_module(home)
            if hasattr(module, name):
                value = getattr(module, name)
                globals()[name] = value  # found directly from now on
                return value
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


def __dir__() -> list[str]:
    return sorted({*globals(), *__all__})
