"""Staying under Telegram's limits on purpose instead of collecting 429s.

Three limits, each kept as "the earliest moment the next message may go" (a virtual schedule
that needs no background task): per bot (about 30/s), per private chat (1/s) and per group
(20/min). A message that would wait long for its chat is handed back to the queue rather than
holding a send slot, so one busy chat never holds back the others.

The schedule is kept in send times, but Telegram counts arrival times, and two requests can
travel unevenly (event-loop lag, a busy network): spaced exactly 1 s apart at the sender they
may arrive 0.99 s apart and the second is refused. So each chat's spacing gets ``chat_margin``
on top; the per-bot default (29/s against Telegram's 30/s) has its margin built in.
"""

from __future__ import annotations

from dataclasses import dataclass, field

__all__ = ["RateLimiter", "RateLimits"]

_PRUNE_AT = 10_000  # chats remembered before the idle ones are forgotten


@dataclass(frozen=True, slots=True)
class RateLimits:
    per_bot: float = 29.0  # messages/s for the whole bot; 0 switches the limit off
    per_chat: float = 1.0  # messages/s to one private chat; 0 switches it off
    per_group_per_minute: float = 20.0  # messages/min to one group; 0 switches it off
    bot_burst: int = 1  # messages that may go back to back before the per-bot pacing starts
    chat_margin: float = 0.05  # seconds added to each chat's spacing (1.05 s, 3.05 s)

    def __post_init__(self) -> None:
        if min(self.per_bot, self.per_chat, self.per_group_per_minute, self.chat_margin) < 0:
            raise ValueError("rate limits cannot be negative")


@dataclass
class RateLimiter:
    limits: RateLimits = field(default_factory=RateLimits)
    _bot_next: float = 0.0
    _chat_next: dict[int | str, float] = field(default_factory=dict)
    _paused_until: float = 0.0
    _prune_at: int = _PRUNE_AT

    def _chat_interval(self, chat_id: int | str) -> float:
        # Negative ids are groups and channels; positive ids are private chats.
        is_group = isinstance(chat_id, str) or chat_id < 0
        rate = self.limits.per_group_per_minute / 60.0 if is_group else self.limits.per_chat
        return 1.0 / rate + self.limits.chat_margin if rate > 0 else 0.0

    def chat_delay(self, chat_id: int | str, now: float) -> float:
        """Seconds until ``chat_id`` may receive again (0: now). Reserves nothing."""
        return max(0.0, self._chat_next.get(chat_id, 0.0) - now)

    def reserve(self, chat_id: int | str, now: float) -> float:
        """Book the next slot for ``chat_id``; return how long to wait before sending."""
        start = max(now, self._paused_until, self._chat_next.get(chat_id, 0.0))
        if self.limits.per_bot > 0:
            interval = 1.0 / self.limits.per_bot
            # The bot schedule may run up to bot_burst intervals behind "now" (a burst).
            start = max(start, self._bot_next - (self.limits.bot_burst - 1) * interval)
            self._bot_next = max(self._bot_next, start) + interval
        chat_interval = self._chat_interval(chat_id)
        if chat_interval:
            self._chat_next[chat_id] = start + chat_interval
        if len(self._chat_next) > self._prune_at:
            self._forget_idle_chats(now)
            # Chats still inside their interval stay; look again only once the map has doubled,
            # so that a busy broadcast does not rescan the whole map on every message.
            self._prune_at = max(_PRUNE_AT, 2 * len(self._chat_next))
        return start - now

    def pause(self, seconds: float, now: float) -> None:
        """Flood control: Telegram asked this bot to wait; every send waits."""
        self._paused_until = max(self._paused_until, now + seconds)

    def paused_for(self, now: float) -> float:
        return max(0.0, self._paused_until - now)

    def _forget_idle_chats(self, now: float) -> None:
        self._chat_next = {c: t for c, t in self._chat_next.items() if t > now}
