"""The relay: one claimer, one send pool, one completer, flood control, a listener and
maintenance, wired so that rows flow claim -> send -> record.

Nothing the relay keeps in memory is needed for correctness: a claimed row the relay never
reports on is returned to the queue by the reaper once its lease runs out.

Every service has one shape (``outbox.relay.service``): ``run()`` until ``stop()``. They stop
in this order: the claimer stops claiming (and so no new send starts); the sends in flight
finish within the grace period while the completer keeps writing their outcomes; the
completer writes the rest; then flood control, the listener, maintenance and the heartbeat
stop. A second
``stop()`` cuts the grace short.
"""

from __future__ import annotations

import asyncio
import logging
import time

from outbox.config import RelayConfig
from outbox.db import check_schema
from outbox.errors import DatabaseUnavailable, OutboxError, TelegramUnavailable
from outbox.relay.bots import BotLanes, BotsClaimer
from outbox.relay.claimer import Claimer, fleet_limits
from outbox.relay.completer import Completer
from outbox.relay.flood import FloodControl
from outbox.relay.health import Health
from outbox.relay.heartbeat import Heartbeat, RelayIdentity
from outbox.relay.listener import Listener
from outbox.relay.maintenance import Maintenance, Reaper, Retention
from outbox.relay.send_pool import SendPool, claim_check
from outbox.relay.service import Service
from outbox.relay.startup import wait_until_reachable
from outbox.relay.store import OutageLog, Store
from outbox.relay.summary import RelaySnapshot, RunSummary
from outbox.relay.tokens import TokenFolder
from outbox.telegram import Sender, TelegramPool

__all__ = ["Relay"]

log = logging.getLogger("outbox.relay")


