"""The queue's counts and health: ``outbox status``, the web page's header, health checks.

Operator statements, run through SQLAlchemy on a sync connection or session.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from outbox.queries._common import SyncConn, _execute
from outbox.states import FailureCode, State

# --- reading -------------------------------------------------------------------------------------

_COUNT_BY_STATE = "SELECT holat, count(*) FROM {outbox} GROUP BY holat"


def count_by_state(conn: SyncConn, *, schema: str) -> dict[str, int]:
    counts: dict[str, int] = dict.fromkeys(State, 0)
    for state, count in _execute(conn, schema, _COUNT_BY_STATE).fetchall():
        counts[state] = int(count)
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

    @property
    def prioritised(self) -> bool:
        """Whether the priorities tell anything: more than one, or one other than 0, holds
        due rows (an outbox without priorities has all its rows at 0)."""
        return len(self.due_per_priority) > 1 or any(self.due_per_priority)

    @property
    def in_use(self) -> bool:
        """Whether any lane figure is worth a line: a plain outbox shows none of them."""
        return self.prioritised or bool(self.windowed or self.expiring or self.expired)


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
    # The same figures per queue (navbat), by name: the queue asked for, or every queue that
    # holds rows to send, being sent or failed (and done rows, when they are counted).
    queues: dict[str, QueueFigures] = field(default_factory=dict)
    # Priorities, delivery windows and expiry (docs/lanes.md), of the queue asked for or all.
    lanes: LaneFigures = field(default_factory=LaneFigures)


# A status is a health check, run often: the live states are counted through their partial
# indexes (as large as the backlog), while done rows and sent markers, which grow with every
# message ever sent until retention removes them, are counted only in small tables and
# otherwise read from the planner's statistics (kept fresh by autovacuum).
EXACT_COUNT_BELOW = 200_000  # rows, by the statistics: above this, estimate

# One queue's figures. The plain (holat) conditions first keep the partial indexes usable.
_QUEUE_STATUS = """
SELECT
    (SELECT count(*) FROM {outbox} WHERE holat = {pending} AND navbat = :navbat) AS pending,
    (SELECT count(*) FROM {outbox} WHERE holat = {in_progress} AND navbat = :navbat)
        AS in_progress,
    (SELECT count(*) FROM {outbox} WHERE holat = {failed} AND navbat = :navbat) AS failed,
    (SELECT coalesce(extract(epoch FROM now() - min(keyingi_urinish)), 0)::float8
     FROM {outbox} WHERE holat = {pending} AND keyingi_urinish <= now()
                     AND keyingi_urinish > '-infinity' AND navbat = :navbat) AS lag,
    (SELECT count(*) FROM {outbox} WHERE holat = {in_progress} AND navbat = :navbat
        AND (band_vaqti IS NULL OR band_vaqti = 'infinity'
             OR band_vaqti < now() - make_interval(secs => :lease))) AS stuck_claims,
    (SELECT count(*) FROM {outbox} WHERE holat = {pending} AND keyingi_urinish = 'infinity'
        AND navbat = :navbat) AS never_due
"""

# The tables' sizes by the planner's statistics: whether done rows and markers are counted.
_TABLE_SIZES = """
SELECT (SELECT reltuples::float8 FROM pg_class WHERE oid = '{outbox}'::regclass),
       (SELECT reltuples::float8 FROM pg_class WHERE oid = '{yuborilgan}'::regclass)
"""

# The figures of every queue, from which the whole outbox's are summed. Each state is read on
# its own, so that its partial index
# serves it: pending rows from (navbat, keyingi_urinish, id) alone. Done rows only in a table
# small enough to count them.
_STATUS_PER_QUEUE = """
SELECT navbat AS queue,
       count(*) FILTER (WHERE holat = {pending}) AS pending,
       count(*) FILTER (WHERE holat = {in_progress}) AS in_progress,
       count(*) FILTER (WHERE holat = {done}) AS done,
       count(*) FILTER (WHERE holat = {failed}) AS failed,
       coalesce(extract(epoch FROM now() - min(keyingi_urinish) FILTER (
           WHERE holat = {pending} AND keyingi_urinish <= now()
             AND keyingi_urinish > '-infinity')), 0)::float8 AS lag,
       count(*) FILTER (WHERE holat = {in_progress} AND (band_vaqti IS NULL
           OR band_vaqti = 'infinity' OR band_vaqti < now() - make_interval(secs => :lease)))
           AS stuck_claims,
       count(*) FILTER (WHERE holat = {pending} AND keyingi_urinish = 'infinity') AS never_due
FROM (
    SELECT navbat, {pending} AS holat, keyingi_urinish, NULL::timestamptz AS band_vaqti
    FROM {outbox} WHERE holat = {pending}
    UNION ALL
    SELECT navbat, {in_progress}, NULL, band_vaqti FROM {outbox} WHERE holat = {in_progress}
    UNION ALL
    SELECT navbat, {failed}, NULL, NULL FROM {outbox} WHERE holat = {failed}
    UNION ALL
    SELECT navbat, {done}, NULL, NULL FROM {outbox}
    WHERE holat = {done} AND CAST(:count_done AS boolean)
) r
GROUP BY navbat
ORDER BY navbat
"""

# The lanes' figures in one statement: the pending rows read once through their partial index
# (ustuvorlik and keyingi_urinish from outbox_ustuvorlik_idx; eng_erta and eskirish from the
# row), the failed ones through theirs.
_LANE_FIGURES = """
SELECT ustuvorlik AS priority,
       count(*) FILTER (WHERE keyingi_urinish <= now()) AS due,
       count(*) FILTER (WHERE eng_erta IS NOT NULL) AS windowed,
       count(*) FILTER (WHERE eskirish <= now() + make_interval(secs => :within)) AS expiring,
       0::bigint AS expired
