"""The queue's status as people see it: ``outbox status`` and the page's header and chart."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from outbox.ops.views._text import figures, span, table, when
from outbox.ops.views.bots import bot_json, unserved_bots_line
from outbox.ops.views.pause import paid_stop_json, pause_json
from outbox.queries import (
    EXPIRING_WITHIN,
    Activity,
    LaneFigures,
    QueueFigures,
    QueueStatus,
    TokenState,
)
from outbox.states import FailureCode, State
from outbox.vocabulary import label

if TYPE_CHECKING:
    from outbox.ops import StatusReport

__all__ = [
    "CHART_HEIGHT",
    "CHART_WIDTH",
    "chart_bars",
    "health",
    "lanes_lines",
    "status_json",
    "status_lines",
]


def status_lines(status: QueueStatus, *, lease: float, max_lag: float) -> list[str]:
    def counted(name: str, n: int, note: str = "") -> tuple[str, str, str]:
        if name not in status.estimated:
            return name, str(n), note
        about = "about: from table statistics"
        return name, f"~{n}", f"{note}; {about}" if note else about

    rows = [counted(state, n) for state, n in status.counts.items()]
    rows.append(("lag", span(status.lag_seconds), f"oldest due pending row (max {span(max_lag)})"))
    if status.held:  # only when some are: an outbox whose chats flow shows no such line
        note = "due pending rows waiting for an earlier message of their chat (not in the lag)"
        rows.append(("held", str(status.held), note))
    stuck = (
        f"claims older than the {span(lease)} lease or without a claim time; pending rows never due"
    )
    rows.append(("stuck", str(status.stuck), stuck))
    rows.append(counted("markers", status.markers, "sent markers (yuborilgan)"))
    lines = figures(rows + lanes_lines(status.lanes))
    if len(status.queues) > 1:
        lines += ["", *queues_table(status.queues)]
    return lines


def lanes_lines(lanes: LaneFigures) -> list[tuple[str, str, str]]:
    """Priorities, windows and expiry: only the lines that say something (none without lanes)."""
    lines = []
    if lanes.prioritised:
        per = ", ".join(f"{priority}: {n}" for priority, n in lanes.due_per_priority.items())
        due = str(sum(lanes.due_per_priority.values()))
        lines.append(("priorities", due, f"due pending rows per {label('priority')}: {per}"))
    if lanes.windowed:
        note = f"pending rows with a delivery window ({label('earliest')}: may go early)"
        lines.append(("windowed", str(lanes.windowed), note))
    if lanes.expiring:
        note = f"pending rows whose {label('expires_at')} is within {span(EXPIRING_WITHIN)}"
        lines.append(("expiring", str(lanes.expiring), note))
    if lanes.expired:
        note = (
            f"{State.FAILED} rows that expired unsent ({label('error_code')} {FailureCode.EXPIRED})"
        )
        lines.append(("expired", str(lanes.expired), note))
    if lanes.chat_blocked:
        note = (
            f"{State.FAILED} rows not sent: their chat is gone for the bot "
            f"({label('error_code')} {FailureCode.CHAT_BLOCKED}; `outbox chats --blocked`)"
        )
        lines.append(("chat blocked", str(lanes.chat_blocked), note))
    return lines


def lanes_json(lanes: LaneFigures) -> dict[str, Any]:
    """The same figures, always all of them (JSON object keys are strings: "10", "-5")."""
    return {
        "due_per_priority": {str(p): n for p, n in lanes.due_per_priority.items()},
        "windowed": lanes.windowed,
        "expiring_within_hour": lanes.expiring,
        "expired": lanes.expired,
        "chat_blocked": lanes.chat_blocked,
    }


def queues_table(queues: Mapping[str, QueueFigures]) -> list[str]:
    """One line per queue (done rows as ``-`` when the outbox is too large to count them)."""
    rows = [
        (
            name,
            *(
                "-" if figures.counts[state] is None else str(figures.counts[state])
                for state in State
            ),
            span(figures.lag_seconds),
            str(figures.stuck),
        )
        for name, figures in queues.items()
    ]
    return table((label("queue"), *State, "lag", "stuck"), rows, numeric={1, 2, 3, 4, 5, 6})


def _figures_json(figures: QueueStatus | QueueFigures) -> dict[str, Any]:
    """The figures the whole status and each of its queues share."""
    return {
        label("state"): figures.counts,
        "lag_seconds": figures.lag_seconds,
        "stuck": figures.stuck,
        "stuck_claims": figures.stuck_claims,
        "never_due": figures.never_due,
        "held": figures.held,
    }


def unserved_line(unserved: Mapping[str, int]) -> str:
    parts = [f"{due} in {name}" for name, due in unserved.items()]
    return (
        f"due rows wait and no live relay serves their queue: {', '.join(parts)} "
        "(start a relay with --queue for it; `outbox relays` lists the fleet)"
    )


def health(
    report: StatusReport, *, lease: float, max_lag: float, max_failed: int | None
) -> tuple[list[str], list[str]]:
    """The warnings (said, not failed on) and the problems (exit 8) of a status."""
    status = report.status
    # A warning, not a problem: the lag says whether the wait has become one (--max-lag).
    warnings = [unserved_line(report.unserved)] if report.unserved else []
    # A bot's rows wait on purpose while it is paused; with no usable token they wait for good.
    stranded = [b for b in report.bots if b.pending and b.token is not TokenState.SERVED]
    if stranded:
        warnings.append(unserved_bots_line(stranded))
    # Telegram refused the bot's paid broadcasts: its paid rows wait on purpose.
    warnings += [
        f"bot {stop.bot}: paid broadcasts stopped until {when(stop.until)} ({stop.reason}); "
        f"`outbox resume --paid {stop.bot}` once its Stars balance allows"
        for stop in report.paid_stops
    ]
    problems = []
    lag = max(report.lags.values(), default=0.0)
    if lag > max_lag:
        late = _named(status, [name for name, one in report.lags.items() if one > max_lag])
        problems.append(
            f"lag {span(lag)}{late} is over --max-lag {span(max_lag)} (is a relay running?)"
        )
    if status.stuck_claims:
        stuck = _named(status, [n for n, f in status.queues.items() if f.stuck_claims > 0])
        problems.append(
            f"{status.stuck_claims} claims{stuck} are older than the {span(lease)} lease "
            "or have no claim time (a relay died or hangs, or a row was claimed by hand; "
            "a running relay reaps them within a minute, or run `outbox reap`)"
        )
    if status.never_due:
        problems.append(
            f"{status.never_due} pending rows are due at infinity and will never be sent "
            "(`outbox list --holat kutmoqda`; set their keyingi_urinish, or cancel them)"
        )
    failed = status.counts[State.FAILED]
    if max_failed is not None and failed > max_failed:
        problems.append(
            f"{failed} failed messages, more than --max-failed {max_failed} "
            "(`outbox list --holat xato`)"
        )
    return warnings, problems


def _named(status: QueueStatus, names: list[str]) -> str:
    """Which queues a problem is in (" in queue bot2"): each bot's relays serve their own."""
    if len(status.queues) < 2 or not names:
        return ""
    return f" in queue{'s' if len(names) > 1 else ''} {', '.join(names)}"


