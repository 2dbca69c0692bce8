"""Crash safety with real processes: kill -9, a Postgres restart, many relays, a hung relay.

Here the e2e tier's tests (processes); the others are in ``tests/db/test_crash_safety.py``.
"""

from __future__ import annotations

import re
import signal
import time
from collections import Counter
from collections.abc import Callable, Iterator
from datetime import datetime
from pathlib import Path

import pytest
import sqlalchemy as sa

from outbox import enqueue, migrate
from outbox.db import create_engine
from outbox_testing.fake_telegram import FakeTelegram, Fault
from tests.support import (
    TEST_TOKEN,
    Relays,
    chats_of,
    enqueue_numbered,
    insert_raw,
    relay_env,
    row,
    start_own_postgres,
    states,
    wait_until,
)

CONCURRENCY = 32


def held_since(engine: sa.Engine, since: datetime | None) -> tuple[int, datetime]:
    """Rows claimed (and still held) since ``since``, and the database's clock now."""
    with engine.begin() as conn:
        count, now = conn.exec_driver_sql(
            "SELECT count(*) FILTER (WHERE holat = 'bajarilmoqda' "
            "AND band_vaqti >= coalesce(%(since)s::timestamptz, '-infinity')), now() FROM outbox",
            {"since": since},
        ).one()
    return int(count), now


def at_least(fake: FakeTelegram, n: int) -> Callable[[], bool]:
    return lambda: fake.count() >= n


@pytest.fixture
def fake_any_bot() -> Iterator[FakeTelegram]:
    """A fake Bot API taking any well-formed token, so each relay can send as its own bot id."""
    fake = FakeTelegram(token=None).start_in_thread()
    yield fake
    fake.stop_thread()


@pytest.mark.slow
def test_kill_9_three_times_during_a_drain_loses_nothing(
    engine: sa.Engine, db_url: str, fake_any_bot: FakeTelegram, tmp_path: Path
) -> None:
    n, first_chat = 5000, 10_000
    fake_any_bot.latency = 0.02  # keeps sends in flight at the kill
    enqueue_numbered(engine, n, first_chat=first_chat)
    settings = {
        "OUTBOX_CONCURRENCY": str(CONCURRENCY),
        "OUTBOX_BATCH_SIZE": str(CONCURRENCY),
        "OUTBOX_LEASE": "3s",
        # The lease must cover a send: the Telegram timeout plus the grace.
        "OUTBOX_TELEGRAM_TIMEOUT": "2s",
        "OUTBOX_GRACE": "1s",
        # A row can be claimed by each of the three killed relays; that must not fail it.
        "OUTBOX_MAX_ATTEMPTS": "5",
    }

    # Relay i sends with bot id i + 1, so the fake tells which relay sent each delivery.
    def as_relay(i: int) -> dict[str, str]:
        return {**settings, "TELEGRAM_BOT_TOKEN": f"{i + 1}:{TEST_TOKEN.split(':', 1)[1]}"}

    held_at_kill: list[int] = []  # rows the dead relay still held: claimed, not recorded
    previous_kill: datetime | None = None
    with Relays(relay_env(db_url, fake_any_bot.api_url), tmp_path).running() as relays:
        for i, target in enumerate((800, 1900, 3000)):
            relay = relays.start(**as_relay(i))
            wait_until(
                at_least(fake_any_bot, target),
                60,
                f"{target} deliveries",
                explain=relays.describe,
            )
            assert relay.alive(), relay.describe()
            relay.kill()
            # Everything claimed since the previous kill and still held is the dead relay's.
            held, previous_kill = held_since(engine, previous_kill)
            held_at_kill.append(held)
        final = relays.start(**as_relay(3))
        wait_until(
            lambda: states(engine)["bajarildi"] + states(engine)["xato"] == n,
            90,
            "every row to be terminal",
            explain=relays.describe,
        )
        assert final.stop() == 0, final.describe()

    delivered = fake_any_bot.delivered
    per_chat = Counter(d.chat_id for d in delivered)
    assert set(per_chat) == set(range(first_chat, first_chat + n)), "a message was lost"
    assert states(engine) == {"kutmoqda": 0, "bajarilmoqda": 0, "bajarildi": n, "xato": 0}
    # A send Telegram did not answer in time may have been delivered, and is retried: the
    # documented duplicate without a crash (a loaded machine can hold the fake's answers back
    # past the timeout). Those chats are left out of the accounting below.
    timed_out = chats_of(engine, relays.timed_out())
    # A duplicate is a message Telegram accepted whose sent marker had not committed when the
    # relay that sent it was killed: each further delivery of a chat belongs to the relay of
    # the delivery before it (a resent message can be caught by the next kill too).
    senders: dict[int, list[int]] = {}
    for d in sorted(delivered, key=lambda d: d.at):
        if d.chat_id not in timed_out:
            senders.setdefault(d.chat_id, []).append(d.bot_id)
    duplicates = [0] * 4
    for chat_senders in senders.values():
        for sender in chat_senders[:-1]:
            duplicates[sender - 1] += 1
    sent_thrice = sum(1 for chat_senders in senders.values() if len(chat_senders) > 2)
    print(
        f"\nduplicates per kill {duplicates[:-1]}; rows the dead relay held {held_at_kill}; "
        f"messages sent three times or more {sent_thrice}; sends that timed out {len(timed_out)}"
    )
    # Judged by who sent, not by the order the fake read them: a killed relay's last request can
    # still sit in the fake's socket when the final relay resends that row.
    final_bot = 4  # as_relay(3): the relay never killed
    sent_twice_by_final = [chat for chat, s in senders.items() if s.count(final_bot) > 1]
    # The relays' logs go with a failure: CI keeps nothing else of the run.
    assert not sent_twice_by_final, (
        f"a message was sent twice without a crash: chats {sent_twice_by_final[:10]}\n"
        f"{relays.describe()}"
    )
    for dups, held in zip(duplicates, held_at_kill, strict=False):
        assert dups <= min(held, CONCURRENCY), (duplicates, held_at_kill, relays.describe())


