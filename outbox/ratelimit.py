"""Staying under Telegram's limits on purpose instead of collecting 429s.

Three limits: per bot (about 30/s), per private chat (1/s) and per group (20/min). The bot's
limit is a calendar of send slots, 1/rate apart: each message takes the first free slot at or
after the moment its chat may receive again. A message that must wait for its chat therefore
books a later slot and never holds back messages to other chats, and no two messages share a
slot, so no second (of any alignment) carries more than the rate allows.

A message that would wait long is handed back to the queue rather than holding a send slot
(``defer``); messages handed back for one chat get slots one chat interval apart, so they do
not all come back at once.

Telegram counts arrival times, and two requests can travel unevenly (event-loop lag, a busy
network): spaced exactly 1 s apart at the sender they may arrive 0.99 s apart and the second is
refused. So each chat's spacing gets ``chat_margin`` on top; the per-bot default (28/s against
Telegram's 30/s) has its margin built in: at 29/s, two bots' relays on a busy 2-core machine
had about 2 % of their requests refused, with bunched arrivals; at 28/s none (bench part 6).
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import NamedTuple

__all__ = ["MAX_FLOOD_PAUSE", "Booking", "RateLimiter", "RateLimits"]

# Telegram's retry_after is believed up to this many seconds (10 minutes): a larger one (a
# garbled answer, a proxy's, or a long ban) pauses the bot for this long, then one request
# asks again. The same cap bounds a pause read from the shared queue state. It lives here, with
# the other limits, so that the queries (and so ``import outbox``) need no Telegram client.
MAX_FLOOD_PAUSE = 600.0

_PRUNE_AT = 10_000  # chats remembered before the idle ones are forgotten


@dataclass(frozen=True, slots=True)
class RateLimits:
    per_bot: float = 28.0  # messages/s for the whole bot; 0 switches the limit off
    per_chat: float = 1.0  # messages/s to one private chat; 0 switches it off
    per_group_per_minute: float = 20.0  # messages/min to one group; 0 switches it off
    chat_margin: float = 0.05  # seconds added to each chat's spacing (1.05 s, 3.05 s)

    def __post_init__(self) -> None:
        if min(self.per_bot, self.per_chat, self.per_group_per_minute, self.chat_margin) < 0:
            raise ValueError("rate limits cannot be negative")

    def chat_interval(self, *, group: bool) -> float:
        """Seconds between two messages to one chat (margin included); 0: no limit."""
        rate = self.per_group_per_minute / 60.0 if group else self.per_chat
        return 1.0 / rate + self.chat_margin if rate > 0 else 0.0


class Booking(NamedTuple):
    """A send slot booked for one message: given back with ``RateLimiter.cancel`` if unused."""

    chat_id: int | str
    start: float  # when the message may go
    slot: int | None  # the bot slot taken; None without a per-bot limit
    chat_before: float | None  # the chat's next free moment before this booking


@dataclass
class RateLimiter:
    limits: RateLimits = field(default_factory=RateLimits)
    _taken_slots: set[int] = field(default_factory=set)  # bot slots booked, by index
    _chat_next: dict[int | str, float] = field(default_factory=dict)
    _chat_deferred: dict[int | str, float] = field(default_factory=dict)
    _paused_until: float = 0.0
    _prune_at: int = _PRUNE_AT

    def _chat_interval(self, chat_id: int | str) -> float:
        # Negative ids are groups and channels; positive ids are private chats.
        return self.limits.chat_interval(group=isinstance(chat_id, str) or chat_id < 0)

    def _earliest(self, chat_id: int | str, now: float) -> float:
        return max(now, self._paused_until, self._chat_next.get(chat_id, 0.0))

    def _first_free_slot(self, earliest: float) -> int:
        slot = math.ceil(earliest * self.limits.per_bot - 1e-9)
        while slot in self._taken_slots:
            slot += 1
        return slot

    def plan(self, chat_id: int | str, now: float) -> float:
        """Seconds a message to ``chat_id`` would wait if booked now. Books nothing."""
        start = self._earliest(chat_id, now)
        if self.limits.per_bot > 0:
            start = self._first_free_slot(start) / self.limits.per_bot
        return start - now

    def reserve(self, chat_id: int | str, now: float) -> float:
        """Book the next slot for ``chat_id``; return how long to wait before sending."""
        return self.book(chat_id, now).start - now

    def book(self, chat_id: int | str, now: float) -> Booking:
        """Book the next slot for ``chat_id``; the booking says when the message may go."""
        start = self._earliest(chat_id, now)
        chat_before = self._chat_next.get(chat_id)
        slot: int | None = None
        if self.limits.per_bot > 0:
            slot = self._first_free_slot(start)
            self._taken_slots.add(slot)
            start = slot / self.limits.per_bot
            if len(self._taken_slots) > 4 * self.limits.per_bot + 64:
                past = math.floor(now * self.limits.per_bot)
                self._taken_slots = {s for s in self._taken_slots if s >= past}
        chat_interval = self._chat_interval(chat_id)
        if chat_interval:
            self._chat_next[chat_id] = start + chat_interval
        if len(self._chat_next) > self._prune_at:
            self._forget_idle_chats(now)
            # Chats still inside their interval stay; look again only once the map has doubled,
            # so that a busy broadcast does not rescan the whole map on every message.
            self._prune_at = max(_PRUNE_AT, 2 * len(self._chat_next))
        return Booking(chat_id, start, slot, chat_before)

    def cancel(self, booking: Booking) -> None:
        """Give back a booking that will not be used (flood control began, the row was
        withdrawn): its bot slot is free again, and its chat's spacing is as before, unless a
        later booking of the chat has moved it on since."""
        if booking.slot is not None:
            self._taken_slots.discard(booking.slot)
        interval = self._chat_interval(booking.chat_id)
        if interval and self._chat_next.get(booking.chat_id) == booking.start + interval:
            if booking.chat_before is None:
                del self._chat_next[booking.chat_id]
            else:
                self._chat_next[booking.chat_id] = booking.chat_before

    def defer(self, chat_id: int | str, now: float) -> float:
        """Seconds until a message handed back to the queue should come back.

        Messages handed back for the same chat come back one chat interval apart. Nothing is
        booked: the message books its slot when it is claimed again.
        """
        at = now + self.plan(chat_id, now)
        previous = self._chat_deferred.get(chat_id)
        if previous is not None and previous >= now:
            at = max(at, previous + self._chat_interval(chat_id))
        self._chat_deferred[chat_id] = at
        if len(self._chat_deferred) > _PRUNE_AT:
            self._chat_deferred = {c: t for c, t in self._chat_deferred.items() if t > now}
        return at - now

    def capacity(self, now: float, horizon: float) -> int | None:
        """Free bot slots in the next ``horizon`` seconds; None when there is no bot limit."""
        if self.limits.per_bot <= 0:
            return None
        first = math.ceil(max(now, self._paused_until) * self.limits.per_bot - 1e-9)
        last = math.floor((now + horizon) * self.limits.per_bot)
        taken = sum(1 for s in self._taken_slots if first <= s <= last)
        return max(0, last - first + 1 - taken)

    def pause(self, seconds: float, now: float) -> None:
        """Flood control: Telegram asked this bot to wait; every send waits."""
        self._paused_until = max(self._paused_until, now + seconds)

    def paused_for(self, now: float) -> float:
        return max(0.0, self._paused_until - now)

    def _forget_idle_chats(self, now: float) -> None:
        self._chat_next = {c: t for c, t in self._chat_next.items() if t > now}
        self._chat_deferred = {c: t for c, t in self._chat_deferred.items() if t > now}
