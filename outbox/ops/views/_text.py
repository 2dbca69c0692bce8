"""The few ways every view writes things: times, durations, clipped text, aligned tables."""

from __future__ import annotations

import json
from collections.abc import Sequence
from datetime import UTC, datetime
from typing import Any

from outbox.durations import format_duration

__all__ = ["clip", "figures", "iso", "json_text", "span", "table", "when"]

span = format_duration  # how every duration is shown to operators


def when(moment: datetime | None) -> str:
    """A time in UTC, to the second: the same answer on every operator's machine."""
    if moment is None:
        return "-"
    return moment.astimezone(UTC).strftime("%Y-%m-%d %H:%M:%SZ")


def iso(moment: datetime | None) -> str | None:
    return None if moment is None else moment.isoformat()


def clip(text: str | None, width: int) -> str:
    """One line of at most ``width`` characters ('-' for nothing)."""
    if not text:
        return "-"
    line = " ".join(text.split())
    return line if len(line) <= width else line[: width - 1] + "…"


def json_text(value: Any, indent: int | None = None) -> str:
    try:
        return json.dumps(value, indent=indent, ensure_ascii=False, sort_keys=True)
    except RecursionError:
        return "(nested too deeply to print)"


def table(headers: Sequence[str], rows: Sequence[Sequence[str]], numeric: set[int]) -> list[str]:
    """Columns padded to their widest cell; numbers right-aligned; no trailing spaces."""
    widths = [max(len(cell) for cell in column) for column in zip(headers, *rows, strict=True)]
    lines = []
    for row in (headers, *rows):
        cells = [
            cell.rjust(width) if i in numeric else cell.ljust(width)
            for i, (cell, width) in enumerate(zip(row, widths, strict=True))
        ]
        lines.append("  ".join(cells).rstrip())
    return lines


def figures(rows: Sequence[tuple[str, str, str]]) -> list[str]:
    """``name  figure  note`` lines, the figures right-aligned in one column."""
    width = max(len(value) for _, value, _ in rows)
    return [f"{name:<13} {value:>{width}}  {note}".rstrip() for name, value, note in rows]
