"""The retry policy: the one home of attempts, "max attempts then xato", backoff and expiry.

Each function is pure: of (now, the row's facts, what happened) to a ``Decision``, which the
outcome write applies as it is. Times are seconds on one clock of the caller's (the relay uses
its event loop's); the reaper, which decides for many rows at once in SQL, gets
``max_attempts`` from here as a parameter.
"""

from __future__ import annotations

import random
from dataclasses import dataclass

from outbox.classify import Failure, FailureKind
from outbox.states import FailureCode, State

__all__ = ["Decision", "RetryPolicy", "RowFacts", "decide", "expiry", "hand_back"]


@dataclass(frozen=True, slots=True)
class RetryPolicy:
    max_attempts: int = 3
    base_seconds: float = 2.0  # attempt n waits base * 2^(n-1): 2, 4, 8 s
    max_delay_seconds: float = 3600.0
    jitter: float = 0.0  # up to this fraction added at random; off so the schedule is exact

    def __post_init__(self) -> None:
        if self.max_attempts < 1:
            raise ValueError("max_attempts must be at least 1")
        if self.base_seconds < 0 or self.jitter < 0:
            raise ValueError("base_seconds and jitter cannot be negative")

    def backoff(self, attempts: int) -> float:
        delay = min(self.base_seconds * 2.0 ** max(attempts - 1, 0), self.max_delay_seconds)
        if self.jitter:
            delay += delay * self.jitter * random.random()
        return delay


@dataclass(frozen=True, slots=True)
class RowFacts:
    """What the decisions need to know of a claimed row."""

    attempts: int  # urinish after its claim: the claim counts every attempt
    expires_at: float | None = None  # when it may no longer be sent (None: never)


@dataclass(frozen=True, slots=True)
class Decision:
    state: State
    attempts: int  # urinish the row keeps: the claim's, or one less for an attempt not made
    delay_seconds: float | None = None  # kutmoqda: due in this long; None keeps its time
    error: str | None = None
    code: FailureCode | None = None  # xato_turi, with ``error``
    chat_gone: bool = False  # record the row's chat as gone for its bot (outbox_0017)


def expiry(now: float, row: RowFacts) -> Decision | None:
    """The row's expiry has come: it fails without being sent (None: it has not)."""
    if row.expires_at is None or now < row.expires_at:
        return None
    return Decision(
        State.FAILED, row.attempts, None, "expired before it could be sent", FailureCode.EXPIRED
    )


def hand_back(now: float, row: RowFacts, delay: float | None = None) -> Decision:
    """Back to the queue unsent (shutdown, a rejected token, late for its slot): the attempt
    is not counted. ``delay`` None keeps the row's time, and so its place in line."""
    due = now + (delay or 0.0)
    if (expired := expiry(due, row)) is not None:
        return expired
    return Decision(State.PENDING, max(row.attempts - 1, 0), delay if delay and delay > 0 else None)


def decide(policy: RetryPolicy, now: float, row: RowFacts, failure: Failure) -> Decision:
    """What happens to a row whose send failed with ``failure``.

    Unauthorized failures never reach here (the row is handed back). A migrated failure reaches
    here only when the resend to the group's new chat migrated again: it counts as transient.
    A request that could not connect never left: the row goes back keeping its place, and the
    attempt is not counted (the bot's pause keeps it from being claimed again at once).
    """
    if failure.kind in (FailureKind.UNREACHABLE, FailureKind.PAID_REFUSED):
        return hand_back(now, row)
    n = row.attempts
    if failure.kind is FailureKind.PERMANENT:
        return Decision(
            State.FAILED, n, None, failure.reason, failure.code, chat_gone=failure.chat_gone
        )
    if n >= policy.max_attempts:
        reason = f"{failure.reason} (gave up after {n} attempts)"
        return Decision(State.FAILED, n, None, reason, FailureCode.TOO_MANY_ATTEMPTS)
    delay = max(policy.backoff(n), failure.retry_after)
    if row.expires_at is not None and now + delay >= row.expires_at:
        reason = f"{failure.reason}; its expiry comes before another attempt"
        return Decision(State.FAILED, n, None, reason, FailureCode.EXPIRED)
    return Decision(State.PENDING, n, delay, f"{failure.reason}; attempt {n} failed", failure.code)
