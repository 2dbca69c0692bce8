"""Faults of the relay's hot path, each reproduced: reconnects, shutdown, lost and refused
writes, a dead writer, a cut-off claim check, a lease shorter than a send, start-up patience,
and a schema from another version.

Here the e2e tier's tests (processes); the others are in ``tests/db/test_relay_faults.py``.
"""

from __future__ import annotations

import signal
import time
import uuid
from pathlib import Path
from typing import Any

import psycopg
import pytest
import sqlalchemy as sa

from outbox import enqueue, migrate
from outbox.db import create_engine
from outbox_testing.fake_telegram import FakeTelegram, Fault
from tests.support import (
    TEST_TOKEN,
    Relays,
    enqueue_numbered,
    free_port,
    relay_env,
    row,
    start_own_postgres,
    text,
    wait_until,
)
from tests.support.fixtures import TEMPLATE

# --- 1. reconnect stampede ---------------------------------------------------------------------


@pytest.mark.slow
def test_a_database_restart_while_rows_wait_for_their_turn_reopens_few_connections(
    fake_telegram: FakeTelegram, tmp_path: Path
) -> None:
    """Rows that wait for the rate limit check their claim when their turn comes: during an
    outage each of them needs the claim connection. After the restart the relay opens its few
    connections again, not one per waiting row."""
    server = start_own_postgres()
    engine = create_engine(server.url, pool_pre_ping=True)
    try:
        migrate.upgrade(server.url)
        with engine.connect() as conn:
            conn.execution_options(isolation_level="AUTOCOMMIT")
            conn.exec_driver_sql("ALTER SYSTEM SET log_connections = on")
        n = 400
        enqueue_numbered(engine, n, first_chat=40_000)
        env = relay_env(
            server.url + "?application_name=outbox-relay",
            fake_telegram.api_url,
            OUTBOX_RATE_LIMIT="20",  # rows wait in memory for their turn, holding send slots
            OUTBOX_CONCURRENCY="32",
            OUTBOX_LEASE="60s",
        )
        with Relays(env, tmp_path).running() as relays:
            relay = relays.start()
            wait_until(lambda: fake_telegram.count() >= 40, 30, "40 deliveries")
            server.stop("immediate")
            restarted_at = len(server.logfile.read_text(errors="replace"))
            time.sleep(2.0)  # the outage
            server.start()
            wait_until(lambda: fake_telegram.count() >= 100, 60, "deliveries after the restart")
            assert relay.alive(), relay.describe()
            assert relay.stop() == 0, relay.describe()
        after = server.logfile.read_text(errors="replace")[restarted_at:]
        opened = after.count(
            "connection authorized: user=postgres database=postgres application_name=outbox-relay"
        )
        # Claim, record and listen (maintenance reconnects at its next round, some seconds
        # later); one more if a connection failed on its way up.
        assert 3 <= opened <= 5, f"{opened} relay connections after the restart"
    finally:
        engine.dispose()
        server.close()


# --- 2. outcomes are written during the grace period -------------------------------------------


def test_outcomes_of_sends_that_finish_during_the_grace_are_written_at_once(
    engine: sa.Engine, fake_telegram: FakeTelegram, relays: Relays
) -> None:
    """SIGTERM, then SIGKILL inside the grace (as Kubernetes does after its own grace): the
    messages delivered during the grace have their sent markers, so none is sent again."""
    answered_during_grace = {800: 2.0, 802: 4.0}  # chat: seconds until the Bot API answers
    for chat, delay in answered_during_grace.items():
        fake_telegram.script(chat, Fault.slow(delay))
    fake_telegram.script(801, Fault.slow(40.0))  # holds the grace open
    with engine.begin() as conn:
        for chat in (800, 801, 802):
            enqueue(conn, key=f"g{chat}", payload=text(chat))
    relay = relays.start(OUTBOX_GRACE="20s", OUTBOX_TELEGRAM_TIMEOUT="60s")
    wait_until(
        lambda: len(fake_telegram.delivered) == 3, 20, "three sends", explain=relays.describe
    )
    relay.signal(signal.SIGTERM)
    wait_until(
        lambda: all(row(engine, f"g{chat}")["holat"] == "bajarildi" for chat in (800, 802)),
        15,  # well inside the 20 s grace
        "the outcomes of the sends that finished during the grace",
        explain=relays.describe,
    )
    relay.kill()
    for chat in answered_during_grace:
        written = row(engine, f"g{chat}")
        assert (written["holat"], written["urinish"]) == ("bajarildi", 1)
        assert written["marker_message"] is not None