def test_a_relay_hung_past_its_lease_is_reaped_and_its_late_result_discarded(
    engine: sa.Engine, fake_telegram: FakeTelegram, relays: Relays
) -> None:
    chat = 555
    with engine.begin() as conn:
        enqueue(conn, key="hung", payload={"chat_id": chat, "text": "kechikkan"})
    # The Bot API holds the first answer, then refuses: a late result that, written, would
    # turn a delivered message into a dead letter.
    fake_telegram.script(chat, Fault.forbidden().after(1.5))
    # The lease covers the Telegram timeout (beyond the 1.5 s answer) plus the grace.
    settings = {"OUTBOX_LEASE": "2s", "OUTBOX_TELEGRAM_TIMEOUT": "1.8s", "OUTBOX_GRACE": "0.2s"}
    hung = relays.start(**settings)
    wait_until(
        lambda: any(r.chat_id == chat for r in fake_telegram.requests),
        20,
        "the first relay to send",
        interval=0.01,
        explain=relays.describe,
    )
    # The process hangs mid-send, holding its claim (after its start-up maintenance round,
    # which takes milliseconds, so that it does not hang holding the maintenance lock).
    time.sleep(0.3)
    hung.signal(signal.SIGSTOP)
    rescuer = relays.start(**settings)
    wait_until(
        lambda: row(engine, "hung")["holat"] == "bajarildi",
        20,
        "the second relay to reap and deliver the row",
        explain=relays.describe,
    )
    rescued = row(engine, "hung")
    hung.signal(signal.SIGCONT)  # the late 403 reaches the hung relay now
    assert hung.stop() == 0, hung.describe()
    assert rescuer.stop() == 0, rescuer.describe()

    assert row(engine, "hung") == rescued, "the hung relay's late result was written"
    assert rescued["urinish"] == 2
    assert rescued["marker_message"] == 1
    assert "claim expired" in rescued["oxirgi_xato"]
    assert [d.text for d in fake_telegram.delivered_to(chat)] == ["kechikkan"]
    assert [r.status for r in fake_telegram.requests if r.chat_id == chat] == [403, 200]
    assert "discarded" in hung.stderr, hung.describe()


@pytest.mark.slow
def test_relay_rides_out_a_postgres_restart_by_itself(
    fake_telegram: FakeTelegram, tmp_path: Path
) -> None:
    server = start_own_postgres()
    engine = create_engine(server.url, pool_pre_ping=True)
    try:
        migrate.upgrade(server.url)
        n, first_chat = 1000, 20_000
        enqueue_numbered(engine, n, first_chat=first_chat)
        env = relay_env(
            server.url,
            fake_telegram.api_url,
            OUTBOX_RATE_LIMIT="250",  # a drain of a few seconds, so the outage lands in it
            OUTBOX_LEASE="60s",  # no claim expires during the outage: nothing to duplicate
            OUTBOX_CONCURRENCY="16",
        )
        with Relays(env, tmp_path).running() as relays:
            relay = relays.start()
            wait_until(
                lambda: fake_telegram.count() >= 250, 30, "250 deliveries", explain=relays.describe
            )
            server.stop("immediate")  # a crash: connections drop without a goodbye
            at_stop = fake_telegram.count()
            time.sleep(2.0)
            during_outage = fake_telegram.count() - at_stop
            server.start()
            wait_until(
                lambda: states(engine)["bajarildi"] == n,
                90,
                "the drain to finish after the restart",
                explain=relays.describe,
            )
            assert relay.alive(), "the relay gave up instead of reconnecting"
            assert relay.stop() == 0, relay.describe()
        per_chat = Counter(d.chat_id for d in fake_telegram.delivered)
        print(f"\ndelivered before the crash {at_stop}, during the 2 s outage {during_outage}")
        assert set(per_chat) == set(range(first_chat, first_chat + n))
        assert max(per_chat.values()) == 1, "a message was sent twice"
        assert states(engine) == {"kutmoqda": 0, "bajarilmoqda": 0, "bajarildi": n, "xato": 0}
        assert at_stop < n, "the outage missed the drain"
        # Unrecorded sends hold their slots: with the database gone, sending stops.
        assert during_outage <= 16
        assert "connection lost" in relay.stderr
    finally:
        engine.dispose()
        server.close()


