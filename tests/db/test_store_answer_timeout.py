"""A statement the database never answers (a hung pooler, a commit waiting for a synchronous
standby that is gone) is bounded by the relay's own clock: the store cuts the connection,
says why, and the next step runs on a fresh connection. A claim cut off mid-transaction lets
go of its locks soon, and the rows of a claim whose answer was lost go back at once. Here the
server is made to sit on a statement (``pg_sleep``); ``tests/e2e/test_network_cut.py`` cuts a
real link.
"""

from __future__ import annotations

import asyncio
import time
from typing import Any

import psycopg
import pytest
import sqlalchemy as sa

from outbox import queries
from outbox.db import async_connect
from outbox.queries.claim import CLAIM_IDLE_LIMIT_MS
from outbox.relay.store import DatabaseLost, Store
from outbox.schema import DEFAULT_BOT
from tests.support import enqueue_numbered


async def _sleep(conn: psycopg.AsyncConnection[Any]) -> None:
    await conn.execute("SELECT pg_sleep(30)")


async def _pid(conn: psycopg.AsyncConnection[Any]) -> int:
    found = await (await conn.execute("SELECT pg_backend_pid()")).fetchone()
    assert found is not None
    return int(found[0])


def test_a_step_without_an_answer_loses_its_connection_within_the_timeout(
    db_url: str, caplog: pytest.LogCaptureFixture
) -> None:
    async def scenario() -> tuple[float, int, int]:
        store = Store(db_url, "claim", asyncio.Event(), answer_timeout=0.5)
        try:
            first = await store.run(_pid)
            started = time.monotonic()
            with pytest.raises(DatabaseLost, match=r"no answer from the database for 0\.5 s"):
                await store.run(_sleep)
            took = time.monotonic() - started
            return took, first, await store.run(_pid, retry=True)
        finally:
            await store.close()

    took, first, second = asyncio.run(scenario())
    assert took < 3.0  # the timeout, not the statement's 30 s (nor a cancel request's wait)
    assert second != first  # a fresh connection
    said = [r.getMessage() for r in caplog.records if r.name == "outbox.relay"]
    assert any("no answer from the database" in line for line in said), said
    assert not [r for r in caplog.records if r.name == "psycopg"]  # no cancel dance


def test_a_long_step_that_reports_progress_is_not_cut(db_url: str) -> None:
    async def scenario() -> int:
        store = Store(db_url, "maintenance", asyncio.Event(), answer_timeout=0.5)

        async def batches(conn: psycopg.AsyncConnection[Any]) -> int:
            for _ in range(4):  # 1.2 s in all, never 0.5 s without progress
                await conn.execute("SELECT pg_sleep(0.3)")
                store.answered()
            return 4

        try:
            return await store.run(batches)
        finally:
            await store.close()

    assert asyncio.run(scenario()) == 4


def test_a_step_that_waits_for_notifications_is_not_bounded(db_url: str) -> None:
    async def scenario() -> None:
        store = Store(db_url, "listen", asyncio.Event(), answer_timeout=0.2)
        try:
            await store.run(lambda conn: conn.execute("SELECT pg_sleep(0.6)"), bounded=False)
        finally:
            await store.close()

    asyncio.run(scenario())


def test_a_claim_left_idle_mid_transaction_is_ended_by_the_server(db_url: str) -> None:
    """Its lock on the bot's budget row would hold back every later claim of the bot until
    the server's TCP gave up on a client behind a silent link."""

    async def scenario() -> str:
        conn = await async_connect(db_url)
        try:
            await queries.ensure_bot(conn, DEFAULT_BOT, schema="public")
            async with conn.transaction():
                await queries.claim_due(conn, 5, schema="public")
                found = await (
                    await conn.execute("SHOW idle_in_transaction_session_timeout")
                ).fetchone()
            assert isinstance(found, tuple)
            return str(found[0])
        finally:
            await conn.close()

    assert asyncio.run(scenario()) == f"{CLAIM_IDLE_LIMIT_MS // 1000}s"


def test_rows_of_a_claim_whose_answer_was_lost_go_back_at_once(
    db_url: str, engine: sa.Engine
) -> None:
    """The link went silent after the claim's commit: the relay never heard of its rows. Its
    next claim hands them back (keeping their place, no attempt counted), not the reaper after
    the lease; the rows it does hold stay its own."""
    enqueue_numbered(engine, 3, first_chat=700)

    async def scenario() -> tuple[list[int], int]:
        conn = await async_connect(db_url)
        try:
            await queries.ensure_bot(conn, DEFAULT_BOT, schema="public")
            claimed = await queries.claim_due(conn, 3, schema="public")
            ids = sorted(r.id for r in claimed)
            released = await queries.release_unheard_claims(
                conn, schema="public", holder=queries.claim_holder(), held=ids[:1]
            )
            return ids, released
        finally:
            await conn.close()

    ids, released = asyncio.run(scenario())
    assert released == 2
    with engine.begin() as conn:
        found = conn.exec_driver_sql(
            "SELECT id, holat, urinish, egasi FROM outbox ORDER BY id"
        ).all()
    assert [(r.id, r.holat, r.urinish, r.egasi is None) for r in found] == [
        (ids[0], "bajarilmoqda", 1, False),
        (ids[1], "kutmoqda", 0, True),
        (ids[2], "kutmoqda", 0, True),
    ]
