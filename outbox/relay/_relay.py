"""The relay: a lane per bot (sender, flood control, send pool), one claimer for them all,
one completer, a listener and maintenance, wired so that rows flow claim -> send -> record.
The services and the order they stop in: docs/how-it-works.md.
"""

from __future__ import annotations

import asyncio
import logging
import time

from outbox.config import RelayConfig
from outbox.db import check_schema
from outbox.errors import DatabaseUnavailable, OutboxError
from outbox.relay.claimer import Claimer
from outbox.relay.completer import Completer
from outbox.relay.health import LIVE_AFTER, Health
from outbox.relay.heartbeat import Heartbeat, RelayIdentity
from outbox.relay.lanes import BotSource, GivenBots, Lanes
from outbox.relay.listener import Listener
from outbox.relay.maintenance import Maintenance, Reaper, Retention
from outbox.relay.send_pool import held_in_this_process
from outbox.relay.service import Service
from outbox.relay.startup import wait_until_reachable
from outbox.relay.store import ANSWER_TIMEOUT, OutageLog, Store
from outbox.relay.summary import RelaySnapshot, RunSummary
from outbox.telegram import Sender

__all__ = ["Relay"]

log = logging.getLogger("outbox.relay")

# The start-up's check of the schema: a connect (libpq's connect_timeout) and one query.
_START_TIMEOUT = 2 * ANSWER_TIMEOUT


