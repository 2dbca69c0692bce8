"""The queue's counts and health (``outbox status``, the web page's header, health checks), each
bot's figures, and the fleet's register as operators read it: operations of named queries
(``outbox/sql/status.sql``)."""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from datetime import datetime
from enum import StrEnum
from typing import Any

from outbox.queries._common import Reading, operation
from outbox.queries.registry import MISSED_BEATS
from outbox.states import State


@operation
def count_by_state(*, schema: str) -> Reading[dict[str, int]]:
    counts: dict[str, int] = dict.fromkeys(State, 0)
    for row in (yield "count_by_state", schema, {}):
        counts[row.state] = int(row.n)
    return counts


@dataclass(frozen=True, slots=True)
class QueueFigures:
    """One queue's share of a status: what an operator with a bot per queue looks at."""

    # Rows per holat. bajarildi is None when the outbox is too large to count done rows (the
    # status then estimates their total from the planner's statistics, which know no queues).
    counts: dict[str, int | None]
    lag_seconds: float
    stuck_claims: int = 0
    never_due: int = 0
    held: int = 0  # due pending rows waiting for an earlier message of their chat

    @property
    def stuck(self) -> int:
        return self.stuck_claims + self.never_due


# Pending rows that expire this soon (or have expired and wait for a claim to fail them) are
# counted in a status: what an outage of this long would cost.
EXPIRING_WITHIN = 3600.0  # seconds


@dataclass(frozen=True, slots=True)
class LaneFigures:
    """The lanes' share of a status: who waits at which priority, in a window, near expiry."""

    # Due pending rows per ustuvorlik, highest first; only priorities that hold due rows.
    due_per_priority: dict[int, int] = field(default_factory=dict)
    windowed: int = 0  # pending rows with a delivery window (eng_erta set)
    expiring: int = 0  # pending rows whose eskirish is within EXPIRING_WITHIN (or passed)
    expired: int = 0  # xato rows whose expiry passed before they could be sent
    chat_blocked: int = 0  # xato rows not sent: their chat is gone for the bot (bloklangan)

    @property
    def prioritised(self) -> bool:
        """Whether the priorities tell anything: more than one, or one other than 0, holds
        due rows (an outbox without priorities has all its rows at 0)."""
        return len(self.due_per_priority) > 1 or any(self.due_per_priority)


@dataclass(frozen=True, slots=True)
class QueueStatus:
    counts: dict[str, int]  # rows per holat
    lag_seconds: float  # age of the oldest due pending row; 0 when none is due
    stuck: int  # rows that do not move on: stuck_claims + never_due
    markers: int
    # Figures read from the planner's statistics instead of counted: "bajarildi", "markers".
    estimated: tuple[str, ...] = ()
    # Claims older than the lease or without a claim time (the reaper returns them).
    stuck_claims: int = 0
    # Pending rows due at infinity: no relay ever claims them (the table refuses them since
    # outbox_0002, but a table migrated before may hold some).
    never_due: int = 0
    # Due pending rows held behind an earlier message of their chat (bot, priority) still to
    # be sent: they wait for it (its retry), not for a relay, and are not in lag_seconds.
    held: int = 0
    # The same figures per queue (navbat), by name: the queue asked for, or every queue that
    # holds rows to send, being sent or failed (and done rows, when they are counted).
    queues: dict[str, QueueFigures] = field(default_factory=dict)
    # Priorities, delivery windows and expiry (docs/lanes.md), of the queue asked for or all.
    lanes: LaneFigures = field(default_factory=LaneFigures)


# Done rows and sent markers are counted only below this many rows (by the statistics);
# above, their totals are estimated.
EXACT_COUNT_BELOW = 200_000


@operation
def queue_status(
    *, schema: str, lease_seconds: float, exact_below: int | None = None, queue: str | None = None
) -> Reading[QueueStatus]:
    """Counts and health, of every queue or of ``queue`` (its done rows then counted exactly;
    sent markers are the whole outbox's)."""
    threshold = EXACT_COUNT_BELOW if exact_below is None else exact_below
    tables = {"outbox": f'"{schema}".outbox', "markers": f'"{schema}".yuborilgan'}
    (sizes,) = yield "table_sizes", schema, tables
    # reltuples is -1 until a table is first vacuumed or analysed: below any threshold.
    count_done = queue is not None or sizes.outbox_rows < threshold
    params = {"lease": float(lease_seconds), "navbat": queue, "count_done": count_done}
    per_queue: dict[str, QueueFigures] = {}
    for row in (yield "status_per_queue", schema, params):
        counts: dict[str, int | None] = {
            State.PENDING: int(row.pending),
            State.IN_PROGRESS: int(row.in_progress),
            State.DONE: int(row.done) if count_done else None,
            State.FAILED: int(row.failed),
        }
        per_queue[str(row.queue)] = QueueFigures(
            counts,
            max(float(row.lag), 0.0),
            int(row.stuck_claims),
            int(row.never_due),
            int(row.held),
        )
    if queue is not None and queue not in per_queue:
        per_queue[queue] = QueueFigures(dict.fromkeys(State, 0), 0.0)
    figures = per_queue.values()
    totals: dict[str, int] = {state: sum(f.counts[state] or 0 for f in figures) for state in State}
    estimated: list[str] = []
    if not count_done:
        live = totals[State.PENDING] + totals[State.IN_PROGRESS] + totals[State.FAILED]
        totals[State.DONE] = max(0, round(sizes.outbox_rows) - live)
        estimated.append(State.DONE)
    if sizes.marker_rows >= threshold:
        markers = max(0, round(sizes.marker_rows))
        estimated.append("markers")
    else:
        (counted,) = yield "count_markers", schema, {}
        markers = int(counted.markers)
    stuck = sum(f.stuck_claims for f in figures)
    never_due = sum(f.never_due for f in figures)
    return QueueStatus(
        counts=totals,
        lag_seconds=max((f.lag_seconds for f in figures), default=0.0),
        stuck=stuck + never_due,
        markers=markers,
        estimated=tuple(estimated),
        stuck_claims=stuck,
        never_due=never_due,
        held=sum(f.held for f in figures),
        queues=per_queue,
        lanes=(yield from lane_figures.steps(schema=schema, queue=queue)),
    )


