"""What ``outbox reap`` and ``outbox prune`` (and the relay's log) say about a round."""

from __future__ import annotations

from outbox.queries import Pruned, Reaped
from outbox.states import State

__all__ = ["pruned_json", "pruned_text", "reaped_json", "reaped_text"]


def reaped_text(reaped: Reaped) -> str:
    return f"{reaped.pending} back to {State.PENDING}, {reaped.failed} to {State.FAILED}"


def reaped_json(reaped: Reaped) -> dict[str, int]:
    return {State.PENDING: reaped.pending, State.FAILED: reaped.failed}


def pruned_text(pruned: Pruned) -> str:
    return f"{pruned.done_rows} {State.DONE} rows and {pruned.markers} sent markers"


def pruned_json(pruned: Pruned) -> dict[str, int]:
    return {State.DONE: pruned.done_rows, "yuborilgan": pruned.markers}
