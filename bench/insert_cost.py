"""The enqueue cost of the blocked-chat check (part 15's second step).

Two databases cloned from the migrated template: one as it is, one without the check: the
insert trigger's function as outbox_0016 wrote it, and ``enqueue_many`` sending its statement
as it was before (no join of ``bloklangan``). Each round, in turn on one then the other:
``enqueue_many`` of 20,000 rows (2,000 chats, ten messages each) in chunks of 10,000 in one
transaction, then 2,000 single ``enqueue`` calls, each its own transaction. ``bloklangan``
holds 400 pairs in both, none of them a chat enqueued to: what is measured is the probe that
finds nothing, the common case. Medians of the rounds.

    python -m bench.insert_cost [rounds]
"""

from __future__ import annotations

import contextlib
import importlib
import statistics
import sys
import time
from collections.abc import Iterator
from dataclasses import dataclass
from unittest import mock

import psycopg
import sqlalchemy as sa

from bench.harness import Options, Server
from outbox.api import enqueue
from outbox.broadcast import enqueue_many
from outbox.db import create_engine
from outbox.queries import batch

CHATS = 2_000
PER_CHAT = 10
CHUNK = 10_000
SINGLES = 2_000
BLOCKED_PAIRS = 400
_CHAT_BASE = 9_000_000


# enqueue_many's statement before blocked chats, for the schema "public" of the bench's databases.
_ENQUEUE_MANY_BEFORE = """
WITH inserted AS (
    INSERT INTO "public".outbox (tur, kalit, payload, keyingi_urinish, navbat, partiya,
        ustuvorlik, eng_erta, eskirish, bot, traceparent, tracestate, tartib, tinch)
    SELECT :tur, r.kalit, r.payload, coalesce(CAST(:run_at AS timestamptz), now()), :navbat,
           CAST(:partiya AS text), :ustuvorlik, CAST(:eng_erta AS timestamptz),
           CAST(:eskirish AS timestamptz), CAST(:bot AS text), CAST(:traceparent AS text),
           CAST(:tracestate AS text),
           CASE WHEN CAST(:ordered AS boolean) THEN NULL ELSE CAST('infinity' AS timestamptz) END,
           CAST(:tinch AS boolean)
    FROM json_to_recordset(CAST(:rows AS json)) AS r(kalit text, payload jsonb)
    ON CONFLICT (kalit) DO NOTHING
    RETURNING 1
)
SELECT count(*) FROM inserted
"""


@contextlib.contextmanager
def _statement_before() -> Iterator[None]:
    named = batch.sql.sa_sql

    def before(name: str, schema: str) -> sa.TextClause:
        if name == "enqueue_many":
            return sa.text(_ENQUEUE_MANY_BEFORE)
        return named(name, schema)

    with mock.patch.object(batch.sql, "sa_sql", before):
        yield


@dataclass(frozen=True)
class Cost:
    """Medians: rows/s of ``enqueue_many``, microseconds of one ``enqueue``."""

    bulk_with: float
    bulk_without: float
    single_with_us: float
    single_without_us: float

    @property
    def bulk_change(self) -> float:
        """The check's change of the bulk rate, a fraction (negative: slower)."""
        return self.bulk_with / self.bulk_without - 1.0


def _without_check(url: str) -> None:
    """The outbox's insert triggers as they were before blocked chats."""
    blocked = importlib.import_module("outbox.migrations.versions.outbox_0017_blocked_chats")
    with psycopg.connect(url, autocommit=True) as conn:
        conn.execute(blocked.previous_fill('"public"'))


def _seed_pairs(url: str) -> None:
    with psycopg.connect(url, autocommit=True) as conn:
        conn.execute(
            "INSERT INTO bloklangan (bot, suhbat, xato) SELECT '', (%s::bigint + g)::text, "
            "'Forbidden: bot was blocked by the user' FROM generate_series(1, %s) g",
            [_CHAT_BASE - BLOCKED_PAIRS - 1, BLOCKED_PAIRS],
        )


def _bulk(url: str, round_: int) -> float:
    rows = [
        (f"m{round_}-{r}-{n}", {"chat_id": _CHAT_BASE + n, "text": f"yangilik {r}"})
        for r in range(PER_CHAT)
        for n in range(CHATS)
    ]
    engine = create_engine(url)
    try:
        began = time.perf_counter()
        with engine.begin() as conn:
            for at in range(0, len(rows), CHUNK):
                enqueue_many(conn, rows[at : at + CHUNK], batch=f"kampaniya-{round_}")
        return len(rows) / (time.perf_counter() - began)
    finally:
        engine.dispose()


def _singles(url: str, round_: int) -> float:
    engine = create_engine(url)
    try:
        with engine.begin() as conn:  # the pool's first connection, outside the timing
            conn.exec_driver_sql("SELECT 1")
        began = time.perf_counter()
        for n in range(SINGLES):
            with engine.begin() as conn:
                enqueue(
                    conn,
                    key=f"s{round_}-{n}",
                    payload={"chat_id": _CHAT_BASE + n % CHATS, "text": "eslatma"},
                )
        return (time.perf_counter() - began) / SINGLES * 1e6
    finally:
        engine.dispose()


def measure(server: Server, options: Options, rounds: int = 5) -> Cost:
    bulk: dict[bool, list[float]] = {True: [], False: []}
    single: dict[bool, list[float]] = {True: [], False: []}
    with server.database("check") as with_url, server.database("nocheck") as without_url:
        _without_check(without_url)
        urls = {True: with_url, False: without_url}
        for url in urls.values():
            _seed_pairs(url)
        for round_ in range(rounds):
            # Alternate which goes first, so that neither always follows the other.
            for checked in (True, False) if round_ % 2 == 0 else (False, True):
                with contextlib.nullcontext() if checked else _statement_before():
                    bulk[checked].append(_bulk(urls[checked], round_))
                single[checked].append(_singles(urls[checked], round_))
            options.say(
                f"insert cost round {round_ + 1}: enqueue_many {bulk[True][-1]:,.0f} rows/s "
                f"with the check, {bulk[False][-1]:,.0f} without; enqueue "
                f"{single[True][-1]:.0f} us with, {single[False][-1]:.0f} us without"
            )
    return Cost(
        statistics.median(bulk[True]),
        statistics.median(bulk[False]),
        statistics.median(single[True]),
        statistics.median(single[False]),
    )


def main() -> None:
    rounds = int(sys.argv[1]) if len(sys.argv) > 1 else 5
    options = Options()
    server = Server.start()
    try:
        cost = measure(server, options, rounds)
    finally:
        server.close()
    print(
        f"enqueue_many: {cost.bulk_with:,.0f} rows/s with the blocked-chat check, "
        f"{cost.bulk_without:,.0f} without ({cost.bulk_change:+.1%}); single enqueue "
        f"{cost.single_with_us:.0f} us with, {cost.single_without_us:.0f} us without "
        f"(medians of {rounds})"
    )


if __name__ == "__main__":
    main()
