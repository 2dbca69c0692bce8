"""A database the relay can connect to but not use: no reconnect storm, one clear word, and
delivery as soon as it is usable again.

Two ways to get there, both from the field: a read-only database (a relay left on a standby
after a failover) and PostgreSQL stopped behind PgBouncer (PgBouncer still takes the login, the
first statement fails). Reconnects are counted by the server (``pg_stat_database.sessions``)
or by PgBouncer's log, not by the relay's own word.

Here the e2e tier's tests (processes); the others are in ``tests/unit/test_relay_outage.py``.
"""

from __future__ import annotations

import time
from pathlib import Path
from urllib.parse import urlsplit

import psycopg
import pytest
import sqlalchemy as sa

from outbox import migrate
from outbox.db import create_engine
from outbox_testing.fake_telegram import FakeTelegram
from tests.support import (
    Relays,
    enqueue_numbered,
    relay_env,
    start_own_postgres,
    states,
    wait_until,
)
from tests.support.pgbouncer import PgBouncer, require_pgbouncer

# Reconnects a relay may make per second while the database cannot be used (before the
# store's backoff: 180 to 800 per second).
MAX_RECONNECTS_PER_SECOND = 4.0
WINDOW = 6.0  # seconds of outage the reconnects are counted over

READ_ONLY_LINE = "the database is read-only: is this a standby?"


def database_name(url: str) -> str:
    return urlsplit(url).path.lstrip("/")


def sessions(server_url: str, name: str) -> int:
    """Sessions ever opened on database ``name`` (the server counts them as they start)."""
    with psycopg.connect(server_url, autocommit=True) as conn:
        found = conn.execute(
            "SELECT sessions FROM pg_stat_database WHERE datname = %s", (name,)
        ).fetchone()
    assert found is not None
    return int(found[0])


def set_read_only(server_url: str, name: str, *, on: bool) -> None:
    """Sessions that start from now on are read-only (or not): a standby, as a relay sees it."""
    with psycopg.connect(server_url, autocommit=True) as conn:
        value = "on" if on else "off"
        conn.execute(f'ALTER DATABASE "{name}" SET default_transaction_read_only = {value}')


def cpu_seconds(pid: int) -> float:
    """User plus system CPU time of process ``pid`` so far."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    ticks = int(fields[11]) + int(fields[12])  # utime, stime
    return ticks / 100.0  # USER_HZ is 100 on Linux


def test_a_relay_on_a_read_only_database_backs_off_says_so_once_and_delivers_after(
    server_url: str, db_url: str, engine: sa.Engine, fake_telegram: FakeTelegram, tmp_path: Path
) -> None:
    n = 20
    name = database_name(db_url)
    enqueue_numbered(engine, n, first_chat=90_000)
    engine.dispose()  # no pooled session of the test stays read-write behind the relay's back
    set_read_only(server_url, name, on=True)
    with Relays(relay_env(db_url, fake_telegram.api_url), tmp_path).running() as relays:
        relay = relays.start()
        wait_until(
            lambda: "read-only" in relay.stderr, 30, "the read-only line", explain=relays.describe
        )
        before, cpu_before, t0 = sessions(server_url, name), cpu_seconds(relay.pid), time.time()
        time.sleep(WINDOW)
        after, cpu_after, t1 = sessions(server_url, name), cpu_seconds(relay.pid), time.time()
        rate = (after - before) / (t1 - t0)
        print(f"\nread-only: {rate:.1f} sessions/s, {(cpu_after - cpu_before) / (t1 - t0):.1%} CPU")
        assert rate <= MAX_RECONNECTS_PER_SECOND, relay.describe()
        assert relay.alive(), relay.describe()
        assert fake_telegram.count() == 0
        set_read_only(server_url, name, on=False)
        wait_until(
            lambda: states(engine).get("bajarildi") == n,
            30,
            "every row delivered once the database takes writes",
            explain=relays.describe,
        )
        assert relay.stop() == 0, relay.describe()
    log = relay.stderr
    assert log.count(READ_ONLY_LINE) == 1, log
    assert "Traceback" not in log, log
    assert sorted(d.chat_id for d in fake_telegram.delivered) == list(range(90_000, 90_000 + n))


def login_attempts(bouncer: PgBouncer) -> int:
    """Client logins PgBouncer has logged so far."""
    return bouncer.log.read_text(errors="replace").count("login attempt")


@pytest.mark.slow
def test_postgres_stopped_behind_pgbouncer_mid_drain_no_storm_then_every_row_done(
    fake_telegram: FakeTelegram, tmp_path: Path
) -> None:
    binary = require_pgbouncer()
    server = start_own_postgres()
    # PgBouncer's defaults: after a failed server login it tries again 15 s later
    # (server_login_retry), and until then answers every client "server login has been failing".
    bouncer = PgBouncer(binary, server.url)
    engine = create_engine(server.url, pool_pre_ping=True)
    try:
        migrate.upgrade(server.url)
        n = 600
        enqueue_numbered(engine, n, first_chat=100_000)
        env = {
            **relay_env(bouncer.url(server.url), fake_telegram.api_url),
            "OUTBOX_POLL_ONLY": "1",
            "OUTBOX_RATE_LIMIT": "100",  # a drain of some seconds, so the outage lands in it
            "OUTBOX_LEASE": "25s",  # a claim whose answer the crash lost is reaped soon
        }
        with Relays(env, tmp_path).running() as relays:
            relay = relays.start()
            wait_until(
                lambda: fake_telegram.count() >= 100, 30, "100 deliveries", explain=relays.describe
            )
            server.stop("immediate")
            at_stop = fake_telegram.count()
            time.sleep(1.0)  # the relay finds out
            before, cpu_before, t0 = login_attempts(bouncer), cpu_seconds(relay.pid), time.time()
            time.sleep(WINDOW)
            after, cpu_after, t1 = login_attempts(bouncer), cpu_seconds(relay.pid), time.time()
            rate = (after - before) / (t1 - t0)
            cpu = (cpu_after - cpu_before) / (t1 - t0)
            print(f"\nbehind pgbouncer: {rate:.1f} logins/s, {cpu:.1%} CPU")
            assert rate <= MAX_RECONNECTS_PER_SECOND, relay.describe() + bouncer.describe()
            server.start()
            wait_until(
                lambda: states(engine).get("bajarildi") == n,
                90,
                "the drain to finish after the restart",
                explain=relays.describe,
            )
            assert relay.stop() == 0, relay.describe()
        assert at_stop < n, "the outage missed the drain"
        assert states(engine) == {"kutmoqda": 0, "bajarilmoqda": 0, "bajarildi": n, "xato": 0}
        assert "still unavailable" in relay.stderr, relay.stderr
        assert "Traceback" not in relay.stderr, relay.stderr
    finally:
        engine.dispose()
        bouncer.close()
        server.close()
