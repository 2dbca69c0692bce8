"""What a relay did: the totals ``run`` and ``run_once`` return, and a snapshot for metrics."""

from __future__ import annotations

from dataclasses import dataclass, fields, replace

__all__ = ["RelaySnapshot", "RunSummary"]


@dataclass
class RunSummary:
    """What the relay did; ``run_once`` returns one, ``run`` returns the total."""

    claimed: int = 0
    sent: int = 0
    already_sent: int = 0  # completed without sending: the key had a sent marker
    retried: int = 0
    failed: int = 0
    # Handed back unsent: late for its moment, a flood pause, Telegram out of reach.
    deferred: int = 0
    released: int = 0  # handed back unsent (shutdown, rejected token)
    cancelled: int = 0  # withdrawn by the app after the claim
    fenced_out: int = 0  # outcomes discarded because the claim had been reaped

    def add(self, other: RunSummary) -> None:
        for f in fields(self):
            setattr(self, f.name, getattr(self, f.name) + getattr(other, f.name))

    def copy(self) -> RunSummary:
        return replace(self)

    def since(self, before: RunSummary) -> RunSummary:
        """What was added to these totals after ``before`` was copied from them."""
        done = self.copy()
        for f in fields(done):
            setattr(done, f.name, getattr(done, f.name) - getattr(before, f.name))
        return done


@dataclass(frozen=True)
class RelaySnapshot:
    """A running relay's figures at one moment (for metrics)."""

    summary: RunSummary  # a copy of the totals so far
    in_flight: int  # claimed rows held: sending, waiting for a slot or for their write
    unwritten: int  # outcomes decided and not yet written
    paused_seconds: float  # flood control still to wait
    unreachable_bots: int = 0  # bots this relay cannot reach Telegram for now
