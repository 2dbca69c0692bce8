"""The fleet's register (table ``relaylar``): each relay's heartbeat, the list of relays, and
the queues no live relay serves.

A relay is alive while its last heartbeat is younger than ``MISSED_BEATS`` of its own
intervals, by the database clock; its row stays until maintenance forgets it. Every statement
stands alone (autocommit, no session state), so all of it works through PgBouncer in
transaction pooling.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from outbox import sql
from outbox.queries._common import AsyncConn, SyncConn, _execute
from outbox.vocabulary import RELAY

__all__ = [
    "MISSED_BEATS",
    "RelayRecord",
    "forget_gone_relays",
    "forget_relay",
    "list_relays",
    "relay_heartbeat",
    "unserved_queues",
]

# Heartbeats a relay may miss before it is called gone (with the default 5 s interval: 20 s).
MISSED_BEATS = 4

# --- the relay's own row (psycopg, the relay's connection; outbox/sql/heartbeat.sql) -----------


async def relay_heartbeat(
    conn: AsyncConn,
    *,
    schema: str,
    relay_id: str,
    host: str,
    pid: int,
    version: str,
    queues: Sequence[str],
    bots: Sequence[str],
    interval: float,
    in_flight: int,
    totals: Mapping[str, int],
    rejected_bots: Sequence[str] = (),
) -> None:
    """Register the relay, or say that it is still alive and what it has done."""
    params = {
        "id": relay_id,
        "host": host,
        "pid": pid,
        "version": version,
        "queues": list(queues),
        "bots": list(bots),
        "rejected": list(rejected_bots),
        "interval": interval,
        "in_flight": in_flight,
        "totals": json.dumps(dict(totals)),
    }
    await sql.execute(conn, "relay_heartbeat", schema=schema, params=params)


async def forget_relay(conn: AsyncConn, *, schema: str, relay_id: str) -> None:
    """A relay that stops cleanly takes its row with it."""
    await sql.execute(conn, "forget_relay", schema=schema, params={"id": relay_id})


async def forget_gone_relays(conn: AsyncConn, *, schema: str, after_seconds: float) -> int:
    """Delete the rows of relays silent for longer than ``after_seconds``; how many."""
    params = {"after": after_seconds}
    return await sql.execute(conn, "forget_gone_relays", schema=schema, params=params)


# --- reading (operator commands and the web page, SQLAlchemy) ----------------------------------

_ALIVE = f"r.oxirgi_signal > now() - make_interval(secs => r.signal_oraligi * {MISSED_BEATS})"


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


_LIST_RELAYS = f"""
SELECT {", ".join(f"r.{name.column} AS {name.python}" for name in RELAY)},
       {_ALIVE} AS alive,
       greatest(extract(epoch FROM now() - r.oxirgi_signal), 0)::float8 AS silent_seconds
FROM {{relaylar}} r
ORDER BY r.host, r.pid, r.id
"""


def _record(found: Any) -> RelayRecord:
    values = dict(found._mapping)
    values["queues"] = tuple(values["queues"])
    values["bots"] = tuple(values["bots"])
    values["rejected_bots"] = tuple(values["rejected_bots"])
    values["totals"] = {str(k): int(v) for k, v in dict(values["totals"]).items()}
    values["interval"] = float(values["interval"])
    values["silent_seconds"] = float(values["silent_seconds"])
    return RelayRecord(**values)


def list_relays(conn: SyncConn, *, schema: str) -> list[RelayRecord]:
    """Every relay in the register, alive or gone, by host and pid."""
    return [_record(found) for found in _execute(conn, schema, _LIST_RELAYS).fetchall()]


# Due rows grouped first (through the partial index on pending rows), then the few queues
# matched against the few live relays.
_UNSERVED_QUEUES = f"""
SELECT d.navbat, d.due
FROM (SELECT navbat, count(*) AS due FROM {{outbox}}
      WHERE holat = {{pending}} AND keyingi_urinish <= now() GROUP BY navbat) d
WHERE NOT EXISTS (SELECT 1 FROM {{relaylar}} r WHERE d.navbat = ANY (r.navbatlar) AND {_ALIVE})
ORDER BY d.navbat
"""


def unserved_queues(conn: SyncConn, *, schema: str) -> dict[str, int]:
    """Queues with due rows that no live relay serves, and how many rows are due in each."""
    rows = _execute(conn, schema, _UNSERVED_QUEUES).fetchall()
    return {str(queue): int(due) for queue, due in rows}
