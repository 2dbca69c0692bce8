"""The send pool: claimed rows wait for a worker and for the moment their claim reserved,
are sent, and their outcome (classified in one place, ``outbox.classify``) goes to the
completer. The pool keeps no limits of its own (the claim keeps them for the whole fleet): it
sends each row at its moment or not at all. A row that cannot go then (it waited for a worker,
the event loop was busy, flood control began) goes back to the queue without spending an
attempt, and its next claim gives it a new moment.
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import logging
import weakref
from collections.abc import Awaitable, Callable
from typing import Any

from outbox import queries
from outbox.classify import Failure, FailureKind, MalformedPayload, classify
from outbox.errors import TelegramUnauthorized
from outbox.payload import Request, is_basic, request_of
from outbox.relay.completer import Completer
from outbox.relay.flood import FloodControl
from outbox.relay.reach import TelegramReach
from outbox.relay.store import DatabaseLost, Store
from outbox.relay.summary import RunSummary
from outbox.relay.tracing import SendSpan, SendTracer
from outbox.relay.workers import Workers
from outbox.retry import Decision, RetryPolicy, RowFacts, decide, expiry, hand_back
from outbox.states import FailureCode, State
from outbox.telegram import MethodSender, Sender, SentMessage, sent_of

__all__ = ["LATE_FOR_SLOT", "SendPool", "claim_check", "held_in_this_process", "late_for_slot"]

log = logging.getLogger("outbox.relay")

# A claimed row that waited longer than this (for a worker or its moment) is checked
# before sending: the app may have withdrawn it meanwhile (outbox.cancel).
RECHECK_AFTER = 0.05
# A row later than this for the moment its claim reserved (a busy event loop, a slow database
# answer, a wait for a worker) is not sent: the chat spacing the claim keeps includes this
# much, and no more.
LATE_FOR_SLOT = 0.1


# Every send pool of this process: a claim's holder is the process (queries.claim_holder), so
# the rows it holds are those of all its relays' pools (an app may run more than one).
_POOLS: weakref.WeakSet[SendPool] = weakref.WeakSet()


def held_in_this_process() -> set[int]:
    """The claimed rows this process's send pools hold (their outcomes not yet written)."""
    return set().union(*(pool.held_ids for pool in list(_POOLS)))


