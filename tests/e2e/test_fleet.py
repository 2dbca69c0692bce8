"""A fleet of relays: Telegram's limits and flood pause shared through PostgreSQL, queues per
bot. Relays are real processes; Telegram is the fake Bot API, enforcing its limits where said.

Here the e2e tier's tests (processes); the others are in ``tests/db/test_fleet.py``.
"""

from __future__ import annotations

import asyncio
import collections
import json
import os
import signal
import time
from collections.abc import Iterator
from pathlib import Path

import psycopg
import pytest
import sqlalchemy as sa

from outbox import enqueue
from outbox.queries import announce_pause
from outbox.schema import pause_channel
from outbox.telegram import bot_id_of
from outbox_testing.fake_telegram import FakeTelegram
from tests.support import (
    DEFAULT_LIMITS,
    TEST_TOKEN,
    Relays,
    relay_env,
    row,
    run_module,
    states,
    text,
    wait_until,
)

BOT = bot_id_of(TEST_TOKEN)  # the key of the test bot's shared limits and pause


@pytest.fixture
def strict_fake() -> Iterator[FakeTelegram]:
    """The fake Bot API enforcing 30/s per bot, 1/s per chat, 20/min per group."""
    fake = FakeTelegram(token=TEST_TOKEN, enforce_limits=True).start_in_thread()
    yield fake
    fake.stop_thread()


def test_three_relays_keep_the_bots_limits_together(
    engine: sa.Engine, db_url: str, strict_fake: FakeTelegram, tmp_path: Path
) -> None:
    chats = range(5000, 5090)
    with engine.begin() as conn:
        for chat in chats:  # a chat's two messages next to each other
            for n in range(2):
                enqueue(conn, key=f"m{chat}-{n}", payload=text(chat, n))
    expected = 2 * len(chats)
    env = relay_env(db_url, strict_fake.api_url, **DEFAULT_LIMITS)
    with Relays(env, tmp_path).running() as fleet:
        started = [fleet.start() for _ in range(3)]
        wait_until(
            lambda: states(engine)["bajarildi"] == expected,
            60,
            "every message sent",
            explain=fleet.describe,
        )
        for relay in started:
            assert relay.stop() == 0, fleet.describe()
    stats = strict_fake.stats()
    texts = collections.Counter(d.text for d in strict_fake.delivered)
    assert len(texts) == expected and set(texts.values()) == {1}, "a message sent twice"
    refused = [(r.chat_id, round(r.at, 3)) for r in strict_fake.requests if r.status == 429]
    sends: dict[int | None, list[float]] = {}
    for r in strict_fake.requests:
        sends.setdefault(r.chat_id, []).append(round(r.at, 3))
    detail = [(c, sends[c]) for c, _ in refused]
    assert stats["rejected_429"] <= 0.01 * stats["requests"], (stats, detail)
    # Every relay took part: the limits are the fleet's, not one relay's.
    assert all("sent" in relay.stdout for relay in started), fleet.describe()


def test_a_relay_killed_holding_send_slots_holds_back_the_others_briefly(
    engine: sa.Engine, db_url: str, fake_telegram: FakeTelegram, relays: Relays
) -> None:
    rate, horizon = 2.0, 3.0  # slots 0.5 s apart, reserved up to 3 s ahead
    settings = {"OUTBOX_RATE_LIMIT": f"{rate:g}", "OUTBOX_SLOT_HORIZON": f"{horizon:g}s"}
    with engine.begin() as conn:
        for chat in range(6000, 6020):
            enqueue(conn, key=f"k{chat}", payload=text(chat))
    doomed = relays.start(**settings)
    wait_until(lambda: states(engine)["bajarilmoqda"] >= 5, 20, "claims", explain=relays.describe)
    doomed.signal(signal.SIGKILL)
    doomed.wait()
    # What the dead relay holds of the bot's budget ends within the horizon (and one slot).
    with engine.connect() as conn:
        held = conn.execute(
            sa.text(
                "SELECT extract(epoch FROM keyingi_slot - now()) FROM bot_holati WHERE bot = :bot"
            ),
            {"bot": BOT},
        ).scalar_one()
    assert 0 < held <= horizon + 1 / rate
    sent_before = fake_telegram.count()
    with engine.begin() as conn:
        enqueue(conn, key="after", payload=text(6100))
    relays.start(**settings)
    # The survivor sends the new row and the dead relay's unclaimed rows without waiting for
    # the dead relay's claims (those wait for the lease).
    wait_until(
        lambda: row(engine, "after")["holat"] == "bajarildi",
        20,
        "the other relay to send",
        explain=relays.describe,
    )
    assert fake_telegram.count() > sent_before


def test_a_forged_notify_pauses_nothing(
    engine: sa.Engine, db_url: str, fake_telegram: FakeTelegram, relays: Relays
) -> None:
    relay = relays.start()
    wait_until(
        lambda: "listen connection to the database is up" in relay.stderr,
        20,
        "the relay listening",
        explain=relays.describe,
    )
    with psycopg.connect(db_url, autocommit=True) as conn:
        conn.execute("SELECT pg_notify(%s, '3600')", (pause_channel("public"),))
        conn.execute("SELECT pg_notify(%s, %s)", (pause_channel("public"), BOT))
    with engine.begin() as conn:
        enqueue(conn, key="not-paused", payload=text(7000))
    wait_until(
        lambda: row(engine, "not-paused")["holat"] == "bajarildi",
        20,
        "the message sent (no pause)",
        explain=relays.describe,
    )
    assert "flood control" not in relay.stderr


