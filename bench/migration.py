"""Part 12: how long the newest revision holds the outbox table's lock, as an app sees it.

An outbox of 1,000,000 rows (990,000 done, 10,000 pending) at the revision before, an enqueue
every 10 ms from another connection, and ``outbox migrate`` to the head: the longest enqueue is
the time the app waited for the revision's lock.
"""

from __future__ import annotations

import threading
import time

import psycopg

from bench.harness import Figure, Options, Server
from outbox import migrate
from outbox.schema import KNOWN_REVISIONS

_FILL = """
INSERT INTO outbox (kalit, payload, holat, keyingi_urinish)
SELECT 'k' || g, jsonb_build_object('chat_id', g %% 50000 + 1, 'text', 'eslatma ' || g),
       CASE WHEN g <= %(done)s THEN 'bajarildi' ELSE 'kutmoqda' END, now() - interval '1 minute'
FROM generate_series(1, %(rows)s) g
"""
_ENQUEUE = """INSERT INTO outbox (kalit, payload) VALUES (%s, '{"chat_id": 1, "text": "x"}')"""


def run(server: Server, options: Options) -> list[Figure]:
    rows = options.scale(1_000_000, 100_000)
    pending = rows // 100
    head, before = KNOWN_REVISIONS[-1], KNOWN_REVISIONS[-2]
    with server.database("migration", migrated=False) as url:
        migrate.upgrade(url, before)
        with psycopg.connect(url, autocommit=True) as conn:
            conn.execute(_FILL, {"rows": rows, "done": rows - pending})
            conn.execute("VACUUM ANALYZE outbox")
        waits: list[float] = []
        stop = threading.Event()

        def enqueue_every_10ms() -> None:
            with psycopg.connect(url, autocommit=True) as writer:
                for n in range(10**9):
                    if stop.is_set():
                        return
                    began = time.perf_counter()
                    writer.execute(_ENQUEUE, (f"app-{n}",))
                    waits.append(time.perf_counter() - began)
                    time.sleep(0.01)

        app = threading.Thread(target=enqueue_every_10ms)
        app.start()
        try:
            time.sleep(0.5)
            began = time.perf_counter()
            migrate.upgrade(url, "head")
            took = time.perf_counter() - began
            time.sleep(0.3)
        finally:
            stop.set()
            app.join()
    longest = max(waits)
    options.say(f"migration {before} -> {head}: {took:.2f} s; the app waited {longest:.2f} s")
    return [
        Figure(
            "12",
            f"{head}: the longest enqueue during the revision, {rows:,} rows ({pending:,} pending)",
            longest,
            "s",
            note=f"the whole upgrade {took:.2f} s, an enqueue every 10 ms beside it",
        )
    ]
