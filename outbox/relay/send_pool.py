"""The send pool: claimed rows wait for a send slot and the rate limits, are sent, and their
outcome (classified in one place, ``outbox.classify``) goes to the completer."""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Awaitable, Callable

from outbox import queries
from outbox.classify import Failure, FailureKind, MalformedPayload, classify
from outbox.errors import TelegramUnauthorized
from outbox.ratelimit import Booking, RateLimiter
from outbox.relay.completer import Completer
from outbox.relay.flood import FloodControl
from outbox.relay.store import DatabaseLost, Store
from outbox.relay.summary import RunSummary
from outbox.retry import RetryPolicy, decide
from outbox.states import FailureCode, State
from outbox.telegram import Sender, SentMessage, send_message_args

__all__ = ["LATE_FOR_SLOT", "SendPool", "claim_check", "late_for_slot"]

log = logging.getLogger("outbox.relay")

# A claimed row that waited longer than this (for a send slot or a rate limit) is checked
# before sending: the app may have withdrawn it meanwhile (outbox.cancel).
RECHECK_AFTER = 0.05
# A row whose reserved send slot passed longer ago than this is not sent in it (a busy event
# loop, a slow database answer); the chat spacing the claim keeps includes this much.
LATE_FOR_SLOT = 0.1


def late_for_slot(per_bot: float) -> float:
    """How late a send may be for its slot. With a per-bot limit, one slot at most: then any
    second holds at most ``per_bot + 1`` sends of the fleet (29 at the default 28)."""
    return min(LATE_FOR_SLOT, 1.0 / per_bot) if per_bot > 0 else LATE_FOR_SLOT


def claim_check(store: Store, *, schema: str) -> Callable[[queries.ClaimedRow], Awaitable[bool]]:
    """Whether a claimed row is still this relay's (the app may withdraw a row), asked on
    ``store``; True when the database cannot tell: the row is sent, the fenced write sorts
    out the rest."""

    async def still_claimed(row: queries.ClaimedRow) -> bool:
        try:
            return await store.run(lambda conn: queries.still_claimed(conn, row, schema=schema))
        except DatabaseLost:
            return True

    return still_claimed


_CUT_OFF = Failure(
    FailureKind.TRANSIENT,
    "relay stopped while sending; the message may have been delivered",
    maybe_delivered=True,
)


