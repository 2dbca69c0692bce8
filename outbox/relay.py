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
import time
from collections import deque
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
from outbox.schema import notify_channel, pause_channel
from outbox.states import State
from outbox.telegram import Sender, SentMessage, send_message_args

__all__ = ["Relay", "RelaySnapshot", "RunSummary"]

log = logging.getLogger("outbox.relay")

# A claimed row that waited longer than this (for a send slot or a rate limit) is checked
# before sending: the app may have withdrawn it meanwhile (outbox.cancel).
_RECHECK_AFTER = 0.05
# Rows claimed ahead of the free send slots should start well within that time, so the relay
# claims ahead only what it starts within half of it at the rate its slots have been freeing
# up (and at most config.claim_ahead). The rate is measured over windows of this length.
_AHEAD_WINDOW = _RECHECK_AFTER / 2
_RATE_WINDOW = 0.1
_DEFER_SLACK = 0.5
# A pause announced by another relay longer than this is not believed (a garbled payload).
_MAX_PEER_PAUSE = 3600.0

# Due rows that stay locked by another transaction are looked at after 10 ms, then 20 ms, ...
_BUSY_BACKOFF_START = 0.01
_BUSY_BACKOFF_MAX = 0.5

# Errors that mean "the database connection is gone": reconnect and carry on.
# A failover can leave the relay on a read-only replica, and a connection pooler can lose the
# server's prepared statements: a fresh connection mends both.
_DB_LOST = (
    psycopg.OperationalError,
    psycopg.InterfaceError,
    psycopg.errors.ReadOnlySqlTransaction,
    psycopg.errors.InvalidSqlStatementName,
    psycopg.errors.DuplicatePreparedStatement,
    psycopg.errors.IdleInTransactionSessionTimeout,  # the server cut off a hung round
)


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


@dataclass(frozen=True)
class RelaySnapshot:
    """A running relay's figures at one moment (for metrics)."""

    summary: RunSummary  # a copy of the totals so far
    in_flight: int  # claimed rows held: sending, waiting for a slot or for their write
    unwritten: int  # outcomes decided and not yet written
    paused_seconds: float  # flood control still to wait


def retry_if_not_stopping(stopping: asyncio.Event) -> Any:
    from tenacity import retry_if_exception  # noqa: PLC0415

    return retry_if_exception(lambda _err: not stopping.is_set())


class _Connection:
    """One psycopg connection that reconnects with backoff when the database goes away."""

    def __init__(
        self, url: str, name: str, stopping: asyncio.Event, *, prepare: bool = True
    ) -> None:
        self._url = url
        self._prepare = prepare
        self._name = name
        self._stopping = stopping
        self._conn: psycopg.AsyncConnection[Any] | None = None
        self._closing: set[asyncio.Task[None]] = set()

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
                conn = await async_connect(self._url, prepare=self._prepare)
                log.info("%s connection to the database is up", self._name)
                return conn
        raise AssertionError("unreachable")

    @property
    def backend_pid(self) -> int | None:
        """The server process of the current connection (NOTIFY names its sender by it)."""
        return None if self._conn is None or self._conn.closed else self._conn.info.backend_pid

    def lost(self, err: BaseException) -> None:
        log.warning("%s connection lost (%s); reconnecting", self._name, err)
        if self._conn is not None:
            conn, self._conn = self._conn, None
            with contextlib.suppress(Exception):
                # Referenced until done: the event loop keeps only weak references to tasks.
                closing = asyncio.get_running_loop().create_task(conn.close())
                self._closing.add(closing)
                closing.add_done_callback(self._closing.discard)

    async def close(self) -> None:
        if self._conn is not None:
            with contextlib.suppress(Exception):
                await self._conn.close()
            self._conn = None
        await asyncio.gather(*self._closing, return_exceptions=True)