@operation
def lane_figures(*, schema: str, queue: str | None = None) -> Reading[LaneFigures]:
    """Priorities, windows and expiry of every queue's rows, or of ``queue``'s."""
    due: dict[int, int] = {}
    windowed = expiring = expired = chat_blocked = 0
    for row in (yield "lane_figures", schema, {"navbat": queue, "within": EXPIRING_WITHIN}):
        if row.priority is None:  # the failed rows' part
            expired += int(row.expired)
            chat_blocked += int(row.chat_blocked)
            continue
        if row.due:
            due[int(row.priority)] = int(row.due)
        windowed += int(row.windowed)
        expiring += int(row.expiring)
    return LaneFigures(
        due_per_priority=dict(sorted(due.items(), reverse=True)),
        windowed=windowed,
        expiring=expiring,
        expired=expired,
        chat_blocked=chat_blocked,
    )


# --- the fleet: relays and bots ------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class RelayRecord:
    """One relay of the register, as read now."""

    id: str
    host: str
    pid: int
    version: str
    queues: tuple[str, ...]
    bots: tuple[str, ...]
    rejected_bots: tuple[str, ...]
    started_at: datetime
    last_seen: datetime
    interval: float
    in_flight: int
    totals: dict[str, int]
    alive: bool
    silent_seconds: float  # since its last heartbeat


def _relay(row: Any) -> RelayRecord:
    totals = row.totals if isinstance(row.totals, dict) else json.loads(row.totals)
    return RelayRecord(
        id=row.id,
        host=row.host,
        pid=row.pid,
        version=row.version,
        queues=tuple(row.queues),
        bots=tuple(row.bots),
        rejected_bots=tuple(row.rejected_bots),
        started_at=row.started_at,
        last_seen=row.last_seen,
        interval=float(row.interval),
        in_flight=row.in_flight,
        totals={str(k): int(v) for k, v in totals.items()},
        alive=bool(row.alive),
        silent_seconds=float(row.silent_seconds),
    )


@operation
def list_relays(*, schema: str) -> Reading[list[RelayRecord]]:
    """Every relay in the register, alive or gone, by host and pid."""
    rows = yield "list_relays", schema, {"missed_beats": MISSED_BEATS}
    return [_relay(row) for row in rows]


@operation
def unserved_queues(*, schema: str) -> Reading[dict[str, int]]:
    """Queues with due rows that no live relay serves, and how many rows are due in each."""
    rows = yield "unserved_queues", schema, {"missed_beats": MISSED_BEATS}
    return {str(row.queue): int(row.due) for row in rows}


class TokenState(StrEnum):
    SERVED = "served"  # a live relay holds a token Telegram accepts
    REJECTED = "rejected"  # every live relay that holds it was told 401
    MISSING = "missing"  # no live relay holds its token: its rows wait


@dataclass(frozen=True, slots=True)
class BotFigures:
    bot: str
    pending: int
    in_progress: int
    failed: int
    lag_seconds: float  # age of its oldest due pending row; 0 when none is due
    relays: int  # live relays that hold its token
    token: TokenState
    flood_paused: bool  # Telegram's flood control (bot_holati.pauza_tugashi)
    operator_paused: bool  # outbox pause --bot
    # Its paid lane is stopped (bot_holati.pullik_pauza_tugashi): Telegram's words; None: not.
    paid_stopped: str | None = None


def _token(relays: int, rejected: int) -> TokenState:
    if not relays:
        return TokenState.MISSING
    return TokenState.REJECTED if rejected >= relays else TokenState.SERVED


@operation
def bot_status(*, schema: str, bot: str | None = None) -> Reading[list[BotFigures]]:
    """The figures of every bot that rows name or a live relay serves (or of ``bot``). The
    token itself is never in the database: the register holds the bots' public ids."""
    rows = yield "bot_status", schema, {"bot": bot, "missed_beats": MISSED_BEATS}
    return [
        BotFigures(
            bot=str(row.bot),
            pending=int(row.pending),
            in_progress=int(row.in_progress),
            failed=int(row.failed),
            lag_seconds=max(float(row.lag), 0.0),
            relays=int(row.relays),
            token=_token(int(row.relays), int(row.rejected)),
            flood_paused=bool(row.flood_paused),
            operator_paused=bool(row.operator_paused),
            paid_stopped=None if row.paid_stopped is None else str(row.paid_stopped),
        )
        for row in rows
    ]
