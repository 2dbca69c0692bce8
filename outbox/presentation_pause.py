"""Pauses and batches as people see them, in the CLI and on the web page alike (beside
``outbox.presentation``, which shows messages and the status)."""

from __future__ import annotations

from collections.abc import Sequence
from datetime import datetime
from typing import Any

from outbox.presentation import when
from outbox.queries import BatchProgress, Pause

__all__ = ["batch_json", "batch_lines", "pause_json", "pause_text", "pauses_lines"]


def _iso(moment: datetime | None) -> str | None:
    return None if moment is None else moment.isoformat()


def pause_text(p: Pause) -> str:
    """``queue default``, ``batch campaign-7``: the words the command line takes."""
    return f"{p.scope.option} {p.value}"


def pause_json(p: Pause) -> dict[str, Any]:
    return {
        "scope": p.scope.option,
        "doira": p.scope.value,
        "value": p.value,
        "since": _iso(p.since),
    }


def pauses_lines(pauses: Sequence[Pause]) -> list[str]:
    """One line per pause, for ``outbox status`` and ``outbox pauses``."""
    return [f"paused        {pause_text(p)} (since {when(p.since)})" for p in pauses]


def batch_json(b: BatchProgress) -> dict[str, Any]:
    return {
        "batch": b.name,
        "total": b.total,
        "sent": b.sent,
        "failed": b.failed,
        "cancelled": b.cancelled,
        "sending": b.sending,
        "waiting": b.waiting,
        "paused": b.paused,
        "rate_per_second": round(b.rate, 3),
        "expected_end": _iso(b.expected_end),
        "started": _iso(b.started),
        "last_sent": _iso(b.last_sent),
        "finished": b.finished,
        "paused_by": [pause_json(p) for p in b.paused_by],
    }


def batch_lines(b: BatchProgress) -> list[str]:
    done = b.sent + b.failed
    share = f" ({100 * done / b.total:.1f}% done)" if b.total else ""
    if b.finished:
        end = f"finished {when(b.expected_end)}"
    elif b.paused:
        held = ", ".join(pause_text(p) for p in b.paused_by) or "a pause"
        end = f"none while paused ({held}): `outbox resume --batch {b.name}`"
    elif b.expected_end is not None:
        end = when(b.expected_end)
    else:
        end = "unknown (nothing sent in the last minute)"
    rows = [
        ("total", str(b.total), f"rows of batch {b.name}{share}"),
        ("sent", str(b.sent), "bajarildi"),
        ("failed", str(b.failed), f"xato, of which {b.cancelled} cancelled by operator"),
        ("sending", str(b.sending), "bajarilmoqda: claimed by a relay now"),
        ("waiting", str(b.waiting), "kutmoqda, not paused"),
        ("paused", str(b.paused), "kutmoqda, held by a pause"),
        ("rate", f"{b.rate:.1f}/s", "sent per second over the last minute"),
    ]
    width = max(len(value) for _, value, _ in rows)
    lines = [f"{name:<13} {value:>{width}}  {note}" for name, value, note in rows]
    lines.append(f"{'expected end':<13} {end}")
    if b.started is not None:
        lines.append(f"{'started':<13} {when(b.started)} (first row enqueued)")
    return lines
