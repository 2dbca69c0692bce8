"""The fleet's register (table ``relaylar``): each relay's heartbeat (the operator reads the
register through ``outbox.queries.status``).

A relay is alive while its last heartbeat is younger than ``MISSED_BEATS`` of its own
intervals, by the database clock; its row stays until maintenance forgets it. Every statement
stands alone (autocommit, no session state), so all of it works through PgBouncer in
transaction pooling.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence

from outbox.queries._common import AsyncConn, _sql

__all__ = [
    "MISSED_BEATS",
    "forget_gone_relays",
    "forget_relay",
    "relay_heartbeat",
]

# Heartbeats a relay may miss before it is called gone (with the default 5 s interval: 20 s).
MISSED_BEATS = 4

# --- the relay's own row (psycopg, the relay's connection) -------------------------------------

# Insert on the first beat, and again if maintenance forgot the row while the relay could not
# reach the database for a long time; update on every other beat.
_HEARTBEAT = """
INSERT INTO {relaylar}
    (id, host, pid, versiya, navbatlar, botlar, rad_botlar, signal_oraligi, jarayonda, jami)
VALUES (%(id)s, %(host)s, %(pid)s, %(version)s, %(queues)s, %(bots)s, %(rejected)s,
        %(interval)s, %(in_flight)s, %(totals)s::jsonb)
ON CONFLICT (id) DO UPDATE
SET oxirgi_signal = now(), jarayonda = EXCLUDED.jarayonda, jami = EXCLUDED.jami,
    -- A relay with a folder of tokens gains and loses bots while it runs.
    botlar = EXCLUDED.botlar, rad_botlar = EXCLUDED.rad_botlar
"""


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
    await conn.execute(
        _sql(_HEARTBEAT, schema),
        {
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
        },
    )


_FORGET_RELAY = "DELETE FROM {relaylar} WHERE id = %(id)s"


async def forget_relay(conn: AsyncConn, *, schema: str, relay_id: str) -> None:
    """A relay that stops cleanly takes its row with it."""
    await conn.execute(_sql(_FORGET_RELAY, schema), {"id": relay_id})


_FORGET_GONE = """
DELETE FROM {relaylar} WHERE oxirgi_signal < now() - make_interval(secs => %(after)s)
"""


async def forget_gone_relays(conn: AsyncConn, *, schema: str, after_seconds: float) -> int:
    """Delete the rows of relays silent for longer than ``after_seconds``; how many."""
    cursor = await conn.execute(_sql(_FORGET_GONE, schema), {"after": after_seconds})
    return cursor.rowcount
