"""Part 7 (``--peers``): procrastinate and PgQueuer on the workload of part 3.

The same number of jobs, each a no-op "send" of a reminder payload, on the same Postgres server
in the same run, each driven through its public API in a database of its own: jobs are enqueued
in bulk beforehand, then one worker drains them and the drain is timed. Each peer runs at the
settings that were fastest for it here (listed in the figure's note); the relay runs at its
defaults (per-bot limit off), measured again in this part so that the ratio compares
neighbours in time.
"""

from __future__ import annotations

import asyncio
import logging
import time
from datetime import timedelta
from importlib.util import find_spec
from typing import Any
from urllib.parse import urlsplit

import psycopg

from bench import db_path
from bench.cost import CostProbe
from bench.harness import Figure, Options, PartUnavailable, Server, at_least

PROCRASTINATE_CONCURRENCY = 8
PGQUEUER_BATCH = 100
PGQUEUER_TABLES = ("pgqueuer", "pgqueuer_log", "pgqueuer_statistics")


def _payload(n: int) -> dict[str, Any]:
    return {"chat_id": 1_000_000 + n, "text": f"Eslatma: vazifa #{n}"}


async def _procrastinate(url: str, jobs: int) -> float:
    import procrastinate

    app = procrastinate.App(connector=procrastinate.PsycopgConnector(conninfo=url))
    done = 0

    @app.task(name="send_reminder")
    async def send_reminder(chat_id: int, text: str) -> None:
        nonlocal done
        done += 1

    async with app.open_async():
        await app.schema_manager.apply_schema_async()
        for first in range(0, jobs, 5_000):
            count = min(5_000, jobs - first)
            await send_reminder.batch_defer_async(*(_payload(first + k) for k in range(count)))
        began = time.perf_counter()
        await app.run_worker_async(
            concurrency=PROCRASTINATE_CONCURRENCY, wait=False, install_signal_handlers=False
        )
        elapsed = time.perf_counter() - began
    if done != jobs:
        raise RuntimeError(f"procrastinate ran {done} of {jobs} jobs")
    return jobs / elapsed


async def _pgqueuer(url: str, jobs: int, probe: CostProbe) -> float:
    import json

    from pgqueuer import PsycopgDriver, QueueManager
    from pgqueuer.models import Job
    from pgqueuer.queries import Queries
    from pgqueuer.types import QueueExecutionMode

    conn = await psycopg.AsyncConnection.connect(url, autocommit=True)
    driver = PsycopgDriver(conn)
    queries = Queries(driver)
    await queries.install()
    manager = QueueManager(queries)
    done = 0

    @manager.entrypoint("send_reminder")
    async def send_reminder(job: Job) -> None:
        nonlocal done
        done += 1

    for first in range(0, jobs, 5_000):
        count = min(5_000, jobs - first)
        await queries.enqueue(
            ["send_reminder"] * count,
            [json.dumps(_payload(first + k)).encode() for k in range(count)],
            [0] * count,
        )
    probe.start()
    began = time.perf_counter()
    await manager.run(
        batch_size=PGQUEUER_BATCH,
        mode=QueueExecutionMode.drain,
        dequeue_timeout=timedelta(seconds=0.1),
    )
    elapsed = time.perf_counter() - began
    probe.stop()
    await conn.close()
    if done != jobs:
        raise RuntimeError(f"PgQueuer ran {done} of {jobs} jobs")
    return jobs / elapsed


def run(server: Server, options: Options) -> list[Figure]:
    missing = [name for name in ("procrastinate", "pgqueuer") if find_spec(name) is None]
    if missing:
        raise PartUnavailable(
            f"{' and '.join(missing)} not installed: `make bench-peers` installs them "
            "(or pip install 'procrastinate>=3' 'pgqueuer>=0.20')"
        )
    jobs = options.scale(50_000, 5_000)
    # Both peers log every job or batch at INFO; keep the table readable.
    for name in ("procrastinate", "pgqueuer"):
        logging.getLogger(name).setLevel(logging.WARNING)
    with server.database("peer_procrastinate", migrated=False) as url:
        procrastinate_rate = asyncio.run(_procrastinate(url, jobs))
    options.say(f"procrastinate: {procrastinate_rate:,.0f} jobs/s")
    # PgQueuer and the relay alternate, twice each: the best of each is the ratio, and the
    # relay's slowest drain of the whole run (part 3's included) must keep its lead too.
    pgqueuer_rates: list[float] = []
    relay_rates: list[float] = []
    # Ten messages each to a tenth as many chats, the chat limits off: per-chat order alone
    # holds a chat's next message until the one before it is done.
    chats = jobs // 10
    ten_each_rates: list[float] = []
    for _ in range(2):
        with server.database("peer_pgqueuer", migrated=False) as url:
            db = urlsplit(url).path.lstrip("/")
            with CostProbe(server.url, url, db, PGQUEUER_TABLES).watching() as probe:
                pgqueuer_rates.append(asyncio.run(_pgqueuer(url, jobs, probe)))
                cost = probe.result(jobs)
        options.say(f"PgQueuer: {pgqueuer_rates[-1]:,.0f} jobs/s")
        options.say(f"  {cost.line()}")
        options.say(f"  {cost.details()}")
        relay_rates.append(db_path.measure(server, options, jobs).rate)
        ten_each_rates.append(
            db_path.measure(
                server, options, jobs, db_path.NO_LIMITS, counted=False, chats=chats
            ).rate
        )
    pgqueuer_rate, relay_rate = max(pgqueuer_rates), max(relay_rates)
    ten_each_rate = max(ten_each_rates)
    slowest = min(options.db_path_rates)
    spread = (
        f"PgQueuer {' · '.join(f'{r:,.0f}' for r in pgqueuer_rates)}, relay "
        f"{' · '.join(f'{r:,.0f}' for r in relay_rates)} (alternating)"
    )
    return [
        Figure(
            "7",
            f"procrastinate, concurrency {PROCRASTINATE_CONCURRENCY}",
            procrastinate_rate,
            "jobs/s",
            baseline="relay",
            ratio=procrastinate_rate / relay_rate,
            note=f"{jobs:,} no-op jobs",
        ),
        Figure(
            "7",
            f"PgQueuer, batch {PGQUEUER_BATCH}",
            pgqueuer_rate,
            "jobs/s",
            baseline="relay",
            ratio=pgqueuer_rate / relay_rate,
            note=f"{jobs:,} no-op jobs, best of two",
        ),
        Figure(
            "7",
            "relay, no-op sender, same run",
            relay_rate,
            "msg/s",
            baseline="PgQueuer",
            **at_least(relay_rate, pgqueuer_rate, 3, "PgQueuer"),
            note=f"{jobs:,} messages, best of two; {spread}",
        ),
        Figure(
            "7",
            f"relay, {chats:,} chats ten messages each, chat limits off (per-chat order)",
            ten_each_rate,
            "msg/s",
            baseline="PgQueuer",
            **at_least(ten_each_rate, pgqueuer_rate, 3, "PgQueuer"),
            note=f"{jobs:,} messages, best of two: "
            + " · ".join(f"{r:,.0f}" for r in ten_each_rates),
        ),
        Figure(
            "7",
            "relay, slowest drain of the run",
            slowest,
            "msg/s",
            baseline="PgQueuer",
            **at_least(slowest, pgqueuer_rate, 2, "PgQueuer"),
            note=f"of {len(options.db_path_rates)} drains, part 3's included, the first too",
        ),
    ]
