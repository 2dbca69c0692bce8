"""Part 5: growth. What 1,000,000 done rows cost a claim, and how big the outbox stays.

Claim cost: three databases, one holding 1,000,000 ``bajarildi`` rows with their sent markers,
one holding 1,000,000 pending rows of four other queues (other bots' backlog, all due earlier),
one empty; all get the same pending rows of the claimed queue and fresh statistics. The relay's
claim statement (``queries.claim_due``, 64 rows, on a connection set up as the relay's claim
connection is) is timed round trip by round trip, alternating
between the databases so that noise hits them alike; each claimed batch is then recorded as
sent (untimed).

Size: the relay (no-op sender, per-bot limit off) drains 1,000,000 messages that a producer keeps
enqueueing while it runs, with retention on. Retention is compressed from a week to seconds so
that the steady state of a long-running outbox shows within a minute.
"""

from __future__ import annotations

import asyncio
import threading
import time
from dataclasses import dataclass

import psycopg

from bench.harness import Figure, Options, Server, fill, percentile, vacuum_analyze
from outbox import queries
from outbox.config import RelayConfig
from outbox.db import async_connect
from outbox.ratelimit import RateLimits
from outbox.relay import Relay
from outbox.states import State
from outbox.telegram import NullSender

CLAIM = 64
OTHER_QUEUES = 4
_MARK_ALL_SENT = """
INSERT INTO yuborilgan (kalit, chat_id, message_id)
SELECT kalit, (payload->>'chat_id')::bigint, id FROM outbox
"""
_SIZES = """
SELECT pg_relation_size('outbox'), pg_indexes_size('outbox'),
       pg_total_relation_size('yuborilgan'), (SELECT count(*) FROM outbox)
"""
_AUTOVACUUMS = "SELECT autovacuum_count FROM pg_stat_user_tables WHERE relname = 'outbox'"


@dataclass
class Sizes:
    table_bytes: int
    index_bytes: int
    markers_bytes: int
    rows: int

    def describe(self) -> str:
        mib = 1024 * 1024
        return (
            f"outbox {self.table_bytes / mib:.1f} MiB + indexes {self.index_bytes / mib:.1f} MiB "
            f"({self.rows:,} rows); markers {self.markers_bytes / mib:.1f} MiB"
        )


def sizes(url: str) -> Sizes:
    with psycopg.connect(url) as conn:
        row = conn.execute(_SIZES).fetchone()
    assert row is not None
    return Sizes(*(int(v) for v in row))


async def _claim_times(urls: list[str], rounds: int) -> list[list[float]]:
    """Seconds per claim round trip, per database, alternating between them."""
    conns = [await async_connect(url) for url in urls]
    times: list[list[float]] = [[] for _ in urls]
    try:
        for _ in range(rounds):
            for conn, spent in zip(conns, times, strict=True):
                began = time.perf_counter()
                rows = await queries.claim_due(conn, CLAIM, schema="public")
                spent.append(time.perf_counter() - began)
                outcomes = [
                    queries.Outcome(
                        r.id,
                        r.attempts,
                        State.DONE,
                        key=r.key,
                        chat_id=r.payload["chat_id"],
                        message_id=r.id,
                    )
                    for r in rows
                ]
                await queries.record_outcomes(conn, outcomes, schema="public")
    finally:
        for conn in conns:
            await conn.close()
    return times


