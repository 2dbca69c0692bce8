"""The relay's services through their own public methods, against a real PostgreSQL."""

from __future__ import annotations

import asyncio

import psycopg
import sqlalchemy as sa

from outbox import enqueue, queries
from outbox.relay import RunSummary
from outbox.states import State
from tests.support import outcome_writer, row


def test_the_completer_writes_a_batch_in_one_go_and_counts_what_the_fence_kept_out(
    engine: sa.Engine, db_url: str
) -> None:
    with engine.begin() as conn:
        for key in ("sent", "retry", "reaped"):
            enqueue(conn, key=key, payload={"chat_id": 1, "text": key})

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