class Relay:
    """Use as ``async with Relay(config, sender) as relay: await relay.run()``; with a folder of
    tokens, ``Relay(config, tokens=TokenFolder(path), telegram=TelegramPool(...))`` serves every
    bot in it (``outbox.relay.bots``)."""

    def __init__(
        self,
        config: RelayConfig,
        sender: Sender | None = None,
        *,
        tokens: TokenFolder | None = None,
        telegram: TelegramPool | None = None,
    ) -> None:
        if (sender is None) == (tokens is None) or (tokens is not None and telegram is None):
            raise ValueError("a relay has a sender, or a tokens folder and a TelegramPool")
        self.config = config
        self._sender = sender
        self._telegram = telegram
        # No new claims and no new sends once set (the claimer's stop, the first of every stop).
        self._stopping = asyncio.Event()
        # The claimer sleeps on this between claims; whoever makes work for it sets it.
        self._wakeup = asyncio.Event()
        self._fatal: BaseException | None = None
        self._total = RunSummary()
        # Poll-only is the PgBouncer mode: no server-side prepared statements there. So is a
        # relay that LISTENs on a direct URL of its own: its main URL is the pooler's.
        prepare = not config.poll_only and config.listen_database_url is None
        url = config.database_url
        # One store per connection; one word in the log about the database for all of them.
        self._outage = OutageLog()
        self._claim_store = Store(
            url, "claim", self._stopping, prepare=prepare, outage=self._outage
        )
        self._record_store = Store(
            url, "record", self._stopping, prepare=prepare, outage=self._outage
        )
        # /healthz and /readyz (outbox.metrics); the heartbeat is its probe of the database.
        self.health = Health(stale_after=2 * config.heartbeat_interval)
        self.identity = RelayIdentity.of_this_process(
            config.queues, () if sender is None else (sender.bot_id,)
        )
        self._heartbeat_store = Store(
            url, "heartbeat", self._stopping, prepare=prepare, outage=self._outage
        )
        self.completer = Completer(
            self._record_store,
            schema=config.schema,
            flush_interval=config.flush_interval,
            grace_seconds=config.grace_seconds,
            stopping=self._stopping,
            total=self._total,
            wakeup=self._wakeup,
        )
        self.lanes: BotLanes | None = None
        self.flood: FloodControl | _LaneFloods
        self.send_pool: SendPool | _LanePools
        self.claimer: Claimer | BotsClaimer
        if sender is None:
            assert tokens is not None and telegram is not None
            self._wire_lanes(tokens, telegram)
        else:
            self._wire_one_bot(sender)
        self.listener = None if config.poll_only else self._listener()
        self.maintenance = self._maintenance()
        lanes = self.lanes
        self.heartbeat = Heartbeat(
            self._heartbeat_store,
            schema=config.schema,
            identity=self.identity,
            interval=config.heartbeat_interval,
            snapshot=self.snapshot,
            health=self.health,
            bots=None if lanes is None else lanes.bots,
        )

    def _wire_one_bot(self, sender: Sender) -> None:
        config = self.config
        # Every relay of the bot, whichever of its queues it serves, shares its limits and pause.
        self.flood = flood = FloodControl(
            schema=config.schema, bot=sender.bot_id, store=self._record_store
        )
        # The bot's budget and each chat's spacing are the claim's, in the database, for the
        # whole fleet; the pool sends each row at the moment its claim reserved, or not at all.
        self.send_pool = pool = SendPool(
            sender,
            concurrency=config.concurrency,
            limits=fleet_limits(config.rate_limits, config.slot_horizon),
            grace_seconds=config.grace_seconds,
            retry=config.retry,
            flood=flood,
            completer=self.completer,
            still_claimed=claim_check(self._claim_store, schema=config.schema),
            stopping=self._stopping,
            total=self._total,
            on_unauthorized=self._fail,
            wakeup=self._wakeup,
        )
        self.claimer = Claimer(
            self._claim_store,
            config,
            pool=pool,
            completer=self.completer,
            flood=flood,
            total=self._total,
            stopping=self._stopping,
            wakeup=self._wakeup,
        )

    def _wire_lanes(self, tokens: TokenFolder, telegram: TelegramPool) -> None:
        """A lane per bot of the folder; the relay's connections and completer are theirs."""
        self.lanes = lanes = BotLanes(
            tokens,
            telegram,
            config=self.config,
            claim_store=self._claim_store,
            record_store=self._record_store,
            completer=self.completer,
            total=self._total,
            stopping=self._stopping,
            wakeup=self._wakeup,
        )
        self.flood = _LaneFloods(lanes)
        self.send_pool = _LanePools(lanes)
        self.claimer = BotsClaimer(lanes, self._claim_store, self.config, stopping=self._stopping)

    # --- lifecycle ---------------------------------------------------------------------------

    async def __aenter__(self) -> Relay:
        await self.open()
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.close()

    async def open(self) -> None:
        """Check the schema and the token, waiting for the database and the Bot API to answer.

        A schema this version cannot use or a rejected token is one clear error at once.
        """
        url, schema = self.config.database_url, self.config.schema
        health = self.health

        async def database() -> None:
            try:
                await check_schema(url, schema=schema)
            except DatabaseUnavailable as err:
                health.database_failed(str(err))
                raise
            health.database_ok()

        async def token() -> None:
            if self._sender is None:
                health.token_ok()  # each bot of the folder checks its own as its lane starts
                return
            try:
                await self._sender.start()
            except TelegramUnavailable as err:
                health.token_pending(str(err))
                raise
            health.token_ok()

        if self._telegram is not None:
            await self._telegram.start()
        if await wait_until_reachable(
            "the database", database, unreachable=DatabaseUnavailable, stopping=self._stopping
        ):
            await wait_until_reachable(
                "the Telegram Bot API",
                token,
                unreachable=TelegramUnavailable,
                stopping=self._stopping,
            )

    async def close(self) -> None:
        self._stopping.set()  # a final write that cannot reach the database gives up at once
        await self._write_the_rest()
        await self.flood.announce()
        if self._sender is not None:
            await self._sender.close()
        if self.lanes is not None:
            await self.lanes.finish()
        if self._telegram is not None:
            await self._telegram.close()
        await self._claim_store.close()
        await self._record_store.close()
        await self._heartbeat_store.close()

    def snapshot(self) -> RelaySnapshot:
        """The relay's figures now; safe to call from another thread (metrics)."""
        return RelaySnapshot(
            summary=self._total.copy(),
            in_flight=self.send_pool.in_flight,
            unwritten=self.completer.unwritten,
            # asyncio's event loop keeps time with time.monotonic.
            paused_seconds=self.flood.paused_for(time.monotonic()),
        )

    def stop(self) -> None:
        """Ask the relay to stop: no new claims; in-flight sends get the grace period.

        Asked again, it stops at once: sends still running are cut off.
        """
        if self._stopping.is_set():
            self.send_pool.hurry()
            self.completer.hurry()
        self.claimer.stop()

    # --- one batch, for tests and tools ------------------------------------------------------

    async def run_once(self) -> RunSummary:
        """Claim one batch, send it, record the outcomes, and say what happened."""
        before = self._total.copy()
        if isinstance(self.claimer, BotsClaimer):
            await self.claimer.run_once()
            await self.completer.write_pending()
            await self.flood.announce()
        elif not self._stopping.is_set() and isinstance(self.send_pool, SendPool):
            rows = await self.claimer.claim(self.config.batch_size)
            checked_at = asyncio.get_running_loop().time()
            self.send_pool.start(rows, checked_at)
            # Each row goes at its moment (within the slot horizon): all within the lease.
            await self.send_pool.finish(self.config.lease_seconds, asyncio.Event())
            await self.completer.write_pending()
            await self.flood.announce()
        self._raise_if_fatal()
        return self._total.since(before)

    # --- the long-running loop ---------------------------------------------------------------

    async def run(self, *, drain: bool = False) -> RunSummary:
        """Relay until stopped (or, with ``drain``, until nothing is due and nothing in flight)."""
        if self._stopping.is_set():  # stopped while it waited to start: nothing was claimed
            return self._total.copy()
        # The claimer's run is the relay's: when it ends, so do the others, in order.
        helpers: list[Service] = [self.flood, self.maintenance, self.heartbeat]
        if self.listener is not None:
            helpers.append(self.listener)
        services: list[Service] = [self.send_pool, self.completer, *helpers]
        running = {service.name: self._start(service) for service in services}
        self.health.running()
        try:
            await self.claimer.run(drain=drain)
        finally:
            # 1. The claimer stops: no new claims, and so no new sends.
            self.claimer.stop()
            self.health.stopping()
            if self.send_pool.in_flight:
                log.info(
                    "stopping: %d claimed rows in flight get up to %g s; "
                    "a second signal stops at once",
                    self.send_pool.in_flight,
                    self.config.grace_seconds,
                )
            # 2. Sends finish within the grace while the completer keeps writing outcomes.
            await _stopped(running, self.send_pool)
            # 3. The completer writes the rest.
            await _stopped(running, self.completer)
            # 4. Last, flood control (its last announcement), the listener, maintenance and the
            # heartbeat (which takes the relay out of the register).
            await _stopped(running, *helpers)
        self._raise_if_fatal()
        return self._total

    # --- wiring ----------------------------------------------------------------------------------

    def _start(self, service: Service) -> asyncio.Task[None]:
        task = asyncio.create_task(service.run(), name=f"outbox-{service.name}")
        task.add_done_callback(self._writer_ended if service is self.completer else _log_if_died)
        return task

    def _listener(self) -> Listener:
        lanes = self.lanes
        return Listener(
            # LISTEN needs a session of its own: a direct URL beside PgBouncer's, if given.
            self.config.listen_database_url or self.config.database_url,
            schema=self.config.schema,
            bot=self.flood.bot if isinstance(self.flood, FloodControl) else "",
            bots=None if lanes is None else lanes.lanes.keys,
            announcer=self._record_store,
            stopping=self._stopping,
            wakeup=self._wakeup,
            outage=self._outage,
        )

    def _maintenance(self) -> Maintenance:
        config = self.config
        return Maintenance(
            config.database_url,
            reaper=Reaper(
                schema=config.schema,
                lease_seconds=config.lease_seconds,
                max_attempts=config.retry.max_attempts,
            ),
            retention=self._retention(),
            interval=config.reap_interval,
            stopping=self._stopping,
            wakeup=self._wakeup,
            outage=self._outage,
        )

    def _retention(self) -> Retention | None:
        if not self.config.retention_seconds:
            return None
        return Retention(
            schema=self.config.schema,
            done_older_than=self.config.retention_seconds,
            markers_older_than=self.config.marker_retention_seconds,
            batch_size=self.config.prune_batch_size,
        )

    def _fail(self, err: BaseException) -> None:
        """Stop the relay because of ``err``; ``run`` raises it once the relay has stopped."""
        if self._fatal is None:
            self._fatal = err
            self.health.fatal(str(err))
            log.error("%s", err)
        # Not stop(): a second rejected send (they come one by one on a busy machine) is no
        # operator's second signal, and must not cut the other sends short.
        self.claimer.stop()

    def _writer_ended(self, task: asyncio.Task[None]) -> None:
        """Outcomes that are not written cost duplicates: a relay whose writer died stops
        sending at once instead of going on in silence."""
        if task.cancelled() or task.exception() is None:
            return
        err = task.exception()
        log.error("the outcome writer stopped unexpectedly", exc_info=err)
        self._fail(OutboxError(f"relay stopped: writing outcomes failed ({err!r})"))

    async def _write_the_rest(self) -> None:
        """What ``run_once`` recorded, or what a completer that failed left."""
        try:
            await self.completer.write_pending()
        except Exception as err:  # a bug in the writer; run() reports it
            log.exception("could not write the last outcomes; the reaper returns those rows")
            if self._fatal is None:
                self._fatal = OutboxError(f"relay stopped: writing outcomes failed ({err!r})")

    def _raise_if_fatal(self) -> None:
        if self._fatal is not None:
            raise self._fatal


