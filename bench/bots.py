"""Part 10: many bots, one fleet. A folder of tokens against a relay per token.

Twelve bots, 600 messages each (one chat per message), a fake Bot API keeping Telegram's limits
per bot. First two relays started with ``--tokens-dir`` and no other flag serve every bot
(the rows name their bot: ``enqueue_many(..., bot=ID)``); then twelve relays with a token and a
queue each (``--queue``, the rows without a bot) do the same work side by side. Figures for
each set-up: each bot's rate (its messages over the span of its deliveries), its share of
requests answered 429, every message once and by its own bot, the relays' CPU seconds and
memory (resident, summed) and the database connections of the run at their most.

Then the database path: the claim loop's one question per round (which bots have work:
``queries.bots_timing``) and a claim for each bot that has, with 10 busy bots alone and with
the same 10 among 1,000 bots of which 990 have rows due only in an hour.
"""

from __future__ import annotations

import asyncio
import collections
import contextlib
import os
import tempfile
import threading
import time
from collections.abc import Sequence
from pathlib import Path

import psycopg
import sqlalchemy as sa

from bench.harness import FakeBotApi, Figure, Options, RelayProcess, Server
from outbox import queries
from outbox.broadcast import enqueue_many
from outbox.db import create_engine

BOTS = [8001 + k for k in range(12)]
CHAT_BASE = 20_000_000


def _token(bot: int) -> str:
    return f"{bot}:bench-token_of-bot-{bot}"


def run(server: Server, options: Options) -> list[Figure]:
    per_bot = options.scale(600, 120)
    return [
        *fleet(server, options, per_bot=per_bot, folder=True),
        *fleet(server, options, per_bot=per_bot, folder=False),
        *claim_rounds(server, options),
    ]


# --- the fleet: two relays with a folder, or a relay per token ------------------------------


class _Connections:
    """The database's client connections, sampled while the run lasts; the most seen."""

    def __init__(self, url: str) -> None:
        self._url = url
        self.most = 0
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._sample, daemon=True)

    def _sample(self) -> None:
        with psycopg.connect(self._url, autocommit=True) as conn:
            while not self._stop.wait(0.2):
                found = conn.execute(
                    "SELECT count(*) FROM pg_stat_activity "
                    "WHERE datname = current_database() AND pid <> pg_backend_pid()"
                ).fetchone()
                self.most = max(self.most, int(found[0]) if found else 0)

    def __enter__(self) -> _Connections:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join()