def test_a_second_signal_stops_at_once(
    engine: sa.Engine, fake_telegram: FakeTelegram, relays: Relays
) -> None:
    fake_telegram.script(810, Fault.slow(60.0))
    with engine.begin() as conn:
        enqueue(conn, key="slow", payload=text(810))
    relay = relays.start(OUTBOX_GRACE="60s", OUTBOX_TELEGRAM_TIMEOUT="90s")
    wait_until(lambda: fake_telegram.delivered, 20, "the send", explain=relays.describe)
    relay.signal(signal.SIGTERM)
    wait_until(lambda: "a second signal stops at once" in relay.stderr, 10, "the stop")
    relay.signal(signal.SIGTERM)
    assert relay.wait(15) == 0, relay.describe()
    cut_off = row(engine, "slow")
    assert (cut_off["holat"], cut_off["urinish"]) == ("kutmoqda", 1)
    assert "may have been delivered" in cut_off["oxirgi_xato"]


# --- 7. a lease shorter than a send ------------------------------------------------------------


def test_a_lease_shorter_than_a_send_is_refused_in_one_line(relays: Relays) -> None:
    relay = relays.start("--lease", "5s", "--telegram-timeout", "4s", "--grace", "2s")
    assert relay.wait(20) == 3, relay.describe()
    last = relay.stderr.strip().splitlines()[-1]
    assert last.startswith("outbox: lease (5s) must be at least the Telegram timeout plus")
    assert "Traceback" not in relay.stderr


# --- 8. start-up patience ----------------------------------------------------------------------


def test_a_relay_started_before_its_database_exists_waits_for_it(
    server_url: str, template_url: str, fake_telegram: FakeTelegram, tmp_path: Any
) -> None:
    from outbox.db import create_engine, with_database

    name = f"later_{uuid.uuid4().hex[:8]}"
    url = with_database(server_url, name)
    with Relays(relay_env(url, fake_telegram.api_url), tmp_path).running() as relays:
        relay = relays.start()
        wait_until(
            lambda: "cannot reach the database yet" in relay.stderr,
            20,
            "the relay to wait for its database",
            explain=relays.describe,
        )
        assert relay.alive(), relay.describe()
        with psycopg.connect(server_url, autocommit=True) as admin:
            admin.execute(f'CREATE DATABASE "{name}" TEMPLATE "{TEMPLATE}"')
        engine = create_engine(url)
        try:
            with engine.begin() as conn:
                enqueue(conn, key="late", payload=text(820))
            wait_until(
                lambda: row(engine, "late")["holat"] == "bajarildi",
                30,
                "delivery once the database is there",
                explain=relays.describe,
            )
            assert relay.stop() == 0, relay.describe()
        finally:
            engine.dispose()
            with psycopg.connect(server_url, autocommit=True) as admin:
                admin.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')
    assert [d.chat_id for d in fake_telegram.delivered] == [820]


def test_a_relay_started_before_the_bot_api_answers_waits_for_it(
    engine: sa.Engine, db_url: str, tmp_path: Any
) -> None:
    port = free_port()
    env = relay_env(db_url, f"http://127.0.0.1:{port}")
    with Relays(env, tmp_path).running() as relays:
        relay = relays.start()
        wait_until(
            lambda: "cannot reach the Telegram Bot API yet" in relay.stderr,
            20,
            "the relay to wait for the Bot API",
            explain=relays.describe,
        )
        assert relay.alive(), relay.describe()
        fake = FakeTelegram(token=TEST_TOKEN).start_in_thread(port=port)
        try:
            with engine.begin() as conn:
                enqueue(conn, key="late", payload=text(830))
            wait_until(
                lambda: row(engine, "late")["holat"] == "bajarildi",
                30,
                "delivery once the Bot API answers",
                explain=relays.describe,
            )
            assert relay.stop() == 0, relay.describe()
        finally:
            fake.stop_thread()
    assert [d.chat_id for d in fake.delivered] == [830]


def test_a_relay_waiting_at_start_stops_on_sigterm(db_url: str, tmp_path: Any) -> None:
    env = relay_env(db_url, f"http://127.0.0.1:{free_port()}")  # nothing listens there
    with Relays(env, tmp_path).running() as relays:
        relay = relays.start()
        wait_until(
            lambda: "cannot reach the Telegram Bot API yet" in relay.stderr,
            20,
            "the relay to wait for the Bot API",
            explain=relays.describe,
        )
        assert relay.stop(timeout=10) == 0, relay.describe()
    assert "relay stopped: 0 sent" in relay.stdout


# --- 9. a schema from another version ----------------------------------------------------------


def test_a_schema_migrated_by_an_unknown_version_stops_the_relay_in_one_line(
    engine: sa.Engine, relays: Relays
) -> None:
    with engine.begin() as conn:
        conn.exec_driver_sql("COMMENT ON TABLE outbox IS 'outbox-telegram outbox_9999'")
    relay = relays.start()
    assert relay.wait(20) == 5, relay.describe()
    last = relay.stderr.strip().splitlines()[-1]
    assert last.startswith("outbox: the outbox tables in schema public"), relay.describe()
    assert "revision 'outbox_9999'" in last and "does not know" in last
    assert "Traceback" not in relay.stderr
