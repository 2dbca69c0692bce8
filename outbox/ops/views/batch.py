"""A batch's progress as people see it."""

from __future__ import annotations

import csv
import io
from collections.abc import Iterable, Sequence
from typing import Any

from outbox.ops.views._text import figures, iso, when
from outbox.ops.views.pause import pause_json, pause_text
from outbox.queries import BatchProgress

__all__ = ["REPORT_COLUMNS", "batch_json", "batch_lines", "cancelled_line", "report_csv"]

# The batch report's columns, in the order of the batch_report query's.
REPORT_COLUMNS = (
    "key",
    "chat_id",
    "holat",
    "error_code",
    "attempts",
    "sent_at",
    "message_id",
    "error",
)
# A spreadsheet reads a cell that starts with one of these as a formula.
_FORMULA_START = ("=", "+", "-", "@", "\t", "\r")


def batch_json(b: BatchProgress) -> dict[str, Any]:
    return {
        "batch": b.name,
        "total": b.total,
        "sent": b.sent,
        "failed": b.failed,
        "cancelled": b.cancelled,
        "chat_blocked": b.chat_blocked,
        "sending": b.sending,
        "waiting": b.waiting,
        "paused": b.paused,
        "rate_per_second": round(b.rate, 3),
        "expected_end": iso(b.expected_end),
        "started": iso(b.started),
        "last_sent": iso(b.last_sent),
        "finished": b.finished,
        "paused_by": [pause_json(p) for p in b.paused_by],
        "paid": b.paid,
        "paid_sent": b.paid_sent,
    }


def batch_lines(b: BatchProgress) -> list[str]:
    share = f" ({100 * (b.sent + b.failed) / b.total:.1f}% done)" if b.total else ""
    if b.finished:
        end = f"finished {when(b.expected_end)}"
    elif b.paused:
        held = ", ".join(pause_text(p) for p in b.paused_by) or "a pause"
        end = f"none while paused ({held}): `outbox resume --batch {b.name}`"
    elif b.expected_end is not None:
        end = when(b.expected_end)
    else:
        end = "unknown (nothing sent in the last minute)"
    failed_note = (
        f"xato, of which {b.cancelled} cancelled by operator and {b.chat_blocked} "
        "not sent to a blocked chat"
    )
    rows = [
        ("total", str(b.total), f"rows of batch {b.name}{share}"),
        ("sent", str(b.sent), "bajarildi"),
        ("failed", str(b.failed), failed_note),
        ("sending", str(b.sending), "bajarilmoqda: claimed by a relay now"),
        ("waiting", str(b.waiting), "kutmoqda, not paused"),
        ("paused", str(b.paused), "kutmoqda, held by a pause"),
        ("rate", f"{b.rate:.1f}/s", "sent per second over the last minute"),
    ]
    if b.paid:
        paid_note = f"sent with allow_paid_broadcast, of {b.paid}: up to 0.1 Star each"
        rows.append(("paid", str(b.paid_sent), paid_note))
    lines = figures(rows)
    lines.append(f"{'expected end':<13} {end}")
    if b.started is not None:
        lines.append(f"{'started':<13} {when(b.started)} (first row enqueued)")
    return lines


def cancelled_line(b: BatchProgress, cancelled: int) -> str:
    return (
        f"cancelled {cancelled} waiting messages of batch {b.name} (xato, 'cancelled by "
        f"operator'; `outbox replay --all-failed` or the web page sends them again); "
        f"{b.sending} being sent now finish"
    )


def _cell(value: Any) -> str:
    if value is None:
        return ""
    text = value.isoformat() if hasattr(value, "isoformat") else str(value)
    if text.startswith(_FORMULA_START) and not _is_number(text):
        return "'" + text  # a key or an error is text, never a formula (a chat id may be -100…)
    return text


def _is_number(text: str) -> bool:
    try:
        int(text)
    except ValueError:
        return False
    return True


def report_csv(rows: Iterable[Sequence[Any]], *, header: bool = False) -> str:
    buffer = io.StringIO()
    writer = csv.writer(buffer, lineterminator="\n")
    if header:
        writer.writerow(REPORT_COLUMNS)
    writer.writerows([_cell(v) for v in row] for row in rows)
    return buffer.getvalue()
