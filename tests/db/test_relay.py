"""The whole path against a real PostgreSQL and the fake Bot API over real HTTP."""

from __future__ import annotations

import asyncio
import itertools
import time
from datetime import UTC, datetime, timedelta

import sqlalchemy as sa

from outbox import State, enqueue
from outbox.ratelimit import RateLimits
from outbox.relay import RunSummary
from outbox_testing.fake_telegram import FakeTelegram
from tests.support import (
    add_rows_for_retention,
    backends,
    eventually,
    make_relay,
    rows_and_markers,
    states,
)


async def drain(db_url: str, fake: FakeTelegram, **config: object) -> RunSummary:
    async with make_relay(db_url, fake, **config) as relay:
        return await relay.run(drain=True)


def test_enqueue_commits_and_rolls_back_with_the_caller(engine: sa.Engine) -> None:
    with engine.connect() as conn:
        with conn.begin():
            enqueue(conn, key="kept", payload={"chat_id": 1, "text": "a"})
        trans = conn.begin()
        enqueue(conn, key="dropped", payload={"chat_id": 1, "text": "b"})
        trans.rollback()
        keys = conn.exec_driver_sql("SELECT kalit FROM outbox").scalars().all()
    assert keys == ["kept"]


def test_enqueue_twice_with_one_key_gives_one_row(engine: sa.Engine) -> None:
    with engine.begin() as conn:
        first = enqueue(conn, key="same", payload={"chat_id": 1, "text": "a"})
        second = enqueue(conn, key="same", payload={"chat_id": 1, "text": "other"})
    with engine.begin() as conn:
        second_tx = enqueue(conn, key="same", payload={"chat_id": 1, "text": "third"})
    assert first.created and not second.created and not second_tx.created
    assert first.id == second.id == second_tx.id
    assert states(engine)["kutmoqda"] == 1


def test_relay_sends_and_marks_done(
    engine: sa.Engine, db_url: str, fake_telegram: FakeTelegram
) -> None:
    with engine.begin() as conn:
        for i in range(5):
            enqueue(conn, key=f"k{i}", payload={"chat_id": 100 + i, "text": f"salom {i}"})
    summary = asyncio.run(drain(db_url, fake_telegram))
    assert summary.sent == 5
    assert sorted((d.chat_id, d.text) for d in fake_telegram.delivered) == [
        (100 + i, f"salom {i}") for i in range(5)
    ]
    assert states(engine) == {"kutmoqda": 0, "bajarilmoqda": 0, "bajarildi": 5, "xato": 0}
    with engine.begin() as conn:
        markers = conn.exec_driver_sql(
            "SELECT y.kalit, y.chat_id, y.message_id FROM yuborilgan y ORDER BY kalit"
        ).all()
    assert [m[0] for m in markers] == [f"k{i}" for i in range(5)]
    assert all(m[2] > 0 for m in markers)


def test_key_with_a_sent_marker_is_completed_without_sending(
    engine: sa.Engine, db_url: str, fake_telegram: FakeTelegram
) -> None:
    with engine.begin() as conn:
        enqueue(conn, key="sent-before", payload={"chat_id": 7, "text": "once"})
        enqueue(conn, key="fresh", payload={"chat_id": 8, "text": "new"})
        conn.exec_driver_sql(
            "INSERT INTO yuborilgan (kalit, chat_id, message_id) VALUES ('sent-before', 7, 99)"
        )
    summary = asyncio.run(drain(db_url, fake_telegram))
    assert (summary.sent, summary.already_sent) == (1, 1)
    assert [d.chat_id for d in fake_telegram.delivered] == [8]
    assert states(engine)["bajarildi"] == 2


def test_eight_relays_deliver_two_thousand_rows_exactly_once(
    engine: sa.Engine, db_url: str, fake_telegram: FakeTelegram
) -> None:
    n = 2000
    with engine.begin() as conn:
        conn.exec_driver_sql(
            "INSERT INTO outbox (kalit, payload) "
            "SELECT 'm' || i, jsonb_build_object('chat_id', i, 'text', 'xabar ' || i) "
            "FROM generate_series(1, %(n)s) AS i",
            {"n": n},
        )

    async def eight() -> list[RunSummary]:
        relays = [
            make_relay(db_url, fake_telegram, batch_size=16, concurrency=16) for _ in range(8)
        ]
        for relay in relays:
            await relay.open()
        try:
            return await asyncio.gather(*(r.run(drain=True) for r in relays))
        finally:
            for relay in relays:
                await relay.close()

    summaries = asyncio.run(eight())
    delivered = [d.chat_id for d in fake_telegram.delivered]
    assert len(delivered) == n
    assert sorted(delivered) == list(range(1, n + 1))
    assert sum(s.sent for s in summaries) == n
    assert sum(1 for s in summaries if s.sent > 0) > 1, "the work was not shared"
    assert states(engine) == {"kutmoqda": 0, "bajarilmoqda": 0, "bajarildi": n, "xato": 0}