def claim_cost(server: Server, options: Options, done_rows: int) -> tuple[list[Figure], Sizes]:
    rounds = options.scale(300, 100)
    with (
        server.database("growth_big") as big,
        server.database("growth_empty") as empty,
        server.database("growth_queues") as queues,
    ):
        options.say(f"growth: writing {done_rows:,} done rows and their markers")
        fill(big, done_rows, holat="bajarildi", prefix="old-")
        with psycopg.connect(big, autocommit=True) as conn:
            conn.execute(_MARK_ALL_SENT)
        # Other queues' (other bots') backlog, due before every row of the claimed queue.
        options.say(f"growth: writing {done_rows:,} pending rows of {OTHER_QUEUES} other queues")
        for k in range(OTHER_QUEUES):
            share = done_rows // OTHER_QUEUES
            fill(queues, share, first=1 + k * share, prefix="other-", navbat=f"bot_{k}")
        for url in (big, empty, queues):
            fill(url, rounds * CLAIM, prefix="new-")
            vacuum_analyze(url, "outbox", "yuborilgan")
        full = sizes(big)
        urls = [big, empty, queues]
        asyncio.run(_claim_times(urls, 10))  # warm-up: connections, prepared statements
        big_times, empty_times, queue_times = asyncio.run(_claim_times(urls, rounds - 10))
    big_ms = percentile(big_times, 50) * 1000
    empty_ms = percentile(empty_times, 50) * 1000
    queues_ms = percentile(queue_times, 50) * 1000
    options.say(
        f"claim of {CLAIM}: {big_ms:.2f} ms with {done_rows:,} done rows, {queues_ms:.2f} ms "
        f"beside {done_rows:,} pending rows of other queues, {empty_ms:.2f} ms empty"
    )
    figures = [
        Figure(
            "5",
            f"claim of {CLAIM} rows, empty table, median",
            empty_ms,
            "ms",
            note=f"p90 {percentile(empty_times, 90) * 1000:.2f} ms; includes the commit",
        ),
        Figure(
            "5",
            f"claim of {CLAIM} rows beside {done_rows:,} done rows + markers, median",
            big_ms,
            "ms",
            baseline="empty table",
            ratio=big_ms / empty_ms,
            target="<= 1.2x",
            met=big_ms / empty_ms <= 1.2,
            note=f"p90 {percentile(big_times, 90) * 1000:.2f} ms",
        ),
        Figure(
            "5",
            f"claim of {CLAIM} rows beside {done_rows:,} pending rows of other queues, median",
            queues_ms,
            "ms",
            baseline="empty table",
            ratio=queues_ms / empty_ms,
            target="<= 1.2x",
            met=queues_ms / empty_ms <= 1.2,
            note=(
                f"p90 {percentile(queue_times, 90) * 1000:.2f} ms; {OTHER_QUEUES} queues, all due "
                "before the claimed queue's rows"
            ),
        ),
    ]
    return figures, full


class _Producer(threading.Thread):
    """Keeps about ``backlog`` messages pending until ``total`` have been enqueued."""

    def __init__(self, url: str, total: int, backlog: int = 20_000, step: int = 5_000) -> None:
        super().__init__(daemon=True)
        self.url, self.total, self.backlog, self.step = url, total, backlog, step
        self.enqueued = 0
        self.failure: BaseException | None = None

    def run(self) -> None:
        try:
            with psycopg.connect(self.url, autocommit=True) as conn:
                while self.enqueued < self.total:
                    row = conn.execute(
                        "SELECT count(*) FROM outbox WHERE holat = 'kutmoqda'"
                    ).fetchone()
                    if row is not None and row[0] > self.backlog - self.step:
                        time.sleep(0.05)
                        continue
                    count = min(self.step, self.total - self.enqueued)
                    fill(self.url, count, first=self.enqueued + 1, chat_base=7_000_000)
                    self.enqueued += count
        except BaseException as err:  # reported by the measuring thread
            self.failure = err


_UNFINISHED = "SELECT EXISTS (SELECT 1 FROM outbox WHERE holat IN ('kutmoqda', 'bajarilmoqda'))"
RETENTION = 2.0  # seconds: a week, compressed


def _larger(a: Sizes | None, b: Sizes) -> Sizes:
    if a is None or b.table_bytes + b.index_bytes > a.table_bytes + a.index_bytes:
        return b
    return a


