"""The relay's bots: a lane per bot (docs/many-bots.md), made and retired as the relay's source
of bots changes. The lanes share the relay's connections and completer, so a relay keeps as
many connections with a thousand bots as with one. A token Telegram rejects (401) stops its
lane alone; a relay with no lane left stops with one line.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from enum import StrEnum
from typing import Protocol, runtime_checkable

from outbox.classify import classify
from outbox.config import RelayConfig
from outbox.errors import TelegramUnauthorized, TelegramUnavailable
from outbox.relay.claimer import LaneClaim, fleet_limits
from outbox.relay.completer import Completer
from outbox.relay.flood import FloodControl
from outbox.relay.health import Health
from outbox.relay.reach import TelegramReach
from outbox.relay.send_pool import SendPool, claim_check
from outbox.relay.startup import wait_until_reachable
from outbox.relay.store import Store
from outbox.relay.summary import RunSummary
from outbox.relay.tokens import BotToken, TokenFolder
from outbox.relay.tracing import send_tracer
from outbox.telegram import Prober, Sender, TelegramPool

__all__ = ["BotSource", "GivenBots", "Lane", "LaneState", "Lanes", "TokenBots"]

log = logging.getLogger("outbox.relay")


@runtime_checkable
class BotSource(Protocol):
    """Where a relay's bots come from; looked at again while the relay runs."""

    takes_unnamed_rows: bool  # its bots also send the rows that name no bot

    def look(self) -> dict[str, BotToken]:
        """The bots now, by bot id, each with its token and a label for the log."""

    def sender(self, bot: str, token: BotToken) -> Sender: ...

    async def start(self) -> None: ...

    async def close(self) -> None: ...


class GivenBots:
    """Bots whose senders the relay is given (the token of ``TELEGRAM_BOT_TOKEN``, or a test's
    senders). A relay given a single token also sends the rows that name no bot."""

    def __init__(self, senders: Sequence[Sender]) -> None:
        self._senders = {sender.bot_id: sender for sender in senders}
        self.takes_unnamed_rows = len(self._senders) == 1

    def look(self) -> dict[str, BotToken]:
        return {bot: BotToken(bot, "TELEGRAM_BOT_TOKEN") for bot in self._senders}

    def sender(self, bot: str, token: BotToken) -> Sender:
        del token  # the sender holds its own
        return self._senders[bot]

    async def start(self) -> None:
        pass  # each sender starts with its lane

    async def close(self) -> None:
        pass  # each sender closes with its lane


class TokenBots:
    """The bots of a folder of tokens, over one set of HTTP pools."""

    takes_unnamed_rows = False

    def __init__(self, folder: TokenFolder, telegram: TelegramPool) -> None:
        self.folder = folder
        self._telegram = telegram

    def look(self) -> dict[str, BotToken]:
        found = self.folder.look()
        return {bot: BotToken(t.token, f"tokens file {t.file}") for bot, t in found.items()}

    def sender(self, bot: str, token: BotToken) -> Sender:
        del bot
        return self._telegram.sender(token.token)

    async def start(self) -> None:
        await self._telegram.start()

    async def close(self) -> None:
        await self._telegram.close()


class LaneState(StrEnum):
    STARTING = "starting"  # getMe not answered yet (or the Bot API cannot be reached yet)
    SERVING = "serving"
    REJECTED = "rejected"  # Telegram rejected the token (401): nothing more is claimed


@dataclass(eq=False)
class Lane:
    bot: str
    token: BotToken
    sender: Sender
    flood: FloodControl
    pool: SendPool
    claim: LaneClaim
    stopping: asyncio.Event  # no new claims or sends for this bot
    state: LaneState = LaneState.STARTING
    tasks: list[asyncio.Task[None]] = field(default_factory=list)

    @property
    def serving(self) -> bool:
        return self.state is LaneState.SERVING


