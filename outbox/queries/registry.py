"""The fleet's register (table ``relaylar``): each relay's heartbeat (the operator's reading of
it is in ``outbox.queries.status``).

A relay is alive while its last heartbeat is younger than ``MISSED_BEATS`` of its own
intervals, by the database clock; its row stays until maintenance forgets it. Every statement
stands alone (autocommit, no session state), so all of it works through PgBouncer in
transaction pooling.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence

from outbox import sql
from outbox.queries._common import AsyncConn

__all__ = [
    "MISSED_BEATS",
    "forget_gone_relays",
    "forget_relay",
    "relay_heartbeat",
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
