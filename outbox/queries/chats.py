"""Chats gone for a bot (``bloklangan``, outbox_0017): the operator's list and unblock. The
statements are named queries of ``outbox/sql/operator.sql`` and ``app.sql``."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime

from outbox.queries._common import Reading, operation

__all__ = ["BlockedChat", "blocked_chats", "unblock"]


@dataclass(frozen=True, slots=True)
class BlockedChat:
    bot: str | None  # None: the rows naming no bot
    chat: str
    since: datetime
    said: str  # Telegram's words
    learned_from: int | None  # the row whose 403 recorded it


@operation
def blocked_chats(
    *, schema: str, bot: str | None = None, limit: int = 1000
) -> Reading[list[BlockedChat]]:
    """The blocked chats, newest first; of one bot (``''``: the rows naming none) or all."""
    rows = yield "blocked_chats", schema, {"bot": bot, "limit": limit}
    return [
        BlockedChat(
            row.bot or None,
            str(row.chat),
            row.since,
            str(row.said),
            None if row.learned_from is None else int(row.learned_from),
        )
        for row in rows
    ]


@operation
def unblock(*, schema: str, chat: str, bot: str | None = None) -> Reading[bool]:
    """Forget that ``chat`` is gone for ``bot`` (None: the rows naming none); whether it was."""
    rows = yield "unblock_chat", schema, {"bot": bot or "", "suhbat": chat}
    return bool(rows)