def _log_if_died(task: asyncio.Task[None]) -> None:
    """A helper that ends on its own is a bug: say so instead of degrading in silence."""
    if not task.cancelled() and task.exception() is not None:
        log.error("%s stopped unexpectedly", task.get_name(), exc_info=task.exception())


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
        # Poll-only is the PgBouncer mode: no server-side prepared statements there.
        prepare = not config.poll_only
        self._schema = config.schema
        self._claimer = _Connection(config.database_url, "claim", self._stopping, prepare=prepare)
        self._recorder = _Connection(config.database_url, "record", self._stopping, prepare=prepare)
        self._pending: list[queries.Outcome] = []
        self._flush_now = asyncio.Event()
        self._flush_lock = asyncio.Lock()
        # Send slots: claimed rows beyond them (claim_ahead) wait here for a slot to free up.
        self._slots = asyncio.Semaphore(config.concurrency)
        # Outcomes recorded and written so far, in order: a send keeps its slot until its
        # outcome is written (see _process). Outcomes are written in the order recorded, so
        # each waiter waits for a count, and a write wakes exactly the sends it covered.
        self._recorded_count = 0
        self._written_count = 0
        self._write_waiters: deque[tuple[int, asyncio.Future[None]]] = deque()
        self._flusher_running = False
        self._busy_backoff = _BUSY_BACKOFF_START
        self._give_up_writing_at: float | None = None
        # How far ahead claims may fill the bot's send slots; at least two slots, so that a
        # very low --rate-limit still finds room.
        per_bot = config.rate_limits.per_bot
        self._claim_horizon = max(config.max_chat_hold, 2.0 / per_bot if per_bot else 0.0)
        self._deferred_until = 0.0  # loop time when the last row this relay handed back is due
        self._pause_to_announce = 0.0  # flood control to tell the other relays about (seconds)
        self._release_rate = 0.0  # outcomes written (send slots freed) per second, lately
        self._rate_measured_at = 0.0
        self._rate_measured_count = 0
        self._fatal: BaseException | None = None
        self._total = RunSummary()
        self._in_flight: set[asyncio.Task[None]] = set()

    # --- lifecycle ---------------------------------------------------------------------------

    async def __aenter__(self) -> Relay:
        await self.open()
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.close()

    async def open(self) -> None:
        """Connect, check the schema and the token; every problem here is one clear error."""
        await check_schema(self.config.database_url, schema=self._schema)
        await self._sender.start()

    async def close(self) -> None:
        self._stopping.set()  # a final write that cannot reach the database gives up at once
        await self._flush()
        await self._sender.close()
        await self._claimer.close()
        await self._recorder.close()

    def snapshot(self) -> RelaySnapshot:
        """The relay's figures now; safe to call from another thread (metrics)."""
        summary = RunSummary()
        summary.add(self._total)
        return RelaySnapshot(
            summary=summary,
            in_flight=len(self._in_flight),
            unwritten=self._recorded_count - self._written_count,
            # asyncio's event loop keeps time with time.monotonic.
            paused_seconds=self._limiter.paused_for(time.monotonic()),
        )

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
        claimed_at = asyncio.get_running_loop().time()
        await asyncio.gather(*(self._process(row, claimed_at) for row in rows))
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
        for task in helpers:
            task.add_done_callback(_log_if_died)
        in_flight = self._in_flight
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

        loop = asyncio.get_running_loop()
        while not self._stopping.is_set():
            # Cleared before this round's awaits, not after them: a NOTIFY, a finished send or a
            # stop() that comes while the round claims or asks the database must still wake
            # the wait below, or the relay would sleep through it until the timeout.
            self._wakeup.clear()
            ahead = self._claim_ahead(loop.time())
            free = self.config.concurrency + ahead - len(in_flight)
            # Claim once half the rows claimed ahead have started, so that claims (each a
            # commit) stay large; with nothing claimed ahead, claim for every free slot.
            min_claim = max(1, ahead // 2)
            # Claim no more than the bot's rate limit lets go soon: rows beyond it would only
            # wait in memory, or be handed back.
            bot_room = self._limiter.capacity(loop.time(), self._claim_horizon)
            if bot_room is not None:
                free = min(free, bot_room)
            timeout = self.config.poll_interval
            paused = self._limiter.paused_for(loop.time())
            if paused > 0:
                # Flood control: this bot must not send; claim nothing until the pause ends.
                timeout = paused
            elif bot_room == 0:
                timeout = 1.0 / self.config.rate_limits.per_bot
            elif free >= min(min_claim, bot_room or min_claim):
                want = min(free, self.config.batch_size)
                rows = await self._claim(want)
                claimed_at = loop.time()
                for row in rows:
                    task = asyncio.create_task(self._process(row, claimed_at))
                    in_flight.add(task)
                    task.add_done_callback(finished)
                if len(rows) == want:
                    self._busy_backoff = _BUSY_BACKOFF_START
                    await asyncio.sleep(0)  # let the sends start before claiming more
                    continue
                next_due = await self._next_due(claimed=bool(rows), idle=not in_flight)
                nothing_due = next_due is None or next_due > 0
                # Rows this relay handed back fall due a moment after it decided (their time is
                # set when the write commits): give them that moment before a drain ends.
                deferred_done = self._deferred_until + _DEFER_SLACK <= loop.time()
                if drain and not in_flight and nothing_due and deferred_done:
                    return
                if next_due is not None:
                    # A hair late rather than early, so that the claim finds the row due.
                    timeout = min(timeout, max(next_due, 0.0) + 0.002)
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self._wakeup.wait(), timeout)

    def _claim_ahead(self, now: float) -> int:
        """How many rows to claim beyond the free send slots (see _AHEAD_WINDOW)."""
        elapsed = now - self._rate_measured_at
        if elapsed >= _RATE_WINDOW:
            written = self._written_count - self._rate_measured_count
            self._release_rate = written / elapsed
            self._rate_measured_at, self._rate_measured_count = now, self._written_count
        return min(self.config.claim_ahead, int(self._release_rate * _AHEAD_WINDOW))

    async def _next_due(self, *, claimed: bool, idle: bool) -> float | None:
        """Seconds until there may be work again; None: nothing is pending for this relay."""
        if idle:
            await self._flush()  # retries written now count for the next due time
        next_due = await self._seconds_until_next_due()
        now = asyncio.get_running_loop().time()
        own_deferred = self._deferred_until + _DEFER_SLACK - now
        if own_deferred > 0 and (next_due is None or next_due > own_deferred):
            next_due = own_deferred  # rows this relay handed back are its own work
        if next_due is not None and next_due <= 0 and not claimed:
            # Due rows exist but the claim skipped them: another transaction holds them locked
            # (an app changing its task, say). Look again later instead of spinning on them.
            next_due = self._busy_backoff
            # Capped low: rows due later must not wait behind a row someone keeps locked.
            self._busy_backoff = min(self._busy_backoff * 2, _BUSY_BACKOFF_MAX)
        else:
            self._busy_backoff = _BUSY_BACKOFF_START
        return next_due

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
                rows = await queries.claim_due(conn, limit, schema=self._schema)
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
            return await queries.seconds_until_next_due(conn, schema=self._schema)
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
                    applied = await queries.record_outcomes(conn, batch, schema=self._schema)
                except (*_DB_LOST, OutboxError) as err:
                    self._pending[:0] = batch
                    self._recorder.lost(err)
                    if self._stopping.is_set() and self._past_final_write_deadline():
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
                    # The database refused the batch itself, not the connection: write the
                    # outcomes one by one so that one bad row cannot cost the others their
                    # sent markers.
                    log.error("could not record a batch of %d outcomes: %s", len(batch), err)
                    applied = await self._record_one_by_one(batch)
                self._mark_written(len(batch))
                if applied < len(batch):
                    self._total.fenced_out += len(batch) - applied
                    log.warning(
                        "%d outcome(s) discarded: the claim was reaped, or the app withdrew it",
                        len(batch) - applied,
                    )
                if any(o.state == State.PENDING for o in batch):
                    self._wakeup.set()  # a retry may now be the earliest due row
                if self._pause_to_announce:
                    await self._announce_pause()

    async def _announce_pause(self) -> None:
        seconds, self._pause_to_announce = self._pause_to_announce, 0.0
        try:
            await queries.announce_pause(await self._recorder.get(), seconds, schema=self._schema)
        except (psycopg.Error, OutboxError) as err:
            # Best effort: the other relays find out from Telegram instead, one 429 each.
            log.warning("could not tell the other relays about flood control: %s", err)
            if isinstance(err, _DB_LOST):
                self._recorder.lost(err)

    def _pause_from_peer(self, notify: psycopg.Notify) -> None:
        """Another relay was asked to wait: Telegram's limit is the bot's, so wait as well."""
        if notify.pid == self._recorder.backend_pid:
            return  # this relay's own announcement
        try:
            seconds = float(notify.payload)
        except ValueError:
            return
        if 0 < seconds <= _MAX_PEER_PAUSE:
            self._limiter.pause(seconds, asyncio.get_running_loop().time())
            log.warning("flood control: another relay must wait %g s; this one waits too", seconds)

    def _past_final_write_deadline(self) -> bool:
        """While stopping, written outcomes (sent markers) are worth a few reconnects."""
        now = time.monotonic()
        if self._give_up_writing_at is None:
            self._give_up_writing_at = now + self.config.grace_seconds + 5.0
        return now >= self._give_up_writing_at

    async def _record_one_by_one(self, batch: list[queries.Outcome]) -> int:
        applied = 0
        for outcome in batch:
            try:
                conn = await self._recorder.get()
                applied += await queries.record_outcomes(conn, [outcome], schema=self._schema)
            except psycopg.Error as err:
                # Not lost: the reaper returns the row to the queue after the lease.
                log.error(
                    "could not record the outcome of outbox %s: %s",
                    outcome.id,
                    err,
                    extra={"outbox_id": outcome.id, "key": outcome.key},
                )
                applied += 1  # not a fencing discard; do not report it as one
        return applied

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
            self._wake_write_waiters(everyone=True)  # nobody waits for a flusher that ended

    def _record(self, outcome: queries.Outcome) -> None:
        self._pending.append(outcome)
        self._recorded_count += 1
        # Sends hold their slots until written, so waiting to fill a batch costs throughput:
        # write at once. Batches still form: what is recorded while a write is in flight goes
        # together in the next one, as commits do in a database's group commit.
        self._flush_now.set()

    def _mark_written(self, count: int) -> None:
        self._written_count += count
        self._wake_write_waiters()

    def _wake_write_waiters(self, *, everyone: bool = False) -> None:
        waiters = self._write_waiters
        while waiters and (everyone or waiters[0][0] <= self._written_count):
            future = waiters.popleft()[1]
            if not future.done():  # a cancelled send leaves a cancelled future behind
                future.set_result(None)

    async def _until_written(self) -> None:
        """Wait until every outcome recorded so far is written (or the flusher has ended)."""
        target = self._recorded_count
        if self._written_count >= target or not self._flusher_running:
            return
        # Recorded counts only grow, so the queue stays sorted by target.
        future = asyncio.get_running_loop().create_future()
        self._write_waiters.append((target, future))
        await future

    async def _listen_forever(self) -> None:
        """LISTEN for new rows; after a reconnect, look again at once (notes may be lost)."""
        listener = _Connection(self.config.database_url, "listen", self._stopping)
        pause = pause_channel(self._schema)
        try:
            while True:
                conn = await listener.get()
                try:
                    await conn.execute(f'LISTEN "{pause}"')
                    await conn.execute(f'LISTEN "{notify_channel(self._schema)}"')
                    self._wakeup.set()
                    async for notify in conn.notifies():
                        if notify.channel == pause:
                            self._pause_from_peer(notify)
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
        pruned = await queries.prune(
            conn,
            schema=self._schema,
            done_older_than_seconds=self.config.retention_seconds,
            markers_older_than_seconds=self.config.marker_retention_seconds,
            batch_size=self.config.prune_batch_size,
        )
        if any(pruned.values()):
            log.info("retention: deleted %s", pruned)

    async def _maintain_forever(self) -> None:
        """Reap expired claims, one relay at a time (the holder of the advisory lock).

        The lock lasts one round, one transaction: a relay that hangs (a stopped process, a
        frozen VM) must not keep the others from reaping the rows it holds.
        """
        keeper = _Connection(self.config.database_url, "maintenance", self._stopping, prepare=False)
        # An expired claim waits at most half a lease more, whatever the reap interval.
        interval = min(self.config.reap_interval, self.config.lease_seconds / 2)
        idle_limit = max(2.0, min(30.0, interval))
        try:
            while True:
                try:
                    conn = await keeper.get()
                    reaped: dict[str, int] | None = None
                    async with conn.transaction():
                        # A round takes well under a second; one that sits idle much longer
                        # inside its transaction belongs to a hung relay, and the server ends it.
                        if await queries.try_maintenance_lock(
                            conn, schema=self._schema, idle_seconds=idle_limit
                        ):
                            reaped = await queries.reap_stale(
                                conn,
                                schema=self._schema,
                                lease_seconds=self.config.lease_seconds,
                                max_attempts=self.config.retry.max_attempts,
                            )
                    if reaped is not None:
                        # Retention after the round, in short transactions of its own.
                        await self._apply_retention(conn)
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

    async def _process(self, row: queries.ClaimedRow, claimed_at: float) -> None:
        try:
            await self._slots.acquire()
        except asyncio.CancelledError:
            self._skip_unsent(row)  # never started: back to the queue untouched
            raise
        try:
            await self._deliver(row, claimed_at)
        except Exception as err:  # a bug must not strand the row until the lease
            log.exception(
                "outbox %s: unexpected error while delivering",
                row.id,
                extra={"outbox_id": row.id, "key": row.key},
            )
            self._fail(row, classify(err))
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

    async def _deliver(self, row: queries.ClaimedRow, claimed_at: float) -> None:  # noqa: PLR0911 - one exit per fate
        if row.already_sent:
            self._total.already_sent += 1
            self._record(queries.Outcome.for_row(row, State.DONE))
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
            if self._limiter.plan(chat_id, now) > self.config.max_chat_hold:
                delay = self._limiter.defer(chat_id, now)
                self._deferred_until = max(self._deferred_until, now + delay)
                self._total.deferred += 1
                self._release(row, delay=delay, new_chat_id=new_chat_id)
                return
            waited = await self._wait_for_slot(chat_id)
            if waited is None:
                self._skip_unsent(row, new_chat_id)
                return
            if self._limiter.paused_for(loop.time()) > 0.001:
                continue  # flood control began while this send waited for its turn
            stale = loop.time() - claimed_at > _RECHECK_AFTER
            if stale and not await self._still_claimed(row):
                # The app withdrew the message (its task was completed, say) while it waited.
                self._total.cancelled += 1
                return
            try:
                sent = await self._sender.send(args)
            except Exception as err:  # noqa: BLE001 - every failure is classified in one place
                failure = classify(err)
                if failure.kind is FailureKind.MIGRATED and new_chat_id is None:
                    chat_id = new_chat_id = args["chat_id"] = failure.new_chat_id
                    log.info(
                        "outbox %s: %s; resending",
                        row.id,
                        failure.reason,
                        extra={"outbox_id": row.id, "key": row.key, "chat_id": chat_id},
                    )
                    continue
                self._handle_failure(row, failure, new_chat_id)
                return
            self._mark_sent(row, sent, new_chat_id)
            return

    async def _wait_for_slot(self, chat_id: int | str) -> float | None:
        """Wait for the rate limits; the seconds waited, or None if the relay is stopping."""
        if self._stopping.is_set():
            return None
        delay = self._limiter.reserve(chat_id, asyncio.get_running_loop().time())
        if delay > 0:
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self._stopping.wait(), delay)
        return None if self._stopping.is_set() else delay

    async def _still_claimed(self, row: queries.ClaimedRow) -> bool:
        try:
            return await queries.still_claimed(await self._claimer.get(), row, schema=self._schema)
        except _DB_LOST as err:
            self._claimer.lost(err)
            return True  # cannot tell: send; the fenced write sorts out the rest

    def _mark_sent(
        self, row: queries.ClaimedRow, sent: SentMessage, new_chat_id: int | None
    ) -> None:
        self._total.sent += 1
        self._record(
            queries.Outcome.for_row(
                row,
                State.DONE,
                key=row.key,
                chat_id=sent.chat_id,
                message_id=sent.message_id,
                new_chat_id=new_chat_id,
            )
        )

    def _handle_failure(
        self, row: queries.ClaimedRow, failure: Failure, new_chat_id: int | None = None
    ) -> None:
        if failure.kind is FailureKind.UNAUTHORIZED:
            # Not the message's fault: hand it back untouched and stop the relay.
            if self._fatal is None:
                self._fatal = TelegramUnauthorized(
                    "Telegram rejected the bot token (check TELEGRAM_BOT_TOKEN); relay stopped"
                )
                log.error("%s", self._fatal)
            self._total.released += 1
            self._release(row, delay=0.0, new_chat_id=new_chat_id)
            self.stop()
            return
        if failure.retry_after:
            # Flood control is per bot: every send of this bot waits, not only this row, and
            # so do the other relays (told with the next write).
            self._limiter.pause(failure.retry_after, asyncio.get_running_loop().time())
            self._pause_to_announce = max(self._pause_to_announce, failure.retry_after)
        self._fail(row, failure, new_chat_id)

    def _fail(
        self, row: queries.ClaimedRow, failure: Failure, new_chat_id: int | None = None
    ) -> None:
        decision = decide(self.config.retry, row.attempts, failure)
        # A malformed payload may be any JSON value, not an object.
        chat = row.payload.get("chat_id") if isinstance(row.payload, dict) else None
        about = {"outbox_id": row.id, "key": row.key, "chat_id": chat}
        if decision.state is State.FAILED:
            self._total.failed += 1
            log.warning("outbox %s failed for good: %s", row.id, decision.error, extra=about)
        else:
            self._total.retried += 1
            log.info(
                "outbox %s retry in %.1f s: %s",
                row.id,
                decision.delay_seconds,
                decision.error,
                extra=about,
            )
        self._record(
            queries.Outcome.for_row(
                row,
                decision.state,
                delay_seconds=decision.delay_seconds,
                error=decision.error,
                # A group that moved stays moved, whatever happened to the resend.
                new_chat_id=new_chat_id,
            )
        )

    def _skip_unsent(self, row: queries.ClaimedRow, new_chat_id: int | None = None) -> None:
        self._total.released += 1
        self._release(row, delay=0.0, new_chat_id=new_chat_id)

    def _release(
        self, row: queries.ClaimedRow, *, delay: float, new_chat_id: int | None = None
    ) -> None:
        """Back to the queue without spending an attempt."""
        self._record(
            queries.Outcome.for_row(
                row,
                State.PENDING,
                delay_seconds=delay,
                refund_attempt=True,
                new_chat_id=new_chat_id,
            )
        )
