"""Pauses as people see them."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from outbox.ops.views._text import iso, when
from outbox.queries import Pause

__all__ = ["pause_json", "pause_text", "pauses_lines"]


def pause_text(p: Pause) -> str:
    """``queue default``, ``batch campaign-7``: the words the command line takes."""
    return f"{p.scope.option} {p.value}"


def pause_json(p: Pause) -> dict[str, Any]:
    return {
        "scope": p.scope.option,
        "doira": p.scope.value,
        "value": p.value,
        "since": iso(p.since),
    }


def pauses_lines(pauses: Sequence[Pause]) -> list[str]:
    """One line per pause, for ``outbox status`` and ``outbox pauses``."""
    return [f"paused        {pause_text(p)} (since {when(p.since)})" for p in pauses]
