"""The claimer: one loop that claims for every bot (lane) of the relay, and decides when a drain
ends (docs/how-it-works.md). Each round asks once which bots have work and when (an index probe
per bot and queue: an idle bot costs the round almost nothing), then claims for each lane with
due work, one lane further on each round, so that a bot with a deep backlog takes its turn and
no more. A lane claims a few rows ahead of its free send slots, so that a slot that frees up
starts its next send at once.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import math
from dataclasses import dataclass
from typing import TYPE_CHECKING

from outbox import queries
from outbox.config import RelayConfig
from outbox.ratelimit import RateLimits
from outbox.relay.completer import Completer
from outbox.relay.flood import FloodControl
from outbox.relay.reach import TelegramReach
from outbox.relay.send_pool import LATE_FOR_SLOT, RECHECK_AFTER, held_in_this_process
from outbox.relay.store import DatabaseLost, Store
from outbox.relay.summary import RunSummary

if TYPE_CHECKING:
    from outbox.relay.lanes import Lane, Lanes

__all__ = ["DEFER_SLACK", "ClaimPlan", "Claimer", "LaneClaim", "fleet_limits"]

log = logging.getLogger("outbox.relay")

# Rows claimed ahead of the free send slots should start well within RECHECK_AFTER, so a lane
# claims ahead only what it starts within half of it at the rate its slots have been freeing up
# (and at most config.claim_ahead). The rate is measured over windows of this length.
_AHEAD_WINDOW = RECHECK_AFTER / 2
_RATE_WINDOW = 0.1
# Rows this relay handed back fall due a moment after it decided (their time is set when the
# write commits): a drain gives them that moment before it ends.
DEFER_SLACK = 0.5
# Due rows that stay locked by another transaction are looked at after 10 ms, then 20 ms, ...
_BUSY_BACKOFF_START = 0.01
_BUSY_BACKOFF_MAX = 0.5
# How often the bots' source (a folder of tokens) is looked at for added and removed bots.
LOOK_INTERVAL = 2.0
_LATE = 0.002  # wait a hair past a due moment, so that the claim finds the row due
# With a paid lane, a free claim that found nothing is not tried again for this long: it reads
# past the paid rows pending in its queue (one index entry and row each), so a paid campaign's
# backlog would make each round's free claim as slow as the campaign is long. A free row
# enqueued meanwhile (a reply) waits this much more at most; under the slot horizon.
FREE_IDLE = 0.2
_UNKNOWN = queries.QueueTiming(0.0, 0.0, True)
_NOTHING = queries.QueueTiming(None, 0.0)


@dataclass(frozen=True, slots=True)
class ClaimPlan:
    want: int  # rows to claim now; 0: claim nothing, wait
    wait: float  # seconds to wait for a wake-up when the claim does not fill up (or is none)


class LaneClaim:
    """One lane's claims: their size, the lane's queues in turn, and its busy back-off."""

    def __init__(
        self,
        store: Store,
        config: RelayConfig,
        *,
        flood: FloodControl,
        total: RunSummary,
        stopping: asyncio.Event,
        takes_unnamed_rows: bool,
        reach: TelegramReach | None = None,
    ) -> None:
        self._store = store
        self._config = config
        self._flood = flood
        self._reach = reach
        self._total = total
        self._stopping = stopping
        # The claim's bot_rows: False also claims the rows that name no bot.
        self.takes_unnamed_rows = takes_unnamed_rows
        self._limits = fleet_limits(config.rate_limits, config.slot_horizon)
        self._bot_known = False  # the bot's state row exists
        # A claim's answer was lost: it may have committed rows that nobody here holds.
        self._unheard = False
        self._next_queue = 0
        self._free_idle_until: dict[str, float] = {}  # queue: loop time (see FREE_IDLE)
        self.held = False  # due rows wait for their chat, the bot's budget or a pause
        self.blocked_until = 0.0  # loop time: due rows locked by another claim, look later
        self._busy_backoff = _BUSY_BACKOFF_START
        self._release_rate = 0.0  # outcomes written (send slots freed) per second, lately
        self._rate_measured_at = 0.0
        self._rate_measured_count = 0

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
        # Once half the rows claimed ahead have started, so that claims (each a commit) stay
        # large. The bot's rate limit is the claim's own, kept in the database.
        min_claim = max(1, ahead // 2)
        paused = self._flood.paused_for(now)
        if paused > 0:
            return ClaimPlan(0, paused)  # flood control: nothing until the pause ends
        # Telegram cannot be reached (cut_off): nothing until the probe finds it and wakes us.
        want = 0 if self.cut_off or free < min_claim else min(free, config.batch_size)
        return ClaimPlan(want, config.poll_interval)

    @property
    def cut_off(self) -> bool:
        """This relay cannot reach Telegram now."""
        return self._reach is not None and self._reach.down

    def settle(self, timing: queries.QueueTiming, *, deferred_until: float) -> float | None:
        """Take in the timing of this lane's rows: seconds until there may be work (None:
        none), counting the rows its pool handed back; a pause it reports pauses the bot."""
        now = asyncio.get_running_loop().time()
        self.held = timing.due_now
        if timing.paused:
            self._flood.read(timing.paused, now)  # another relay of the bot was told to wait
        next_due = timing.next_due
        own_deferred = deferred_until + DEFER_SLACK - now
        if own_deferred > 0 and (next_due is None or next_due > own_deferred):
            next_due = own_deferred  # rows this relay handed back are its own work
        return next_due

    def skipped(self) -> float:
        """Due rows the claim did not get (another transaction holds them locked): seconds to
        wait before looking again, twice as long each time in a row (capped low, so that rows
        due later do not wait behind a row someone keeps locked)."""
        wait = self._busy_backoff
        self._busy_backoff = min(self._busy_backoff * 2, _BUSY_BACKOFF_MAX)
        return wait

    def took(self) -> None:
        """The claim got rows: the next skip waits the least again."""
        self._busy_backoff = _BUSY_BACKOFF_START

    async def claim(self, limit: int) -> list[queries.ClaimedRow]:
        """Claim up to ``limit`` rows from the relay's queues, the first one in turn first."""
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
            if self._unheard:
                await self._release_unheard(conn)
            self._unheard = True  # until its answer is heard
            rows: list[queries.ClaimedRow] = []
            # The free lane first (replies are free rows), then the paid one with what is left:
            # each is held to its own clock's room, so neither takes the other's slots.
            loop = asyncio.get_running_loop()
            for lane in queries.claim_lanes(self._limits):
                if lane is queries.ClaimLane.PAID and self._flood.paid_held:
                    continue  # Telegram refused a paid send: stopped here until written
                free = lane is queries.ClaimLane.FREE
                if free and loop.time() < self._free_idle_until.get(queue, 0.0):
                    continue
                got = await queries.claim_due(
                    conn,
                    limit - len(rows),
                    schema=schema,
                    queue=queue,
                    bot=bot,
                    limits=self._limits,
                    bot_rows=not self.takes_unnamed_rows,
                    lane=lane,
                )
                if free and not got:
                    self._free_idle_until[queue] = loop.time() + FREE_IDLE
                rows += got
                if len(rows) >= limit:
                    break
            self._unheard = False
            return rows

        try:
            rows = await self._store.run(claim, retry=True)
        except DatabaseLost:  # stopping
            return []
        self._total.claimed += len(rows)
        return rows

    async def _release_unheard(self, conn: queries.AsyncConn) -> None:
        """The last claim's answer was lost (the link went silent): rows it may have claimed
        go back to the queue now, not after the lease. Claims are held by the process: another
        relay of the process whose claim is on its way back now could lose a row of it (sent
        again), so ``outbox relay`` runs one relay per process."""
        released = await queries.release_unheard_claims(
            conn,
            schema=self._config.schema,
            holder=queries.claim_holder(),
            held=held_in_this_process(),
        )
        self._unheard = False
        if released:
            log.warning("%d rows of a claim whose answer was lost went back to the queue", released)