class Lanes:
    """The lanes of the relay's bots; as a service (``run`` until ``stop``), the relay's send
    pools: when the relay stops, every lane's sends end within the grace, then it winds down."""

    def __init__(
        self,
        source: BotSource,
        *,
        config: RelayConfig,
        claim_store: Store,
        record_store: Store,
        completer: Completer,
        total: RunSummary,
        stopping: asyncio.Event,
        wakeup: asyncio.Event,
        health: Health,
        on_none_left: Callable[[BaseException], None],
        tracer_provider: object | None = None,
    ) -> None:
        self.name = "lanes"
        self.source = source
        self._config = config
        self._claim_store = claim_store
        self._record_store = record_store
        self._completer = completer
        self._total = total
        self._stopping = stopping
        self._wakeup = wakeup  # the claimer's: a bot that starts serving has work
        self._health = health
        self._on_none_left = on_none_left
        self._tracer_provider = tracer_provider  # None: the process's own, if it has one
        self._stop = asyncio.Event()
        self._hurry = asyncio.Event()
        self.lanes: dict[str, Lane] = {}
        self._retiring: dict[Lane, asyncio.Task[None]] = {}
        self._limits = fleet_limits(config.rate_limits, config.slot_horizon)
        # One reach for every bot: they share one Bot API and one HTTP pool, so a cut is
        # said once and probed once however many bots the relay serves.
        self.reach = TelegramReach(
            self._bots_named, self._probe, on_change=self._reach_changed, wakeup=wakeup
        )

    # --- what the relay reports --------------------------------------------------------------

    def bots(self) -> tuple[tuple[str, ...], tuple[str, ...]]:
        """The bots this relay holds tokens of, and those of them Telegram rejected."""
        bots = tuple(sorted(self.lanes))
        return bots, tuple(b for b in bots if self.lanes[b].state is LaneState.REJECTED)

    @property
    def in_flight(self) -> int:
        return sum(lane.pool.in_flight for lane in self._all())

    def paused_for(self, now: float) -> float:
        """The longest flood pause of the relay's bots (each pauses only itself)."""
        return max((lane.flood.paused_for(now) for lane in self.lanes.values()), default=0.0)

    def unreachable(self) -> int:
        """How many of the relay's serving bots cannot reach Telegram from here now."""
        return len(self.serving()) if self.reach.down else 0

    def _reach_changed(self) -> None:
        """Ready while the relay reaches Telegram (or no bot serves yet)."""
        if self.reach.down and self.serving():
            self._health.telegram_unreachable(self.reach.reason)
        else:
            self._health.telegram_reachable()

    def _bots_named(self) -> str:
        """The serving bots, for the log: "bot 123", or a few and how many more."""
        bots = sorted(lane.bot for lane in self.serving()) or sorted(self.lanes)
        if len(bots) == 1:
            return f"bot {bots[0]}"
        shown = ", ".join(bots[:3])
        return f"bots {shown}" + (f" and {len(bots) - 3} more" if len(bots) > 3 else "")

    async def _probe(self) -> bool:
        """Whether the Bot API answers a serving bot's getMe (any answer, an error too). None
        serving: nothing to ask; a sender that cannot probe lets its next sends find out."""
        serving = self.serving()
        if not serving or not isinstance(sender := serving[0].sender, Prober):
            return True
        try:
            await sender.probe()
        except Exception as err:  # noqa: BLE001 - every failure is classified in one place
            return classify(err, "getMe").answered
        return True

    @property
    def starting(self) -> bool:
        """A bot's getMe has not been answered yet (a drain waits for it)."""
        return any(lane.state is LaneState.STARTING for lane in self.lanes.values())

    def serving(self) -> list[Lane]:
        return [lane for lane in self.lanes.values() if lane.serving]

    def _all(self) -> list[Lane]:
        return [*self.lanes.values(), *self._retiring]

    # --- the source ------------------------------------------------------------------------

    def look(self) -> None:
        """Make lanes for new bots, retire those whose token is gone or was replaced."""
        found = self.source.look()
        for bot, lane in list(self.lanes.items()):
            now = found.get(bot)
            if now is None or now.token != lane.token.token:
                del self.lanes[bot]
                why = "its token is gone" if now is None else "its token was replaced"
                log.info("bot %s: %s; no more claims with the old token", bot, why)
                self._retire(lane)
        for bot, token in found.items():
            if bot not in self.lanes and not self._stopping.is_set():
                self.lanes[bot] = self._lane(bot, token)
        if not self.lanes:
            self._health.token_ok()  # no token to check (an empty folder, for now)

    async def started(self) -> None:
        """Look at the source and wait until every bot's getMe is answered (``--once``)."""
        self.look()
        await asyncio.gather(*(lane.tasks[0] for lane in self.lanes.values()))

    def _lane(self, bot: str, token: BotToken) -> Lane:
        config = self._config
        stopping = asyncio.Event()
        sender = self.source.sender(bot, token)
        flood = FloodControl(schema=config.schema, bot=bot, store=self._record_store)

        def rejected(err: TelegramUnauthorized) -> None:
            del err  # the lane says its own
            self._reject(lane)  # made below, before any send

        pool = SendPool(
            sender,
            concurrency=config.concurrency,
            limits=self._limits,
            retry=config.retry,
            flood=flood,
            completer=self._completer,
            still_claimed=claim_check(self._claim_store, schema=config.schema),
            stopping=stopping,
            total=self._total,
            on_unauthorized=rejected,
            wakeup=self._wakeup,
            tracer=send_tracer(self._tracer_provider, bot),
            reach=self.reach,
        )
        claim = LaneClaim(
            self._claim_store,
            config,
            flood=flood,
            total=self._total,
            stopping=stopping,
            takes_unnamed_rows=self.source.takes_unnamed_rows,
            reach=self.reach,
        )
        lane = Lane(bot, token, sender, flood, pool, claim, stopping)
        lane.tasks = [
            asyncio.create_task(self._start(lane), name=f"outbox-bot-{bot}-start"),
            asyncio.create_task(flood.run(), name=f"outbox-bot-{bot}-flood"),
        ]
        return lane

    async def _start(self, lane: Lane) -> None:
        """getMe until Telegram answers: the lane serves, or its token is rejected."""

        async def get_me() -> None:
            try:
                await lane.sender.start()
            except TelegramUnavailable as err:
                if not self.serving():
                    self._health.token_pending(str(err))
                raise

        try:
            if not await wait_until_reachable(
                "the Telegram Bot API",
                get_me,
                unreachable=TelegramUnavailable,
                stopping=lane.stopping,
            ):
                return  # retired (or stopping) before Telegram answered
        except TelegramUnauthorized:
            self._reject(lane)
            return
        if lane.stopping.is_set():
            return  # retired while Telegram answered
        lane.state = LaneState.SERVING
        self._health.token_ok()
        log.info("bot %s (%s): serving", lane.bot, lane.token.file)
        self._wakeup.set()

    def _reject(self, lane: Lane) -> None:
        if lane.state is LaneState.REJECTED:
            return
        lane.state = LaneState.REJECTED
        lane.stopping.set()  # its claimed rows go back untouched
        log.error(
            "bot %s (%s): Telegram rejected the token; its rows wait for a valid one",
            lane.bot,
            lane.token.file,
        )
        # A retired lane (its file changed) that hears a 401 on its way out ends nothing.
        current = self.lanes.get(lane.bot) is lane
        if current and all(other.state is LaneState.REJECTED for other in self.lanes.values()):
            self._on_none_left(
                TelegramUnauthorized(
                    f"Telegram rejected the bot token (check {lane.token.file}); relay stopped"
                )
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
            self._reach_changed()
            await lane.sender.close()
        finally:
            self._retiring.pop(lane, None)

    # --- stopping ------------------------------------------------------------------------------

    def stop_claims(self) -> None:
        """No lane claims or starts a send any more (the first step of the relay's stop)."""
        for lane in self._all():
            lane.stopping.set()

    async def finish_sends(self, grace: float) -> None:
        """Let every lane's sends end within ``grace`` (``--once``), and tell their pauses."""
        lanes = list(self.lanes.values())
        await asyncio.gather(*(lane.pool.finish(grace, asyncio.Event()) for lane in lanes))
        for lane in self._all():
            await lane.flood.announce()

    async def run(self) -> None:
        probing = asyncio.create_task(self.reach.run(), name="outbox-telegram-reach")
        try:
            await self._stop.wait()
            await self.finish()
        finally:
            self.reach.stop()
            await probing

    def stop(self) -> None:
        self._stop.set()

    def hurry(self) -> None:
        """A second stop: sends still running are cut off now."""
        self._hurry.set()

    async def finish(self) -> None:
        """Every lane's sends end within the grace, then every lane winds down."""
        for bot in list(self.lanes):
            self._retire(self.lanes.pop(bot))
        await asyncio.gather(*self._retiring.values(), return_exceptions=True)
