"""Part 1: the lesson's three ways of taking jobs, reproduced in Python, and the relay.

The lesson runs 8 workers (threads) over 2,000 jobs with 2 ms of work each, one connection and
one transaction per job: connect, select one pending row (with ``FOR UPDATE SKIP LOCKED``, with
plain ``FOR UPDATE``, or with no lock at all), do the work, mark it done, commit, disconnect.
The SKIP LOCKED design runs a second time with each worker keeping its connection open (one
transaction per job still): the stronger baseline, without the cost of connecting. The relay
runs on the same rows with a sender that takes 2 ms (``NullSender(0.002)``) and concurrency 8.
"""

from __future__ import annotations

import asyncio
import threading
import time
from collections import Counter
from dataclasses import dataclass
from typing import Any

import psycopg

from bench.harness import Figure, Options, Server, at_least, counts, fill
from outbox.config import RelayConfig
from outbox.ratelimit import RateLimits
from outbox.relay import Relay
from outbox.telegram import NullSender

WORKERS = 8
WORK_SECONDS = 0.002

# The lesson's statements, against our table (its column names are the lesson's).
_TAKE = {
    "skip_locked": (
        "SELECT id FROM outbox WHERE holat = 'kutmoqda' ORDER BY id LIMIT 1 FOR UPDATE SKIP LOCKED"
    ),
    "for_update": "SELECT id FROM outbox WHERE holat = 'kutmoqda' ORDER BY id LIMIT 1 FOR UPDATE",
    "no_lock": "SELECT id FROM outbox WHERE holat = 'kutmoqda' ORDER BY id LIMIT 1",
}
_DONE = "UPDATE outbox SET holat = 'bajarildi', urinish = urinish + 1 WHERE id = %s"
_ANY_PENDING = "SELECT EXISTS (SELECT 1 FROM outbox WHERE holat = 'kutmoqda')"


@dataclass
class LessonRun:
    mode: str
    jobs_per_second: float
    executions: int
    duplicates: int  # executions beyond the first of a job


def _take_one(conn: psycopg.Connection[Any], mode: str, executed: list[int]) -> bool:
    """One job in one transaction; False once no job is left."""
    with conn.transaction():
        row = conn.execute(_TAKE[mode]).fetchone()
        if row is not None:
            time.sleep(WORK_SECONDS)  # the job's work
            conn.execute(_DONE, (row[0],))
            executed.append(row[0])
            return True
    # FOR UPDATE without SKIP LOCKED can come back empty after waiting for a row another
    # worker completed, while other rows are still pending.
    return conn.execute(_ANY_PENDING).fetchone() == (True,)


def _worker(
    url: str, mode: str, reuse: bool, executed: list[int], start: threading.Barrier
) -> None:
    start.wait()
    if reuse:
        with psycopg.connect(url) as conn:
            while _take_one(conn, mode, executed):
                pass
        return
    while True:
        with psycopg.connect(url) as conn:
            if not _take_one(conn, mode, executed):
                return


def run_lesson(url: str, mode: str, *, reuse: bool = False) -> LessonRun:
    executed: list[int] = []
    start = threading.Barrier(WORKERS + 1)
    threads = [
        threading.Thread(target=_worker, args=(url, mode, reuse, executed, start), daemon=True)
        for _ in range(WORKERS)
    ]
    for thread in threads:
        thread.start()
    start.wait()
    began = time.perf_counter()
    for thread in threads:
        thread.join()
    elapsed = time.perf_counter() - began
    per_job = Counter(executed)
    return LessonRun(
        mode=mode,
        jobs_per_second=len(per_job) / elapsed,
        executions=len(executed),
        duplicates=sum(n - 1 for n in per_job.values()),
    )


async def _drain(url: str) -> float:
    config = RelayConfig(database_url=url, concurrency=WORKERS, rate_limits=RateLimits(per_bot=0))
    async with Relay(config, NullSender(WORK_SECONDS)) as relay:
        began = time.perf_counter()
        summary = await relay.run(drain=True)
        elapsed = time.perf_counter() - began
    return summary.sent / elapsed


def run_relay(url: str) -> float:
    return asyncio.run(_drain(url))


def run(server: Server, options: Options) -> list[Figure]:
    jobs = options.scale(2_000, 400)
    results: dict[str, LessonRun] = {}
    for mode, reuse in (*((m, False) for m in _TAKE), ("skip_locked", True)):
        label = f"{mode}{'_reuse' if reuse else ''}"
        with server.database(f"lesson_{label}") as url:
            fill(url, jobs)
            results[label] = run_lesson(url, mode, reuse=reuse)
        options.say(f"lesson {label}: {results[label]}")
    with server.database("lesson_relay") as url:
        fill(url, jobs)
        relay_rate = run_relay(url)
        left = counts(url)
    options.say(f"relay, 2 ms sender, concurrency 8: {relay_rate:,.0f}/s; rows {left}")
    if left.get("bajarildi") != jobs:
        raise RuntimeError(f"the relay left the outbox as {left}")
    lesson = results["skip_locked"]
    strong = results["skip_locked_reuse"]
    no_lock = results["no_lock"]

    def duplicates(run: LessonRun) -> str:
        return f"{run.duplicates:,} duplicate executions of {jobs:,} jobs"

    return [
        Figure(
            "1",
            "lesson, FOR UPDATE SKIP LOCKED, connection per job",
            lesson.jobs_per_second,
            "jobs/s",
            note=duplicates(lesson),
        ),
        Figure(
            "1",
            "lesson, FOR UPDATE without SKIP LOCKED, connection per job",
            results["for_update"].jobs_per_second,
            "jobs/s",
            baseline="SKIP LOCKED",
            ratio=results["for_update"].jobs_per_second / lesson.jobs_per_second,
            note=duplicates(results["for_update"]),
        ),
        Figure(
            "1",
            "lesson, no lock, connection per job",
            no_lock.jobs_per_second,
            "jobs/s",
            note=duplicates(no_lock),
        ),
        Figure(
            "1",
            "lesson, FOR UPDATE SKIP LOCKED, connection kept per worker",
            strong.jobs_per_second,
            "jobs/s",
            baseline="SKIP LOCKED",
            ratio=strong.jobs_per_second / lesson.jobs_per_second,
            note=duplicates(strong),
        ),
        Figure(
            "1",
            "relay, 2 ms sender, concurrency 8",
            relay_rate,
            "jobs/s",
            baseline="SKIP LOCKED, connection per job",
            **at_least(relay_rate, lesson.jobs_per_second, 1.5),
        ),
        Figure(
            "1",
            "relay, same run, against the stronger baseline",
            relay_rate,
            "jobs/s",
            baseline="SKIP LOCKED, connection kept",
            **at_least(relay_rate, strong.jobs_per_second, 1.5),
            note="a send keeps its slot until its outcome is written",
        ),
    ]