class Claimer:
    """The relay's claim loop: a round asks which bots have work, then claims for each."""

    def __init__(
        self,
        lanes: Lanes,
        store: Store,
        config: RelayConfig,
        *,
        completer: Completer,
        stopping: asyncio.Event,
        wakeup: asyncio.Event,
    ) -> None:
        self.name = "claimer"
        self.lanes = lanes
        self._store = store
        self._config = config
        self._completer = completer
        self._stopping = stopping  # set by stop(): no new claims, and so no new sends
        self._wakeup = wakeup  # set by whoever makes work
        self._turn = 0
        # Bots whose last claim came back full: they have due work still, so the next round
        # claims for them without asking the database when (a round trip a claim on a backlog).
        self._full: set[str] = set()
        self._next_look = 0.0

    def stop(self) -> None:
        """No new claims, and no new sends: the first step of every stop."""
        self._stopping.set()
        self.lanes.stop_claims()
        self._wakeup.set()

    async def run(self, *, drain: bool = False) -> None:
        """Claim for every bot until ``stop()`` (with ``drain``: until no bot has work, none
        is starting and nothing is in flight)."""
        loop = asyncio.get_running_loop()
        while not self._stopping.is_set():
            # Cleared before this round's awaits: a wake-up that comes while the round claims
            # or asks the database must still end the wait below.
            self._wakeup.clear()
            now = loop.time()
            if now >= self._next_look:
                self.lanes.look()
                self._next_look = now + LOOK_INTERVAL
            timeout = min(self._config.poll_interval, max(self._next_look - now, 0.0))
            # Rows out when the round reads the timing: an outcome written after that read (a
            # retry) is work the round did not see, so it cannot end a drain.
            out_before = self.lanes.in_flight
            again, wait, idle = await self.round()
            if again:
                await asyncio.sleep(0)  # let the sends start before claiming more
                continue
            if drain and idle and not (out_before or self.lanes.in_flight or self.lanes.starting):
                return
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self._wakeup.wait(), min(timeout, wait))

    async def round(self, *, whole_batch: bool = False) -> tuple[bool, float, bool]:
        """One look at every serving bot and a claim for each with due work (with
        ``whole_batch``, a batch each whatever its free slots: ``--once``). Returns whether
        to go again at once, how long to wait otherwise, and whether no bot has work."""
        serving = self.lanes.serving()
        if not serving:
            return False, math.inf, True
        if not self.lanes.in_flight:
            await self._completer.write_pending()  # retries written now count for the timing
        if all(lane.bot in self._full for lane in serving):
            timings: dict[str, queries.QueueTiming] | None = {
                lane.bot: _UNKNOWN for lane in serving
            }
        else:
            timings = await self._timings(serving)
        self._turn = (self._turn + 1) % len(serving)
        again, wait, idle = False, math.inf, True
        for lane in serving[self._turn :] + serving[: self._turn]:
            if self._stopping.is_set() or not lane.serving:
                continue  # stopping, or its token was rejected meanwhile
            # No answer (the database is away): every bot may have work; the claim waits.
            timing = _UNKNOWN if timings is None else timings.get(lane.bot, _NOTHING)
            took, lane_wait, lane_idle = await self._claim_for(lane, timing, whole_batch)
            again, wait, idle = again or took, min(wait, lane_wait), idle and lane_idle
        # A bot whose getMe was answered while this round asked the database was not looked
        # at: look again at once, or a drain would end (and a relay wait) before its rows.
        looked = {id(lane) for lane in serving}
        if any(id(lane) not in looked for lane in self.lanes.serving()):
            again = True
        return again, wait, idle

    async def _claim_for(
        self, lane: Lane, timing: queries.QueueTiming, whole_batch: bool
    ) -> tuple[bool, float, bool]:
        """Claim for one lane if it has due work: whether it got rows, how long to wait
        otherwise, and whether the lane has no work."""
        claim, pool = lane.claim, lane.pool
        self._full.discard(lane.bot)
        due_in = claim.settle(timing, deferred_until=pool.deferred_until)
        now = asyncio.get_running_loop().time()
        idle = not pool.in_flight and pool.deferred_until + DEFER_SLACK <= now
        if due_in is None:
            return False, math.inf, idle
        if due_in > 0:
            return False, due_in + _LATE, idle and not claim.held
        if now < claim.blocked_until:
            return False, claim.blocked_until - now, False
        plan = claim.plan(now, in_flight=pool.in_flight, written=pool.finished)
        want = plan.want
        if whole_batch and not lane.flood.paused_for(now) and not claim.cut_off:
            want = self._config.batch_size
        if not want:
            return False, plan.wait, False  # paused, or no free slot (a freed one wakes us)
        rows = await claim.claim(want)
        pool.start(rows, asyncio.get_running_loop().time())
        if len(rows) >= want:
            self._full.add(lane.bot)
        if rows:
            claim.took()
            return True, math.inf, False
        backoff = claim.skipped()  # due rows locked by another transaction
        claim.blocked_until = now + backoff
        return False, backoff, False

    async def _timings(self, lanes: list[Lane]) -> dict[str, queries.QueueTiming] | None:
        """When each lane may have work; None when the database cannot tell."""
        config = self._config
        try:
            return await self._store.run(
                lambda conn: queries.bots_timing(
                    conn,
                    [lane.bot for lane in lanes],
                    config.queues,
                    schema=config.schema,
                    horizon=config.slot_horizon,
                    rate=config.rate_limits.per_bot,
                    unnamed=[lane.claim.takes_unnamed_rows for lane in lanes],
                    paid=config.rate_limits.paid_per_bot > 0,
                )
            )
        except DatabaseLost:
            return None

    async def run_once(self) -> None:
        """Start the bots, claim one round and send it (``--once``)."""
        await self.lanes.started()
        await self.round(whole_batch=True)
        # Each row goes at its moment (within the slot horizon) and is written: all within
        # the lease, or the reaper would have it anyway.
        await self.lanes.finish_sends(self._config.lease_seconds)


def fleet_limits(limits: RateLimits, horizon: float) -> queries.ClaimLimits:
    """The limits the claim keeps for every relay of the bot together."""
    # A send may go up to LATE_FOR_SLOT after its slot: each chat's spacing allows for that.
    chat, group = (limits.chat_interval(group=g) for g in (False, True))
    return queries.ClaimLimits(
        limits.per_bot,
        chat + LATE_FOR_SLOT if chat else 0.0,
        group + LATE_FOR_SLOT if group else 0.0,
        horizon,
        limits.paid_per_bot,
    )
