"""Part 2: through python-telegram-bot to the fake Bot API, against python-telegram-bot alone.

python-telegram-bot alone sends the same messages with the relay's number of requests in flight
and no database at all, twice: with its default ``HTTPXRequest`` (one httpx connection pool), and
through the relay's sender (``TelegramSender``: ``Bot.send_message`` over several small pools),
which is the faster of the two and so the ceiling the relay is held against. The relay runs with
its default settings (per-bot limit off) and its production sender. The fake Bot API runs in a
process of its own; a second round repeats the relay with a Bot API that answers after 100 ms,
Telegram's real round trip, where only many requests in flight help.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Mapping
from typing import Any

import psycopg
from telegram import Bot
from telegram.request import HTTPXRequest

from bench.harness import TOKEN, FakeBotApi, Figure, Options, Server, at_least, counts, fill
from outbox.config import DEFAULT_CONCURRENCY, RelayConfig
from outbox.ratelimit import RateLimits
from outbox.relay import Relay
from outbox.telegram import Sender, SentMessage, TelegramSender, bot_id_of

CHAT_BASE = 1_000_000
IN_FLIGHT = DEFAULT_CONCURRENCY  # the relay's default number of sends in flight


class _PlainSender:
    """python-telegram-bot as it comes: ``Bot`` with its default ``HTTPXRequest``."""

    def __init__(self, api_url: str, pool_size: int) -> None:
        request = HTTPXRequest(connection_pool_size=pool_size, pool_timeout=5.0)
        self._bot = Bot(TOKEN, base_url=api_url + "/bot", request=request)
        self.bot_id = bot_id_of(TOKEN)

    async def start(self) -> None:
        await self._bot.initialize()

    async def send(self, args: Mapping[str, Any]) -> SentMessage:
        message = await self._bot.send_message(**args)
        return SentMessage(message.chat_id, message.message_id)

    async def close(self) -> None:
        await self._bot.shutdown()


async def _alone(sender: Sender, messages: int, in_flight: int) -> float:
    numbers = iter(range(1, messages + 1))

    async def worker() -> None:
        for n in numbers:  # one shared iterator: each message is sent once
            await sender.send({"chat_id": CHAT_BASE + n, "text": f"Eslatma: vazifa #{n}"})

    await sender.start()
    try:
        began = time.perf_counter()
        await asyncio.gather(*(worker() for _ in range(in_flight)))
        elapsed = time.perf_counter() - began
    finally:
        await sender.close()
    return messages / elapsed


def ptb_alone(api_url: str, messages: int, *, plain: bool) -> float:
    sender: Sender = (
        _PlainSender(api_url, IN_FLIGHT)
        if plain
        else TelegramSender(TOKEN, api_url=api_url, pool_size=IN_FLIGHT)
    )
    return asyncio.run(_alone(sender, messages, IN_FLIGHT))


async def _relay(url: str, api_url: str) -> tuple[int, float]:
    config = RelayConfig(database_url=url, rate_limits=RateLimits(per_bot=0))
    sender = TelegramSender(TOKEN, api_url=api_url, pool_size=config.concurrency)
    async with Relay(config, sender) as relay:
        began = time.perf_counter()
        summary = await relay.run(drain=True)
        elapsed = time.perf_counter() - began
    return summary.sent, elapsed


def relay_rate(server: Server, fake: FakeBotApi, messages: int) -> float:
    fake.reset()
    with server.database("telegram") as url:
        fill(url, messages, chat_base=CHAT_BASE)
        sent, elapsed = asyncio.run(_relay(url, fake.url))
        left = counts(url)
    delivered = fake.stats()["delivered"]
    if sent != messages or delivered != messages or left.get("bajarildi") != messages:
        raise RuntimeError(f"relay sent {sent}, fake got {delivered}, outbox left as {left}")
    return sent / elapsed


# A mixed load, in tens: 4 texts, 2 photos by URL, 1 album of 3 photos, and 3 edits of the
# decade's first three texts (each edit waits for its original, and for its chat's turn).
_FILL_MIXED = """
INSERT INTO outbox (tur, kalit, payload)
SELECT 'eslatma', 'mix-' || n, CASE
    WHEN n %% 10 < 4 THEN jsonb_build_object('chat_id', %(chat_base)s + n,
                                            'text', 'Eslatma: vazifa #' || n)
    WHEN n %% 10 < 6 THEN jsonb_build_object('method', 'sendPhoto', 'chat_id', %(chat_base)s + n,
        'photo', 'https://cdn.example.com/receipts/' || n || '.jpg', 'caption', 'Chek #' || n)
    WHEN n %% 10 = 6 THEN jsonb_build_object('method', 'sendMediaGroup',
        'chat_id', %(chat_base)s + n, 'media', (
            SELECT jsonb_agg(jsonb_build_object('type', 'photo',
                'media', 'https://cdn.example.com/items/' || n || '-' || k || '.jpg'))
            FROM generate_series(1, 3) k))
    ELSE jsonb_build_object('method', 'editMessageText', 'message_key', 'mix-' || (n - 7),
                            'text', 'Bajarildi: vazifa #' || (n - 7))
    END