def test_future_row_waits_for_its_time_then_goes_within_a_second(
    engine: sa.Engine, db_url: str, fake_telegram: FakeTelegram
) -> None:
    async def scenario() -> tuple[float, float]:
        async with make_relay(db_url, fake_telegram) as relay:
            runner = asyncio.create_task(relay.run())
            await asyncio.sleep(0.3)  # the relay is idle and listening
            with engine.begin() as conn:
                due = datetime.now(UTC) + timedelta(seconds=1.5)
                enqueue(conn, key="later", payload={"chat_id": 5, "text": "vaqt"}, run_at=due)
            due_wall = due.timestamp()
            deadline = time.monotonic() + 5
            while not fake_telegram.delivered and time.monotonic() < deadline:
                await asyncio.sleep(0.01)
            relay.stop()
            await runner
        return due_wall, fake_telegram.delivered[0].wall

    due_wall, sent_wall = asyncio.run(scenario())
    assert sent_wall >= due_wall - 0.05, "sent before its time"
    assert sent_wall - due_wall < 1.0, f"sent {sent_wall - due_wall:.3f}s late"
    assert states(engine)[State.DONE] == 1


def test_relay_refuses_a_database_without_schema(
    empty_db_url: str, fake_telegram: FakeTelegram
) -> None:
    from outbox.errors import SchemaMissing

    async def scenario() -> None:
        async with make_relay(empty_db_url, fake_telegram):
            pass

    try:
        asyncio.run(scenario())
    except SchemaMissing as err:
        assert "outbox migrate" in str(err)
    else:
        raise AssertionError("expected SchemaMissing")


def test_relay_maintenance_applies_retention(
    engine: sa.Engine, db_url: str, fake_telegram: FakeTelegram
) -> None:
    add_rows_for_retention(engine)

    def kept() -> tuple[list[str], list[str]]:
        return rows_and_markers(engine)

    async def scenario() -> None:
        async with make_relay(db_url, fake_telegram) as relay:
            runner = asyncio.create_task(relay.run())
            # The first maintenance round runs at start; the old marker goes last.
            await eventually(lambda: kept()[1] == ["recent"], 10, "retention to run")
            relay.stop()
            await runner

    asyncio.run(scenario())
    rows, markers = kept()
    assert rows == ["failed-long-ago", "recent"]  # xato rows are never pruned
    assert markers == ["recent"]


def test_payload_that_is_not_an_object_fails_at_once(
    engine: sa.Engine, db_url: str, fake_telegram: FakeTelegram
) -> None:
    # The table refuses such rows since outbox_0002; the relay must not strand one all the
    # same (a table whose constraint was dropped, or rows written before the migration).
    with engine.begin() as conn:
        conn.exec_driver_sql("DROP TRIGGER outbox_row_checks ON outbox")  # outbox_0013
        conn.exec_driver_sql(
            "INSERT INTO outbox (kalit, payload) VALUES ('list', '[1, 2]'), ('number', '42')"
        )
    summary = asyncio.run(drain(db_url, fake_telegram))
    assert summary.failed == 2
    assert [r.method for r in fake_telegram.requests] == ["getMe"]  # no sendMessage
    with engine.begin() as conn:
        rows = conn.exec_driver_sql("SELECT holat, urinish, oxirgi_xato FROM outbox").all()
    assert all(state == "xato" and attempts == 1 for state, attempts, _ in rows)
    assert all("JSON object" in error for *_, error in rows)