def late_for_slot(per_bot: float) -> float:
    """How late a send may be for its slot. With a per-bot limit, one slot at most: then any
    second holds at most ``per_bot + 1`` sends of the fleet (29 at the default 28), as each
    relay reads the slots from its claim's answer (an answer that lags, on a loaded machine,
    moves that claim's sends by the lag)."""
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
    """At most ``concurrency`` sends at once; each keeps its worker until its outcome is
    written. With any of the claim's ``limits`` (``claimer.fleet_limits``) on, each row has a
    moment reserved for it, and goes then or goes back."""

    def __init__(
        self,
        sender: Sender,
        *,
        concurrency: int,
        limits: queries.ClaimLimits,
        retry: RetryPolicy,
        flood: FloodControl,
        completer: Completer,
        still_claimed: Callable[[queries.ClaimedRow], Awaitable[bool]],
        stopping: asyncio.Event,
        total: RunSummary,
        on_unauthorized: Callable[[TelegramUnauthorized], None],
        wakeup: asyncio.Event | None = None,
        tracer: SendTracer | None = None,
        reach: TelegramReach | None = None,
    ) -> None:
        self._sender = sender
        self._tracer = tracer  # None: no spans (outbox.relay.tracing)
        self._spans: dict[int, SendSpan] = {}  # id(row): its span, while it is handled
        self._reach = reach  # None: no pause for a Bot API that cannot be reached (tests)
        self._reserved = bool(limits.per_bot or limits.chat_gap or limits.group_gap)
        self._late_for_slot = late_for_slot(limits.per_bot)
        self._retry = retry
        self._flood = flood
        self._completer = completer
        self._still_claimed = still_claimed
        self._stopping = stopping  # the claimer stopped: no new sends
        self._total = total
        self._on_unauthorized = on_unauthorized
        self._wakeup = wakeup or asyncio.Event()  # the claimer's: a worker is free
        self._workers = Workers(concurrency, self.process, done=self._row_done)
        # Rows (by id(row)) with a request out: cut off now, they may have been delivered.
        self._sending: set[int] = set()
        # Rows (by id(row)) Telegram took whose delivery is not recorded yet: whatever fails
        # before it is, they are recorded as delivered, never retried.
        self._delivered: dict[int, SentMessage] = {}
        self._moved: dict[int, int] = {}  # id(row): the chat a migrated group moved to
        self._facts: dict[int, RowFacts] = {}  # id(row): what the retry policy needs of it
        # Database ids of the claimed rows taken on and not done with (outcome not written).
        self.held_ids: set[int] = set()
        _POOLS.add(self)
        self.deferred_until = 0.0  # loop time when the last row handed back falls due
        self.finished = 0  # rows taken on and done with (the pace its workers free up)

    @property
    def in_flight(self) -> int:
        """Claimed rows held: waiting for a worker, sending, or waiting for their write."""
        return self._workers.held

    def start(self, rows: list[queries.ClaimedRow], checked_at: float) -> None:
        """Take claimed rows on; each goes at its moment, once a worker is free. ``checked_at``:
        the loop time their claim returned (the rows' ``claimed_at``, the database's time, only
        fences the write)."""
        self.held_ids.update(row.id for row in rows)
        self._workers.give(rows, checked_at)

    def _row_done(self) -> None:
        self.finished += 1
        self._wakeup.set()  # a worker is free: the claimer may claim

    async def finish(self, grace: float, hurry: asyncio.Event) -> None:
        """Let the sends in flight end within ``grace`` seconds (or until ``hurry`` is set);
        cut off the rest. Rows not yet sent go back to the queue untouched."""
        if self.in_flight and not hurry.is_set():
            all_done = asyncio.ensure_future(self._workers.idle())
            hurried = asyncio.ensure_future(hurry.wait())
            await asyncio.wait(
                {all_done, hurried}, timeout=grace, return_when=asyncio.FIRST_COMPLETED
            )
            all_done.cancel()
            hurried.cancel()
        for row in await self._workers.stop():
            self._release(row)  # never started: back to the queue untouched

    # --- one row -------------------------------------------------------------------------------

    async def process(self, row: queries.ClaimedRow, checked_at: float) -> None:
        """Send one claimed row (known claimed at loop time ``checked_at``) and record its
        outcome; return once the outcome is written."""
        self._keep_facts(row, checked_at)
        if self._tracer is not None:
            self._spans[id(row)] = self._tracer.start(row)
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
            # Like any outcome, this one is written before the worker takes the next row.
            await self._completer.until_written()
        except asyncio.CancelledError:
            if id(row) in self._sending:
                # The grace period ran out mid-send: the request may have reached Telegram.
                self._fail(row, _CUT_OFF)
            else:
                # Cut off before any request (waiting for its moment, checking the claim):
                # nothing was sent, so no attempt is spent.
                self._release(row)
            raise
        else:
            await self._completer.until_written()
        finally:
            self.held_ids.discard(row.id)
            self._sending.discard(id(row))
            self._delivered.pop(id(row), None)
            self._facts.pop(id(row), None)
            if self._moved:
                self._moved.pop(id(row), None)
            if self._spans:
                span = self._spans.pop(id(row), None)
                if span is not None:
                    span.end()

    async def _deliver(self, row: queries.ClaimedRow, checked_at: float) -> None:  # noqa: PLR0911 - one exit per fate
        if row.already_sent:
            self._total.already_sent += 1
            self._record(row, queries.Outcome.for_row(row, State.DONE))
            return
        if self._expired(row):  # the claim takes expired rows too: they end here
            return
        request = self._request_for(row)
        if request is None:
            return
        loop = asyncio.get_running_loop()
        # The moment the claim reserved for this row in the bot's budget and its chat's spacing.
        moment = checked_at + max(row.wait, 0.0) if self._reserved else None
        if moment is not None and not await self._wait_until(moment - RECHECK_AFTER):
            self._release(row)  # stopping before its moment came
            return
        if self._held_by_flood_control(row):
            return
        if loop.time() - checked_at > RECHECK_AFTER and not await self._still_claimed(row):
            # The app withdrew the message (its task was completed, say) while it waited.
            self._total.cancelled += 1
            return
        if moment is not None:
            if not await self._wait_until(moment):
                self._release(row)
                return
            if loop.time() > moment + self._late_for_slot:
                # Sent now it would crowd the slots of the bot's other relays, or its chat's
                # next message: back to the queue, to be claimed with a new moment.
                self._hand_back(row, 0.0)
                return
        if self._stopping.is_set():
            self._release(row)
            return
        if self._held_by_flood_control(row):  # it began while this row waited
            return
        if self._expired(row):
            return
        await self._send_row(row, request)

    async def _send_row(self, row: queries.ClaimedRow, request: Request) -> None:
        key = id(row)
        args = dict(request.args)
        while True:
            self._sending.add(key)
            try:
                sent = await self._send(request, args)
            except Exception as err:  # noqa: BLE001 - every failure is classified in one place
                failure = classify(err, request.method)
                if failure.kind is FailureKind.DONE:
                    # An edit to the text it has, a delete of a message already gone.
                    self._mark_sent(row, sent_of(request._replace(args=args), True))
                    return
                moved_to = failure.new_chat_id
                # A follow-up's chat is its original's (the marker's), not its own payload's.
                if (
                    failure.kind is FailureKind.MIGRATED
                    and moved_to
                    and key not in self._moved
                    and request.message_key is None
                ):
                    self._moved[key] = args["chat_id"] = moved_to
                    log.info(
                        "outbox %s: %s; resending",
                        row.id,
                        failure.reason,
                        extra=_about(row, moved_to),
                    )
                    self._sending.discard(key)
                    # Resent at once: the moment was this message's, and a group's new id
                    # has had no message yet.
                    if self._stopping.is_set():
                        self._release(row)
                        return
                    if self._held_by_flood_control(row):
                        return
                    continue
                self._handle_failure(row, failure)
                return
            self._delivered[key] = sent
            self._mark_sent(row, sent)
            return

    def _request_for(self, row: queries.ClaimedRow) -> Request | None:
        """The row's request, checked by the payload contract (a follow-up aimed at its
        original); None when the row is dealt with instead."""
        try:
            request = request_of(row.payload)
        except MalformedPayload as err:
            self._fail(row, classify(err))
            return None
        if request.message_key is not None:
            return self._aimed(row, request)
        return request

    async def _send(self, request: Request, args: dict[str, Any]) -> SentMessage:
        if request.method == "sendMessage" and is_basic(args):
            return await self._sender.send(args)
        if not isinstance(self._sender, MethodSender):
            raise MalformedPayload(f"this relay's sender cannot send {request.method}")
        return await self._sender.call(request._replace(args=args))

    def _aimed(self, row: queries.ClaimedRow, request: Request) -> Request | None:
        """A follow-up aimed at its original's message (from the sent marker); None when the
        row is dealt with instead: failed (its original was never sent) or handed back (its
        original is still on its way)."""
        original, key = row.original, request.message_key
        if isinstance(original, list) and len(original) == 3 and original[1]:
            chat_id, message_id, album = original
            args = dict(request.args)
            if request.method == "deleteMessage" and album and len(album) > 1:
                # An album is deleted whole; edits and pins act on its first (captioned) item.
                return request._replace(
                    method="deleteMessages", args={**args, "chat_id": chat_id, "message_ids": album}
                )
            return request._replace(args={**args, "chat_id": chat_id, "message_id": message_id})
        state = row.original_state or ""
        if state in (State.PENDING, State.IN_PROGRESS):
            # Claimed alone (a suspect) or raced with its original's claim: after it.
            self._hand_back(row, 1.0)
            return None
        if not state:
            reason = f"no outbox message has the key {key!r}: nothing to {request.method}"
        elif state == State.DONE:
            reason = f"the message {key!r} has no sent marker any more (pruned): its id is unknown"
        else:
            reason = f"the message {key!r} was never sent ({state}): nothing to {request.method}"
        self._fail(row, Failure(FailureKind.PERMANENT, reason, code=FailureCode.ORIGINAL_FAILED))
        return None

    def _held_by_flood_control(self, row: queries.ClaimedRow) -> bool:
        """While the bot is paused nothing goes out: the row goes back to the queue, due when
        the pause ends (while this relay cannot reach Telegram, keeping its place). True if it
        went back."""
        if self._reach is not None and self._reach.down:
            self._reach.handed_back()
            self._total.deferred += 1
            self._apply(row, hand_back(asyncio.get_running_loop().time(), self._facts_of(row)))
            return True
        paused = self._flood.paused_for(asyncio.get_running_loop().time())
        if paused <= 0:
            return False
        self._hand_back(row, paused)
        return True

    async def _wait_until(self, at: float) -> bool:
        """Wait until loop time ``at`` (at once if it has passed); False if stopping."""
        delay = at - asyncio.get_running_loop().time()
        if delay > 0:
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self._stopping.wait(), delay)
        return not self._stopping.is_set()

    # --- outcomes ------------------------------------------------------------------------------

    def _mark_sent(self, row: queries.ClaimedRow, sent: SentMessage) -> None:
        self._total.sent += 1
        outcome = queries.Outcome.delivered(
            row, sent.chat_id, sent.message_id, sent.message_ids, self._moved.get(id(row))
        )
        self._record(row, outcome)
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
        self._record(row, outcome)

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
        if failure.kind is FailureKind.UNREACHABLE:
            # Not the message's fault either: the bot pauses in this relay, the row goes back
            # keeping its place and its attempts (the retry policy says so).
            if self._reach is None:  # no pause holds the lane back: the row waits instead
                self._hand_back(row, self._retry.base_seconds)
                return
            self._total.deferred += 1
            self._reach.lost(failure.reason)
            self._reach.handed_back()
        if failure.kind is FailureKind.PAID_REFUSED:
            if not _paid(row):  # the words of a paid refusal for a free message: its own
                self._fail(row, dataclasses.replace(failure, kind=FailureKind.PERMANENT))
                return
            # The bot's paid lane stops (here at once, then for every relay); the row waits
            # for it, keeping its place and its attempts.
            self._flood.paid_refused(failure.reason)
        if failure.retry_after:
            # Flood control is per bot: every send of this bot waits, not only this row, and
            # so do the other relays (flood control tells them at once).
            self._flood.flooded(failure.retry_after, asyncio.get_running_loop().time())
        self._fail(row, failure)

    def _fail(self, row: queries.ClaimedRow, failure: Failure) -> None:
        now = asyncio.get_running_loop().time()
        self._apply(row, decide(self._retry, now, self._facts_of(row), failure))

    def _expired(self, row: queries.ClaimedRow) -> bool:
        """Its expiry came (before its claim, or while it waited): failed, never sent late.
        True if it did."""
        if row.expires_in is None:
            return False
        decision = expiry(asyncio.get_running_loop().time(), self._facts_of(row))
        if decision is not None:
            self._apply(row, decision)
        return decision is not None

    def _release(self, row: queries.ClaimedRow) -> None:
        """Back to the queue unsent, keeping its place in line (shutdown, rejected token)."""
        self._total.released += 1
        self._apply(row, hand_back(asyncio.get_running_loop().time(), self._facts_of(row)))

    def _hand_back(self, row: queries.ClaimedRow, delay: float) -> None:
        """Back to the queue without spending an attempt, due in ``delay`` seconds."""
        now = asyncio.get_running_loop().time()
        self._total.deferred += 1
        self.deferred_until = max(self.deferred_until, now + delay)
        self._apply(row, hand_back(now, self._facts_of(row), delay))

    def _keep_facts(self, row: queries.ClaimedRow, checked_at: float) -> None:
        # Only a row with an expiry has facts of its own; the others' are their attempts.
        if row.expires_in is not None:
            self._facts[id(row)] = RowFacts(row.attempts, checked_at + row.expires_in)

    def _facts_of(self, row: queries.ClaimedRow) -> RowFacts:
        return self._facts.get(id(row)) or RowFacts(row.attempts)

    def _apply(self, row: queries.ClaimedRow, decision: Decision) -> None:
        """Record the retry policy's decision for the row (and say it, if it failed)."""
        if decision.error is not None:
            about = _about(row)
            if decision.state is State.FAILED:
                self._total.failed += 1
                gone = "; its chat is recorded as blocked for the bot" if decision.chat_gone else ""
                log.warning(
                    "outbox %s failed for good: %s%s", row.id, decision.error, gone, extra=about
                )
            else:
                self._total.retried += 1
                # During a cut the bot's summary counts them (sends that were out when it
                # began): one line each would flood the log.
                quiet = self._reach is not None and self._reach.retried_in_cut()
                (log.debug if quiet else log.info)(
                    "outbox %s retry in %.1f s: %s",
                    row.id,
                    decision.delay_seconds or 0.0,
                    decision.error,
                    extra=about,
                )
        self._record(
            row,
            queries.Outcome.for_row(
                row,
                decision.state,
                delay_seconds=decision.delay_seconds,
                error=decision.error,
                error_code=decision.code,
                new_attempts=decision.attempts,
                chat_gone=decision.chat_gone,
                # A group that moved stays moved, whatever happened to the resend.
                new_chat_id=self._moved.get(id(row)),
            ),
        )

    def _record(self, row: queries.ClaimedRow, outcome: queries.Outcome) -> None:
        if self._spans and id(row) in self._spans:
            self._spans[id(row)].outcome = outcome  # the span ends once it is written
        self._completer.record(outcome)


def _paid(row: queries.ClaimedRow) -> bool:
    """Sent with allow_paid_broadcast: a row of the paid lane (as the claim reads it)."""
    return isinstance(row.payload, dict) and row.payload.get("allow_paid_broadcast") is True


def _about(row: queries.ClaimedRow, chat_id: object = None) -> dict[str, object]:
    """The fields of a log line about one message (JSON logs carry them as keys)."""
    if chat_id is None and isinstance(row.payload, dict):
        # A malformed payload may be any JSON value, not an object.
        chat_id = row.payload.get("chat_id")
    return {"outbox_id": row.id, "key": row.key, "chat_id": chat_id}