class SendPool:
    """At most ``concurrency`` sends at once; each keeps its slot until its outcome is written."""

    def __init__(
        self,
        sender: Sender,
        *,
        concurrency: int,
        max_chat_hold: float,
        per_bot: float,
        retry: RetryPolicy,
        limiter: RateLimiter,
        flood: FloodControl,
        completer: Completer,
        still_claimed: Callable[[queries.ClaimedRow], Awaitable[bool]],
        stopping: asyncio.Event,
        total: RunSummary,
        on_unauthorized: Callable[[TelegramUnauthorized], None],
        wakeup: asyncio.Event | None = None,
    ) -> None:
        self._sender = sender
        self._max_chat_hold = max_chat_hold
        self._late_for_slot = late_for_slot(per_bot)
        self._retry = retry
        self._limiter = limiter
        self._flood = flood
        self._completer = completer
        self._still_claimed = still_claimed
        self._stopping = stopping
        self._total = total
        self._on_unauthorized = on_unauthorized
        self._wakeup = wakeup or asyncio.Event()  # the claimer's: a slot is free
        self._slots = asyncio.Semaphore(concurrency)
        self._tasks: set[asyncio.Task[None]] = set()
        # Rows (by id(row)) with a request out: cut off now, they may have been delivered.
        self._sending: set[int] = set()
        # Rows (by id(row)) Telegram took whose delivery is not recorded yet: whatever fails
        # before it is, they are recorded as delivered, never retried.
        self._delivered: dict[int, SentMessage] = {}
        self._moved: dict[int, int] = {}  # id(row): the chat a migrated group moved to
        self._deferred_until = 0.0  # loop time when the last row handed back is due

    @property
    def in_flight(self) -> int:
        """Claimed rows held: waiting for a slot, sending, or waiting for their write."""
        return len(self._tasks)

    @property
    def deferred_until(self) -> float:
        """When the last row this pool handed back for a busy chat falls due (loop time)."""
        return self._deferred_until

    def start(self, rows: list[queries.ClaimedRow], checked_at: float) -> None:
        """Take claimed rows on; each goes as soon as a slot and the rate limits allow.

        ``checked_at``: the event loop's time when the rows were known to be claimed (their
        claim just returned). Loop times are seconds of ``loop.time()``; the rows' own
        ``claimed_at`` is the database's time of the claim, used only to fence the write.
        """
        for row in rows:
            task = asyncio.create_task(self.process(row, checked_at))
            self._tasks.add(task)
            task.add_done_callback(self._finished)

    def _finished(self, task: asyncio.Task[None]) -> None:
        self._tasks.discard(task)
        self._wakeup.set()
        if not task.cancelled() and task.exception() is not None:
            log.error("send task failed", exc_info=task.exception())

    async def finish(self, grace: float, hurry: asyncio.Event) -> None:
        """Let the sends in flight end within ``grace`` seconds (or until ``hurry`` is set);
        cut off the rest. Rows not yet sent go back to the queue untouched."""
        if self._tasks:
            all_done = asyncio.ensure_future(asyncio.wait(set(self._tasks)))
            hurried = asyncio.ensure_future(hurry.wait())
            await asyncio.wait(
                {all_done, hurried}, timeout=grace, return_when=asyncio.FIRST_COMPLETED
            )
            all_done.cancel()
            hurried.cancel()
        still_running = set(self._tasks)
        for task in still_running:
            task.cancel()
        await asyncio.gather(*still_running, return_exceptions=True)

    # --- one row -------------------------------------------------------------------------------

    async def process(self, row: queries.ClaimedRow, checked_at: float) -> None:
        """Send one claimed row (known claimed at loop time ``checked_at``) and record its
        outcome; return once the outcome is written."""
        try:
            await self._slots.acquire()
        except asyncio.CancelledError:
            self._release(row)  # never started: back to the queue untouched
            raise
        try:
            await self._deliver(row, checked_at)
        except Exception as err:  # a bug must not strand the row until the lease
            sent = self._delivered.get(id(row))
            if sent is None:
                log.exception(
                    "outbox %s: unexpected error while delivering", row.id, extra=_about(row)
                )
                self._fail(row, classify(err))
            else:
                # Telegram took the message: a retry would send it again.
                log.exception(
                    "outbox %s: unexpected error after the message was delivered; recorded "
                    "as delivered",
                    row.id,
                    extra=_about(row),
                )
                self._record_delivered(row, sent)
            # Like any outcome, this one is written before the slot goes to the next row.
            await self._completer.until_written()
        except asyncio.CancelledError:
            if id(row) in self._sending:
                # The grace period ran out mid-send: the request may have reached Telegram.
                self._fail(row, _CUT_OFF)
            else:
                # Cut off before any request (waiting for the rate limits, checking the
                # claim): nothing was sent, so no attempt is spent.
                self._release(row)
            raise
        else:
            await self._completer.until_written()
        finally:
            self._slots.release()
            self._sending.discard(id(row))
            self._delivered.pop(id(row), None)
            if self._moved:
                self._moved.pop(id(row), None)

    async def _deliver(self, row: queries.ClaimedRow, checked_at: float) -> None:  # noqa: PLR0911 - one exit per fate
        if row.already_sent:
            self._total.already_sent += 1
            self._completer.record(queries.Outcome.for_row(row, State.DONE))
            return
        try:
            args = send_message_args(row.payload)
        except MalformedPayload as err:
            self._fail(row, classify(err))
            return
        loop = asyncio.get_running_loop()
        # Loop time of the row's expiry: a send that would start after it is not made.
        expires_at = None if row.expires_in is None else checked_at + row.expires_in
        if row.wait > 0:
            kept_at = await self._keep_slot(row, checked_at + row.wait)
            if kept_at is None:
                return
            checked_at = kept_at  # checked just now
        while True:
            chat_id = args["chat_id"]
            # A long wait (a busy chat, flood control) is not spent holding a claim and a slot.
            now = loop.time()
            resume_at = self._flood.resume_at
            if self._limiter.plan(chat_id, now, after=resume_at) > self._max_chat_hold:
                delay = self._limiter.defer(chat_id, now, after=resume_at)
                self._deferred_until = max(self._deferred_until, now + delay)
                self._total.deferred += 1
                self._hand_back(row, delay)
                return
            booking = await self._wait_for_turn(chat_id)
            if booking is None:
                self._release(row)
                return
            if self._flood.paused_for(loop.time()) > 0.001:
                # Flood control began while this send waited for its turn: the slot it booked
                # goes back, and it books a new one after the pause.
                self._limiter.cancel(booking)
                continue
            if expires_at is not None and loop.time() >= expires_at:
                self._limiter.cancel(booking)
                self._expire(row)
                return
            stale = loop.time() - checked_at > RECHECK_AFTER
            if stale and not await self._still_claimed(row):
                # The app withdrew the message (its task was completed, say) while it waited.
                self._limiter.cancel(booking)
                self._total.cancelled += 1
                return
            key = id(row)
            self._sending.add(key)
            try:
                sent = await self._sender.send(args)
            except Exception as err:  # noqa: BLE001 - every failure is classified in one place
                failure = classify(err)
                moved_to = failure.new_chat_id
                if failure.kind is FailureKind.MIGRATED and moved_to and key not in self._moved:
                    self._moved[key] = args["chat_id"] = moved_to
                    log.info(
                        "outbox %s: %s; resending",
                        row.id,
                        failure.reason,
                        extra=_about(row, moved_to),
                    )
                    self._sending.discard(key)
                    continue
                self._handle_failure(row, failure)
                return
            self._delivered[key] = sent
            self._mark_sent(row, sent)
            return

    async def _keep_slot(self, row: queries.ClaimedRow, at: float) -> float | None:
        """Wait for the send slot the claim reserved for the fleet (loop time ``at``), checking
        a moment before that the app did not withdraw the row. The time it was checked; None
        if the row is dealt with (withdrawn, handed back)."""
        if not await self._wait_until(at - RECHECK_AFTER):
            self._release(row)  # stopping before its send slot came
            return None
        if not await self._still_claimed(row):
            self._total.cancelled += 1
            return None
        if not await self._wait_until(at):
            self._release(row)
            return None
        now = asyncio.get_running_loop().time()
        if now > at + self._late_for_slot:
            # Sent now it would crowd the slots of the bot's other relays, or its chat's next
            # message: back to the queue, to be claimed with a new slot.
            self._total.deferred += 1
            self._hand_back(row, 0.0)
            return None
        return now

    async def _wait_until(self, at: float) -> bool:
        """Wait for the send slot the claim reserved (loop time ``at``); False if stopping."""
        delay = at - asyncio.get_running_loop().time()
        if delay > 0:
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self._stopping.wait(), delay)
        return not self._stopping.is_set()

    async def _wait_for_turn(self, chat_id: int | str) -> Booking | None:
        """Book a slot with the rate limits and wait for it; None if the relay is stopping."""
        if self._stopping.is_set():
            return None
        loop = asyncio.get_running_loop()
        booking = self._limiter.book(chat_id, loop.time(), after=self._flood.resume_at)
        delay = booking.start - loop.time()
        if delay > 0:
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self._stopping.wait(), delay)
        if self._stopping.is_set():
            self._limiter.cancel(booking)
            return None
        return booking

    # --- outcomes ------------------------------------------------------------------------------

    def _mark_sent(self, row: queries.ClaimedRow, sent: SentMessage) -> None:
        self._total.sent += 1
        self._completer.record(
            queries.Outcome.for_row(
                row,
                State.DONE,
                key=row.key,
                chat_id=sent.chat_id,
                message_id=sent.message_id,
                new_chat_id=self._moved.get(id(row)),
            )
        )
        self._delivered.pop(id(row), None)  # recorded: nothing left to make up for

    def _record_delivered(self, row: queries.ClaimedRow, sent: SentMessage) -> None:
        """Recording the delivery failed (a bug): record it again in the plainest form, the
        sent marker if that can be built, else done without one; never a retry."""
        try:
            outcome = queries.Outcome.for_row(
                row, State.DONE, key=row.key, chat_id=sent.chat_id, message_id=sent.message_id
            )
        except Exception:  # noqa: BLE001 - the bug again: done is still the truth
            outcome = queries.Outcome.for_row(row, State.DONE)
        self._completer.record(outcome)

    def _handle_failure(self, row: queries.ClaimedRow, failure: Failure) -> None:
        if failure.kind is FailureKind.UNAUTHORIZED:
            # Not the message's fault: hand it back untouched and stop the relay.
            self._release(row)
            self._on_unauthorized(
                TelegramUnauthorized(
                    "Telegram rejected the bot token (check TELEGRAM_BOT_TOKEN); relay stopped"
                )
            )
            return
        if failure.retry_after:
            # Flood control is per bot: every send of this bot waits, not only this row, and
            # so do the other relays (flood control tells them at once).
            self._flood.flooded(failure.retry_after, asyncio.get_running_loop().time())
        self._fail(row, failure)

    def _fail(self, row: queries.ClaimedRow, failure: Failure) -> None:
        decision = decide(self._retry, row.attempts, failure)
        about = _about(row)
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
        self._completer.record(
            queries.Outcome.for_row(
                row,
                decision.state,
                delay_seconds=decision.delay_seconds,
                error=decision.error,
                error_code=decision.code,
                # A group that moved stays moved, whatever happened to the resend.
                new_chat_id=self._moved.get(id(row)),
            )
        )

    def _expire(self, row: queries.ClaimedRow) -> None:
        """Its expiry came while it waited for its turn: failed, never sent late."""
        self._total.failed += 1
        log.warning("outbox %s expired before it could be sent", row.id, extra=_about(row))
        self._completer.record(
            queries.Outcome.for_row(
                row,
                State.FAILED,
                error="expired before it could be sent",
                error_code=FailureCode.EXPIRED,
                new_chat_id=self._moved.get(id(row)),
            )
        )

    def _release(self, row: queries.ClaimedRow) -> None:
        """Back to the queue unsent, due now (shutdown, rejected token)."""
        self._total.released += 1
        self._hand_back(row, 0.0)

    def _hand_back(self, row: queries.ClaimedRow, delay: float) -> None:
        """Back to the queue without spending an attempt."""
        self._completer.record(
            queries.Outcome.for_row(
                row,
                State.PENDING,
                delay_seconds=delay,
                refund_attempt=True,
                new_chat_id=self._moved.get(id(row)),
            )
        )


def _about(row: queries.ClaimedRow, chat_id: object = None) -> dict[str, object]:
    """The fields of a log line about one message (JSON logs carry them as keys)."""
    if chat_id is None and isinstance(row.payload, dict):
        # A malformed payload may be any JSON value, not an object.
        chat_id = row.payload.get("chat_id")
    return {"outbox_id": row.id, "key": row.key, "chat_id": chat_id}
