"""A fleet of relays: Telegram's limits and flood pause shared through PostgreSQL, queues per
bot. Relays are real processes; Telegram is the fake Bot API, enforcing its limits where said.

Here the db tier's tests (PostgreSQL, in the test's process); the others are in
``tests/e2e/test_fleet.py``.
"""

from __future__ import annotations

import asyncio

import psycopg
import sqlalchemy as sa

from outbox import enqueue
from outbox.classify import MAX_FLOOD_PAUSE
from outbox.queries import bots_timing, claim_due
from outbox.telegram import bot_id_of
from tests.support import (
    TEST_TOKEN,
    text,
)

BOT = bot_id_of(TEST_TOKEN)  # the key of the test bot's shared limits and pause


def test_a_pause_read_from_the_bots_state_is_capped(engine: sa.Engine, db_url: str) -> None:
    with engine.begin() as conn:
        conn.execute(
            sa.text(
                "INSERT INTO bot_holati (bot, pauza_tugashi) "
                "VALUES (:bot, now() + interval '1 year')"
            ),
            {"bot": BOT},
        )

    async def read() -> float:
        async with await psycopg.AsyncConnection.connect(db_url, autocommit=True) as conn:
            timing = await bots_timing(conn, [BOT], ["default"], schema="public", horizon=1.0)
            return timing[BOT].paused

    assert asyncio.run(read()) == MAX_FLOOD_PAUSE


def test_a_row_due_at_its_writers_now_is_due_for_a_timing_that_began_before(
    engine: sa.Engine, db_url: str
) -> None:
    # A retry's time is its write's now(); a timing statement's own now() is read before the
    # statement is planned, so a write that commits in between is newer than that now(). Here
    # the gap is made wide: the timing runs in a transaction that began before the write.
    async def read() -> tuple[float | None, bool]:
        async with await psycopg.AsyncConnection.connect(db_url) as conn:
            await conn.execute("SELECT now()")  # the transaction, and its now(), begin here
            await asyncio.sleep(0.2)
            with engine.begin() as other:
                enqueue(other, key="written-later", payload=text(7))
            timing = await bots_timing(
                conn, [BOT], ["default"], schema="public", horizon=1.0, unnamed=[True]
            )
            return timing[BOT].next_due, timing[BOT].due_now

    next_due, due_now = asyncio.run(read())
    assert next_due is not None and next_due <= 0 and due_now


def test_the_lessons_plain_insert_lands_in_the_default_queue(engine: sa.Engine) -> None:
    with engine.begin() as conn:
        conn.execute(
            sa.text('INSERT INTO outbox (payload) VALUES (\'{"chat_id": 1, "text": "a"}\')')
        )
        assert conn.execute(sa.text("SELECT navbat FROM outbox")).scalar_one() == "default"


def test_the_reaper_forgets_chats_idle_for_a_minute(engine: sa.Engine, db_url: str) -> None:
    from outbox.relay.maintenance import Reaper

    with engine.begin() as conn:
        conn.execute(
            sa.text(
                "INSERT INTO chat_navbati (bot, chat, keyingi) VALUES "
                "('1', '1', now() - interval '2 minutes'), ('1', '2', now())"
            )
        )

    async def reap() -> None:
        async with await psycopg.AsyncConnection.connect(db_url, autocommit=True) as conn:
            await Reaper(schema="public", lease_seconds=300, max_attempts=3).run_once(conn)

    asyncio.run(reap())
    with engine.connect() as conn:
        left = conn.execute(sa.text("SELECT chat FROM chat_navbati")).scalars().all()
    assert left == ["2"]


def test_a_suspect_row_of_one_queue_does_not_hold_up_another(
    engine: sa.Engine, db_url: str
) -> None:
    with engine.begin() as conn:
        enqueue(conn, key="suspect", payload=text(9500), queue="bot2")
        conn.execute(sa.text("UPDATE outbox SET yakka = true WHERE kalit = 'suspect'"))
        enqueue(conn, key="mine", payload=text(9501), queue="bot1")

    async def claim() -> list[str]:
        async with await psycopg.AsyncConnection.connect(db_url, autocommit=True) as conn:
            return [r.key for r in await claim_due(conn, 10, schema="public", queue="bot1")]

    # A relay of bot1 cannot take bot2's suspect, so it must not wait for it either.
    assert asyncio.run(claim()) == ["mine"]