def test_a_poll_only_relay_keeps_a_pause_written_to_the_bots_state(
    engine: sa.Engine, db_url: str, fake_telegram: FakeTelegram, relays: Relays
) -> None:
    relay = relays.start(OUTBOX_POLL_ONLY="1")

    async def pause(seconds: float) -> None:
        async with await psycopg.AsyncConnection.connect(db_url, autocommit=True) as conn:
            await announce_pause(conn, seconds, schema="public", bot=BOT)

    with engine.begin() as conn:
        enqueue(conn, key="warm-up", payload=text(7100))
    wait_until(lambda: fake_telegram.count() == 1, 20, "warm-up", explain=relays.describe)
    paused_at = time.monotonic()
    asyncio.run(pause(3.0))
    with engine.begin() as conn:
        for chat in range(7101, 7106):
            enqueue(conn, key=f"p{chat}", payload=text(chat))
    wait_until(lambda: fake_telegram.count() == 6, 20, "the rest", explain=relays.describe)
    assert all(d.at >= paused_at + 2.9 for d in fake_telegram.delivered[1:])
    assert "flood control: the bot must wait" in relay.stderr, relays.describe()


def test_two_bots_on_one_database_each_relay_sends_only_its_own_rows(
    engine: sa.Engine, db_url: str, tmp_path: Path
) -> None:
    tokens = {"bot1": "111:first-bot-token", "bot2": "222:second-bot-token"}
    fakes = {q: FakeTelegram(token=t).start_in_thread() for q, t in tokens.items()}
    try:
        with engine.begin() as conn:
            for queue in tokens:
                for chat in range(8000, 8010):
                    enqueue(conn, key=f"{queue}-{chat}", payload=text(chat), queue=queue)
            enqueue(conn, key="nobodys", payload=text(8100))  # the default queue: not served
        with Relays(relay_env(db_url, ""), tmp_path).running() as fleet:
            for queue, fake in fakes.items():
                fleet.start(
                    OUTBOX_QUEUES=queue,
                    TELEGRAM_BOT_TOKEN=tokens[queue],
                    OUTBOX_TELEGRAM_API_URL=fake.api_url,
                )
            wait_until(
                lambda: states(engine)["bajarildi"] == 20,
                30,
                "both bots' messages sent",
                explain=fleet.describe,
            )
        for fake in fakes.values():
            assert len(fake.delivered) == 10
        with engine.connect() as conn:
            for queue, fake in fakes.items():
                own = conn.execute(
                    sa.text("SELECT payload->>'text' FROM outbox WHERE navbat = :q"), {"q": queue}
                ).scalars()
                assert {d.text for d in fake.delivered} == set(own)
        assert row(engine, "nobodys")["holat"] == "kutmoqda"
    finally:
        for fake in fakes.values():
            fake.stop_thread()


def test_the_queues_of_one_bot_share_its_budget(
    engine: sa.Engine, fake_telegram: FakeTelegram, relays: Relays
) -> None:
    rate = 5.0  # messages/s for the bot, whatever queue or relay sends them
    with engine.begin() as conn:
        for queue in ("news", "alerts"):
            for chat in range(9000, 9015):
                enqueue(conn, key=f"{queue}-{chat}", payload=text(chat), queue=queue)
    settings = {"OUTBOX_RATE_LIMIT": f"{rate:g}"}
    # One relay per queue, and one serving both: three relays of one bot.
    for queues in ("news", "alerts", "news,alerts"):
        relays.start(OUTBOX_QUEUES=queues, **settings)
    wait_until(
        lambda: states(engine)["bajarildi"] == 30, 30, "every message sent", explain=relays.describe
    )
    stamps = sorted(d.at for d in fake_telegram.delivered)
    busiest = max(sum(1 for t in stamps if start <= t < start + 1.0) for start in stamps)
    # A slot is 1/rate apart and a send may be a little late for it: one more. Each relay times
    # its sends from its claim's answer, and on a loaded machine those answers lag by different
    # amounts (a gate saw two sends 0.16 s apart): one more again, not three times as many.
    assert busiest <= rate + 2, stamps
    assert (len(stamps) - 1) / (stamps[-1] - stamps[0]) <= rate * 1.1, stamps


def test_status_list_and_replay_take_a_queue(engine: sa.Engine, db_url: str) -> None:
    from outbox import api

    with engine.begin() as conn:
        for queue in ("bot1", "bot2"):
            for n in range(2):
                enqueue(conn, key=f"{queue}-{n}", payload=text(9000 + n), queue=queue)
        conn.execute(sa.text("UPDATE outbox SET holat = 'xato' WHERE kalit LIKE '%-1'"))
    with engine.begin() as conn:
        status = api.queue_status(conn, queue="bot1")
        assert (status.counts["kutmoqda"], status.counts["xato"]) == (1, 1)
        assert api.queue_status(conn).counts["xato"] == 2
        listed = api.list_messages(conn, queue="bot2")
        assert {m.key for m in listed} == {"bot2-0", "bot2-1"}
        replayed = api.replay(conn, None, queue="bot1")
        assert [r.replayed for r in replayed] == [True]
    assert row(engine, "bot1-1")["holat"] == "kutmoqda"
    assert row(engine, "bot2-1")["holat"] == "xato"
    env = {**os.environ, "OUTBOX_DATABASE_URL": db_url}
    done = run_module("outbox.cli", "status", "--queue", "bot2", "--json", env=env)
    assert json.loads(done.stdout)["holat"]["xato"] == 1, done.stderr
    bad = run_module("outbox.cli", "list", "--queue", "no way", env=env)
    assert bad.returncode != 0 and "Traceback" not in bad.stderr