FROM {outbox}
WHERE holat = {pending} AND (CAST(:navbat AS text) IS NULL OR navbat = CAST(:navbat AS text))
GROUP BY ustuvorlik
UNION ALL
SELECT NULL, 0, 0, 0, count(*)
FROM {outbox}
WHERE holat = {failed} AND xato_turi = CAST(:expired AS text)
  AND (CAST(:navbat AS text) IS NULL OR navbat = CAST(:navbat AS text))
"""

_COUNT_DONE = "SELECT count(*) FROM {outbox} WHERE holat = {done} AND navbat = :navbat"
_COUNT_MARKERS = "SELECT count(*) FROM {yuborilgan}"


def queue_status(
    conn: SyncConn,
    *,
    schema: str,
    lease_seconds: float,
    exact_below: int | None = None,
    queue: str | None = None,
) -> QueueStatus:
    """Counts and health, of every queue or of ``queue`` (its done rows then counted exactly;
    sent markers are the whole outbox's)."""
    threshold = EXACT_COUNT_BELOW if exact_below is None else exact_below
    params = {"lease": float(lease_seconds), "navbat": queue}
    outbox_rows, marker_rows = _execute(conn, schema, _TABLE_SIZES).one()
    estimated: list[str] = []
    if queue is None:
        # reltuples is -1 until a table is first vacuumed or analyzed: below any threshold.
        count_done = outbox_rows < threshold
        per_queue = _status_per_queue(conn, schema, params, count_done)
        figures = per_queue.values()
        pending, in_progress, failed = (
            sum(f.counts[state] or 0 for f in figures)
            for state in (State.PENDING, State.IN_PROGRESS, State.FAILED)
        )
        lag = max((f.lag_seconds for f in figures), default=0.0)
        stuck = sum(f.stuck_claims for f in figures)
        never_due = sum(f.never_due for f in figures)
        if count_done:
            done = sum(f.counts[State.DONE] or 0 for f in figures)
        else:
            done = max(0, round(outbox_rows) - pending - in_progress - failed)
            estimated.append(State.DONE)
    else:
        one = _execute(conn, schema, _QUEUE_STATUS, params).one()
        pending, in_progress, failed = one.pending, one.in_progress, one.failed
        lag, stuck, never_due = one.lag, one.stuck_claims, one.never_due
        done = _execute(conn, schema, _COUNT_DONE, {"navbat": queue}).scalar_one()
    if marker_rows >= threshold:
        markers = max(0, round(marker_rows))
        estimated.append("markers")
    else:
        markers = _execute(conn, schema, _COUNT_MARKERS).scalar_one()
    counts: dict[str, int] = {
        State.PENDING: pending,
        State.IN_PROGRESS: in_progress,
        State.DONE: done,
        State.FAILED: failed,
    }
    totals = {state: int(n) for state, n in counts.items()}
    lag_seconds = max(float(lag), 0.0)
    if queue is not None:
        per_queue = {queue: QueueFigures(dict(totals), lag_seconds, int(stuck), int(never_due))}
    return QueueStatus(
        counts=totals,
        lag_seconds=lag_seconds,
        stuck=int(stuck) + int(never_due),
        markers=int(markers),
        estimated=tuple(estimated),
        stuck_claims=int(stuck),
        never_due=int(never_due),
        queues=per_queue,
        lanes=lane_figures(conn, schema=schema, queue=queue),
    )


def lane_figures(conn: SyncConn, *, schema: str, queue: str | None = None) -> LaneFigures:
    """Priorities, windows and expiry of every queue's rows, or of ``queue``'s."""
    params = {"navbat": queue, "within": EXPIRING_WITHIN, "expired": FailureCode.EXPIRED.value}
    due: dict[int, int] = {}
    windowed = expiring = expired = 0
    for row in _execute(conn, schema, _LANE_FIGURES, params):
        if row.priority is None:  # the failed rows' part
            expired += int(row.expired)
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
    )


def _status_per_queue(
    conn: SyncConn, schema: str, params: Mapping[str, Any], count_done: bool
) -> dict[str, QueueFigures]:
    rows = _execute(conn, schema, _STATUS_PER_QUEUE, {**params, "count_done": count_done})
    per_queue = {}
    for row in rows:
        counts: dict[str, int | None] = {
            State.PENDING: int(row.pending),
            State.IN_PROGRESS: int(row.in_progress),
            State.DONE: int(row.done) if count_done else None,
            State.FAILED: int(row.failed),
        }
        per_queue[str(row.queue)] = QueueFigures(
            counts, max(float(row.lag), 0.0), int(row.stuck_claims), int(row.never_due)
        )
    return per_queue
