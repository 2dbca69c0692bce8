"""Staying under Telegram's limits on purpose instead of collecting 429s.

Three limits: per bot (about 30/s), per private chat (1/s) and per group (20/min). The bot's
budget belongs to the whole fleet of its relays: every claim reserves its send slots in the
database (``outbox.queries.claim_due``), and so does each chat's spacing (``chat_navbati``).
``RateLimiter`` is one relay's own view in memory: each chat's next free moment, so that a
send waits for its chat rather than racing the claim's spacing. ``RateLimits.per_bot`` is the
claim's, and the bot's flood pause is flood control's (``outbox.relay.flood``): the limiter
uses neither, and takes the pause's end as the earliest moment (``after``) it may book.

A message that would wait long is handed back to the queue rather than holding a send slot
(``defer``); messages handed back for one chat come back one chat interval apart, so they do
not all come back at once.

Telegram counts arrival times, and two requests can travel unevenly (event-loop lag, a busy
network): spaced exactly 1 s apart at the sender they may arrive 0.99 s apart and the second is
refused. So each chat's spacing gets ``chat_margin`` on top; the per-bot default (28/s against
Telegram's 30/s) has its margin built in: at 29/s, two bots' relays on a busy 2-core machine
had about 2 % of their requests refused, with bunched arrivals; at 28/s none (bench part 6).
"""

from __future__ import annotations

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
    """A chat's turn booked for one message: given back with ``RateLimiter.cancel`` if unused."""

    chat_id: int | str
    start: float  # when the message may go
    chat_before: float | None  # the chat's next free moment before this booking
    weight: int = 1  # messages Telegram counts for it (an album of N: N)


@dataclass
class RateLimiter:
    limits: RateLimits = field(default_factory=RateLimits)
    _chat_next: dict[int | str, float] = field(default_factory=dict)
    _chat_deferred: dict[int | str, float] = field(default_factory=dict)
    _prune_at: int = _PRUNE_AT

    def _chat_interval(self, chat_id: int | str) -> float:
        # Negative ids are groups and channels; positive ids are private chats.
        return self.limits.chat_interval(group=isinstance(chat_id, str) or chat_id < 0)

    def _earliest(self, chat_id: int | str, now: float, after: float) -> float:
        return max(now, after, self._chat_next.get(chat_id, 0.0))

    def plan(self, chat_id: int | str, now: float, *, after: float = 0.0) -> float:
        """Seconds a message to ``chat_id`` would wait if booked now, and not before ``after``
        (a flood pause's end). Books nothing."""
        return self._earliest(chat_id, now, after) - now

    def reserve(self, chat_id: int | str, now: float, *, after: float = 0.0) -> float:
        """Book the next turn of ``chat_id``; return how long to wait before sending."""
        return self.book(chat_id, now, after=after).start - now

    def book(
        self, chat_id: int | str, now: float, *, after: float = 0.0, weight: int = 1
    ) -> Booking:
        """Book the next turn of ``chat_id`` not before ``after`` for ``weight`` messages (an
        album's items each count); the booking says when the request may go."""
        start = self._earliest(chat_id, now, after)
        chat_before = self._chat_next.get(chat_id)
        chat_interval = self._chat_interval(chat_id) * weight
        if chat_interval:
            self._chat_next[chat_id] = start + chat_interval
        if len(self._chat_next) > self._prune_at:
            self._forget_idle_chats(now)
            # Chats still inside their interval stay; look again only once the map has doubled,
            # so that a busy broadcast does not rescan the whole map on every message.
            self._prune_at = max(_PRUNE_AT, 2 * len(self._chat_next))
        return Booking(chat_id, start, chat_before, weight)

    def cancel(self, booking: Booking) -> None:
        """Give back a booking that will not be used (flood control began, the row was
        withdrawn): its chat's spacing is as before, unless a later booking of the chat has
        moved it on since."""
        interval = self._chat_interval(booking.chat_id) * booking.weight
        if interval and self._chat_next.get(booking.chat_id) == booking.start + interval:
            if booking.chat_before is None:
                del self._chat_next[booking.chat_id]
            else:
                self._chat_next[booking.chat_id] = booking.chat_before

    def defer(self, chat_id: int | str, now: float, *, after: float = 0.0) -> float:
        """Seconds until a message handed back to the queue should come back (not before
        ``after``).

        Messages handed back for the same chat come back one chat interval apart. Nothing is
        booked: the message books its slot when it is claimed again.
        """
        at = now + self.plan(chat_id, now, after=after)
        previous = self._chat_deferred.get(chat_id)
        if previous is not None and previous >= now:
            at = max(at, previous + self._chat_interval(chat_id))
        self._chat_deferred[chat_id] = at
        if len(self._chat_deferred) > _PRUNE_AT:
            self._chat_deferred = {c: t for c, t in self._chat_deferred.items() if t > now}
        return at - now

    def _forget_idle_chats(self, now: float) -> None:
        self._chat_next = {c: t for c, t in self._chat_next.items() if t > now}
        self._chat_deferred = {c: t for c, t in self._chat_deferred.items() if t > now}