async def _stopped(running: dict[str, asyncio.Task[None]], *services: Service) -> None:
    """Ask ``services`` to stop and return once they have (their failures are logged)."""
    for service in services:
        service.stop()
    await asyncio.gather(*(running[s.name] for s in services), return_exceptions=True)


class _LanePools:
    """The send pools of a relay's bots as the one service the relay stops: the sends in
    flight of every bot end within the grace, then every lane winds down."""

    def __init__(self, lanes: BotLanes) -> None:
        self.name = "send pool"
        self._lanes = lanes
        self._stop = asyncio.Event()

    @property
    def in_flight(self) -> int:
        return self._lanes.in_flight

    async def run(self) -> None:
        await self._stop.wait()
        await self._lanes.finish()

    def stop(self) -> None:
        self._stop.set()

    def hurry(self) -> None:
        self._lanes.hurry()


class _LaneFloods:
    """The flood controls of a relay's bots: each bot pauses alone (each lane announces its
    own pauses as they come); the relay's figures show the longest pause."""

    def __init__(self, lanes: BotLanes) -> None:
        self.name = "flood control"
        self._lanes = lanes
        self._stop = asyncio.Event()

    def paused_for(self, now: float) -> float:
        return self._lanes.paused_for(now)

    async def announce(self) -> None:
        await self._lanes.announce()

    async def run(self) -> None:
        await self._stop.wait()
        await self.announce()

    def stop(self) -> None:
        self._stop.set()


def _log_if_died(task: asyncio.Task[None]) -> None:
    """A service that fails is a bug: say so instead of degrading in silence."""
    if not task.cancelled() and task.exception() is not None:
        log.error("%s stopped unexpectedly", task.get_name(), exc_info=task.exception())