def test_row_cancelled_while_waiting_for_a_send_slot_is_not_sent(
    engine: sa.Engine, db_url: str, fake_telegram: FakeTelegram
) -> None:
    from outbox import cancel
    from outbox_testing.fake_telegram import Fault

    fake_telegram.script(1, Fault.slow(1.0))  # the first send holds the only slot for a second
    with engine.begin() as conn:
        enqueue(conn, key="first", payload={"chat_id": 1, "text": "birinchi"})
    with engine.begin() as conn:
        enqueue(conn, key="second", payload={"chat_id": 2, "text": "ikkinchi"})

    async def scenario() -> RunSummary:
        async with make_relay(db_url, fake_telegram, concurrency=1) as relay:
            # One batch: both rows are claimed, and the second waits for the only slot.
            runner = asyncio.create_task(relay.run_once())
            await eventually(lambda: fake_telegram.delivered_to(1), 10, "the first send")
            with engine.begin() as conn:
                assert cancel(conn, ["second"]) == 1
            return await runner

    summary = asyncio.run(scenario())
    assert [d.chat_id for d in fake_telegram.delivered] == [1]
    assert (summary.claimed, summary.sent, summary.cancelled) == (2, 1, 1)


def test_stalled_sends_leave_the_other_rows_to_other_relays(
    engine: sa.Engine, db_url: str, fake_telegram: FakeTelegram
) -> None:
    from outbox_testing.fake_telegram import Fault

    fake_telegram.script(1, Fault.slow(1.5))
    with engine.begin() as conn:
        enqueue(conn, key="slow", payload={"chat_id": 1, "text": "sekin"})
        for chat in range(2, 7):
            enqueue(conn, key=f"later{chat}", payload={"chat_id": chat, "text": "keyin"})

    async def scenario() -> tuple[dict[str, int], RunSummary]:
        async with make_relay(db_url, fake_telegram, concurrency=1) as relay:
            runner = asyncio.create_task(relay.run(drain=True))
            # The only slot is busy until the slow answer comes (1.5 s after the request):
            # look at the table throughout that time.
            arrived = await eventually(lambda: fake_telegram.delivered_to(1), 10, "the send")
            seen = [states(engine)]
            while time.monotonic() < arrived[0].at + 1.2:
                seen.append(await asyncio.to_thread(states, engine))
                await asyncio.sleep(0.05)
            during = {name: max(s[name] for s in seen) for name in ("bajarilmoqda", "kutmoqda")}
            return during, await runner

    during, summary = asyncio.run(scenario())
    # No rows are claimed ahead of a stalled slot: they stay claimable by any relay.
    assert (during["bajarilmoqda"], during["kutmoqda"]) == (1, 5)
    assert summary.sent == 6


def test_drain_waits_for_rows_it_handed_back_for_a_busy_chat(
    engine: sa.Engine, db_url: str, fake_telegram: FakeTelegram
) -> None:
    with engine.begin() as conn:
        for i in range(4):
            enqueue(conn, key=f"c{i}", payload={"chat_id": 9, "text": f"xabar {i}"})
    limits = RateLimits(per_bot=0, per_chat=1.0)  # one message per second to one chat
    summary = asyncio.run(drain(db_url, fake_telegram, rate_limits=limits))
    assert summary.sent == 4
    assert states(engine)["bajarildi"] == 4
    times = [d.at for d in fake_telegram.delivered]
    assert all(b - a >= 1.0 for a, b in itertools.pairwise(times))


def test_a_stop_that_comes_during_a_claim_is_not_slept_through(
    engine: sa.Engine, db_url: str, fake_telegram: FakeTelegram
) -> None:
    import psycopg

    def listening() -> bool:
        return bool(backends(engine, "state = 'idle' AND starts_with(query, 'LISTEN')"))

    async def scenario() -> float:
        async with make_relay(db_url, fake_telegram) as relay:  # polls every 30 s by default
            runner = asyncio.create_task(relay.run())
            await eventually(listening, 10, "the relay to listen")  # idle, waiting for a NOTIFY
            async with await psycopg.AsyncConnection.connect(db_url) as locker:
                # The relay's next claim waits for this lock: stop() arrives meanwhile.
                await locker.execute("LOCK TABLE outbox IN ACCESS EXCLUSIVE MODE")
                async with await psycopg.AsyncConnection.connect(db_url, autocommit=True) as c:
                    await c.execute("SELECT pg_notify('outbox', '')")
                await eventually(
                    lambda: backends(engine, "wait_event_type = 'Lock'"), 10, "a blocked claim"
                )
                relay.stop()
                stopped_at = time.monotonic()
            await runner  # the lock is gone: the claim finishes, and the stop is seen
            return time.monotonic() - stopped_at

    assert asyncio.run(scenario()) < 5.0