class Relay:
    """Use as ``async with Relay(config, bots) as relay: await relay.run()``. ``bots`` is a
    sender (one token: a set of one bot) or a source of bots (``outbox.relay.lanes``: a folder
    of tokens); the relay serves each bot in a lane of its own.

    Each send is a span (``outbox.relay.tracing``) made by ``tracer_provider`` (an
    OpenTelemetry ``TracerProvider``) or, without one, by the process's provider, if set.
    """

    def __init__(
        self,
        config: RelayConfig,
        bots: BotSource | Sender,
        *,
        tracer_provider: object | None = None,
    ) -> None:
        self.config = config
        source = bots if isinstance(bots, BotSource) else GivenBots([bots])
        # No new claims and no new sends once set (the claimer's stop, the first of every stop).
        self._stopping = asyncio.Event()
        # The claimer sleeps on this between claims; whoever makes work for it sets it.
        self._wakeup = asyncio.Event()
        self._fatal: BaseException | None = None
        self._total = RunSummary()
        # Poll-only is the PgBouncer mode: no server-side prepared statements there. So is a
        # relay that LISTENs on a direct URL of its own: its main URL is the pooler's.
        prepare = not config.poll_only and config.listen_database_url is None
        self._outage = OutageLog()  # one word in the log about the database for every store

        def store(name: str) -> Store:
            url = config.database_url
            return Store(url, name, self._stopping, prepare=prepare, outage=self._outage)

        self._claim_store, self._record_store = store("claim"), store("record")
        self._heartbeat_store = store("heartbeat")
        # /healthz and /readyz (outbox.metrics); the heartbeat is its probe of the database,
        # alive while its loop goes round (LIVE_AFTER says how long a try may take).
        self.health = Health(
            stale_after=2 * config.heartbeat_interval,
            live_after=max(LIVE_AFTER, 3 * config.heartbeat_interval),
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
        self.lanes = Lanes(
            source,
            config=config,
            claim_store=self._claim_store,
            record_store=self._record_store,
            completer=self.completer,
            total=self._total,
            stopping=self._stopping,
            wakeup=self._wakeup,
            health=self.health,
            on_none_left=self._fail,
            tracer_provider=tracer_provider,
        )
        self.flood = self.lanes  # the relay's pause: its bots' longest (the metrics read it)
        self.claimer = Claimer(
            self.lanes,
            self._claim_store,
            config,
            completer=self.completer,
            stopping=self._stopping,
            wakeup=self._wakeup,
        )
        self.listener = None if config.poll_only else self._listener()
        self.maintenance = self._maintenance()
        self.identity = RelayIdentity.of_this_process(config.queues)
        self.heartbeat = Heartbeat(
            self._heartbeat_store,
            schema=config.schema,
            identity=self.identity,
            interval=config.heartbeat_interval,
            snapshot=self.snapshot,
            health=self.health,
            bots=self.lanes.bots,
        )

    # --- lifecycle ---------------------------------------------------------------------------

    async def __aenter__(self) -> Relay:
        await self.open()
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.close()

    async def open(self) -> None:
        """Check the schema, waiting for the database to answer, and start the bots' source;
        each bot checks its token as its lane starts. A schema this version cannot use is one
        clear error at once."""
        url, schema = self.config.database_url, self.config.schema
        health = self.health

        async def database() -> None:
            try:
                # Bounded like every statement of the relay: a server that takes the
                # connection and never answers is waited for, not hung on.
                await asyncio.wait_for(check_schema(url, schema=schema), _START_TIMEOUT)
            except TimeoutError:
                reason = f"no answer from the database for {_START_TIMEOUT:g} s"
                health.database_failed(reason)
                raise DatabaseUnavailable(reason) from None
            except DatabaseUnavailable as err:
                health.database_failed(str(err))
                raise
            health.database_ok()

        await self.lanes.source.start()
        try:
            reached = await wait_until_reachable(
                "the database", database, unreachable=DatabaseUnavailable, stopping=self._stopping
            )
        except BaseException:
            await self.lanes.source.close()  # its HTTP client: no close() follows a failed open
            raise
        if reached:
            self.lanes.look()  # each bot starts: getMe until Telegram answers

    async def close(self) -> None:
        self._stopping.set()  # a final write that cannot reach the database gives up at once
        await self.lanes.finish()  # rows a lane still holds go back, recorded for the write
        await self._write_the_rest()
        await self.lanes.source.close()
        for store in (self._claim_store, self._record_store, self._heartbeat_store):
            await store.close()

    def snapshot(self) -> RelaySnapshot:
        """The relay's figures now; safe to call from another thread (metrics)."""
        return RelaySnapshot(
            summary=self._total.copy(),
            in_flight=self.lanes.in_flight,
            unwritten=self.completer.unwritten,
            # asyncio's event loop keeps time with time.monotonic.
            paused_seconds=self.lanes.paused_for(time.monotonic()),
            unreachable_bots=self.lanes.unreachable(),
        )

    def stop(self) -> None:
        """Ask the relay to stop: no new claims; in-flight sends get the grace period. Asked
        again, it stops at once: sends still running are cut off."""
        if self._stopping.is_set():
            self.lanes.hurry()
            self.completer.hurry()
        self.claimer.stop()

    # --- one batch, for tests and tools ------------------------------------------------------

    async def run_once(self) -> RunSummary:
        """Start the bots, claim one round, send it, record the outcomes, say what happened."""
        before = self._total.copy()
        if not self._stopping.is_set():
            await self.claimer.run_once()
            await self.completer.write_pending()
        self._raise_if_fatal()
        return self._total.since(before)

    # --- the long-running loop ---------------------------------------------------------------

    async def run(self, *, drain: bool = False) -> RunSummary:
        """Relay until stopped (or, with ``drain``, until nothing is due and nothing in flight)."""
        if self._stopping.is_set():  # stopped while it waited to start: nothing was claimed
            self._raise_if_fatal()
            return self._total.copy()
        # The claimer's run is the relay's: when it ends, so do the others, in order.
        helpers: list[Service] = [self.maintenance, self.heartbeat]
        if self.listener is not None:
            helpers.append(self.listener)
        services: list[Service] = [self.lanes, self.completer, *helpers]
        running = {service.name: self._start(service) for service in services}
        self.health.running()
        try:
            await self.claimer.run(drain=drain)
        finally:
            # 1. The claimer stops: no new claims, and so no new sends.
            self.claimer.stop()
            self.health.stopping()
            if self.lanes.in_flight:
                log.info(
                    "stopping: %d claimed rows in flight get up to %g s; "
                    "a second signal stops at once",
                    self.lanes.in_flight,
                    self.config.grace_seconds,
                )
            # 2. Sends finish within the grace while the completer keeps writing outcomes;
            # then each bot's flood control makes its last announcement.
            await _stopped(running, self.lanes)
            # 3. The completer writes the rest.
            await _stopped(running, self.completer)
            # 4. Last, the listener, maintenance and the heartbeat (which takes the relay out
            # of the register).
            await _stopped(running, *helpers)
        self._raise_if_fatal()
        return self._total

    # --- wiring ----------------------------------------------------------------------------------

    def _start(self, service: Service) -> asyncio.Task[None]:
        task = asyncio.create_task(service.run(), name=f"outbox-{service.name}")
        task.add_done_callback(self._writer_ended if service is self.completer else _log_if_died)
        return task

    def _listener(self) -> Listener:
        return Listener(
            # LISTEN needs a session of its own: a direct URL beside PgBouncer's, if given.
            self.config.listen_database_url or self.config.database_url,
            schema=self.config.schema,
            bots=self.lanes.lanes.keys,
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
                held=held_in_this_process,
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


def _log_if_died(task: asyncio.Task[None]) -> None:
    """A service that fails is a bug: say so instead of degrading in silence."""
    if not task.cancelled() and task.exception() is not None:
        log.error("%s stopped unexpectedly", task.get_name(), exc_info=task.exception())
