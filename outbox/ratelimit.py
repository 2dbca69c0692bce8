"""Staying under Telegram's limits on purpose instead of collecting 429s: per bot (about 30/s),
per private chat (1/s) and per group (20/min), kept for the bot's whole fleet in the database,
where every claim reserves the bot's send slots and each chat's next free moment
(``outbox.queries.claim_due``; docs/how-it-works.md). A relay keeps no limits in memory.

Telegram counts arrival times: spaced exactly 1 s apart at the sender, two requests may arrive
0.99 s apart and the second is refused. So each chat's spacing gets ``chat_margin`` on top; the
per-bot default (28/s against Telegram's 30/s) has its margin built in.
"""

from __future__ import annotations

from dataclasses import dataclass

__all__ = ["MAX_FLOOD_PAUSE", "RateLimits"]

# Telegram's retry_after is believed up to this many seconds (10 minutes): a larger one (a
# garbled answer, a proxy's, or a long ban) pauses the bot for this long, then one request
# asks again. The same cap bounds a pause read from the shared queue state. It lives here, with
# the other limits, so that the queries (and so ``import outbox``) need no Telegram client.
MAX_FLOOD_PAUSE = 600.0


@dataclass(frozen=True, slots=True)
class RateLimits:
    per_bot: float = 28.0  # messages/s for the whole bot; 0 switches the limit off
    per_chat: float = 1.0  # messages/s to one private chat; 0 switches it off
    per_group_per_minute: float = 20.0  # messages/min to one group; 0 switches it off
    chat_margin: float = 0.05  # seconds added to each chat's spacing (1.05 s, 3.05 s)
    # messages/s for the bot's allow_paid_broadcast rows, a budget of their own beside per_bot
    # (Telegram: up to 1,000/s, for Stars); 0: no paid lane, they share per_bot
    paid_per_bot: float = 0.0

    def __post_init__(self) -> None:
        if (
            min(self.per_bot, self.per_chat, self.per_group_per_minute, self.chat_margin) < 0
            or self.paid_per_bot < 0
        ):
            raise ValueError("rate limits cannot be negative")

    def chat_interval(self, *, group: bool) -> float:
        """Seconds between two messages to one chat (margin included); 0: no limit."""
        rate = self.per_group_per_minute / 60.0 if group else self.per_chat
        return 1.0 / rate + self.chat_margin if rate > 0 else 0.0