FROM generate_series(10, 9 + %(count)s) n
"""
MIXED_MESSAGES_PER_TEN = 4 + 2 + 3 + 3  # what Telegram counts: an album of 3 is 3


def mixed_rate(server: Server, fake: FakeBotApi, rows: int) -> tuple[float, float]:
    """Requests/s and Telegram messages/s of the relay draining the mixed load."""
    fake.reset()
    with server.database("mixed") as url:
        with psycopg.connect(url, autocommit=True) as conn:
            conn.execute(_FILL_MIXED, {"count": rows, "chat_base": CHAT_BASE})
        sent, elapsed = asyncio.run(_relay(url, fake.url))
        left = counts(url)
    if sent != rows or left.get("bajarildi") != rows:
        raise RuntimeError(f"relay sent {sent} of the mixed load, outbox left as {left}")
    return sent / elapsed, rows * MIXED_MESSAGES_PER_TEN / 10 / elapsed


def run(server: Server, options: Options) -> list[Figure]:
    messages = options.scale(20_000, 2_000)
    slow_messages = options.scale(10_000, 1_000)
    rounds = 1 if options.quick else 2
    plain: list[float] = []
    alone: list[float] = []
    relayed: list[float] = []
    with FakeBotApi() as fake:
        ptb_alone(fake.url, 500, plain=False)  # warm-up: imports, first connections
        # Alternate the two, each on half the messages per round, so that noise hits both alike.
        # python-telegram-bot's default request is slow (see docs/performance.md): a quarter of the
        # messages, in the first round only, tell its rate well enough.
        fake.reset()
        plain.append(ptb_alone(fake.url, messages // 4, plain=True))
        for _ in range(rounds):
            fake.reset()
            alone.append(ptb_alone(fake.url, messages // rounds, plain=False))
            relayed.append(relay_rate(server, fake, messages // rounds))
    options.say(f"python-telegram-bot alone: default request {plain}, relay's sender {alone}")
    options.say(f"relay through python-telegram-bot: {relayed}")
    with FakeBotApi(latency_ms=100) as slow:
        slow_rate = relay_rate(server, slow, slow_messages)
    options.say(f"relay, Bot API answering after 100 ms: {slow_rate:,.0f}/s")
    mixed_rows = options.scale(10_000, 1_000)
    with FakeBotApi() as fake:
        mixed, mixed_messages = mixed_rate(server, fake, mixed_rows)
    options.say(f"relay, mixed load: {mixed:,.0f} requests/s, {mixed_messages:,.0f} messages/s")
    ceiling = sum(alone) / len(alone)
    rate = sum(relayed) / len(relayed)
    return [
        Figure(
            "2",
            f"python-telegram-bot alone, default HTTPXRequest, {IN_FLIGHT} in flight",
            sum(plain) / len(plain),
            "msg/s",
            baseline="the relay's sender alone",
            ratio=sum(plain) / len(plain) / ceiling,
            note=f"{messages // 4:,} messages, no database",
        ),
        Figure(
            "2",
            f"python-telegram-bot alone, the relay's sender, {IN_FLIGHT} in flight (ceiling)",
            ceiling,
            "msg/s",
            note=f"{messages:,} messages, no database",
        ),
        Figure(
            "2",
            "relay through python-telegram-bot",
            rate,
            "msg/s",
            baseline="ceiling",
            **at_least(rate, ceiling, 0.8),
            note=f"{messages:,} messages",
        ),
        Figure(
            "2",
            f"relay, Bot API answering after 100 ms, {IN_FLIGHT} in flight",
            slow_rate,
            "msg/s",
            baseline="relay through python-telegram-bot",
            # The sends in flight stay full: the next claim is ready before they run out.
            **at_least(slow_rate, rate, 0.9),
            note=f"{slow_messages:,} messages; {IN_FLIGHT} in flight allow "
            f"{IN_FLIGHT * 10:,}/s at 100 ms",
        ),
        Figure(
            "2",
            "relay, mixed load: texts, photos by URL, albums of 3, edits",
            mixed,
            "requests/s",
            baseline="relay through python-telegram-bot",
            ratio=mixed / rate,
            note=f"{mixed_rows:,} rows, {mixed_messages:,.0f} Telegram messages/s "
            "(an album counts 3); each edit waits for its original and its chat's 1 s",
        ),
    ]
