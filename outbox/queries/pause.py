"""Pauses an operator sets: a queue, a bot, a kind of message (tur) or a batch stops being
claimed by every relay until it is resumed.

A pause is a row of ``pauza`` (outbox_0006), so it holds for the whole fleet from its commit
on and a restart cannot undo it; the paused rows stay ``kutmoqda``. The claim and the relay's
timing read it in their own statements; the operator's commands and the web page write it
through the named queries of ``outbox/sql/pause.sql``.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime
from enum import StrEnum

from outbox.errors import InvalidInput
from outbox.queries._common import Reading, operation
from outbox.schema import checked_queue, notify_channel

__all__ = [
    "PAID_STOP_SECONDS",
    "PaidStop",
    "Pause",
    "Scope",
    "check_batch_name",
    "check_name",
    "list_pauses",
    "paid_lane_stops",
    "pause",
    "resume",
    "resume_paid_lane",
    "stop_paid_lane",
    "unpaused_lag",
]


class Scope(StrEnum):
    """What a pause matches, spelled as ``pauza.doira`` holds it (the column it matches)."""

    QUEUE = "navbat"
    BOT = "bot"  # every queue served with this bot's token (the public bot id)
    KIND = "tur"
    BATCH = "partiya"

    @property
    def option(self) -> str:
        """The command line's and the web page's word for it."""
        return _OPTIONS[self]

    @classmethod
    def from_option(cls, word: str) -> Scope:
        for scope, option in _OPTIONS.items():
            if word in (option, scope.value):
                return scope
        raise InvalidInput(f"unknown pause scope {word!r}: use queue, bot, tur or batch")


_OPTIONS = {Scope.QUEUE: "queue", Scope.BOT: "bot", Scope.KIND: "tur", Scope.BATCH: "batch"}
MAX_VALUE_LENGTH = 200  # the table's check says the same


# A paid lane stopped by Telegram's refusal (Stars balance, audience) starts again after an hour,
# or when an operator resumes it: by then the balance may have been topped up.
PAID_STOP_SECONDS = 3600.0


@dataclass(frozen=True, slots=True)
class PaidStop:
    """A bot whose paid lane is stopped: until when, and Telegram's words."""

    bot: str
    until: datetime
    reason: str


@dataclass(frozen=True, slots=True)
class Pause:
    scope: Scope
    value: str
    since: datetime


def check_name(value: str, what: str = "a pause") -> str:
    """A pause's or a batch's name as the table takes it, or one clear error."""
    if not isinstance(value, str) or not 0 < len(value) <= MAX_VALUE_LENGTH:
        raise InvalidInput(f"{what} needs a name of 1 to {MAX_VALUE_LENGTH} characters")
    if not value.isprintable():
        raise InvalidInput(f"{what}'s name may not hold control characters")
    return value


def check_batch_name(value: str) -> str:
    return check_name(value, "a batch")


def _checked_value(scope: Scope, value: str) -> str:
    """What a pause of ``scope`` names, checked: a queue's name as a relay's --queue takes it."""
    if scope == Scope.QUEUE:
        checked_queue(value)
    return check_name(value)


@operation
def pause(scope: Scope, value: str, *, schema: str) -> Reading[bool]:
    """Pause ``scope`` = ``value`` for every relay; False if it was paused already."""
    rows = yield "pause", schema, {"doira": scope.value, "qiymat": _checked_value(scope, value)}
    return bool(rows)


@operation
def resume(scope: Scope, value: str, *, schema: str) -> Reading[bool]:
    """Lift the pause of ``scope`` = ``value`` (waking the relays); False if it was not paused."""
    value = _checked_value(scope, value)
    params = {"doira": scope.value, "qiymat": value, "channel": notify_channel(schema)}
    return bool((yield "resume", schema, params))


@operation
def list_pauses(*, schema: str) -> Reading[list[Pause]]:
    """Every pause in force, by scope and name."""
    rows = yield "list_pauses", schema, {}
    return [Pause(Scope(row.scope), str(row.value), row.since) for row in rows]


@operation
def unpaused_lag(*, schema: str, queue: str | None = None) -> Reading[dict[str, float]]:
    """Per queue, the seconds the oldest due row that no pause holds has waited (queues with
    none are left out)."""
    rows = yield "unpaused_lag", schema, {"navbat": queue}
    return {str(row.queue): max(float(row.lag), 0.0) for row in rows}


@operation
def stop_paid_lane(
    bot: str, reason: str, *, schema: str, seconds: float = PAID_STOP_SECONDS
) -> Reading[datetime | None]:
    """Stop ``bot``'s paid lane for every relay for ``seconds``, saying ``reason``; until when,
    or None if it was stopped already (by another relay's refusal, say)."""
    params = {"bot": bot, "reason": reason[:500], "seconds": float(seconds)}
    rows = yield "stop_paid_lane", schema, params
    return rows[0][0] if rows else None  # the relay's rows are plain tuples


@operation
def resume_paid_lane(bot: str, *, schema: str) -> Reading[bool]:
    """Start ``bot``'s stopped paid lane again (waking the relays); False if it was running."""
    params = {"bot": check_name(bot), "channel": notify_channel(schema)}
    return bool((yield "resume_paid_lane", schema, params))


@operation
def paid_lane_stops(*, schema: str) -> Reading[list[PaidStop]]:
    """The bots whose paid lane is stopped now."""
    rows = yield "paid_lane_stops", schema, {}
    return [PaidStop(str(r.bot), r.until, str(r.reason or "")) for r in rows]
