"""Part 15: blocked chats are not asked again.

A 20,000-message batch to 2,000 chats (ten rounds of one message per chat, enqueued with
``enqueue_many``), of which 400 blocked the bot: the fake Bot API answers every request to them
with 403 "bot was blocked by the user". One relay, the bot's limit raised to 1,000/s so that the
batch runs in well under a minute; the per-chat spacing stays Telegram's (1/s). Counted from the
fake's own request log: the requests each blocked chat received (target: at most one), the
deliveries to the others, and how the blocked chats' rows ended. Then what the check costs an
insert (``bench/insert_cost.py``): ``enqueue_many`` with and without it, alternating.
"""

from __future__ import annotations

import time
from collections import Counter

import psycopg

from bench import insert_cost
from bench.harness import FakeBotApi, Figure, Options, RelayProcess, Server
from outbox.broadcast import enqueue_many
from outbox.db import create_engine

CHAT_BASE = 7_000_000
ROUNDS = 10
RELAY_ARGS = ("--rate-limit", "1000")
_CHUNK = 5_000


def run(server: Server, options: Options) -> list[Figure]:
    chats = options.scale(2_000, 200)
    blocked = {CHAT_BASE + n for n in range(0, chats, 5)}  # a fifth: 400 of 2,000
    total = chats * ROUNDS
    with server.database("blocked") as url, FakeBotApi(latency_ms=20) as fake:
        for chat in blocked:  # Telegram answers 403 to every request, not only the first
            fake.script(chat, {"kind": "forbidden"}, times=ROUNDS + 1)
        engine = create_engine(url)
        rows = [
            (f"b{r}-{n}", {"chat_id": CHAT_BASE + n, "text": f"yangilik {r}"})
            for r in range(ROUNDS)
            for n in range(chats)
        ]
        with engine.begin() as conn:
            for at in range(0, total, _CHUNK):
                enqueue_many(conn, rows[at : at + _CHUNK], batch="kampaniya")
        engine.dispose()
        began = time.time()
        with RelayProcess(url, fake.url, RELAY_ARGS) as relay:
            deadline = time.time() + 600.0
            while _unfinished(url) and time.time() < deadline:
                time.sleep(0.5)
            took = time.time() - began
            log = relay.close()
        requests = Counter(int(r["chat_id"]) for r in fake.requests() if r["chat_id"] is not None)
        delivered = fake.stats()["delivered"]
        ended = _ended(url)
    per_blocked = [requests.get(chat, 0) for chat in blocked]
    spent = sum(per_blocked)
    worst = max(per_blocked)
    options.say(
        f"blocked: {total} messages to {chats} chats ({len(blocked)} blocked) in {took:.1f} s; "
        f"{spent} requests to the blocked chats (at most {worst} each), {delivered} delivered, "
        f"rows ended {dict(ended)}"
    )
    if "Traceback" in log:
        options.say(f"relay log:\n{log}")
    expected = (chats - len(blocked)) * ROUNDS
    cost = insert_cost.measure(server, options, options.scale(5, 3))
    return [
        Figure(
            "15",
            f"{total:,} messages to {chats:,} chats, {len(blocked)} blocked: requests per "
            "blocked chat, at most",
            worst,
            "requests",
            target="<= 1",
            met=worst <= 1 and delivered == expected,
            note=(
                f"{spent} requests to blocked chats in all (without the record: "
                f"{len(blocked) * ROUNDS}); {delivered:,} of {expected:,} others delivered; "
                f"{took:.0f} s, one relay, --rate-limit 1000"
            ),
        ),
        Figure(
            "15",
            "same: blocked chats' rows ended without a request (chat_blocked)",
            ended.get("chat_blocked", 0),
            "rows",
            target=f"{len(blocked) * (ROUNDS - 1)}",
            met=ended.get("chat_blocked", 0) == len(blocked) * (ROUNDS - 1),
            note=f"{ended.get('blocked', 0)} ended with Telegram's 403 (code blocked)",
        ),
        Figure(
            "15",
            "enqueue_many with the blocked-chat check, against the same without it",
            round(cost.bulk_change * 100.0, 1),
            "%",
            target=">= -5",
            met=cost.bulk_change >= -0.05,
            note=(
                f"{cost.bulk_with:,.0f} against {cost.bulk_without:,.0f} rows/s; a single "
                f"enqueue {cost.single_with_us:.0f} against {cost.single_without_us:.0f} us "
                "(medians, alternating; python -m bench.insert_cost)"
            ),
        ),
    ]


def _unfinished(url: str) -> bool:
    with psycopg.connect(url) as conn:
        row = conn.execute(
            "SELECT EXISTS (SELECT 1 FROM outbox WHERE holat IN ('kutmoqda', 'bajarilmoqda'))"
        ).fetchone()
    return bool(row and row[0])


def _ended(url: str) -> Counter[str]:
    with psycopg.connect(url) as conn:
        rows = conn.execute(
            "SELECT xato_turi, count(*) FROM outbox WHERE holat = 'xato' GROUP BY xato_turi"
        ).fetchall()
    return Counter({str(code): int(n) for code, n in rows})
