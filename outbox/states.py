"""The four states of an outbox row, spelled as the database spells them."""

from __future__ import annotations

from enum import StrEnum

__all__ = ["TERMINAL_STATES", "State"]


class State(StrEnum):
    PENDING = "kutmoqda"
    IN_PROGRESS = "bajarilmoqda"
    DONE = "bajarildi"
    FAILED = "xato"


TERMINAL_STATES = frozenset({State.DONE, State.FAILED})