def status_json(report: StatusReport, warnings: list[str], problems: list[str]) -> dict[str, Any]:
    status = report.status
    return {
        **_figures_json(status),
        "markers": status.markers,
        "estimated": list(status.estimated),
        "failed": status.counts[State.FAILED],
        "healthy": not problems,
        "problems": problems,
        "warnings": warnings,
        "unserved_queues": report.unserved,
        "queues": {name: _figures_json(one) for name, one in status.queues.items()},
        "lanes": lanes_json(status.lanes),
        "bots": [bot_json(b) for b in report.bots],
        "paused": [pause_json(p) for p in report.paused],
        "paid_stopped": [paid_stop_json(s) for s in report.paid_stops],
    }


CHART_WIDTH = 600  # the SVG's own units; CSS scales it to the page
CHART_HEIGHT = 100


@dataclass(frozen=True, slots=True)
class Bar:
    x: float
    width: float
    delivered_y: float
    delivered_height: float
    failed_y: float
    failed_height: float
    label: str  # the bar's tooltip


def chart_bars(activity: Activity) -> list[Bar]:
    """One stacked bar per minute, oldest first: delivered at the bottom, failed on top."""
    pairs = list(zip(activity.delivered, activity.failed, strict=True))
    scale = CHART_HEIGHT / max(max((d + f for d, f in pairs), default=0), 1)
    slot = CHART_WIDTH / max(len(pairs), 1)
    bars = []
    for i, (delivered, failed) in enumerate(pairs):
        ago = len(pairs) - 1 - i
        d_height, f_height = delivered * scale, failed * scale
        moment = f"{ago} min ago" if ago else "this minute"
        bars.append(
            Bar(
                x=i * slot + slot * 0.1,
                width=slot * 0.8,
                delivered_y=CHART_HEIGHT - d_height,
                delivered_height=d_height,
                failed_y=CHART_HEIGHT - d_height - f_height,
                failed_height=f_height,
                label=f"{moment}: {delivered} delivered, {failed} failed",
            )
        )
    return bars
