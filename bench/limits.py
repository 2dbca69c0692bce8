"""Part 6: Telegram's limits, enforced by the fake Bot API; the relay with all its defaults.

The fake answers 429 over 30 messages in any 1 s per bot, 1 message in any 1 s per private chat
and 20 in any 60 s per group. For 60 seconds this process enqueues more than the bot may send:
40 messages/s spread over 5,000 private chats, and every 6 s a burst of 10 messages to one private
chat and 8 to one group. ``outbox relay`` runs with no flags at all, once as one process and
once as three (the fleet shares the bot's limits through PostgreSQL). Figures, for each: messages
accepted per second over the window, and the share of sendMessage requests answered 429.
"""

from __future__ import annotations

import contextlib
import random
import time

from bench.harness import FakeBotApi, Figure, Options, RelayProcess, Server
from outbox.api import enqueue
from outbox.db import create_engine

OFFERED = 40  # messages/s over many chats, besides the bursts
CHATS = 5_000
BURST_EVERY = 6.0  # seconds
PRIVATE_BURST = 10
GROUP_BURST = 8
CHAT_BASE = 9_000_000
GROUP_BASE = -1_009_000_000


def run(server: Server, options: Options) -> list[Figure]:
    return [*measure(server, options, relays=1), *measure(server, options, relays=3)]


def measure(server: Server, options: Options, *, relays: int) -> list[Figure]:
    window = 10.0 if options.quick else 60.0
    rng = random.Random(6)
    with (
        server.database(f"limits{relays}") as url,
        FakeBotApi(enforce_limits=True) as fake,
        contextlib.ExitStack() as fleet,
    ):
        engine = create_engine(url)
        started = [fleet.enter_context(RelayProcess(url, fake.url)) for _ in range(relays)]
        with engine.begin() as conn:
            enqueue(conn, key="warmup", payload={"chat_id": CHAT_BASE - 1, "text": "up?"})
        if not fake.wait_delivered(1, timeout=30.0) or not all(r.alive() for r in started):
            raise RuntimeError("the relay did not start")
        time.sleep(1.1)  # the warm-up message leaves the fake's windows
        fake.reset()
        began = time.perf_counter()
        tick, n, bursts = 0.1, 0, 0
        while (elapsed := time.perf_counter() - began) < window:
            with engine.begin() as conn:
                due = round(elapsed * OFFERED)
                while n < due:
                    n += 1
                    chat = CHAT_BASE + rng.randrange(CHATS)
                    enqueue(conn, key=f"m{n}", payload={"chat_id": chat, "text": f"#{n}"})
                if elapsed >= bursts * BURST_EVERY:
                    bursts += 1
                    for k in range(PRIVATE_BURST):
                        enqueue(
                            conn,
                            key=f"p{bursts}-{k}",
                            payload={"chat_id": CHAT_BASE + CHATS + bursts, "text": f"p{k}"},
                        )
                    for k in range(GROUP_BURST):
                        enqueue(
                            conn,
                            key=f"g{bursts}-{k}",
                            payload={"chat_id": GROUP_BASE - bursts, "text": f"g{k}"},
                        )
            time.sleep(max(0.0, tick - (time.perf_counter() - began - elapsed)))
        stats = fake.stats()
        log = "".join(r.close() for r in started)
        refused = [r for r in fake.requests() if r["status"] == 429]
        engine.dispose()
    offered = n + bursts * (PRIVATE_BURST + GROUP_BURST)
    rate = stats["delivered"] / window
    share = stats["rejected_429"] / max(1, stats["requests"])
    options.say(
        f"limits, {relays} relay(s): offered {offered:,} in {window:.0f} s, fake stats {stats}: "
        f"{rate:.1f}/s delivered, {share:.2%} answered 429"
    )
    if "Traceback" in log:
        options.say(f"relay log:\n{log}")
    return [
        Figure(
            "6",
            f"delivered under Telegram's limits, relay defaults, {relays} relay(s)",
            rate,
            "msg/s",
            target=">= 27/s",
            met=rate >= 27,
            note=f"{offered:,} offered in {window:.0f} s, with bursts to single chats",
        ),
        Figure(
            "6",
            f"requests answered 429, {relays} relay(s)",
            share * 100,
            "%",
            target="<= 1%",
            met=share <= 0.01,
            note=(
                f"{stats['rejected_429']} of {stats['requests']:,} sendMessage requests; "
                f"{sum(1 for r in refused if r['chat_id'] > 0)} to private chats, "
                f"{sum(1 for r in refused if r['chat_id'] < 0)} to groups"
            ),
        ),
    ]
