"""Part 8: broadcasts. ``outbox.enqueue_many`` enqueues 100,000 messages of one batch in
chunks of 10,000 (one statement and one commit each, payloads checked as ``enqueue`` checks
them); then the batch's progress (``outbox batch``) and its cancel are timed on those rows.
Last, the relay's claim (64 rows, commit included, ``queries.claim_due``) with the whole batch
paused ahead of 20,000 other due rows, against the same claim with nothing paused: what a
paused batch costs the rows behind it (the claim walks past paused rows, it never takes them).
"""

from __future__ import annotations

import asyncio
import time

import psycopg

from bench.harness import Figure, Options, Server, fill, percentile, vacuum_analyze
from outbox import queries
from outbox.broadcast import Scope, batch_progress, cancel_batch, enqueue_many, pause, resume
from outbox.db import async_connect, create_engine

CHUNK = 10_000
BATCH = "campaign-bench"


def _bulk(url: str, total: int) -> float:
    """Seconds to enqueue ``total`` rows of the batch in chunks, one transaction each."""
    engine = create_engine(url)
    try:
        began = time.perf_counter()
        for first in range(0, total, CHUNK):
            messages = [
                (f"b-{n}", {"chat_id": 10_000_000 + n, "text": f"Aksiya #{n}: chegirma 20%"})
                for n in range(first, min(first + CHUNK, total))
            ]
            with engine.begin() as conn:
                enqueue_many(conn, messages, batch=BATCH, kind="reklama")
        return time.perf_counter() - began
    finally:
        engine.dispose()


def _timed_ms(url: str, work: str) -> float:
    engine = create_engine(url)
    try:
        began = time.perf_counter()
        with engine.begin() as conn:
            if work == "progress":
                batch_progress(conn, BATCH)
            else:
                cancel_batch(conn, BATCH)
        return (time.perf_counter() - began) * 1000.0
    finally:
        engine.dispose()


def _set_pause(url: str, on: bool) -> None:
    engine = create_engine(url)
    try:
        with engine.begin() as conn:
            (pause if on else resume)(conn, Scope.BATCH, BATCH)
    finally:
        engine.dispose()


async def _claims(url: str, rounds: int) -> list[float]:
    """Round trips (ms) of ``rounds`` claims of 64 rows, each batch then handed back."""
    conn = await async_connect(url, prepare=True)
    timings = []
    try:
        for _ in range(rounds):
            began = time.perf_counter()
            async with conn.transaction():
                rows = await queries.claim_due(conn, 64, schema="public")
            timings.append((time.perf_counter() - began) * 1000.0)
            if not rows:
                raise RuntimeError("a claim found nothing: the paused batch held the queue back")
            async with conn.transaction():
                await conn.execute(
                    "UPDATE outbox SET holat = 'kutmoqda', urinish = 0 WHERE id = ANY(%s)",
                    [[r.id for r in rows]],
                )
    finally:
        await conn.close()
    return timings


def run(server: Server, options: Options) -> list[Figure]:
    total = options.scale(100_000, 20_000)
    rounds = options.scale(200, 30)
    with server.database("broadcast") as url:
        seconds = _bulk(url, total)
        rate = total / seconds
        options.say(f"enqueue_many: {total:,} rows in {seconds:.2f} s, {rate:,.0f} rows/s")
        vacuum_analyze(url, "outbox")
        progress_ms = _timed_ms(url, "progress")
        # The batch's rows come first in the claim's order; 20,000 unpaused rows wait behind.
        fill(url, 20_000, prefix="other-", chat_base=20_000_000)
        with psycopg.connect(url, autocommit=True) as conn:
            conn.execute("UPDATE outbox SET keyingi_urinish = now() - interval '1 hour' "
                         "WHERE partiya IS NOT NULL")  # fmt: skip
        vacuum_analyze(url, "outbox")
        plain = asyncio.run(_claims(url, rounds))
        _set_pause(url, on=True)
        paused = asyncio.run(_claims(url, rounds))
        _set_pause(url, on=False)
        cancel_ms = _timed_ms(url, "cancel")
    options.say(
        f"batch progress {progress_ms:.0f} ms, cancel {cancel_ms:.0f} ms ({total:,} rows); "
        f"claim p50 {percentile(plain, 50):.2f} ms, with the batch paused ahead "
        f"{percentile(paused, 50):.2f} ms"
    )
    return [
        Figure(
            "8",
            "enqueue_many, rows per second",
            rate,
            "rows/s",
            note=f"{total:,} rows of one batch in chunks of {CHUNK:,}, a commit each",
        ),
        Figure("8", "outbox batch (progress)", progress_ms, "ms", note=f"a batch of {total:,}"),
        Figure("8", "outbox batch --cancel", cancel_ms, "ms", note=f"{total:,} waiting rows"),
        Figure("8", "claim of 64, nothing paused, p50", percentile(plain, 50), "ms"),
        Figure(
            "8",
            "claim of 64 behind a paused batch, p50",
            percentile(paused, 50),
            "ms",
            baseline="nothing paused",
            ratio=percentile(paused, 50) / percentile(plain, 50),
            note=f"{total:,} paused rows first in the claim's order",
        ),
    ]
