"""Part 6: Telegram's limits, enforced by the fake Bot API; the relay with all its defaults.

The fake answers 429 over 30 messages in any 1 s per bot, 1 message in any 1 s per private chat
and 20 in any 60 s per group, each bot's limits its own. For 60 seconds this process enqueues
more than a bot may send: 40 messages/s spread over 5,000 private chats, and every 6 s a burst of
10 messages to one private chat and 8 to one group. ``outbox relay`` runs with no flags at all,
once as one process and once as three (the fleet shares the bot's limits through PostgreSQL).
Then two bots share the database and the fake: each has its own queue, is offered the same load
and has one relay, started with ``--queue`` and the bot's token. Figures, for each run and each
bot: messages accepted per second over the window, and the share of sendMessage requests
answered 429; for the two bots also how many messages went out as the other bot.
"""

from __future__ import annotations

import contextlib
import random
import time
from collections.abc import Sequence

import sqlalchemy as sa

from bench.harness import FakeBotApi, Figure, Options, RelayProcess, Server
from outbox.api import enqueue
from outbox.db import create_engine
from outbox.schema import DEFAULT_QUEUE
from outbox.telegram import bot_id_of

OFFERED = 40  # messages/s over many chats, besides the bursts, for each bot
CHATS = 5_000
BURST_EVERY = 6.0  # seconds
PRIVATE_BURST = 10
GROUP_BURST = 8
CHAT_BASE = 9_000_000
GROUP_BASE = -1_009_000_000
# Two bots, each with its queue; they write to the same chats (per-chat limits are per bot).
TWO_BOTS = {"bot_a": "7001:bench-token_of-bot-a", "bot_b": "7002:bench-token_of-bot-b"}


def run(server: Server, options: Options) -> list[Figure]:
    return [
        *one_bot(server, options, relays=1),
        *one_bot(server, options, relays=3),
        *two_bots(server, options),
    ]


def one_bot(server: Server, options: Options, *, relays: int) -> list[Figure]:
    window = 10.0 if options.quick else 60.0
    with (
        server.database(f"limits{relays}") as url,
        FakeBotApi(enforce_limits=True) as fake,
        contextlib.ExitStack() as fleet,
    ):
        engine = create_engine(url)
        started = [fleet.enter_context(RelayProcess(url, fake.url)) for _ in range(relays)]
        warm_up(engine, [fake], started, [DEFAULT_QUEUE])
        offered = offer(engine, window, [DEFAULT_QUEUE])
        stats = fake.stats()
        log = "".join(r.close() for r in started)
        refused = [r for r in fake.requests() if r["status"] == 429]
        engine.dispose()
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


