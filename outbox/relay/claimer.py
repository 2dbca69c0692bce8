"""The claimer: how many rows to claim and when, the claims themselves, and when a drain ends.

Claims are sized to the free send slots, plus a few rows claimed ahead so that a slot that
frees up starts its next send at once, and no more than the bot's rate limit lets go soon.
Between claims the claimer sleeps until the earliest due row, a wake-up (NOTIFY, a finished
send, a written retry), or the poll interval.
"""

from __future__ import annotations

import asyncio
import contextlib
from dataclasses import dataclass

from outbox import queries
from outbox.config import RelayConfig
from outbox.ratelimit import RateLimits
from outbox.relay.completer import Completer
from outbox.relay.flood import FloodControl
from outbox.relay.send_pool import LATE_FOR_SLOT, RECHECK_AFTER, SendPool
from outbox.relay.store import DatabaseLost, Store
from outbox.relay.summary import RunSummary

__all__ = ["DEFER_SLACK", "ClaimPlan", "Claimer", "fleet_limits"]

# Rows claimed ahead of the free send slots should start well within RECHECK_AFTER, so the
# claimer claims ahead only what it starts within half of it at the rate its slots have been
# freeing up (and at most config.claim_ahead). The rate is measured over windows of this length.
_AHEAD_WINDOW = RECHECK_AFTER / 2
_RATE_WINDOW = 0.1
# Rows this relay handed back fall due a moment after it decided (their time is set when the
# write commits): a drain gives them that moment before it ends.
DEFER_SLACK = 0.5

# Due rows that stay locked by another transaction are looked at after 10 ms, then 20 ms, ...
_BUSY_BACKOFF_START = 0.01
_BUSY_BACKOFF_MAX = 0.5


@dataclass(frozen=True, slots=True)
class ClaimPlan:
    want: int  # rows to claim now; 0: claim nothing, wait
    wait: float  # seconds to wait for a wake-up when the claim does not fill up (or is none)


