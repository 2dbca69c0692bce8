"""Blocked chats (``outbox chats``) as people see them."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from outbox.ops.views._text import clip, iso, table, when
from outbox.queries.chats import BlockedChat

__all__ = ["blocked_json", "blocked_lines"]

NO_BOT = "-"  # the rows naming no bot (the relay's one token)


def blocked_json(chat: BlockedChat) -> dict[str, Any]:
    return {
        "bot": chat.bot,
        "chat_id": chat.chat,
        "since": iso(chat.since),
        "said": chat.said,
        "learned_from": chat.learned_from,
    }


def blocked_lines(chats: Sequence[BlockedChat]) -> list[str]:
    rows = [
        (
            c.bot or NO_BOT,
            c.chat,
            when(c.since),
            "-" if c.learned_from is None else str(c.learned_from),
            clip(c.said, 60),
        )
        for c in chats
    ]
    return table(("bot", "chat", "since", "row", "Telegram said"), rows, numeric={3})
