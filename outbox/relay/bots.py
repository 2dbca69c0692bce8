"""Many bots in one relay (``outbox relay --tokens-dir``): a lane per bot, one claim loop.

Each bot whose token is in the folder gets a lane: its own sender (over the relay's shared HTTP
pools), flood control, send pool and claimer, which claims the rows that name the bot
(``outbox.bot``) against the bot's own budget in ``bot_holati``. The lanes share everything
that costs a connection: the claim, record, heartbeat and listen connections, the completer,
maintenance; a relay keeps as many connections with a thousand bots as with one.

One loop claims for every lane. Each round asks once which bots have work and when
(``queries.bots_timing``: an index probe per bot, so bots with nothing to send cost the round
almost nothing and no claim), then claims for the lanes that have due work, starting one lane
further on each round, so that a bot with a deep backlog takes its turn and no more. Every
relay started on the same folder serves every bot in it: the claim's lock on the bot's state
row takes their claims in turn and keeps the bot's limits and pause for the whole fleet, and a
relay that dies leaves nothing behind but its claimed rows, which the others' reaper returns
once their lease runs out.

A token Telegram rejects (401) stops its lane alone: the lane claims nothing more, its claimed
rows go back untouched, and the register says so (``relaylar.rad_botlar``) until the file
holds a new token.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import math
from dataclasses import dataclass, field
from enum import StrEnum

from outbox import queries
from outbox.config import RelayConfig
from outbox.errors import TelegramUnauthorized, TelegramUnavailable
from outbox.relay.claimer import DEFER_SLACK, Claimer, fleet_limits
from outbox.relay.completer import Completer
from outbox.relay.flood import FloodControl
from outbox.relay.send_pool import SendPool, claim_check
from outbox.relay.store import DatabaseLost, Store
from outbox.relay.summary import RunSummary
from outbox.relay.tokens import BotToken, TokenFolder
from outbox.telegram import TelegramPool, TelegramSender

__all__ = ["BotLanes", "BotsClaimer", "LaneState"]

log = logging.getLogger("outbox.relay")

# How often the folder is looked at for added, replaced and removed tokens.
LOOK_INTERVAL = 2.0
_START_DELAY, _START_DELAY_MAX = 0.5, 10.0  # getMe again while the Bot API cannot be reached


class LaneState(StrEnum):
    STARTING = "starting"  # getMe not answered yet
    SERVING = "serving"
    UNREACHABLE = "unreachable"  # the Bot API does not answer getMe yet (tried again)
    REJECTED = "rejected"  # Telegram rejected the token (401): nothing more is claimed


@dataclass(eq=False)
class Lane:
    bot: str
    token: BotToken
    sender: TelegramSender
    flood: FloodControl
    pool: SendPool
    claimer: Claimer
    stopping: asyncio.Event  # no new claims or sends for this bot
    state: LaneState = LaneState.STARTING
    tasks: list[asyncio.Task[None]] = field(default_factory=list)
    blocked_until: float = 0.0  # loop time: due rows locked by another claim, look later


class BotLanes:
    """The lanes of the bots in a tokens folder, made and retired as the folder changes."""

    def __init__(
        self,
        folder: TokenFolder,
        telegram: TelegramPool,
        *,
        config: RelayConfig,
        claim_store: Store,
        record_store: Store,
        completer: Completer,
        total: RunSummary,
        stopping: asyncio.Event,
        wakeup: asyncio.Event,
    ) -> None:
        self.folder = folder
        self._telegram = telegram
        self._config = config
        self._claim_store = claim_store
        self._record_store = record_store
        self._completer = completer
        self._total = total
        self._stopping = stopping
        self.wakeup = wakeup  # the relay's: whoever makes work for the claim loop sets it
        self._hurry = asyncio.Event()
        self.lanes: dict[str, Lane] = {}
        self._retiring: dict[Lane, asyncio.Task[None]] = {}
        self._limits = fleet_limits(config.rate_limits, config.slot_horizon)

    # --- what the relay reports --------------------------------------------------------------

    def bots(self) -> tuple[tuple[str, ...], tuple[str, ...]]:
        """The bots whose tokens this relay holds, and those of them Telegram rejected."""
        bots = tuple(sorted(self.lanes))
        return bots, tuple(b for b in bots if self.lanes[b].state is LaneState.REJECTED)

    @property
    def in_flight(self) -> int:
        return sum(lane.pool.in_flight for lane in self._all())

    def paused_for(self, now: float) -> float:
        """The longest flood pause of the relay's bots (each pauses only itself)."""
        return max((lane.flood.paused_for(now) for lane in self.lanes.values()), default=0.0)

    @property
    def starting(self) -> bool:
        """A bot's getMe has not been answered yet (a drain waits for it, as a relay with one
        token waits for the Bot API before it starts)."""
        waiting = (LaneState.STARTING, LaneState.UNREACHABLE)
        return any(lane.state in waiting for lane in self.lanes.values())

    def serving(self) -> list[Lane]:
        return [lane for lane in self.lanes.values() if lane.state is LaneState.SERVING]

    def _all(self) -> list[Lane]:
        return [*self.lanes.values(), *self._retiring]

    # --- the folder ----------------------------------------------------------------------------

    def look(self) -> None:
        """Make lanes for new tokens, retire those whose file is gone or holds another token."""
        found = self.folder.look()
        for bot, lane in list(self.lanes.items()):
            now = found.get(bot)
            if now is None or now.token != lane.token.token:
                del self.lanes[bot]
                why = "its tokens file is gone" if now is None else "its token was replaced"
                log.info("bot %s: %s; no more claims with the old token", bot, why)
                self._retire(lane)
        for bot, token in found.items():
            if bot not in self.lanes and not self._stopping.is_set():
                self.lanes[bot] = self._lane(bot, token)

    def _lane(self, bot: str, token: BotToken) -> Lane:
        config = self._config
        stopping = asyncio.Event()
        sender = self._telegram.sender(token.token)
        flood = FloodControl(schema=config.schema, bot=bot, store=self._record_store)
        holder: list[Lane] = []

        def rejected(err: TelegramUnauthorized) -> None:
            del err  # its text names the single-token variable; this lane says its own
            if holder:
                self._reject(holder[0])

        pool = SendPool(
            sender,
            concurrency=config.concurrency,
            limits=self._limits,
            grace_seconds=config.grace_seconds,
            retry=config.retry,
            flood=flood,
            completer=self._completer,
            still_claimed=claim_check(self._claim_store, schema=config.schema),
            stopping=stopping,
            total=self._total,
            on_unauthorized=rejected,
            wakeup=self.wakeup,
        )
        claimer = Claimer(
            self._claim_store,
            config,
            pool=pool,
            completer=self._completer,
            flood=flood,
            total=self._total,
            stopping=stopping,
            wakeup=self.wakeup,
            bot_rows=True,
        )
        lane = Lane(bot, token, sender, flood, pool, claimer, stopping)
        holder.append(lane)
        lane.tasks = [
            asyncio.create_task(self._start(lane), name=f"outbox-bot-{bot}-start"),
            asyncio.create_task(flood.run(), name=f"outbox-bot-{bot}-flood"),
        ]
        return lane

    async def _start(self, lane: Lane) -> None:
        """getMe until Telegram answers: the lane serves, or its token is rejected."""
        delay = _START_DELAY
        while not lane.stopping.is_set():
            try:
                await lane.sender.start()
            except TelegramUnauthorized:
                self._reject(lane)
                return
            except TelegramUnavailable as err:
                if lane.state is not LaneState.UNREACHABLE:
                    log.warning("bot %s: cannot reach the Bot API yet (%s); waiting", lane.bot, err)
                lane.state = LaneState.UNREACHABLE
                with contextlib.suppress(TimeoutError):
                    await asyncio.wait_for(lane.stopping.wait(), delay)
                delay = min(delay * 2, _START_DELAY_MAX)
                continue
            if lane.stopping.is_set():
                return  # retired (its file changed) while Telegram answered
            lane.state = LaneState.SERVING
            log.info("bot %s (tokens file %s): serving", lane.bot, lane.token.file)
            self.wakeup.set()
            return

    def _reject(self, lane: Lane) -> None:
        if lane.state is LaneState.REJECTED:
            return
        lane.state = LaneState.REJECTED
        lane.stopping.set()  # its claimed rows go back untouched
        log.error(
            "bot %s (tokens file %s): Telegram rejected the token; its rows wait until the file "
            "holds a valid one",
            lane.bot,
            lane.token.file,
        )

    def _retire(self, lane: Lane) -> None:
        lane.stopping.set()
        self._retiring[lane] = asyncio.create_task(
            self._wind_down(lane), name=f"outbox-bot-{lane.bot}-retire"
        )

    async def _wind_down(self, lane: Lane) -> None:
        """Sends in flight finish (within the grace), their outcomes are written, then the
        lane's pause is told and its sender closed."""
        try:
            await lane.pool.finish(self._config.grace_seconds, self._hurry)
            lane.flood.stop()
            await asyncio.gather(*lane.tasks, return_exceptions=True)
            await lane.sender.close()
        finally:
            self._retiring.pop(lane, None)

    # --- stopping ------------------------------------------------------------------------------

    def stop_claims(self) -> None:
        """No lane claims or starts a send any more (the first step of the relay's stop)."""
        for lane in self._all():
            lane.stopping.set()

    def hurry(self) -> None:
        self._hurry.set()

    async def finish(self) -> None:
        """Every lane's sends end within the grace, then every lane winds down."""
        for bot in list(self.lanes):
            self._retire(self.lanes.pop(bot))
        await asyncio.gather(*self._retiring.values(), return_exceptions=True)

    async def announce(self) -> None:
        for lane in self._all():
            await lane.flood.announce()