async def _drain_with_retention(url: str, producer: _Producer) -> tuple[int, float, Sizes]:
    """Relay until the producer is done and nothing is left; the largest size seen on the way."""
    config = RelayConfig(
        database_url=url,
        rate_limits=RateLimits(per_bot=0),
        retention_seconds=RETENTION,
        marker_retention_seconds=RETENTION,
        reap_interval=1.0,
    )
    peak: Sizes | None = None
    async with Relay(config, NullSender()) as relay:
        began = time.perf_counter()
        # Not drain mode: that would stop whenever the relay catches up with the producer.
        task = asyncio.create_task(relay.run())
        while True:
            await asyncio.sleep(0.5)
            peak = _larger(peak, await asyncio.to_thread(sizes, url))
            if not producer.is_alive() and not await asyncio.to_thread(_unfinished, url):
                break
        relay.stop()
        summary = await task
        elapsed = time.perf_counter() - began
    assert peak is not None
    return summary.sent, elapsed, peak


def _unfinished(url: str) -> bool:
    with psycopg.connect(url) as conn:
        return conn.execute(_UNFINISHED).fetchone() == (True,)


async def _last_retention_round(url: str) -> None:
    """What the relay's next maintenance round would do once the last rows are old enough."""
    await asyncio.sleep(RETENTION + 0.5)
    conn = await async_connect(url)
    try:
        await queries.prune(
            conn,
            schema="public",
            done_older_than_seconds=RETENTION,
            markers_older_than_seconds=RETENTION,
            batch_size=RelayConfig(database_url=url).prune_batch_size,
        )
    finally:
        await conn.close()


def drained_size(
    server: Server, options: Options, messages: int
) -> tuple[Sizes, Sizes, float, float, int]:
    """Largest size while draining, size after the last retention round and a vacuum, the rate,
    the seconds it took and how often autovacuum ran on the outbox meanwhile."""
    with server.database("growth_drain") as url:
        producer = _Producer(url, messages)
        producer.start()
        sent, elapsed, peak = asyncio.run(_drain_with_retention(url, producer))
        producer.join()
        if producer.failure is not None:
            raise producer.failure
        with psycopg.connect(url) as conn:
            row = conn.execute(_AUTOVACUUMS).fetchone()
        autovacuums = int(row[0]) if row else 0
        asyncio.run(_last_retention_round(url))
        vacuum_analyze(url, "outbox", "yuborilgan")  # what autovacuum does next
        after = sizes(url)
    options.say(
        f"drained {sent:,} with retention in {elapsed:.1f} s, {autovacuums} autovacuum runs; "
        f"largest {peak.describe()}"
    )
    options.say(f"after the last retention round and vacuum: {after.describe()}")
    return peak, after, sent / elapsed, elapsed, autovacuums


def run(server: Server, options: Options) -> list[Figure]:
    done_rows = options.scale(1_000_000, 50_000)
    figures, full = claim_cost(server, options, done_rows)
    peak, after, rate, seconds, autovacuums = drained_size(server, options, done_rows)
    mib = 1024 * 1024
    full_mib = (full.table_bytes + full.index_bytes) / mib
    peak_mib = (peak.table_bytes + peak.index_bytes) / mib
    after_mib = (after.table_bytes + after.index_bytes) / mib
    return [
        *figures,
        Figure(
            "5",
            f"outbox holding {done_rows:,} done rows (no retention), table + indexes",
            full_mib,
            "MiB",
            note=f"markers {full.markers_bytes / mib:.0f} MiB",
        ),
        Figure(
            "5",
            f"outbox while draining {done_rows:,} messages, retention on, largest",
            peak_mib,
            "MiB",
            baseline="no retention",
            ratio=peak_mib / full_mib,
            note=(
                f"{peak.rows:,} rows at that moment; drained at {rate:,.0f}/s in {seconds:.0f} s; "
                f"autovacuum ran {autovacuums} times meanwhile"
            ),
        ),
        Figure(
            "5",
            "outbox after that drain, retention and vacuum",
            after_mib,
            "MiB",
            baseline="no retention",
            ratio=after_mib / full_mib,
            note=f"{after.rows:,} rows; markers {after.markers_bytes / mib:.1f} MiB",
        ),
    ]
