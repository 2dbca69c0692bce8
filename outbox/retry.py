"""The retry policy: a pure function from (attempts, failure) to the row's next state."""

from __future__ import annotations

import random
from dataclasses import dataclass

from outbox.classify import Failure, FailureKind
from outbox.states import FailureCode, State

__all__ = ["Decision", "RetryPolicy", "decide"]


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
class Decision:
    state: State
    delay_seconds: float
    error: str
    code: FailureCode  # xato_turi: the failure's own, or too_many_attempts when giving up


def decide(policy: RetryPolicy, attempts: int, failure: Failure) -> Decision:
    """What happens to a row after its ``attempts``-th claim failed with ``failure``.

    Unauthorized failures never reach here (the relay releases the row and stops). A migrated
    failure reaches here only when the resend to the group's new chat migrated again: the
    relay resends once per attempt, so this one counts as a transient failure, and the retry
    starts from the chat the group first moved to (written into the payload with the outcome).
    """
    if failure.kind is FailureKind.PERMANENT:
        return Decision(State.FAILED, 0.0, failure.reason, failure.code)
    if attempts >= policy.max_attempts:
        reason = f"{failure.reason} (gave up after {attempts} attempts)"
        return Decision(State.FAILED, 0.0, reason, FailureCode.TOO_MANY_ATTEMPTS)
    delay = max(policy.backoff(attempts), failure.retry_after)
    reason = f"{failure.reason}; attempt {attempts} failed"
    return Decision(State.PENDING, delay, reason, failure.code)
