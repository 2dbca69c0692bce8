"""The relay: claim due rows in batches, send them, record the outcomes in batches.

The loop is pipelined: claims are sized to the free send slots, many sends are in flight at
once, and outcomes are written by a flusher in one statement per batch. Nothing the relay keeps
in memory is needed for correctness: a claimed row the relay never reports on is returned to
the queue by the reaper once its lease runs out.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from dataclasses import dataclass, fields
from typing import Any

import psycopg

from outbox import queries
from outbox.classify import Failure, FailureKind, MalformedPayload, classify
from outbox.config import RelayConfig
from outbox.db import async_connect, check_schema
from outbox.errors import OutboxError, TelegramUnauthorized
from outbox.ratelimit import RateLimiter
from outbox.retry import decide
from outbox.states import State
from outbox.telegram import Sender, SentMessage, send_message_args

__all__ = ["Relay", "RunSummary"]

log = logging.getLogger("outbox.relay")

# Errors that mean "the database connection is gone": reconnect and carry on.
_DB_LOST = (psycopg.OperationalError, psycopg.InterfaceError)


@dataclass
class RunSummary:
    """What the relay did; ``run_once`` returns one, ``run`` returns the total."""

    claimed: int = 0
    sent: int = 0
    already_sent: int = 0  # completed without sending: the key had a sent marker
    retried: int = 0
    failed: int = 0
    deferred: int = 0  # handed back to the queue to respect a chat's rate limit
    released: int = 0  # handed back unsent (shutdown, rejected token)
    cancelled: int = 0  # withdrawn by the app after the claim
    fenced_out: int = 0  # outcomes discarded because the claim had been reaped

    def add(self, other: RunSummary) -> None:
        for f in fields(self):
            setattr(self, f.name, getattr(self, f.name) + getattr(other, f.name))


def retry_if_not_stopping(stopping: asyncio.Event) -> Any:
    from tenacity import retry_if_exception  # noqa: PLC0415

    return retry_if_exception(lambda _err: not stopping.is_set())


class _Connection:
    """One psycopg connection that reconnects with backoff when the database goes away."""

    def __init__(self, url: str, name: str, stopping: asyncio.Event) -> None:
        self._url = url
        self._name = name
        self._stopping = stopping
        self._conn: psycopg.AsyncConnection[Any] | None = None

    async def get(self) -> psycopg.AsyncConnection[Any]:
        if self._conn is None or self._conn.closed:
            self._conn = await self._connect_with_backoff()
        return self._conn

    async def _connect_with_backoff(self) -> psycopg.AsyncConnection[Any]:
        from tenacity import (  # noqa: PLC0415 - keeps import time of the CLI low
            AsyncRetrying,
            retry_if_exception_type,
            wait_exponential,
        )

        async for attempt in AsyncRetrying(
            wait=wait_exponential(multiplier=0.1, max=5.0),
            # While stopping, one try: the reaper covers what cannot be written now.
            retry=retry_if_exception_type(OutboxError) & retry_if_not_stopping(self._stopping),
            reraise=True,
        ):
            with attempt:
                conn = await async_connect(self._url)
                log.info("%s connection to the database is up", self._name)
                return conn
        raise AssertionError("unreachable")

    def lost(self, err: BaseException) -> None:
        log.warning("%s connection lost (%s); reconnecting", self._name, err)
        if self._conn is not None:
            conn, self._conn = self._conn, None
            with contextlib.suppress(Exception):
                asyncio.get_running_loop().create_task(conn.close())

    async def close(self) -> None:
        if self._conn is not None:
            with contextlib.suppress(Exception):
                await self._conn.close()
            self._conn = None


class Relay:
    """Use as ``async with Relay(config, sender) as relay: await relay.run()``."""

    def __init__(
        self, config: RelayConfig, sender: Sender, *, limiter: RateLimiter | None = None
    ) -> None:
        self.config = config
        self._sender = sender
        self._limiter = limiter or RateLimiter(config.rate_limits)
        self._stopping = asyncio.Event()
        self._wakeup = asyncio.Event()
        self._claimer = _Connection(config.database_url, "claim", self._stopping)
        self._recorder = _Connection(config.database_url, "record", self._stopping)
        self._pending: list[queries.Outcome] = []
        self._flush_now = asyncio.Event()
        self._flush_lock = asyncio.Lock()
        # Send slots: claimed rows beyond them (claim_ahead) wait here for a slot to free up.
        self._slots = asyncio.Semaphore(config.concurrency)
        # Outcomes recorded and written so far, in order: a send keeps its slot until its
        # outcome is written (see _process). ``_written`` is set, and replaced, at each write.
        self._recorded_count = 0
        self._written_count = 0
        self._written = asyncio.Event()
        self._flusher_running = False
        self._cancelled: set[int] = set()
        self._fatal: BaseException | None = None
        self._total = RunSummary()

    # --- lifecycle ---------------------------------------------------------------------------

    async def __aenter__(self) -> Relay:
        await self.open()
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.close()

    async def open(self) -> None:
        """Connect, check the schema and the token; every problem here is one clear error."""
        await check_schema(self.config.database_url)
        await self._sender.start()

    async def close(self) -> None:
        await self._flush()
        await self._sender.close()
        await self._claimer.close()
        await self._recorder.close()

    def stop(self) -> None:
        """Ask the relay to stop: no new claims; in-flight sends get the grace period."""
        self._stopping.set()
        self._wakeup.set()

    # --- one batch, for tests and tools ------------------------------------------------------

    async def run_once(self) -> RunSummary:
        """Claim one batch, send it, record the outcomes, and say what happened."""
        before = RunSummary()
        before.add(self._total)
        rows = await self._claim(self.config.batch_size)
        await asyncio.gather(*(self._process(row) for row in rows))
        await self._flush()
        self._raise_if_fatal()
        done = RunSummary()
        done.add(self._total)
        for f in fields(done):
            setattr(done, f.name, getattr(done, f.name) - getattr(before, f.name))
        return done

    # --- the long-running loop ---------------------------------------------------------------

    async def run(self, *, drain: bool = False) -> RunSummary:
        """Relay until stopped (or, with ``drain``, until nothing is due and nothing in flight)."""
        flusher = asyncio.create_task(self._flush_forever(), name="outbox-flusher")
        helpers: list[asyncio.Task[None]] = []
        if not self.config.poll_only:
            helpers.append(asyncio.create_task(self._listen_forever(), name="outbox-listener"))
        helpers.append(asyncio.create_task(self._maintain_forever(), name="outbox-maintenance"))
        in_flight: set[asyncio.Task[None]] = set()
        try:
            await self._claim_loop(in_flight, drain=drain)
        finally:
            self._stopping.set()
            await self._finish_in_flight(in_flight)
            for task in helpers:
                task.cancel()
            await asyncio.gather(*helpers, return_exceptions=True)
            # The flusher is not cancelled mid-statement: it sees the stop and ends by itself.
            self._flush_now.set()
            await asyncio.gather(flusher, return_exceptions=True)
            await self._flush()
        self._raise_if_fatal()
        return self._total

    async def _claim_loop(self, in_flight: set[asyncio.Task[None]], *, drain: bool) -> None:
        def finished(task: asyncio.Task[None]) -> None:
            in_flight.discard(task)
            self._wakeup.set()
            if not task.cancelled() and task.exception() is not None:
                log.error("send task failed", exc_info=task.exception())

        # Claim once half the rows claimed ahead have started, so that claims (each a commit)
        # stay large; with nothing claimed ahead, claim for every free slot.
        min_claim = max(1, self.config.claim_ahead // 2)
        while not self._stopping.is_set():
            free = self.config.concurrency + self.config.claim_ahead - len(in_flight)
            timeout = self.config.poll_interval
            paused = self._limiter.paused_for(asyncio.get_running_loop().time())
            if paused > 0:
                # Flood control: this bot must not send; claim nothing until the pause ends.
                timeout = paused
            elif free >= min_claim:
                want = min(free, self.config.batch_size)
                rows = await self._claim(want)
                for row in rows:
                    task = asyncio.create_task(self._process(row))
                    in_flight.add(task)
                    task.add_done_callback(finished)
                if len(rows) == want:
                    await asyncio.sleep(0)  # let the sends start before claiming more
                    continue
                if not in_flight:
                    await self._flush()
                next_due = await self._seconds_until_next_due()
                if drain and not in_flight and (next_due is None or next_due > 0):
                    return
                if next_due is not None:
                    # A hair late rather than early, so that the claim finds the row due.
                    timeout = min(timeout, max(next_due, 0.0) + 0.002)
            self._wakeup.clear()
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self._wakeup.wait(), timeout)

    async def _finish_in_flight(self, in_flight: set[asyncio.Task[None]]) -> None:
        if not in_flight:
            return
        _, still_running = await asyncio.wait(in_flight, timeout=self.config.grace_seconds)
        for task in still_running:
            task.cancel()
        await asyncio.gather(*still_running, return_exceptions=True)

    def _raise_if_fatal(self) -> None:
        if self._fatal is not None:
            raise self._fatal

    # --- database steps, each surviving a lost connection -----------------------------------

    async def _claim(self, limit: int) -> list[queries.ClaimedRow]:
        while True:
            conn = await self._claimer.get()
            try:
                rows = await queries.claim_due(conn, limit)
            except _DB_LOST as err:
                self._claimer.lost(err)
                if self._stopping.is_set():
                    return []
                continue
            self._total.claimed += len(rows)
            return rows

    async def _seconds_until_next_due(self) -> float | None:
        conn = await self._claimer.get()
        try:
            return await queries.seconds_until_next_due(conn)
        except _DB_LOST as err:
            self._claimer.lost(err)
            return 0.0

    async def _flush(self) -> None:
        """Write every waiting outcome; on a lost connection keep them and try again."""
        async with self._flush_lock:
            while self._pending:
                batch, self._pending = self._pending, []
                try:
                    conn = await self._recorder.get()
                    applied = await queries.record_outcomes(conn, batch)
                except (*_DB_LOST, OutboxError) as err:
                    self._pending[:0] = batch
                    self._recorder.lost(err)
                    if self._stopping.is_set():
                        log.error(
                            "could not record %d outcomes before stopping; the reaper returns "
                            "those rows to the queue after the lease",
                            len(self._pending),
                        )
                        self._mark_written(len(self._pending))  # given up: nobody waits
                        self._pending.clear()
                        return
                    await asyncio.sleep(0.1)
                    continue
                except psycopg.Error as err:
                    # The database refused the batch itself (a bug, not an outage): retrying
                    # cannot help, and the rows are not lost: the reaper returns them.
                    log.error(
                        "could not record %d outcomes (%s); the reaper returns those rows to "
                        "the queue after the lease",
                        len(batch),
                        err,
                    )
                    self._mark_written(len(batch))
                    continue
                self._mark_written(len(batch))
                if applied < len(batch):
                    self._total.fenced_out += len(batch) - applied
                    log.warning(
                        "%d outcome(s) discarded: the claim expired and was reaped meanwhile",
                        len(batch) - applied,
                    )
                if any(o.state == State.PENDING for o in batch):
                    self._wakeup.set()  # a retry may now be the earliest due row

    async def _flush_forever(self) -> None:
        self._flusher_running = True
        try:
            while not self._stopping.is_set():
                with contextlib.suppress(TimeoutError):
                    await asyncio.wait_for(self._flush_now.wait(), self.config.flush_interval)
                self._flush_now.clear()
                await self._flush()
        finally:
            self._flusher_running = False
            self._written.set()  # nobody waits for a flusher that has ended

    def _record(self, outcome: queries.Outcome) -> None:
        self._pending.append(outcome)
        self._recorded_count += 1
        # Sends hold their slots until written, so waiting to fill a batch costs throughput:
        # write at once. Batches still form: what is recorded while a write is in flight goes
        # together in the next one, as commits do in a database's group commit.
        self._flush_now.set()

    def _mark_written(self, count: int) -> None:
        self._written_count += count
        self._written.set()
        self._written = asyncio.Event()

    async def _until_written(self) -> None:
        """Wait until every outcome recorded so far is written (or the relay is stopping)."""
        target = self._recorded_count
        while (
            self._written_count < target and self._flusher_running and not self._stopping.is_set()
        ):
            await self._written.wait()

    async def _listen_forever(self) -> None:
        """LISTEN for new rows and cancellations; after a reconnect, look again at once."""
        listener = _Connection(self.config.database_url, "listen", self._stopping)
        try:
            while True:
                conn = await listener.get()
                try:
                    await conn.execute(f"LISTEN {queries.NOTIFY_CHANNEL}")
                    await conn.execute(f"LISTEN {queries.CANCEL_CHANNEL}")
                    self._wakeup.set()
                    async for note in conn.notifies():
                        if note.channel == queries.CANCEL_CHANNEL:
                            self._cancelled.update(int(i) for i in note.payload.split(",") if i)
                        else:
                            self._wakeup.set()
                except _DB_LOST as err:
                    listener.lost(err)
                    await asyncio.sleep(0.1)
        finally:
            await listener.close()

    async def _apply_retention(self, conn: psycopg.AsyncConnection[Any]) -> None:
        """Keep the hot table small: delete old done rows and, later, their sent markers."""
        if not self.config.retention_seconds:
            return
        pruned = await queries.prune_async(
            conn,
            done_older_than_seconds=self.config.retention_seconds,
            markers_older_than_seconds=self.config.marker_retention_seconds,
            batch_size=self.config.prune_batch_size,
        )
        if any(pruned.values()):
            log.info("retention: deleted %s", pruned)

    async def _maintain_forever(self) -> None:
        """Reap expired claims, one relay at a time (the holder of the advisory lock).

        The lock is held for one round only: a relay that hangs (a stopped process, a frozen
        VM) must not keep the others from reaping the rows it holds.
        """
        keeper = _Connection(self.config.database_url, "maintenance", self._stopping)
        # An expired claim waits at most half a lease more, whatever the reap interval.
        interval = min(self.config.reap_interval, self.config.lease_seconds / 2)
        guarded: object = None
        try:
            while True:
                try:
                    conn = await keeper.get()
                    if conn is not guarded:
                        # The session is idle between rounds; much longer means a hung relay.
                        idle = 2 * interval + 30.0
                        await queries.guard_maintenance_session(conn, idle_seconds=idle)
                        guarded = conn
                    if await queries.try_maintenance_lock(conn):
                        try:
                            reaped = await queries.reap_stale_async(
                                conn,
                                lease_seconds=self.config.lease_seconds,
                                max_attempts=self.config.retry.max_attempts,
                            )
                            await self._apply_retention(conn)
                        finally:
                            await queries.release_maintenance_lock(conn)
                        if any(reaped.values()):
                            log.warning("reaper: expired claims %s", reaped)
                            self._wakeup.set()
                except _DB_LOST as err:
                    keeper.lost(err)
                except Exception:  # the reaper must outlive any one bad round
                    log.exception("maintenance round failed; trying again in %.0f s", interval)
                await asyncio.sleep(interval)
        finally:
            await keeper.close()

    # --- one message ---------------------------------------------------------------------------

    async def _process(self, row: queries.ClaimedRow) -> None:
        try:
            await self._slots.acquire()
        except asyncio.CancelledError:
            self._skip_unsent(row)  # never started: back to the queue untouched
            raise
        try:
            await self._deliver(row)
        except asyncio.CancelledError:
            # The grace period ran out mid-send: the request may have reached Telegram.
            self._fail(
                row,
                Failure(
                    FailureKind.TRANSIENT,
                    "relay stopped while sending; the message may have been delivered",
                    maybe_delivered=True,
                ),
            )
            raise
        else:
            # The slot is held until the outcome is written, so a crash finds at most
            # `concurrency` messages sent but without their sent marker, however far behind
            # the writes are (and a database outage stops new sends after that many).
            await self._until_written()
        finally:
            self._slots.release()

    async def _deliver(self, row: queries.ClaimedRow) -> None:
        if row.already_sent:
            self._total.already_sent += 1
            self._record(queries.Outcome(row.id, row.attempts, State.DONE))
            return
        try:
            args = send_message_args(row.payload)
        except MalformedPayload as err:
            self._fail(row, classify(err))
            return
        chat_id = args["chat_id"]
        loop = asyncio.get_running_loop()
        new_chat_id: int | None = None
        while True:
            # A long wait (a busy chat, flood control) is not spent holding a claim and a slot.
            now = loop.time()
            hold = max(self._limiter.chat_delay(chat_id, now), self._limiter.paused_for(now))
            if hold > self.config.max_chat_hold:
                self._total.deferred += 1
                self._release(row, delay=hold)
                return
            if not await self._wait_for_slot(chat_id) or row.id in self._cancelled:
                self._skip_unsent(row)
                return
            if self._limiter.paused_for(loop.time()) > 0.001:
                continue  # flood control began while this send waited for its turn
            try:
                sent = await self._sender.send(args)
            except Exception as err:  # noqa: BLE001 - every failure is classified in one place
                failure = classify(err)
                if failure.kind is FailureKind.MIGRATED and new_chat_id is None:
                    chat_id = new_chat_id = args["chat_id"] = failure.new_chat_id
                    log.info("outbox %s: %s; resending", row.id, failure.reason)
                    continue
                self._handle_failure(row, failure)
                return
            self._mark_sent(row, sent, new_chat_id)
            return

    async def _wait_for_slot(self, chat_id: int | str) -> bool:
        """Wait for the rate limits; False if the relay is stopping meanwhile."""
        if self._stopping.is_set():
            return False
        delay = self._limiter.reserve(chat_id, asyncio.get_running_loop().time())
        if delay > 0:
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self._stopping.wait(), delay)
        return not self._stopping.is_set()

    def _mark_sent(
        self, row: queries.ClaimedRow, sent: SentMessage, new_chat_id: int | None
    ) -> None:
        self._total.sent += 1
        self._record(
            queries.Outcome(
                row.id,
                row.attempts,
                State.DONE,
                key=row.key,
                chat_id=sent.chat_id,
                message_id=sent.message_id,
                new_chat_id=new_chat_id,
            )
        )

    def _handle_failure(self, row: queries.ClaimedRow, failure: Failure) -> None:
        if failure.kind is FailureKind.UNAUTHORIZED:
            # Not the message's fault: hand it back untouched and stop the relay.
            if self._fatal is None:
                self._fatal = TelegramUnauthorized(
                    "Telegram rejected the bot token (check TELEGRAM_BOT_TOKEN); relay stopped"
                )
                log.error("%s", self._fatal)
            self._total.released += 1
            self._release(row, delay=0.0)
            self.stop()
            return
        if failure.retry_after:
            # Flood control is per bot: every send of this bot waits, not only this row.
            self._limiter.pause(failure.retry_after, asyncio.get_running_loop().time())
        self._fail(row, failure)

    def _fail(self, row: queries.ClaimedRow, failure: Failure) -> None:
        decision = decide(self.config.retry, row.attempts, failure)
        if decision.state is State.FAILED:
            self._total.failed += 1
            log.warning("outbox %s failed for good: %s", row.id, decision.error)
        else:
            self._total.retried += 1
            log.info(
                "outbox %s retry in %.1f s: %s", row.id, decision.delay_seconds, decision.error
            )
        self._record(
            queries.Outcome(
                row.id,
                row.attempts,
                decision.state,
                delay_seconds=decision.delay_seconds,
                error=decision.error,
            )
        )

    def _skip_unsent(self, row: queries.ClaimedRow) -> None:
        if row.id in self._cancelled:
            self._total.cancelled += 1
            self._cancelled.discard(row.id)
            return  # the row is gone; nothing to record
        self._total.released += 1
        self._release(row, delay=0.0)

    def _release(self, row: queries.ClaimedRow, *, delay: float) -> None:
        """Back to the queue without spending an attempt."""
        self._record(
            queries.Outcome(
                row.id, row.attempts, State.PENDING, delay_seconds=delay, refund_attempt=True
            )
        )
