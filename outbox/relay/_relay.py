"""The relay: one claimer, one send pool, one completer, flood control, a listener and
maintenance, wired so that rows flow claim -> send -> record.

Nothing the relay keeps in memory is needed for correctness: a claimed row the relay never
reports on is returned to the queue by the reaper once its lease runs out.

Stop order: the claimer stops claiming; the sends in flight finish within the grace period
while the completer keeps writing their outcomes; the completer writes the rest; then the
listener and maintenance stop. A second ``stop()`` cuts the grace short.
"""

from __future__ import annotations

import asyncio
import logging
import time

from outbox.config import RelayConfig
from outbox.db import check_schema
from outbox.errors import DatabaseUnavailable, OutboxError, TelegramUnavailable
from outbox.ratelimit import RateLimiter
from outbox.relay.claimer import Claimer
from outbox.relay.completer import Completer
from outbox.relay.flood import FloodControl
from outbox.relay.listener import Listener
from outbox.relay.maintenance import Maintenance, Reaper, Retention
from outbox.relay.send_pool import SendPool, claim_check
from outbox.relay.startup import wait_until_reachable
from outbox.relay.store import OutageLog, Store
from outbox.relay.summary import RelaySnapshot, RunSummary
from outbox.telegram import Sender

__all__ = ["Relay"]

log = logging.getLogger("outbox.relay")