def _cpu_seconds(pid: int) -> float:
    """User plus system CPU of a process so far (Linux /proc)."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def _resident_mb(pid: int) -> float:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) / 1024
    return 0.0


def _enqueue(engine: sa.Engine, per_bot: int, *, folder: bool, tag: str) -> None:
    with engine.begin() as conn:
        for k, bot in enumerate(BOTS):
            messages = [
                (
                    f"{tag}{bot}-{n}",
                    {"chat_id": CHAT_BASE + k * 100_000 + n, "text": f"{bot} {tag}{n}"},
                )
                for n in range(per_bot)
            ]
            if folder:
                enqueue_many(conn, messages, bot=bot)
            else:
                enqueue_many(conn, messages, queue=f"q{bot}")


def fleet(server: Server, options: Options, *, per_bot: int, folder: bool) -> list[Figure]:
    label = "2 relays, --tokens-dir" if folder else "12 relays, a token and --queue each"
    with (
        server.database("bots" if folder else "bots12") as url,
        FakeBotApi(enforce_limits=True, token=None) as fake,
        tempfile.TemporaryDirectory() as tokens,
        contextlib.ExitStack() as started,
    ):
        for bot in BOTS:
            (Path(tokens) / f"bot-{bot}").write_text(_token(bot))
        engine = create_engine(url)
        if folder:
            relays = [
                started.enter_context(RelayProcess(url, fake.url, ["--tokens-dir", tokens]))
                for _ in range(2)
            ]
        else:
            relays = [
                started.enter_context(
                    RelayProcess(url, fake.url, ["--queue", f"q{bot}"], token=_token(bot))
                )
                for bot in BOTS
            ]
        _enqueue(engine, 1, folder=folder, tag="warm-")
        if not fake.wait_delivered(len(BOTS), timeout=120.0):
            raise RuntimeError(f"{label}: the relays did not start")
        time.sleep(1.1)  # the warm-up leaves the fake's windows
        fake.reset()
        pids = [r._proc.pid for r in relays]
        cpu_before = sum(_cpu_seconds(pid) for pid in pids)
        began = time.perf_counter()
        with _Connections(url) as connections:
            _enqueue(engine, per_bot, folder=folder, tag="")
            total = per_bot * len(BOTS)
            if not fake.wait_delivered(total, timeout=60.0 + 3.0 * per_bot / 26):
                options.say(f"{label}: only {fake.stats()['delivered']} of {total} delivered")
        elapsed = time.perf_counter() - began
        cpu = sum(_cpu_seconds(pid) for pid in pids) - cpu_before
        memory = sum(_resident_mb(pid) for pid in pids)
        delivered, sent = fake.delivered(), fake.requests()
        log = "".join(r.close() for r in relays)
        engine.dispose()
    if "Traceback" in log:
        options.say(f"relay log:\n{log[-4000:]}")
    return _figures(
        label, per_bot, delivered, sent, cpu, memory, connections.most, elapsed, folder=folder
    )


def _figures(
    label: str,
    per_bot: int,
    delivered: Sequence[dict[str, object]],
    sent: Sequence[dict[str, object]],
    cpu: float,
    memory: float,
    connections: int,
    elapsed: float,
    *,
    folder: bool,
) -> list[Figure]:
    rates, shares = [], []
    texts = collections.Counter(str(d["text"]) for d in delivered)
    strays = sum(1 for d in delivered if not str(d["text"]).startswith(f"{d['bot_id']} "))
    for bot in BOTS:
        at = sorted(float(str(d["at"])) for d in delivered if d["bot_id"] == bot)
        rates.append((len(at) - 1) / (at[-1] - at[0]) if len(at) > 1 else 0.0)
        mine = [r for r in sent if r["bot_id"] == bot and r["method"] == "sendMessage"]
        shares.append(sum(1 for r in mine if r["status"] == 429) / max(1, len(mine)))
    once = len(texts) == per_bot * len(BOTS) and set(texts.values()) == {1} and not strays
    messages = max(1, len(delivered))
    return [
        Figure(
            "10",
            f"slowest bot's rate, {label}",
            min(rates),
            "msg/s",
            target=">= 26/s",
            met=min(rates) >= 26,
            note=f"{len(BOTS)} bots x {per_bot}; fastest {max(rates):.1f}/s; "
            f"all delivered in {elapsed:.1f} s",
        ),
        Figure(
            "10",
            f"most 429s of one bot, {label}",
            max(shares) * 100,
            "%",
            target="<= 1%",
            met=max(shares) <= 0.01,
        ),
        Figure(
            "10",
            f"every message once and by its own bot, {label}",
            len(delivered),
            "msgs",
            target=f"{per_bot * len(BOTS)}, none twice or by another bot",
            met=once,
            note=f"{strays} by another bot",
        ),
        Figure(
            "10",
            f"database connections at most, {label}",
            connections,
            "conns",
            target="<= 12" if folder else "",
            met=connections <= 12 if folder else None,
        ),
        Figure(
            "10",
            f"relays' CPU, {label}",
            cpu,
            "s",
            note=f"{cpu / messages * 1e6:.0f} us per message through python-telegram-bot",
        ),
        Figure("10", f"relays' resident memory, summed, {label}", memory, "MB"),
    ]


# --- the database path: 10 busy bots alone, or among 990 idle ones ---------------------------


def claim_rounds(server: Server, options: Options) -> list[Figure]:
    rounds = options.scale(200, 40)
    figures, costs = [], {}
    for idle in (0, 990):
        with server.database(f"botclaims{idle}") as url:
            _fill(url, idle)
            costs[idle] = asyncio.run(_rounds(url, rounds))
    for idle, (timing, claim) in costs.items():
        bots = 10 + idle
        figures.append(
            Figure(
                "10",
                f"claim loop round, {bots} bots of which {idle} have nothing due",
                timing + claim,
                "us",
                baseline="10 bots" if idle else "",
                ratio=(timing + claim) / sum(costs[0]) if idle else None,
                note=f"which bots have work: {timing:.0f} us; claims for the 10 due bots "
                f"(64 rows each): {claim:.0f} us; commits not flushed to disk",
            )
        )
    options.say(f"bots: claim rounds (timing us, claims us) by idle bots: {costs}")
    return figures


def _fill(url: str, idle: int) -> None:
    """10 bots with many due rows; ``idle`` bots with a few rows due in an hour."""
    with psycopg.connect(url) as conn:
        conn.execute(
            "INSERT INTO outbox (kalit, payload, bot) "
            "SELECT 'b' || b || '-' || g, jsonb_build_object('chat_id', b * 100000 + g, "
            "'text', 'x'), b::text FROM generate_series(1, 10) b, generate_series(1, 20000) g"
        )
        if idle:
            conn.execute(
                "INSERT INTO outbox (kalit, payload, bot, keyingi_urinish) "
                "SELECT 'i' || b || '-' || g, jsonb_build_object('chat_id', b * 100 + g, "
                "'text', 'x'), b::text, now() + interval '1 hour' "
                "FROM generate_series(11, %s) b, generate_series(1, 5) g",
                (10 + idle,),
            )
        conn.execute("ANALYZE outbox")


async def _rounds(url: str, rounds: int) -> tuple[float, float]:
    """Microseconds per round: the timing question for every bot, then the claims (of rows
    that stay claimed: the 10 bots have rows enough for every round)."""
    bots = [str(b) for b in range(1, 11)]
    async with await psycopg.AsyncConnection.connect(url, autocommit=True) as conn:
        # The statements' own cost: the commit's disk flush (the same for every claim, and
        # noisy on a shared disk) is left out.
        await conn.execute("SET synchronous_commit = off")
        found = await conn.execute("SELECT DISTINCT bot FROM outbox")
        every = [str(row[0]) for row in await found.fetchall()]
        timing = claiming = 0.0
        for n in range(rounds + 5):
            began = time.perf_counter()
            work = await queries.bots_timing(conn, every, ["default"], schema="public", horizon=1)
            mid = time.perf_counter()
            for bot in bots:
                if (due := work.get(bot)) and due.next_due is not None and due.next_due <= 0:
                    await queries.claim_due(conn, 64, schema="public", bot=bot, bot_rows=True)
            if n >= 5:  # the first rounds warm the caches and plans
                timing += mid - began
                claiming += time.perf_counter() - mid
    return timing / rounds * 1e6, claiming / rounds * 1e6
