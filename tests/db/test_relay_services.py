"""The relay's services through their own public methods, against a real PostgreSQL."""

from __future__ import annotations

import asyncio
from collections.abc import Mapping
from typing import Any

import psycopg
import pytest
import sqlalchemy as sa

from outbox import enqueue, queries
from outbox.relay import RunSummary
from outbox.states import State
from outbox.telegram import NullSender, SentMessage
from tests.support import outcome_writer, row, send_pool


def test_the_completer_writes_a_batch_in_one_go_and_counts_what_the_fence_kept_out(
    engine: sa.Engine, db_url: str
) -> None:
    with engine.begin() as conn:
        # Three chats: one claim takes all three (a chat's messages go one after the other).
        for chat, key in enumerate(("sent", "retry", "reaped"), 1):
            enqueue(conn, key=key, payload={"chat_id": chat, "text": key})

    async def scenario() -> tuple[RunSummary, list[int]]:
        completer, connection, total = outcome_writer(db_url)
        async with await psycopg.AsyncConnection.connect(db_url, autocommit=True) as claimer:
            claimed = {r.key: r for r in await queries.claim_due(claimer, 3, schema="public")}
            # The reaper took one claim back meanwhile: its outcome must not be written.
            await claimer.execute("UPDATE outbox SET holat = 'kutmoqda' WHERE kalit = 'reaped'")
        writer = asyncio.create_task(completer.run())
        sent = queries.Outcome.for_row(
            claimed["sent"], State.DONE, key="sent", chat_id=1, message_id=7
        )
        completer.record(sent)
        completer.record(queries.Outcome.for_row(claimed["retry"], State.PENDING, error="x"))
        completer.record(queries.Outcome.for_row(claimed["reaped"], State.DONE))
        progress = [completer.unwritten]
        await asyncio.wait_for(completer.until_written(), 10)
        progress.append(completer.unwritten)
        completer.stop()
        await writer
        await connection.close()
        return total, progress

    total, progress = asyncio.run(scenario())
    assert progress == [3, 0]
    assert total.fenced_out == 1
    assert (row(engine, "sent")["holat"], row(engine, "sent")["marker_message"]) == (
        "bajarildi",
        7,
    )
    assert row(engine, "retry")["holat"] == "kutmoqda"
    assert row(engine, "reaped")["holat"] == "kutmoqda"  # untouched by the discarded outcome


class Recording(NullSender):
    """Takes every message at once, and keeps what it took."""

    def __init__(self) -> None:
        super().__init__()
        self.sent: list[object] = []

    async def send(self, args: Mapping[str, Any]) -> SentMessage:
        self.sent.append(args["text"])
        return await super().send(args)


def test_a_bug_after_telegram_took_a_message_records_it_delivered_before_the_slot_is_freed(
    engine: sa.Engine, db_url: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Before: recorded as an ordinary transient failure (the retry sent it again), and its
    send slot went to the next row before that outcome was written."""
    with engine.begin() as conn:
        for chat, key in enumerate(("first", "second")):
            enqueue(conn, key=key, payload={"chat_id": chat + 1, "text": key})
    sender = Recording()
    unwritten_at_start: list[int] = []  # outcomes not yet written as each row got its slot

    async def scenario() -> None:
        completer, store, total = outcome_writer(db_url)
        writer = asyncio.create_task(completer.run())
        async with await psycopg.AsyncConnection.connect(db_url, autocommit=True) as claimer:
            claimed = await queries.claim_due(claimer, 2, schema="public")
        pool = send_pool(sender, completer, total)
        deliver, mark_sent = pool._deliver, pool._mark_sent
        bugs = iter(["first"])

        async def watched(row: queries.ClaimedRow, checked_at: float) -> None:
            unwritten_at_start.append(completer.unwritten)
            await deliver(row, checked_at)

        def buggy(row: queries.ClaimedRow, sent: SentMessage) -> None:
            if row.key == next(bugs, None):
                raise RuntimeError("a bug between Telegram's answer and the outcome")
            mark_sent(row, sent)

        monkeypatch.setattr(pool, "_deliver", watched)
        monkeypatch.setattr(pool, "_mark_sent", buggy)
        pool.start(claimed, asyncio.get_running_loop().time())
        await pool.finish(10.0, asyncio.Event())
        completer.stop()
        await writer
        await store.close()

    asyncio.run(scenario())
    assert sender.sent == ["first", "second"]
    first = row(engine, "first")
    assert (first["holat"], first["urinish"]) == ("bajarildi", 1), first
    assert first["marker_message"] is not None  # a replay refuses it: no second send
    assert row(engine, "second")["holat"] == "bajarildi"
    assert unwritten_at_start == [0, 0]
