"""Faults of the relay's hot path, each reproduced: reconnects, shutdown, lost and refused
writes, a dead writer, a cut-off claim check, a lease shorter than a send, start-up patience,
and a schema from another version."""

from __future__ import annotations

import asyncio
import signal
import time
import uuid
from pathlib import Path
from typing import Any

import psycopg
import pytest
import sqlalchemy as sa

from outbox import enqueue, migrate, queries
from outbox.db import create_engine
from outbox.errors import OutboxError
from outbox.ratelimit import RateLimits
from outbox.relay import RunSummary
from outbox.relay.store import Store
from outbox.states import State
from outbox_testing.fake_telegram import FakeTelegram, Fault
from tests.conftest import TEMPLATE, TEST_TOKEN
from tests.support import (
    Relays,
    backends,
    enqueue_numbered,
    free_port,
    make_relay,
    outcome_writer,
    relay_env,
    row,
    start_own_postgres,
    states,
    text,
    wait_until,
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
        for key in ("bad", "drop", "other"):
            enqueue(conn, key=key, payload=text(1))

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
