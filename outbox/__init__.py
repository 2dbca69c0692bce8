"""A transactional outbox relay for Telegram messages on PostgreSQL."""

from __future__ import annotations

from outbox.api import Enqueued, cancel, enqueue, update_pending
from outbox.errors import OutboxError
from outbox.states import State

__all__ = ["Enqueued", "OutboxError", "State", "cancel", "enqueue", "update_pending"]