class Claimer:
    """Claims due rows for a send pool, sized to its free slots and the bot's rate limit."""

    def __init__(
        self,
        store: Store,
        config: RelayConfig,
        *,
        pool: SendPool,
        completer: Completer,
        total: RunSummary,
        stopping: asyncio.Event,
        flood: FloodControl | None = None,
        wakeup: asyncio.Event | None = None,
        bot_rows: bool = False,
    ) -> None:
        self.name = "claimer"
        # True: the rows that name the flood control's bot only (a lane of a relay with a
        # folder of tokens); False: also the rows that name no bot (a relay with one token).
        self._bot_rows = bot_rows
        self._store = store
        self._config = config
        self._pool = pool
        self._completer = completer
        self._flood = flood or FloodControl(schema=config.schema)
        self._claim_limits = fleet_limits(config.rate_limits, config.slot_horizon)
        self._bot_known = False  # the bot's state row exists
        self._held = False  # due rows wait for their chat, the bot's budget or a pause
        self._next_queue = 0
        self._total = total
        # Set by stop(): no new claims, and so no new sends; the stores stop retrying.
        self._stopping = stopping
        # Set by whoever makes work (a NOTIFY, a freed slot, a written retry, a reap, stop()).
        self._wakeup = wakeup or asyncio.Event()
        self._busy_backoff = _BUSY_BACKOFF_START
        self._release_rate = 0.0  # outcomes written (send slots freed) per second, lately
        self._rate_measured_at = 0.0
        self._rate_measured_count = 0

    # --- sizing --------------------------------------------------------------------------------

    def claim_ahead(self, now: float, written: int) -> int:
        """How many rows to claim beyond the free send slots, given the outcomes written so
        far (``written``): what starts within ``_AHEAD_WINDOW`` at the pace slots free up."""
        elapsed = now - self._rate_measured_at
        if elapsed >= _RATE_WINDOW:
            self._release_rate = (written - self._rate_measured_count) / elapsed
            self._rate_measured_at, self._rate_measured_count = now, written
        return min(self._config.claim_ahead, int(self._release_rate * _AHEAD_WINDOW))

    def plan(self, now: float, *, in_flight: int, written: int) -> ClaimPlan:
        """How many rows to claim now, with ``in_flight`` rows held and ``written`` outcomes
        written so far; and how long to wait if that claim does not fill up."""
        config = self._config
        ahead = self.claim_ahead(now, written)
        free = config.concurrency + ahead - in_flight
        # Claim once half the rows claimed ahead have started, so that claims (each a commit)
        # stay large; with nothing claimed ahead, claim for every free slot.
        min_claim = max(1, ahead // 2)
        # The bot's rate limit is the claim's: it reserves the fleet's send slots in the
        # database and takes no more rows than those (queries.claim_due).
        paused = self._flood.paused_for(now)
        if paused > 0:
            # Flood control: this bot must not send; claim nothing until the pause ends.
            return ClaimPlan(0, paused)
        if free >= min_claim:
            return ClaimPlan(min(free, config.batch_size), config.poll_interval)
        return ClaimPlan(0, config.poll_interval)

    # --- the loop ------------------------------------------------------------------------------

    async def run(self, *, drain: bool = False) -> None:
        """Claim for the send pool, whose slots free up as the completer writes their
        outcomes, until ``stop()`` (with ``drain``: until nothing is due or held)."""
        pool, completer = self._pool, self._completer
        loop = asyncio.get_running_loop()
        while not self._stopping.is_set():
            # Cleared before this round's awaits, not after them: a NOTIFY, a finished send or a
            # stop() that comes while the round claims or asks the database must still wake
            # the wait below, or the relay would sleep through it until the timeout.
            self._wakeup.clear()
            plan = self.plan(loop.time(), in_flight=pool.in_flight, written=completer.written)
            timeout = plan.wait
            if plan.want:
                rows = await self.claim(plan.want)
                pool.start(rows, loop.time())
                if len(rows) == plan.want:
                    self.took()
                    await asyncio.sleep(0)  # let the sends start before claiming more
                    continue
                idle = not pool.in_flight
                if idle:
                    # Retries written now count for the next due time.
                    await completer.write_pending()
                next_due = await self.next_due(
                    claimed=bool(rows), deferred_until=pool.deferred_until
                )
                nothing_due = next_due is None or (next_due > 0 and not self._held)
                deferred_done = pool.deferred_until + DEFER_SLACK <= loop.time()
                if drain and not pool.in_flight and nothing_due and deferred_done:
                    return
                if next_due is not None:
                    # A hair late rather than early, so that the claim finds the row due.
                    timeout = min(timeout, max(next_due, 0.0) + 0.002)
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self._wakeup.wait(), timeout)

    def stop(self) -> None:
        """No new claims, and no new sends: the first step of every stop."""
        self._stopping.set()
        self._wakeup.set()

    # --- database steps (the store deals with a lost or unusable database) ----------------

    async def claim(self, limit: int) -> list[queries.ClaimedRow]:
        """Claim up to ``limit`` rows from this relay's queues, the first one in turn first."""
        rows: list[queries.ClaimedRow] = []
        queues = self._config.queues
        self._next_queue = (self._next_queue + 1) % len(queues)
        for k in range(len(queues)):
            queue = queues[(self._next_queue + k) % len(queues)]
            rows += await self._claim_from(queue, limit - len(rows))
            if len(rows) >= limit or self._stopping.is_set():
                break
        return rows

    async def _claim_from(self, queue: str, limit: int) -> list[queries.ClaimedRow]:
        schema, bot = self._config.schema, self._flood.bot

        async def claim(conn: queries.AsyncConn) -> list[queries.ClaimedRow]:
            if not self._bot_known:
                await queries.ensure_bot(conn, bot, schema=schema)
                self._bot_known = True
            return await queries.claim_due(
                conn,
                limit,
                schema=schema,
                queue=queue,
                bot=bot,
                limits=self._claim_limits,
                bot_rows=self._bot_rows,
            )

        try:
            rows = await self._store.run(claim, retry=True)
        except DatabaseLost:  # stopping
            return []
        self._total.claimed += len(rows)
        return rows

    @property
    def held(self) -> bool:
        """Due rows wait for their chat, the bot's budget or a pause (as last looked)."""
        return self._held

    def settle(self, timing: queries.QueueTiming, *, deferred_until: float) -> float | None:
        """Take in the timing of this claimer's rows: seconds until there may be work (None:
        none), counting the rows its pool handed back; a pause it reports pauses the bot."""
        now = asyncio.get_running_loop().time()
        self._held = timing.due_now
        if timing.paused:
            # Another relay of the bot (or this one) was told to wait: so is this one.
            self._flood.read(timing.paused, now)
        next_due = timing.next_due
        own_deferred = deferred_until + DEFER_SLACK - now
        if own_deferred > 0 and (next_due is None or next_due > own_deferred):
            next_due = own_deferred  # rows this relay handed back are its own work
        return next_due

    async def next_due(self, *, claimed: bool, deferred_until: float) -> float | None:
        """Seconds until there may be work again; None: nothing is pending for this relay."""
        timing = await self._timing()
        next_due = 0.0 if timing is None else self.settle(timing, deferred_until=deferred_until)
        if next_due is not None and next_due <= 0 and not claimed:
            # Due rows exist but the claim skipped them: another transaction holds them locked
            # (an app changing its task, say). Look again later instead of spinning on them.
            next_due = self.skipped()
        else:
            self.took()
        return next_due

    def skipped(self) -> float:
        """Due rows the claim did not get (another transaction holds them locked): seconds to
        wait before looking again, twice as long each time in a row."""
        wait = self._busy_backoff
        # Capped low: rows due later must not wait behind a row someone keeps locked.
        self._busy_backoff = min(self._busy_backoff * 2, _BUSY_BACKOFF_MAX)
        return wait

    def took(self) -> None:
        """The claim got rows (or nothing was due): the next skip waits the least again."""
        self._busy_backoff = _BUSY_BACKOFF_START

    async def _timing(self) -> queries.QueueTiming | None:
        """The timing of this claimer's queues; None when the database cannot tell."""
        config = self._config
        try:
            timing = await self._store.run(
                lambda conn: queries.queue_timing(
                    conn,
                    config.queues,
                    schema=config.schema,
                    horizon=config.slot_horizon,
                    bot=self._flood.bot,
                    rate=self._claim_limits.per_bot,
                )
            )
        except DatabaseLost:
            return None  # the claim finds out, and waits for the database
        return timing


def fleet_limits(limits: RateLimits, horizon: float) -> queries.ClaimLimits:
    """The limits the claim keeps for every relay of the bot together."""
    # A send may go up to LATE_FOR_SLOT after its slot: each chat's spacing allows for that.
    chat, group = (limits.chat_interval(group=g) for g in (False, True))
    return queries.ClaimLimits(
        limits.per_bot,
        chat + LATE_FOR_SLOT if chat else 0.0,
        group + LATE_FOR_SLOT if group else 0.0,
        horizon,
    )
