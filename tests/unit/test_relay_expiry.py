"""The claim takes expired rows like any other (its ``expires_in`` <= 0 once expired): the send
pool ends them xato with FailureCode.EXPIRED, through the retry policy, without sending."""

from __future__ import annotations

import asyncio
from datetime import UTC, datetime

from outbox import queries
from outbox.relay.completer import Completer
from outbox.relay.store import Store
from outbox.relay.summary import RunSummary
from outbox.states import FailureCode, State
from outbox.telegram import NullSender, SentMessage
from tests.support import send_pool


class Counting(NullSender):
    def __init__(self) -> None:
        super().__init__()
        self.sent = 0

    async def send(self, args: object) -> SentMessage:
        self.sent += 1
        return await super().send(args)  # type: ignore[arg-type]


def _through_the_pool(
    expires_in: float | None, *, already_sent: bool = False
) -> tuple[int, list[queries.Outcome], RunSummary]:
    async def scenario() -> tuple[int, list[queries.Outcome], RunSummary]:
        stopping, total = asyncio.Event(), RunSummary()
        completer = Completer(
            Store("postgresql:///unused", "record", stopping),
            schema="public",
            flush_interval=1.0,
            grace_seconds=0,
            stopping=stopping,
            total=total,
        )
        sender = Counting()
        pool = send_pool(sender, completer, total)
        row = queries.ClaimedRow(
            7,
            "eslatma",
            "k7",
            {"chat_id": 5, "text": "x"},
            2,
            already_sent,
            datetime.now(UTC),
            expires_in=expires_in,
        )
        # The outcome is never written here: the worker would wait for it; the record is enough.
        task = asyncio.create_task(pool.process(row, asyncio.get_running_loop().time()))
        await asyncio.sleep(0.05)
        task.cancel()
        await asyncio.gather(task, return_exceptions=True)
        return sender.sent, list(completer._pending), total

    return asyncio.run(scenario())


def test_a_row_claimed_after_its_expiry_fails_without_being_sent() -> None:
    for expires_in in (0.0, -30.0):
        sent, [outcome], total = _through_the_pool(expires_in)
        assert sent == 0
        assert (outcome.state, outcome.error_code) == (State.FAILED, FailureCode.EXPIRED)
        assert outcome.new_attempts == 2  # the claim's attempt stands: fenced on it, as ever
        assert total.failed == 1


def test_a_row_not_yet_expired_or_without_expiry_is_sent() -> None:
    for expires_in in (30.0, None):
        sent, [outcome], _ = _through_the_pool(expires_in)
        assert (sent, outcome.state) == (1, State.DONE)


def test_an_expired_row_already_sent_is_done_not_failed() -> None:
    sent, [outcome], _ = _through_the_pool(-1.0, already_sent=True)
    assert (sent, outcome.state) == (0, State.DONE)
