"""Pauses kept in the database: a paused queue, bot, kind or batch is claimed by no relay,
across restarts, and its rows go out once when it is resumed. Relays run in this process
against the fake Bot API; a drain ends when nothing unpaused is left, so "nothing sent while
paused" is what a finished drain shows, not a sleep.

Here the db tier's tests (PostgreSQL, in the test's process); the others are in
``tests/e2e/test_pause.py``.
"""

from __future__ import annotations

import asyncio
import collections
from typing import Any

import sqlalchemy as sa

from outbox import enqueue
from outbox.broadcast import Scope, enqueue_many, pause, pauses, resume
from outbox.relay import RunSummary
from outbox.telegram import bot_id_of
from outbox_testing.fake_telegram import FakeTelegram
from tests.support import (
    TEST_TOKEN,
    backends,
    eventually,
    make_relay,
    states,
    text,
)

BOT = bot_id_of(TEST_TOKEN)


async def _drain(db_url: str, fake: FakeTelegram, **config: Any) -> RunSummary:
    async with make_relay(db_url, fake, **config) as relay:
        return await relay.run(drain=True)


def drain(db_url: str, fake: FakeTelegram, **config: Any) -> RunSummary:
    """One relay from start to a finished drain: each call is a relay restart."""
    return asyncio.run(_drain(db_url, fake, **config))


def holat(engine: sa.Engine, where: str) -> collections.Counter[str]:
    with engine.begin() as conn:
        found = conn.exec_driver_sql(f"SELECT holat FROM outbox WHERE {where}").scalars()
        return collections.Counter(found)


def delivered_once(fake: FakeTelegram) -> collections.Counter[str]:
    texts = collections.Counter(d.text for d in fake.delivered)
    assert set(texts.values()) <= {1}, f"sent twice: {texts.most_common(3)}"
    return texts


def test_a_paused_queue_is_not_sent_across_restarts_and_is_sent_once_on_resume(
    engine: sa.Engine, db_url: str, fake_telegram: FakeTelegram
) -> None:
    with engine.begin() as conn:
        for n in range(6):
            enqueue(conn, key=f"held{n}", payload=text(100 + n), queue="promo")
            enqueue(conn, key=f"free{n}", payload=text(200 + n))
        assert pause(conn, Scope.QUEUE, "promo")
        assert not pause(conn, Scope.QUEUE, "promo")  # twice is once
    queues = ("default", "promo")
    for _ in range(2):  # a second relay, as after a restart, obeys it too
        drain(db_url, fake_telegram, queues=queues, batch_size=2)
        assert holat(engine, "navbat = 'promo'") == {"kutmoqda": 6}
    assert holat(engine, "navbat = 'default'") == {"bajarildi": 6}
    with engine.begin() as conn:
        assert resume(conn, Scope.QUEUE, "promo")
        assert not resume(conn, Scope.QUEUE, "promo")
        assert pauses(conn) == []
    summary = drain(db_url, fake_telegram, queues=queues)
    assert summary.sent == 6
    assert states(engine)["bajarildi"] == 12
    assert len(delivered_once(fake_telegram)) == 12


def test_a_paused_bot_sends_nothing_until_resumed(
    engine: sa.Engine, db_url: str, fake_telegram: FakeTelegram
) -> None:
    with engine.begin() as conn:
        for n in range(5):
            enqueue(conn, key=f"k{n}", payload=text(300 + n))
        pause(conn, Scope.BOT, BOT)
        pause(conn, Scope.BOT, "some-other-bot")
    for _ in range(2):
        assert drain(db_url, fake_telegram).sent == 0
    assert fake_telegram.delivered == []
    with engine.begin() as conn:
        resume(conn, Scope.BOT, BOT)
    assert drain(db_url, fake_telegram).sent == 5  # the other bot's pause is not this one's
    assert len(delivered_once(fake_telegram)) == 5


def test_a_paused_batch_never_fills_a_claim_nor_holds_back_the_queue(
    engine: sa.Engine, db_url: str, fake_telegram: FakeTelegram
) -> None:
    # The batch's rows come first in the claim's order and outnumber a claim many times over:
    # filtered after the LIMIT, they would fill every claim and the others would never go.
    with engine.begin() as conn:
        pause(conn, Scope.BATCH, "campaign-7")
        enqueue_many(conn, [(f"c{n}", text(1000 + n)) for n in range(40)], batch="campaign-7")
        enqueue_many(conn, [(f"o{n}", text(2000 + n)) for n in range(4)], batch="other")
        for n in range(3):
            enqueue(conn, key=f"plain{n}", payload=text(3000 + n))
        # A paused suspect (a row claimed alone next time) does not stop the queue either.
        conn.exec_driver_sql("UPDATE outbox SET yakka = true WHERE kalit = 'c0'")
    for _ in range(2):
        drain(db_url, fake_telegram, batch_size=4)
        assert holat(engine, "partiya = 'campaign-7'") == {"kutmoqda": 40}
    assert holat(engine, "partiya IS DISTINCT FROM 'campaign-7'") == {"bajarildi": 7}
    with engine.begin() as conn:
        resume(conn, Scope.BATCH, "campaign-7")
    drain(db_url, fake_telegram, batch_size=16)
    assert holat(engine, "true") == {"bajarildi": 47}
    assert len(delivered_once(fake_telegram)) == 47


def test_a_paused_kind_waits_while_other_kinds_go(
    engine: sa.Engine, db_url: str, fake_telegram: FakeTelegram
) -> None:
    with engine.begin() as conn:
        pause(conn, Scope.KIND, "reklama")
        for n in range(5):
            enqueue(conn, key=f"ad{n}", payload=text(400 + n), kind="reklama")
        enqueue(conn, key="reminder", payload=text(500))
    drain(db_url, fake_telegram, batch_size=2)
    assert holat(engine, "tur = 'reklama'") == {"kutmoqda": 5}
    assert holat(engine, "tur = 'eslatma'") == {"bajarildi": 1}
    with engine.begin() as conn:
        resume(conn, Scope.KIND, "reklama")
    drain(db_url, fake_telegram)
    assert len(delivered_once(fake_telegram)) == 6


def test_resume_wakes_an_idle_relay_before_its_poll(
    engine: sa.Engine, db_url: str, fake_telegram: FakeTelegram
) -> None:
    with engine.begin() as conn:
        pause(conn, Scope.QUEUE, "default")
        enqueue(conn, key="held", payload=text(600))

    def asleep() -> bool:
        # Listening, and the claimer's last question (when is work due?) is half a second old:
        # whatever woke it at start has passed, and only a NOTIFY or the poll wakes it now.
        listening = backends(engine, "state = 'idle' AND starts_with(query, 'LISTEN')")
        idle = backends(
            engine,
            "state = 'idle' AND strpos(query, 'CROSS JOIN LATERAL') > 0 "
            "AND query_start < now() - interval '0.5 s'",
        )
        return bool(listening and idle)

    async def scenario() -> None:
        # A poll of an hour: only the resume's NOTIFY can wake this relay in time.
        async with make_relay(db_url, fake_telegram, poll_interval=3600.0) as relay:
            runner = asyncio.create_task(relay.run())
            await eventually(asleep, 20, "the relay to sleep")
            with engine.begin() as conn:
                resume(conn, Scope.QUEUE, "default")
            await eventually(lambda: states(engine)["bajarildi"] == 1, 20, "the resumed row")
            relay.stop()
            await runner

    asyncio.run(scenario())
    assert len(delivered_once(fake_telegram)) == 1
