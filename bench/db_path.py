"""Part 3: the database path alone: the relay with a sender that does nothing.

Every row is claimed, "sent" by ``NullSender`` and recorded as done with its sent marker, with
the relay's default settings except the per-bot rate limit (off, as for a local Bot API server).
Each message goes to a chat of its own, like a broadcast of reminders to many users. A second
drain with the chat limits off too gives what keeping each chat's spacing for the whole fleet
(a row per claimed chat in ``chat_navbati``) costs a message.

Each drain also says what a message cost (bench.cost): the relay's CPU and the server's, WAL
bytes and full-page images, commits, rows and index entries written; and what else happened
meanwhile (checkpoints, autovacuum, the rest of the machine's load), which is what makes one
drain slower than another.
"""

from __future__ import annotations

import asyncio
import time
from typing import NamedTuple
from urllib.parse import urlsplit

from bench.cost import CostProbe, DrainCost
from bench.harness import Figure, Options, Server, counts, fill
from outbox.config import RelayConfig
from outbox.ratelimit import RateLimits
from outbox.relay import Relay
from outbox.telegram import NullSender

DEFAULT_CHAT_LIMITS = RateLimits(per_bot=0)
NO_LIMITS = RateLimits(per_bot=0, per_chat=0, per_group_per_minute=0)
DRAINS = 3  # of each kind, alternating
BACKLOG_FACTOR = 3  # the backlog drain: three times the others' messages


class Drain(NamedTuple):
    rate: float  # messages/s
    cost: DrainCost


async def drain(url: str, limits: RateLimits, probe: CostProbe) -> tuple[int, float]:
    """Run the relay until nothing is due; return (messages sent, seconds)."""
    config = RelayConfig(database_url=url, rate_limits=limits)
    async with Relay(config, NullSender()) as relay:
        probe.start()
        began = time.perf_counter()
        summary = await relay.run(drain=True)
        elapsed = time.perf_counter() - began
        probe.stop()
    return summary.sent, elapsed


def measure(
    server: Server,
    options: Options,
    messages: int,
    limits: RateLimits = DEFAULT_CHAT_LIMITS,
    *,
    counted: bool = True,
    chats: int | None = None,
) -> Drain:
    """One drain of ``messages`` (to as many chats, or ``chats`` chats in turn)."""
    with server.database("db_path") as url:
        fill(url, messages, chats=chats)
        with CostProbe(server.url, url, urlsplit(url).path.lstrip("/")).watching() as probe:
            sent, elapsed = asyncio.run(drain(url, limits, probe))
            cost = probe.result(sent)
        left = counts(url)
    if left.get("bajarildi") != messages or sent != messages:
        raise RuntimeError(f"relay left the outbox as {left} after sending {sent}")
    rate = sent / elapsed
    if counted:  # among the drains part 7 compares with PgQueuer's
        options.db_path_rates.append(rate)
    options.say(f"database path: {sent:,} messages in {elapsed:.2f} s = {rate:,.0f}/s")
    options.say(f"  {cost.line()}")
    options.say(f"  {cost.details()}")
    return Drain(rate, cost)


def _swing_note(drains: list[Drain]) -> str:
    """What the slowest drain had that the fastest did not."""
    slow = min(drains, key=lambda d: d.rate)
    fast = max(drains, key=lambda d: d.rate)
    order = " · ".join(f"{d.rate:,.0f}" for d in drains)

    def said(d: Drain) -> str:
        c = d.cost
        return (
            f"{d.rate:,.0f}/s: {c.checkpoints} checkpoint(s), {c.fpi:.3f} full pages and "
            f"{c.wal_bytes:,.0f} B WAL a message, {c.autovacuums} autovacuum run(s), "
            f"PostgreSQL {c.pg_backend_us:.0f} us, relay {c.relay_cpu_us:.0f} us, rest of "
            f"the machine {c.machine_other_cores:.2f} cores"
        )

    return f"drains in order {order}; slowest {said(slow)}; fastest {said(fast)}"


def run(server: Server, options: Options) -> list[Figure]:
    messages = options.scale(50_000, 10_000)
    # Alternating, best of each: the machine is shared, and one drain of each says little.
    drains: dict[bool, list[Drain]] = {True: [], False: []}
    in_order: list[Drain] = []
    for _ in range(DRAINS):
        for chat_limits in (True, False):
            limits = DEFAULT_CHAT_LIMITS if chat_limits else NO_LIMITS
            result = measure(server, options, messages, limits)
            drains[chat_limits].append(result)
            in_order.append(result)
    # A broadcast's backlog in one queue, drained before autovacuum has analysed it: the
    # relay plans its claim once, on statistics that saw the queue empty.
    backlog = measure(server, options, BACKLOG_FACTOR * messages, counted=False)
    best = max(drains[True], key=lambda d: d.rate)
    unlimited = max(d.rate for d in drains[False])
    slowest = min(d.rate for d in in_order)
    # The fleet-wide chat spacing is what one chat_navbati upsert per message costs.
    chat_cost_us = max(0.0, 1e6 / best.rate - 1e6 / unlimited)
    c = best.cost
    return [
        Figure(
            "3",
            f"relay, no-op sender, {messages:,} messages",
            best.rate,
            "msg/s",
            target=">= 10,000/s",
            met=best.rate >= 10_000,
            note=f"best of {DRAINS} drains",
        ),
        Figure(
            "3",
            "same, chat limits off too",
            unlimited,
            "msg/s",
            baseline="chat limits on",
            ratio=unlimited / best.rate,
            note=(
                f"best of {DRAINS} drains, alternating with the above; the fleet-wide chat "
                f"spacing costs about {chat_cost_us:.1f} us a message"
            ),
        ),
        Figure(
            "3",
            f"relay, a backlog of {BACKLOG_FACTOR * messages:,} in one queue, never analysed",
            backlog.rate,
            "msg/s",
            baseline="the best",
            ratio=backlog.rate / best.rate,
            target=">= 0.8x",
            met=backlog.rate >= 0.8 * best.rate,
            note=(
                f"one drain, after the others; PostgreSQL {backlog.cost.pg_backend_us:.0f} us a "
                "message (a claim that reads the whole backlog shows here)"
            ),
        ),
        Figure(
            "3",
            "slowest drain of the part",
            slowest,
            "msg/s",
            baseline="the best",
            ratio=slowest / max(d.rate for d in in_order),
            note=_swing_note(in_order),
        ),
        Figure(
            "3",
            "a message's cost: relay CPU",
            c.relay_cpu_us,
            "us",
            note=f"the best drain; PostgreSQL {c.pg_backend_us:.0f} us in the backends serving "
            f"it, {c.pg_other_us:.0f} us in its other processes (WAL writer, checkpointer, "
            f"autovacuum)",
        ),
        Figure(
            "3",
            "a message's cost: WAL",
            c.wal_bytes,
            "B",
            note=(
                f"{c.fpi:.3f} full-page images, {c.commits:.3f} commits, {c.wal_syncs:.3f} WAL "
                f"syncs, {c.rows:.2f} rows written ({100 * c.hot_share:.0f} % of outbox's "
                f"updates HOT), "
                + (
                    "index entries n/a"
                    if c.index_entries is None
                    else f"{c.index_entries:.2f} index entries: "
                    + ", ".join(f"{k} {v:.2f}" for k, v in c.entries_by_index.items())
                )
            ),
        ),
    ]