class Relay:
    """Use as ``async with Relay(config, sender) as relay: await relay.run()``."""

    def __init__(self, config: RelayConfig, sender: Sender) -> None:
        self.config = config
        self._sender = sender
        # The bot's send slots are reserved in the database by every claim, for the whole fleet
        # (outbox.queries.claim_due), and the pause is flood control's: this relay's limiter
        # keeps the chats' spacing only.
        self._limiter = RateLimiter(config.rate_limits)
        self._stopping = asyncio.Event()  # no new claims, no new sends
        # The claimer sleeps on this between claims; whoever makes work for it sets it.
        self._wakeup = asyncio.Event()
        self._hurry = asyncio.Event()  # a second stop: no more grace
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
        # Every relay of the bot, whichever of its queues it serves, shares its limits and pause.
        self.flood = FloodControl(schema=config.schema, bot=sender.bot_id, store=self._record_store)
        self.claimer = Claimer(
            self._claim_store,
            config,
            flood=self.flood,
            total=self._total,
            stopping=self._stopping,
            wakeup=self._wakeup,
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
        self.send_pool = SendPool(
            sender,
            concurrency=config.concurrency,
            max_chat_hold=config.max_chat_hold,
            per_bot=config.rate_limits.per_bot,
            retry=config.retry,
            limiter=self._limiter,
            flood=self.flood,
            completer=self.completer,
            still_claimed=claim_check(self._claim_store, schema=config.schema),
            stopping=self._stopping,
            total=self._total,
            on_unauthorized=self._fail,
            wakeup=self._wakeup,
        )

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
        if await wait_until_reachable(
            "the database",
            lambda: check_schema(url, schema=schema),
            unreachable=DatabaseUnavailable,
            stopping=self._stopping,
        ):
            await wait_until_reachable(
                "the Telegram Bot API",
                self._sender.start,
                unreachable=TelegramUnavailable,
                stopping=self._stopping,
            )

    async def close(self) -> None:
        self._stopping.set()  # a final write that cannot reach the database gives up at once
        await self._write_the_rest()
        await self.flood.close()
        await self._sender.close()
        await self._claim_store.close()
        await self._record_store.close()

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
            self._hurry.set()
        self._stop_claiming()

    def _stop_claiming(self) -> None:
        self._stopping.set()
        self._wakeup.set()

    # --- one batch, for tests and tools ------------------------------------------------------

    async def run_once(self) -> RunSummary:
        """Claim one batch, send it, record the outcomes, and say what happened."""
        before = self._total.copy()
        if not self._stopping.is_set():
            rows = await self.claimer.claim(self.config.batch_size)
            checked_at = asyncio.get_running_loop().time()
            await asyncio.gather(*(self.send_pool.process(row, checked_at) for row in rows))
            await self.completer.write_pending()
        self._raise_if_fatal()
        return self._total.since(before)

    # --- the long-running loop ---------------------------------------------------------------

    async def run(self, *, drain: bool = False) -> RunSummary:
        """Relay until stopped (or, with ``drain``, until nothing is due and nothing in flight)."""
        if self._stopping.is_set():  # stopped while it waited to start: nothing was claimed
            return self._total.copy()
        writer = asyncio.create_task(self.completer.run(), name="outbox-completer")
        writer.add_done_callback(self._writer_ended)
        helpers: list[asyncio.Task[None]] = []
        if not self.config.poll_only:
            listener = Listener(
                self.config.listen_database_url or self.config.database_url,
                schema=self.config.schema,
                bot=self.flood.bot,
                announcer=self._record_store,
                stopping=self._stopping,
                wakeup=self._wakeup,
                outage=self._outage,
            )
            helpers.append(asyncio.create_task(listener.run(), name="outbox-listener"))
        maintenance = Maintenance(
            self.config.database_url,
            reaper=Reaper(
                schema=self.config.schema,
                lease_seconds=self.config.lease_seconds,
                max_attempts=self.config.retry.max_attempts,
            ),
            retention=self._retention(),
            interval=self.config.reap_interval,
            stopping=self._stopping,
            wakeup=self._wakeup,
            outage=self._outage,
        )
        helpers.append(asyncio.create_task(maintenance.run(), name="outbox-maintenance"))
        for task in helpers:
            task.add_done_callback(_log_if_died)
        try:
            await self.claimer.run(self.send_pool, self.completer, drain=drain)
        finally:
            # 1. No new claims, no new sends.
            self._stopping.set()
            if self.send_pool.in_flight:
                log.info(
                    "stopping: %d claimed rows in flight get up to %g s; "
                    "a second signal stops at once",
                    self.send_pool.in_flight,
                    self.config.grace_seconds,
                )
            # 2. Sends finish within the grace while the completer keeps writing outcomes.
            await self.send_pool.finish(self.config.grace_seconds, self._hurry)
            # 3. The completer ends after its write in progress; the rest is written now.
            self.completer.stop()
            await asyncio.gather(writer, return_exceptions=True)
            await self._write_the_rest()
            # 4. Last, the listener and maintenance.
            for task in helpers:
                task.cancel()
            await asyncio.gather(*helpers, return_exceptions=True)
        self._raise_if_fatal()
        return self._total

    # --- wiring ----------------------------------------------------------------------------------

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
            log.error("%s", err)
        # Not stop(): a second rejected send (they come one by one on a busy machine) is no
        # operator's second signal, and must not cut the other sends short.
        self._stop_claiming()

    def _writer_ended(self, task: asyncio.Task[None]) -> None:
        """Outcomes that are not written cost duplicates: a relay whose writer died stops
        sending at once instead of going on in silence."""
        if task.cancelled() or task.exception() is None:
            return
        err = task.exception()
        log.error("the outcome writer stopped unexpectedly", exc_info=err)
        self._fail(OutboxError(f"relay stopped: writing outcomes failed ({err!r})"))

    async def _write_the_rest(self) -> None:
        if self._hurry.is_set():
            self.completer.hurry()
        try:
            await self.completer.write_pending()
        except Exception as err:  # a bug in the writer; run() reports it
            log.exception("could not write the last outcomes; the reaper returns those rows")
            if self._fatal is None:
                self._fatal = OutboxError(f"relay stopped: writing outcomes failed ({err!r})")

    def _raise_if_fatal(self) -> None:
        if self._fatal is not None:
            raise self._fatal


def _log_if_died(task: asyncio.Task[None]) -> None:
    """A helper that ends on its own is a bug: say so instead of degrading in silence."""
    if not task.cancelled() and task.exception() is not None:
        log.error("%s stopped unexpectedly", task.get_name(), exc_info=task.exception())
