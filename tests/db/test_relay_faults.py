"""Faults of the relay's hot path, each reproduced: reconnects, shutdown, lost and refused
writes, a dead writer, a cut-off claim check, a lease shorter than a send, start-up patience,
and a schema from another version.

Here the db tier's tests (PostgreSQL, in the test's process); the others are in
``tests/e2e/test_relay_faults.py``.
"""

from __future__ import annotations

import asyncio
from typing import Any

import psycopg
import pytest
import sqlalchemy as sa

from outbox import enqueue, queries
from outbox.errors import OutboxError
from outbox.ratelimit import RateLimits
from outbox.relay import RunSummary
from outbox.relay.store import Store
from outbox.states import State
from outbox_testing.fake_telegram import FakeTelegram
from tests.support import (
    backends,
    make_relay,
    outcome_writer,
    row,
    states,
    text,
)

# --- 1. reconnect stampede ---------------------------------------------------------------------


async def _this_connection(conn: psycopg.AsyncConnection[Any]) -> psycopg.AsyncConnection[Any]:
    await conn.execute("SELECT 1")
    return conn


def test_a_lost_connection_is_opened_again_once_however_many_tasks_need_it(
    engine: sa.Engine, db_url: str
) -> None:
    """After a failover every send waiting to check its claim needs the connection at once:
    one new connection serves them all (before the fix: 21 tasks opened 21 connections)."""

    async def scenario() -> list[psycopg.AsyncConnection[Any]]:
        store = Store(db_url, "claim", asyncio.Event())
        first = await store.run(_this_connection)
        with engine.begin() as conn:  # the server drops the relay's connection
            conn.exec_driver_sql(f"SELECT pg_terminate_backend({first.info.backend_pid})")
        try:
            used = await asyncio.gather(
                *(store.run(_this_connection, retry=True) for _ in range(21))
            )
            assert len(backends(engine, "true")) == 1, backends(engine, "true")
            assert store.connects == 2
            return used
        finally:
            await store.close()

    used = asyncio.run(scenario())
    assert len({id(conn) for conn in used}) == 1


# --- 3. a rejected batch, then a lost connection -----------------------------------------------

# 'bad' is refused as data; 'drop' loses the connection once, after 'bad' was refused.
_TRIPWIRE = """
CREATE SEQUENCE refused;
CREATE SEQUENCE dropped;
CREATE FUNCTION tripwire() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    IF NEW.kalit = 'bad' THEN
        PERFORM nextval('refused');
        RAISE EXCEPTION 'refused as data';
    END IF;
    IF NEW.kalit = 'drop' AND (SELECT is_called FROM refused) THEN
        IF nextval('dropped') = 1 THEN
            PERFORM pg_terminate_backend(pg_backend_pid());
        END IF;
    END IF;
    RETURN NEW;
END $$;
CREATE TRIGGER tripwire BEFORE UPDATE ON outbox FOR EACH ROW EXECUTE FUNCTION tripwire();
"""


def test_a_connection_lost_while_writing_one_by_one_keeps_the_rest_for_later(
    engine: sa.Engine, db_url: str
) -> None:
    with engine.begin() as conn:
        # Three chats: one claim takes all three (a chat's messages go one after the other).
        for chat, key in enumerate(("bad", "drop", "other"), 1):
            enqueue(conn, key=key, payload=text(chat))

    async def scenario() -> RunSummary:
        completer, connection, total = outcome_writer(db_url)
        async with await psycopg.AsyncConnection.connect(db_url, autocommit=True) as claimer:
            claimed = {r.key: r for r in await queries.claim_due(claimer, 3, schema="public")}
            await claimer.execute(_TRIPWIRE)
        completer.record(queries.Outcome.for_row(claimed["bad"], State.FAILED, error="x"))
        for n, key in enumerate(("drop", "other"), start=1):
            completer.record(
                queries.Outcome.for_row(claimed[key], State.DONE, key=key, chat_id=1, message_id=n)
            )
        try:
            await completer.write_pending()
        finally:
            await connection.close()
        assert completer.unwritten == 0
        return total

    total = asyncio.run(scenario())
    assert row(engine, "bad")["holat"] == "bajarilmoqda"  # left to the reaper, as before
    for key in ("drop", "other"):
        written = row(engine, key)
        assert (written["holat"], written["marker_message"] is not None) == ("bajarildi", True)
    assert total.fenced_out == 0


# --- 4. a writer that dies ---------------------------------------------------------------------


def test_a_relay_whose_writer_dies_stops_sending_and_says_so(
    engine: sa.Engine, db_url: str, fake_telegram: FakeTelegram, monkeypatch: pytest.MonkeyPatch
) -> None:
    with engine.begin() as conn:
        for chat in range(900, 920):
            enqueue(conn, key=f"w{chat}", payload=text(chat))

    async def broken(*_args: object, **_kwargs: object) -> int:
        raise RuntimeError("a bug in the writer")

    monkeypatch.setattr(queries, "record_outcomes", broken)

    async def scenario() -> None:
        async with make_relay(db_url, fake_telegram, concurrency=2, batch_size=2) as relay:
            with pytest.raises(OutboxError, match="writing outcomes failed"):
                await asyncio.wait_for(relay.run(drain=True), 20)

    asyncio.run(scenario())
    # Sends stop with the writer: at most the two in flight went out without their markers.
    assert len(fake_telegram.delivered) <= 2
    assert states(engine)["bajarildi"] == 0


# --- 5. cut off while checking its claim -------------------------------------------------------


def test_a_row_cut_off_while_its_claim_is_checked_spends_no_attempt(
    engine: sa.Engine, db_url: str, fake_telegram: FakeTelegram, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The grace runs out while a row that waited for its send slot asks the database whether
    it is still claimed: nothing was sent, so it goes back untouched, not as 'may have been
    delivered' with an attempt spent."""
    with engine.begin() as conn:
        enqueue(conn, key="first", payload=text(5))
    with engine.begin() as conn:
        enqueue(conn, key="second", payload=text(5))  # its slot is a second after the first
    checking = asyncio.Event()

    async def hangs(*_args: object, **_kwargs: object) -> bool:
        checking.set()
        await asyncio.Event().wait()  # a check that never answers (a lock, a slow server)
        return True

    monkeypatch.setattr(queries, "still_claimed", hangs)

    async def scenario() -> None:
        limits = RateLimits(per_bot=1.0, per_chat=0)  # both claimed, slots a second apart
        async with make_relay(db_url, fake_telegram, rate_limits=limits, grace_seconds=0.2) as r:
            runner = asyncio.create_task(r.run())
            await asyncio.wait_for(checking.wait(), 10)
            r.stop()
            await asyncio.wait_for(runner, 10)

    asyncio.run(scenario())
    assert [d.chat_id for d in fake_telegram.delivered] == [5]
    second = row(engine, "second")
    assert (second["holat"], second["urinish"], second["oxirgi_xato"]) == ("kutmoqda", 0, None)
