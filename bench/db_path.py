"""Part 3: the database path alone: the relay with a sender that does nothing.

Every row is claimed, "sent" by ``NullSender`` and recorded as done with its sent marker, with
the relay's default settings except the per-bot rate limit (off, as for a local Bot API server).
Each message goes to a chat of its own, like a broadcast of reminders to many users.
"""

from __future__ import annotations

import asyncio
import time

from bench.harness import Figure, Options, Server, counts, fill
from outbox.config import RelayConfig
from outbox.ratelimit import RateLimits
from outbox.relay import Relay
from outbox.telegram import NullSender


async def drain(url: str) -> tuple[int, float]:
    """Run the relay until nothing is due; return (messages sent, seconds)."""
    config = RelayConfig(database_url=url, rate_limits=RateLimits(per_bot=0))
    async with Relay(config, NullSender()) as relay:
        began = time.perf_counter()
        summary = await relay.run(drain=True)
        elapsed = time.perf_counter() - began
    return summary.sent, elapsed


def measure(server: Server, options: Options, messages: int) -> float:
    with server.database("db_path") as url:
        fill(url, messages)
        sent, elapsed = asyncio.run(drain(url))
        left = counts(url)
    if left.get("bajarildi") != messages or sent != messages:
        raise RuntimeError(f"relay left the outbox as {left} after sending {sent}")
    rate = sent / elapsed
    options.say(f"database path: {sent:,} messages in {elapsed:.2f} s = {rate:,.0f}/s")
    return rate


def run(server: Server, options: Options) -> list[Figure]:
    messages = options.scale(50_000, 10_000)
    rate = measure(server, options, messages)
    return [
        Figure(
            "3",
            f"relay, no-op sender, {messages:,} messages",
            rate,
            "msg/s",
            target=">= 10,000/s",
            met=rate >= 10_000,
        )
    ]
