"""Part 3: the database path alone: the relay with a sender that does nothing.

Every row is claimed, "sent" by ``NullSender`` and recorded as done with its sent marker, with
the relay's default settings except the per-bot rate limit (off, as for a local Bot API server).
Each message goes to a chat of its own, like a broadcast of reminders to many users. A second
drain with the chat limits off too gives what keeping each chat's spacing for the whole fleet
(a row per claimed chat in ``chat_navbati``) costs a message.
"""

from __future__ import annotations

import asyncio
import time

from bench.harness import Figure, Options, Server, counts, fill
from outbox.config import RelayConfig
from outbox.ratelimit import RateLimits
from outbox.relay import Relay
from outbox.telegram import NullSender

DEFAULT_CHAT_LIMITS = RateLimits(per_bot=0)
NO_LIMITS = RateLimits(per_bot=0, per_chat=0, per_group_per_minute=0)


async def drain(url: str, limits: RateLimits = DEFAULT_CHAT_LIMITS) -> tuple[int, float]:
    """Run the relay until nothing is due; return (messages sent, seconds)."""
    config = RelayConfig(database_url=url, rate_limits=limits)
    async with Relay(config, NullSender()) as relay:
        began = time.perf_counter()
        summary = await relay.run(drain=True)
        elapsed = time.perf_counter() - began
    return summary.sent, elapsed


def measure(
    server: Server, options: Options, messages: int, limits: RateLimits = DEFAULT_CHAT_LIMITS
) -> float:
    with server.database("db_path") as url:
        fill(url, messages)
        sent, elapsed = asyncio.run(drain(url, limits))
        left = counts(url)
    if left.get("bajarildi") != messages or sent != messages:
        raise RuntimeError(f"relay left the outbox as {left} after sending {sent}")
    rate = sent / elapsed
    options.say(f"database path: {sent:,} messages in {elapsed:.2f} s = {rate:,.0f}/s")
    return rate


def run(server: Server, options: Options) -> list[Figure]:
    messages = options.scale(50_000, 10_000)
    # Alternating, best of two each: the machine is shared, and one drain of each says little.
    rates: dict[bool, list[float]] = {True: [], False: []}
    for _ in range(2):
        for chat_limits in (True, False):
            limits = DEFAULT_CHAT_LIMITS if chat_limits else NO_LIMITS
            rates[chat_limits].append(measure(server, options, messages, limits))
    rate, unlimited = max(rates[True]), max(rates[False])
    chat_cost_us = max(0.0, 1e6 / rate - 1e6 / unlimited)
    return [
        Figure(
            "3",
            f"relay, no-op sender, {messages:,} messages",
            rate,
            "msg/s",
            target=">= 10,000/s",
            met=rate >= 10_000,
            note="best of two drains",
        ),
        Figure(
            "3",
            "same, chat limits off too",
            unlimited,
            "msg/s",
            baseline="chat limits on",
            ratio=unlimited / rate,
            note=(
                f"best of two drains, alternating with the above; the fleet-wide chat spacing "
                f"costs about {chat_cost_us:.1f} us a message"
            ),
        ),
    ]