def test_four_relay_processes_deliver_every_message_exactly_once(
    engine: sa.Engine, fake_telegram: FakeTelegram, relays: Relays
) -> None:
    n, first_chat = 2000, 30_000
    fake_telegram.latency = 0.005
    group = [relays.start(OUTBOX_CONCURRENCY="16", OUTBOX_BATCH_SIZE="16") for _ in range(4)]
    wait_until(
        lambda: all("listen connection" in r.stderr for r in group),
        30,
        "four listening relays",
        explain=relays.describe,
    )
    enqueue_numbered(engine, n, first_chat=first_chat)
    wait_until(lambda: states(engine)["bajarildi"] == n, 60, "the drain", explain=relays.describe)
    assert [r.stop() for r in group] == [0, 0, 0, 0], relays.describe()

    per_chat = Counter(d.chat_id for d in fake_telegram.delivered)
    assert set(per_chat) == set(range(first_chat, first_chat + n))
    assert max(per_chat.values()) == 1, "a message was sent twice"
    sent = [int(re.search(r"(\d+) sent", r.stdout).group(1)) for r in group]  # type: ignore[union-attr]
    assert sum(sent) == n
    assert all(s > 0 for s in sent), f"the work was not shared: {sent}"


def test_token_never_appears_in_debug_logs_errors_or_argv(
    engine: sa.Engine, fake_telegram: FakeTelegram, relays: Relays
) -> None:
    secret = TEST_TOKEN.split(":")[1]
    faults = {
        800: Fault.retry_after(1),
        801: Fault.server_error(500),
        802: Fault.bad_gateway_html(),
        803: Fault.drop(),
        804: Fault.forbidden(),
        805: Fault.bad_request("chat not found"),
        -806: Fault.migrate(-100_806),
        807: Fault.slow(0.3),
    }
    for chat, fault in faults.items():
        fake_telegram.script(chat, fault)
    with engine.begin() as conn:
        for chat in faults:
            enqueue(conn, key=f"s{chat}", payload={"chat_id": chat, "text": "maxfiy emas"})
        insert_raw(conn, "malformed", {"chat_id": "nobody", "text": "x"})
    debug = {"OUTBOX_LOG_LEVEL": "DEBUG", "OUTBOX_BACKOFF_BASE": "0.2s"}
    relay = relays.start(**debug)
    cmdline = Path(f"/proc/{relay.pid}/cmdline").read_bytes()
    wait_until(
        lambda: states(engine)["bajarildi"] + states(engine)["xato"] == len(faults) + 1,
        30,
        "every row to end",
        explain=relays.describe,
    )
    # Last, the token itself is refused mid-run: the fatal path and its error line.
    fake_telegram.script(None, Fault.unauthorized(), times=None)
    with engine.begin() as conn:
        enqueue(conn, key="refused", payload={"chat_id": 809, "text": "x"})
    assert relay.wait(20) == 6, relay.describe()
    # And a token Telegram does not know at all, refused at start-up.
    stranger = relays.start(TELEGRAM_BOT_TOKEN="987654:WRONG-secret_value-xyz", **debug)
    assert stranger.wait(20) == 6, stranger.describe()

    assert TEST_TOKEN.encode() not in cmdline and secret.encode() not in cmdline
    logs = relay.stdout + relay.stderr
    assert " DEBUG " in logs, "the logs were not captured at DEBUG"
    assert "outbox: Telegram rejected the bot token" in relay.stderr
    assert secret not in logs, relay.describe()
    assert "WRONG-secret_value" not in stranger.stdout + stranger.stderr, stranger.describe()
    with engine.begin() as conn:
        stored = conn.exec_driver_sql(
            "SELECT string_agg(concat_ws(' ', oxirgi_xato, tarix::text, payload::text), ' ') "
            "FROM outbox"
        ).scalar_one()
    assert "flood control" in stored and "Bad Gateway" in stored  # errors were written
    assert secret not in stored
