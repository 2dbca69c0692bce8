"""What the app calls: enqueue and cancel messages inside its own transaction."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from outbox import queries
from outbox.errors import InvalidInput

__all__ = ["Enqueued", "cancel", "enqueue", "update_pending"]

REMINDER = "eslatma"


@dataclass(frozen=True, slots=True)
class Enqueued:
    id: int
    created: bool  # False: a message with this key already existed and was returned as is


def enqueue(
    conn: queries.SyncConn,
    *,
    key: str,
    payload: Mapping[str, Any],
    kind: str = REMINDER,
    run_at: datetime | None = None,
) -> Enqueued:
    """Add a message to the outbox in the caller's transaction (never commits).

    ``conn`` is the app's SQLAlchemy ``Session`` or ``Connection``: the message exists exactly
    when the caller's transaction commits. ``key`` identifies the logical message: enqueueing
    the same key again returns the existing row. ``payload`` holds sendMessage's parameters
    (``chat_id`` and ``text`` at least). ``run_at`` (timezone-aware) delays the message; the
    default is now.
    """
    if not key:
        raise InvalidInput("an outbox message needs a non-empty key")
    if run_at is not None and run_at.tzinfo is None:
        raise InvalidInput("run_at must be timezone-aware (a naive time is ambiguous)")
    row_id, created = queries.enqueue(
        conn, kind=kind, key=key, payload=dict(payload), run_at=run_at
    )
    return Enqueued(row_id, created)


def cancel(conn: queries.SyncConn, keys: Sequence[str]) -> int:
    """Withdraw unsent messages by key in the caller's transaction; return how many.

    Pending and failed messages are deleted. So is a message a relay has claimed: a relay whose
    claimed row waited (for a send slot or a rate limit) checks that its claim still exists
    before sending; a request already on its way cannot be called back. Do not enqueue the same
    key again right after cancelling it: another relay could send it while the first one is
    still sending. Use a new key, or ``update_pending`` to change a message's text.
    """
    return queries.cancel(conn, keys)


def update_pending(conn: queries.SyncConn, key: str, payload: Mapping[str, Any]) -> bool:
    """Replace the payload of an unsent message (waiting, claimed or failed); False if none.

    A message being sent at this moment goes out with the text it had; a retry or replay of it
    sends the new one. A sent message is not sent again.
    """
    return queries.update_pending(conn, key, dict(payload))
