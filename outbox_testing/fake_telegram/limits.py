"""Rate limits (``enforce_limits``), kept for each bot (the numeric part of its token) apart, as
Telegram keeps them: 30 messages in any 1 s window per bot, 1 message in any 1 s window per
private chat (no burst, so a second message within a second is refused), 20 messages in any 60 s
window per group (negative chat id). A message sent with ``allow_paid_broadcast`` counts against
the bot's paid window instead, 1,000 in any 1 s window, and against its chat's as any other.
Limits are checked before scripted faults; a refused message consumes no fault and takes no
slot.
"""

from __future__ import annotations

import math
from collections import deque


class _Limiter:
    """One bot's sliding-window counters of accepted messages (see the module docstring)."""

    bot_per_second = 30
    paid_per_second = 1000
    private_per_second = 1
    group_per_minute = 20

    def __init__(self) -> None:
        self.bot: deque[float] = deque()
        self.paid: deque[float] = deque()
        self.chats: dict[int, deque[float]] = {}

    def admit(self, chat_id: int, now: float, *, paid: bool = False) -> int:
        """Take a slot and return 0, or return the retry_after seconds to answer."""
        private = chat_id > 0
        window = 1.0 if private else 60.0
        limit = self.private_per_second if private else self.group_per_minute
        bot, bot_limit = (
            (self.paid, self.paid_per_second) if paid else (self.bot, self.bot_per_second)
        )
        chat = self.chats.setdefault(chat_id, deque())
        for q, span in ((bot, 1.0), (chat, window)):
            while q and q[0] <= now - span:
                q.popleft()
        wait = 0.0
        if len(bot) >= bot_limit:
            wait = bot[0] + 1.0 - now
        if len(chat) >= limit:
            wait = max(wait, chat[0] + window - now)
        if len(bot) >= bot_limit or len(chat) >= limit:
            return max(1, math.ceil(wait))
        bot.append(now)
        chat.append(now)
        return 0