class BotsClaimer:
    """The claim loop of a relay with a folder of tokens: one round asks which bots have work,
    then claims for each that has, in turn."""

    def __init__(
        self, lanes: BotLanes, store: Store, config: RelayConfig, *, stopping: asyncio.Event
    ) -> None:
        self.name = "claimer"
        self.lanes = lanes
        self._store = store
        self._config = config
        self._stopping = stopping
        self._wakeup = lanes.wakeup
        self._turn = 0
        self._next_look = 0.0

    def stop(self) -> None:
        self._stopping.set()
        self.lanes.stop_claims()
        self._wakeup.set()

    async def run(self, *, drain: bool = False) -> None:
        """Claim for every bot until ``stop()`` (with ``drain``: until no bot has work)."""
        loop = asyncio.get_running_loop()
        while not self._stopping.is_set():
            self._wakeup.clear()
            now = loop.time()
            if now >= self._next_look:
                self.lanes.look()
                self._next_look = now + LOOK_INTERVAL
            timeout = min(self._config.poll_interval, max(self._next_look - now, 0.0))
            again, wait, idle = await self.round()
            if again:
                await asyncio.sleep(0)  # let the sends start before claiming more
                continue
            if drain and idle and not self.lanes.starting and not self.lanes.in_flight:
                return
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self._wakeup.wait(), min(timeout, wait))

    async def round(self) -> tuple[bool, float, bool]:
        """One look at every serving bot and a claim for each with due work. Returns whether
        to go again at once, how long to wait otherwise, and whether no bot has work."""
        serving = self.lanes.serving()
        if not serving:
            return False, math.inf, True
        loop = asyncio.get_running_loop()
        timings = await self._timings([lane.bot for lane in serving])
        self._turn = (self._turn + 1) % len(serving)
        again, wait, idle = False, math.inf, True
        # No answer (the database is away): every bot may have work; the claim waits for it.
        unknown = queries.QueueTiming(0.0, 0.0, True)
        nothing = queries.QueueTiming(None, 0.0)
        for lane in serving[self._turn :] + serving[: self._turn]:
            if self._stopping.is_set():
                break
            if lane.state is not LaneState.SERVING:
                continue  # rejected meanwhile
            timing = unknown if timings is None else timings.get(lane.bot, nothing)
            due_in = lane.claimer.settle(timing, deferred_until=lane.pool.deferred_until)
            now = loop.time()
            if lane.pool.in_flight or lane.pool.deferred_until + DEFER_SLACK > now:
                idle = False
            if due_in is None:
                continue
            if due_in > 0:
                idle = idle and not lane.claimer.held
                wait = min(wait, due_in + 0.002)  # a hair late, so that the claim finds it
                continue
            idle = False
            if now < lane.blocked_until:
                wait = min(wait, lane.blocked_until - now)
                continue
            plan = lane.claimer.plan(now, in_flight=lane.pool.in_flight, written=lane.pool.finished)
            if not plan.want:
                wait = min(wait, plan.wait)  # paused, or no free slot (a freed one wakes us)
                continue
            rows = await lane.claimer.claim(plan.want)
            lane.pool.start(rows, loop.time())
            if rows:
                lane.claimer.took()
                again = True
            else:
                # Due rows the claim skipped: locked by another relay's claim of this bot.
                backoff = lane.claimer.skipped()
                lane.blocked_until = now + backoff
                wait = min(wait, backoff)
        # A bot whose getMe was answered while this round asked the database was not looked
        # at: look again at once, or a drain would end (and a relay wait) before its rows.
        looked = {id(lane) for lane in serving}
        if any(id(lane) not in looked for lane in self.lanes.serving()):
            again = True
        return again, wait, idle

    async def _timings(self, bots: list[str]) -> dict[str, queries.QueueTiming] | None:
        config = self._config
        try:
            return await self._store.run(
                lambda conn: queries.bots_timing(
                    conn,
                    bots,
                    config.queues,
                    schema=config.schema,
                    horizon=config.slot_horizon,
                    rate=self._config.rate_limits.per_bot,
                )
            )
        except DatabaseLost:
            return None

    async def run_once(self) -> None:
        """Look at the folder, start its bots, claim one round and send it (``--once``)."""
        self.lanes.look()
        starting = [lane.tasks[0] for lane in self.lanes.lanes.values()]
        await asyncio.gather(*starting, return_exceptions=True)
        await self.round()
        # Each row goes at its moment (within the slot horizon) and is written: all within the
        # lease, or the reaper would have it anyway.
        lease, pools = self._config.lease_seconds, [lane.pool for lane in self.lanes.lanes.values()]
        await asyncio.gather(*(pool.finish(lease, asyncio.Event()) for pool in pools))
