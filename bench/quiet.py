"""Part 13: what quiet hours cost the database path.

1. No chat has quiet hours: drains of the database path (part 3's relay with a sender that does
   nothing, one chat a message) of rows that do not ask for quiet hours against rows that all
   ask (each claim then makes one more round trip, the probe of their chats' hours, and finds
   none), alternating, three of each; the medians compared.
2. 10,000 chats in quiet hours and their rows held (held by the relay's own claims): claims for
   5,000 rows of other chats, against the same claims in a database without the held rows,
   alternating, three of each; the medians of the time a claim of 100 took compared.
"""

from __future__ import annotations

import asyncio
import statistics
import time
from urllib.parse import urlsplit

import psycopg

from bench.cost import CostProbe
from bench.db_path import DEFAULT_CHAT_LIMITS, drain
from bench.harness import Figure, Options, Server, counts, fill, vacuum_analyze
from outbox.queries import ClaimLimits, claim_due, ensure_bot

ROUNDS = 3
CLAIM = 100  # rows a claim asks for (the relay's default batch)
QUIET_CHAT_BASE = 5_000_000
OTHER_CHAT_BASE = 1_000_000


def _drain_rate(server: Server, messages: int, *, flagged: bool) -> float:
    with server.database("quiet_drain") as url:
        fill(url, messages)
        if flagged:
            with psycopg.connect(url, autocommit=True) as conn:
                conn.execute("UPDATE outbox SET tinch = true")
            vacuum_analyze(url, "outbox")
        probe = CostProbe(server.url, url, urlsplit(url).path.lstrip("/"))
        with probe.watching():
            sent, elapsed = asyncio.run(drain(url, DEFAULT_CHAT_LIMITS, probe))
        if sent != messages or counts(url).get("bajarildi") != messages:
            raise RuntimeError(f"the drain sent {sent} of {messages}")
    return sent / elapsed


async def _claims(url: str, rows: int) -> list[float]:
    """Claim ``rows`` rows CLAIM at a time as a relay with one token; each claim's seconds."""
    took: list[float] = []
    async with await psycopg.AsyncConnection.connect(url, autocommit=True) as conn:
        await ensure_bot(conn, "default", schema="public")
        claimed = 0
        while claimed < rows:
            began = time.perf_counter()
            got = await claim_due(conn, CLAIM, schema="public", limits=ClaimLimits())
            took.append(time.perf_counter() - began)
            if not got:
                break
            claimed += len(got)
    if claimed != rows:
        raise RuntimeError(f"claimed {claimed} of {rows}")
    return took


def _hold(url: str, chats: int) -> None:
    """Quiet hours holding now for ``chats`` chats, a due row asking for them in each, and the
    relay's claims until every one of them is held."""
    with psycopg.connect(url, autocommit=True) as conn:
        conn.execute(
            "INSERT INTO tinch_soatlar (chat, boshi, oxiri, tz) "
            "SELECT (%s + n)::text, (now() AT TIME ZONE 'Asia/Tashkent' - interval '1 hour')::time,"
            " (now() AT TIME ZONE 'Asia/Tashkent' + interval '2 hours')::time, 'Asia/Tashkent' "
            "FROM generate_series(1, %s) AS n",
            (QUIET_CHAT_BASE, chats),
        )
    fill(url, chats, chat_base=QUIET_CHAT_BASE, prefix="quiet-")
    with psycopg.connect(url, autocommit=True) as conn:
        conn.execute("UPDATE outbox SET tinch = true WHERE kalit LIKE 'quiet-%%'")

    async def hold_all() -> None:
        async with await psycopg.AsyncConnection.connect(url, autocommit=True) as conn:
            await ensure_bot(conn, "default", schema="public")
            while await claim_due(conn, 1000, schema="public", limits=ClaimLimits()) == []:
                cursor = await conn.execute(
                    "SELECT count(*) FROM outbox WHERE tinch AND tinch_oldin IS NULL"
                )
                left = await cursor.fetchone()
                if left is None or left[0] == 0:
                    return
            raise RuntimeError("a claim took a row that quiet hours should hold")

    asyncio.run(hold_all())


def _claim_time(server: Server, others: int, *, held: int) -> float:
    with server.database("quiet_claim") as url:
        if held:
            _hold(url, held)
        fill(url, others, chat_base=OTHER_CHAT_BASE, prefix="other-")
        vacuum_analyze(url, "outbox", "tinch_soatlar")
        took = asyncio.run(_claims(url, others))
    return statistics.median(took)


def run(server: Server, options: Options) -> list[Figure]:
    messages = options.scale(20_000, 2_000)
    plain: list[float] = []
    flagged: list[float] = []
    for _ in range(ROUNDS):
        plain.append(_drain_rate(server, messages, flagged=False))
        flagged.append(_drain_rate(server, messages, flagged=True))
    ratio = statistics.median(flagged) / statistics.median(plain)
    options.say(
        f"quiet: drains without the flag {', '.join(f'{r:,.0f}' for r in plain)} msg/s; "
        f"flagged, no hours {', '.join(f'{r:,.0f}' for r in flagged)} msg/s"
    )
    held_chats = options.scale(10_000, 1_000)
    others = options.scale(5_000, 1_000)
    none: list[float] = []
    some: list[float] = []
    for _ in range(ROUNDS):
        none.append(_claim_time(server, others, held=0))
        some.append(_claim_time(server, others, held=held_chats))
    slower = statistics.median(some) / statistics.median(none)
    options.say(
        "quiet: a claim of 100 other rows, ms: "
        f"none held {', '.join(f'{t * 1000:.2f}' for t in none)}; "
        f"{held_chats:,} held {', '.join(f'{t * 1000:.2f}' for t in some)}"
    )
    return [
        Figure(
            "13",
            f"no chat with quiet hours: drain of {messages:,} flagged rows against unflagged",
            round(statistics.median(flagged)),
            "msg/s",
            baseline=f"{statistics.median(plain):,.0f} msg/s unflagged",
            ratio=round(ratio, 3),
            target=">= 0.95x",
            met=ratio >= 0.95,
            note="median of three each, alternating; part 3's relay, one chat a message",
        ),
        Figure(
            "13",
            f"{held_chats:,} chats' rows held by quiet hours: a claim of {CLAIM} other rows",
            round(statistics.median(some) * 1000, 2),
            "ms",
            baseline=f"{statistics.median(none) * 1000:.2f} ms with none held",
            ratio=round(slower, 3),
            target="<= 1.2x",
            met=slower <= 1.2,
            note=f"median claim over {others:,} rows; median of three databases each, alternating",
        ),
    ]