def two_bots(server: Server, options: Options) -> list[Figure]:
    window = 10.0 if options.quick else 60.0
    queues = list(TWO_BOTS)
    # A Bot API process per bot: Telegram keeps each bot's limits on its own, and one fake
    # process serving both bots on this 2-core machine stamps arrivals in bunches when it is
    # starved (paced clients measured 1-75 ms apart instead of 22-37 ms), which it then counts
    # as more than 30 in a second.
    with (
        server.database("limits2bots") as url,
        contextlib.ExitStack() as fleet,
    ):
        fakes = [fleet.enter_context(FakeBotApi(enforce_limits=True, token=None)) for _ in queues]
        engine = create_engine(url)
        started = [
            fleet.enter_context(RelayProcess(url, fake.url, ["--queue", queue], token=token))
            for (queue, token), fake in zip(TWO_BOTS.items(), fakes, strict=True)
        ]
        warm_up(engine, fakes, started, queues)
        offered = offer(engine, window, queues)
        delivered = [d for fake in fakes for d in fake.delivered()]
        sends = [r for fake in fakes for r in fake.requests() if r["method"] == "sendMessage"]
        log = "".join(r.close() for r in started)
        engine.dispose()
    if "Traceback" in log:
        options.say(f"relay log:\n{log}")
    figures: list[Figure] = []
    strays = 0  # messages that went out as a bot other than their queue's
    by_bot: dict[int, int] = {}
    for queue, token in TWO_BOTS.items():
        bot = int(bot_id_of(token))
        own = [d for d in delivered if d["bot_id"] == bot]
        by_bot[bot] = len(own)
        # The text names the queue the row was enqueued in (see offer()).
        stray = sum(1 for d in own if not d["text"].startswith(f"{queue} "))
        strays += stray
        mine = [r for r in sends if r["bot_id"] == bot]
        refused_chats = [r["chat_id"] for r in mine if r["status"] == 429]
        refused = len(refused_chats)
        rate = len(own) / window
        share = refused / max(1, len(mine))
        options.say(
            f"limits, 2 bots, {queue} (bot id {bot}): offered {offered:,} in {window:.0f} s, "
            f"{len(own):,} delivered ({rate:.1f}/s), {refused} of {len(mine):,} requests "
            f"answered 429 ({share:.2%}), {stray} from another queue"
        )
        figures += [
            Figure(
                "6",
                f"delivered under Telegram's limits, 2 bots, a fake each, {queue}",
                rate,
                "msg/s",
                target=">= 27/s",
                met=rate >= 27,
                note=f"{offered:,} offered to each bot in {window:.0f} s; one relay per bot",
            ),
            Figure(
                "6",
                f"requests answered 429, 2 bots, a fake each, {queue}",
                share * 100,
                "%",
                target="<= 1%",
                met=share <= 0.01,
                note=(
                    f"{refused} of {len(mine):,} sendMessage requests of bot id {bot}; "
                    f"{sum(1 for c in refused_chats if c > 0)} to private chats, "
                    f"{sum(1 for c in refused_chats if c < 0)} to groups"
                ),
            ),
        ]
    figures.append(
        Figure(
            "6",
            "messages sent by a bot other than their queue's, 2 bots",
            strays,
            "msgs",
            target="0",
            met=strays == 0 and sum(by_bot.values()) == len(delivered),
            note="deliveries by bot id: " + ", ".join(f"{b}: {n:,}" for b, n in by_bot.items()),
        )
    )
    return figures


def warm_up(
    engine: sa.Engine,
    fakes: Sequence[FakeBotApi],
    started: Sequence[RelayProcess],
    queues: Sequence[str],
) -> None:
    """One message per queue goes through, then the fakes forget it (and their windows)."""
    with engine.begin() as conn:
        for queue in queues:
            payload = {"chat_id": CHAT_BASE - 1, "text": "up?"}
            enqueue(conn, key=f"{queue}-warmup", payload=payload, queue=queue)
    each = len(queues) // len(fakes)
    if not all(f.wait_delivered(each, timeout=30.0) for f in fakes) or not all(
        r.alive() for r in started
    ):
        raise RuntimeError("the relay did not start")
    time.sleep(1.1)  # the warm-up messages leave the fakes' windows
    for fake in fakes:
        fake.reset()


def offer(engine: sa.Engine, window: float, queues: Sequence[str]) -> int:
    """Enqueue the load into every queue for ``window`` seconds; the messages offered per queue.

    Each queue gets the same messages to the same chats; a text starts with its queue's name.
    """
    rng = random.Random(6)
    began = time.perf_counter()
    tick, n, bursts = 0.1, 0, 0

    def add(conn: sa.Connection, key: str, chat: int, text: str) -> None:
        for queue in queues:
            payload = {"chat_id": chat, "text": f"{queue} {text}"}
            enqueue(conn, key=f"{queue}-{key}", payload=payload, queue=queue)

    while (elapsed := time.perf_counter() - began) < window:
        with engine.begin() as conn:
            due = round(elapsed * OFFERED)
            while n < due:
                n += 1
                add(conn, f"m{n}", CHAT_BASE + rng.randrange(CHATS), f"#{n}")
            if elapsed >= bursts * BURST_EVERY:
                bursts += 1
                for k in range(PRIVATE_BURST):
                    add(conn, f"p{bursts}-{k}", CHAT_BASE + CHATS + bursts, f"p{k}")
                for k in range(GROUP_BURST):
                    add(conn, f"g{bursts}-{k}", GROUP_BASE - bursts, f"g{k}")
        time.sleep(max(0.0, tick - (time.perf_counter() - began - elapsed)))
    return n + bursts * (PRIVATE_BURST + GROUP_BURST)
