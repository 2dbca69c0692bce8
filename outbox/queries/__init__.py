r"""The typed Python face of the outbox's SQL, in modules by caller (docs/how-it-works.md lists
them). Every statement is a named query in ``outbox/sql/*.sql``: the relay's, the CLI's and the
page's run on psycopg through ``outbox.sql``'s executor, the app's on the host's SQLAlchemy
session; the operator's are ``Operation``\ s, written once for every connection.

Callers import from here (``from outbox import queries``; ``queries.claim_due(...)``), not
from the modules. Times that decide behaviour come from the database clock (``now()``), so
many relay hosts agree on what is due.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from outbox.queries._common import (
    AnyConn,
    Operation,
    SyncConn,
    app_steps,
    app_twins,
    run_async,
    run_sync,
    schema_facts,
    schema_facts_sync,
)

# The types callers annotate with: importable from here, though not part of __all__.
from outbox.queries._common import AsyncConn as AsyncConn
from outbox.queries._common import Steps as Steps
from outbox.queries.app import Lane, Route, cancel, enqueue, sent_keys, update_pending
from outbox.queries.batch import BatchProgress, batch_progress, cancel_batch, enqueue_many
from outbox.queries.claim import (
    ClaimedRow,
    ClaimLane,
    ClaimLimits,
    claim_due,
    claim_holder,
    claim_lanes,
)
from outbox.queries.maintenance import (
    Pruned,
    Reaped,
    count_prunable,
    forget_idle_chats,
    prune,
    reap_stale,
    try_maintenance_lock,
)
from outbox.queries.operator import (
    Activity,
    Hold,
    Message,
    ReplayResult,
    SentMarker,
    cancel_waiting,
    count_failed,
    failed_filters,
    finished_per_minute,
    get_message,
    list_messages,
    replay,
    search_messages,
)
from outbox.queries.pause import (
    PaidStop,
    Pause,
    Scope,
    list_pauses,
    paid_lane_stops,
    pause,
    resume,
    resume_paid_lane,
    stop_paid_lane,
    unpaused_lag,
)
from outbox.queries.registry import forget_gone_relays, forget_relay, relay_heartbeat
from outbox.queries.relay import (
    Outcome,
    announce_pause,
    backlog,
    ensure_bot,
    record_outcomes,
    release_unheard_claims,
    still_claimed,
)
from outbox.queries.status import (
    EXPIRING_WITHIN,
    BotFigures,
    LaneFigures,
    QueueFigures,
    QueueStatus,
    RelayRecord,
    TokenState,
    bot_status,
    count_by_state,
    lane_figures,
    list_relays,
    queue_status,
    unserved_queues,
)
from outbox.queries.timing import QueueTiming, bots_timing

if TYPE_CHECKING:
    from outbox.queries._common import AsyncAppConn as AsyncAppConn

__all__ = [
    "EXPIRING_WITHIN",
    "Activity",
    "AnyConn",
    "BatchProgress",
    "BotFigures",
    "ClaimLane",
    "ClaimLimits",
    "ClaimedRow",
    "Hold",
    "Lane",
    "LaneFigures",
    "Message",
    "Operation",
    "Outcome",
    "PaidStop",
    "Pause",
    "Pruned",
    "QueueFigures",
    "QueueStatus",
    "QueueTiming",
    "Reaped",
    "RelayRecord",
    "ReplayResult",
    "Route",
    "Scope",
    "SentMarker",
    "SyncConn",
    "TokenState",
    "announce_pause",
    "app_steps",
    "app_twins",
    "backlog",
    "batch_progress",
    "bot_status",
    "bots_timing",
    "cancel",
    "cancel_batch",
    "cancel_waiting",
    "claim_due",
    "claim_holder",
    "claim_lanes",
    "count_by_state",
    "count_failed",
    "count_prunable",
    "enqueue",
    "enqueue_many",
    "ensure_bot",
    "failed_filters",
    "finished_per_minute",
    "forget_gone_relays",
    "forget_idle_chats",
    "forget_relay",
    "get_message",
    "lane_figures",
    "list_messages",
    "list_pauses",
    "list_relays",
    "paid_lane_stops",
    "pause",
    "prune",
    "queue_status",
    "reap_stale",
    "record_outcomes",
    "relay_heartbeat",
    "release_unheard_claims",
    "replay",
    "resume",
    "resume_paid_lane",
    "run_async",
    "run_sync",
    "schema_facts",
    "schema_facts_sync",
    "search_messages",
    "sent_keys",
    "still_claimed",
    "stop_paid_lane",
    "try_maintenance_lock",
    "unpaused_lag",
    "unserved_queues",
    "update_pending",
]
