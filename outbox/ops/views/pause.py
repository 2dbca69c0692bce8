"""Pauses as people see them."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from outbox.ops.views._text import iso, when
from outbox.queries import PaidStop, Pause

__all__ = ["paid_stop_json", "paid_stops_lines", "pause_json", "pause_text", "pauses_lines"]


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
    return [f"paused        {pause_text(p)} (since {when(p.since)})" for p in pauses]


def paid_stop_json(stop: PaidStop) -> dict[str, Any]:
    return {"scope": "paid", "value": stop.bot, "until": iso(stop.until), "reason": stop.reason}


def paid_stops_lines(stops: Sequence[PaidStop]) -> list[str]:
    return [
        f"paid stopped  bot {s.bot} until {when(s.until)}: {s.reason} "
        f"(`outbox resume --paid {s.bot}`)"
        for s in stops
    ]
