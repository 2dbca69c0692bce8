"""A failover under a draining relay: a primary and its synchronous standby, made with
PostgreSQL's own tools (``pg_basebackup -R``, ``pg_ctl promote``), the primary's postmaster
killed with ``kill -9`` mid-drain, the standby promoted. The relay and the app know both
servers through one libpq multi-host URL with ``target_session_attrs=read-write``; the same
relay process carries on by itself.

Run with ``-s`` to see the figures that docs/operations.md quotes.
"""

from __future__ import annotations

import time
from collections import Counter
from pathlib import Path

import psycopg
import pytest
import sqlalchemy as sa
from sqlalchemy.orm import Session

from outbox import enqueue, migrate
from outbox.config import DEFAULT_CONCURRENCY
from outbox.db import create_engine
from outbox_testing.fake_telegram import FakeTelegram
from tests.support import (
    DEFAULT_LIMITS,
    OwnPostgres,
    Relays,
    backends,
    enqueue_numbered,
    relay_env,
    start_own_postgres,
    states,
    wait_until,
)

# The servers trust local connections, so the password is never asked for; the relay still
# holds it in its URLs, and it must not appear in anything the relay writes.
PASSWORD = "failover-s3cret"
N, FIRST_CHAT = 2000, 500_000
CRASH_AFTER = 600  # deliveries before the primary dies


def multi_host_url(*servers: OwnPostgres) -> str:
    hosts = ",".join("127.0.0.1" for _ in servers)
    ports = ",".join(str(s.port) for s in servers)
    return (
        f"postgresql://postgres:{PASSWORD}@/postgres?host={hosts}&port={ports}"
        "&target_session_attrs=read-write"
    )


def setting(server: OwnPostgres, sql: str) -> object:
    with psycopg.connect(server.url, autocommit=True) as conn:
        found = conn.execute(sql).fetchone()
    return None if found is None else found[0]


def admin(server: OwnPostgres, *statements: str) -> None:
    with psycopg.connect(server.url, autocommit=True) as conn:
        for statement in statements:
            conn.execute(statement)


def settled(fake: FakeTelegram, quiet: float = 1.0, timeout: float = 15.0) -> int:
    """The delivery count once no delivery came for ``quiet`` seconds."""
    deadline = time.monotonic() + timeout
    last, since = fake.count(), time.monotonic()
    while time.monotonic() - since < quiet:
        assert time.monotonic() < deadline, "deliveries went on with the primary dead"
        time.sleep(0.05)
        now = fake.count()
        if now != last:
            last, since = now, time.monotonic()
    return last


@pytest.mark.slow
def test_a_relay_rides_out_a_failover_to_its_synchronous_standby_by_itself(
    fake_telegram: FakeTelegram, tmp_path: Path
) -> None:
    primary = start_own_postgres()
    standby: OwnPostgres | None = None
    engine: sa.Engine | None = None
    try:
        # Synchronous: a commit returns once the standby has it on disk.
        admin(
            primary,
            "ALTER SYSTEM SET synchronous_standby_names = '*'",
            "SELECT pg_reload_conf()",
        )
        standby = OwnPostgres(standby_of=primary)
        standby.start()
        # pg_basebackup copied the primary's synchronous_standby_names: once promoted, the
        # standby would wait for a standby of its own that does not exist.
        admin(
            standby,
            "ALTER SYSTEM RESET synchronous_standby_names",
            "SELECT pg_reload_conf()",
        )
        wait_until(
            lambda: setting(primary, "SELECT sync_state FROM pg_stat_replication") == "sync",
            30,
            "the standby to stream synchronously",
        )
        url = multi_host_url(primary, standby)
        migrate.upgrade(url)
        # The app's engine, made before the failover and used after it.
        engine = create_engine(url, pool_pre_ping=True)
        enqueue_numbered(engine, N, first_chat=FIRST_CHAT)

        env = relay_env(
            url,
            fake_telegram.api_url,
            **{
                **DEFAULT_LIMITS,
                # The only settings changed: a drain of some seconds instead of Telegram's
                # 28/s, and a claim whose answer died with the primary reaped soon, not in 5 min.
                "OUTBOX_RATE_LIMIT": "500",
                "OUTBOX_LEASE": "25s",
            },
            OUTBOX_LISTEN_DATABASE_URL=url,
        )
        with Relays(env, tmp_path).running() as relays:
            relay = relays.start()
            wait_until(
                lambda: fake_telegram.count() >= CRASH_AFTER,
                60,
                f"{CRASH_AFTER} deliveries",
                explain=relays.describe,
            )
            crashed_at = time.monotonic()
            primary.kill_postmaster()
            at_crash = fake_telegram.count()
            # The sends in flight end; no new one starts while nothing can be written.
            held = settled(fake_telegram)
            promoting_at = time.monotonic()
            standby.promote()
            promoted_at = time.monotonic()
            wait_until(
                lambda: fake_telegram.count() > held,
                60,
                "delivery to resume on the new primary",
                explain=relays.describe,
            )
            resumed_at = min(d.at for d in fake_telegram.delivered if d.at > promoting_at)
            wait_until(
                lambda: states(engine).get("bajarildi") == N,
                120,
                "every row done on the new primary",
                explain=relays.describe,
            )
            done_at = time.monotonic()
            # The app: an enqueue through SQLAlchemy with the same URL, on the same engine.
            with Session(engine) as session, session.begin():
                enqueue(session, key="after-failover", payload={"chat_id": 1, "text": "yana"})
            wait_until(
                lambda: fake_telegram.delivered_to(1),
                30,
                "the message enqueued after the failover",
                explain=relays.describe,
            )
            # The relay hears NOTIFY on the new primary again.
            assert backends(engine, "left(query, 6) = 'LISTEN'"), relays.describe()
            assert relay.alive(), "the relay gave up instead of carrying on"
            assert relays.started == [relay]
            assert relay.stop() == 0, relay.describe()

        per_chat = Counter(d.chat_id for d in fake_telegram.delivered)
        duplicates = sum(count - 1 for count in per_chat.values())
        print(
            f"\nfailover: {at_crash} delivered at the crash, {held - at_crash} in flight after it; "
            f"promoted {promoting_at - crashed_at:.1f} s after the crash "
            f"(pg_ctl promote took {promoted_at - promoting_at:.2f} s); "
            f"delivery resumed {resumed_at - promoting_at:.2f} s after the promotion began, "
            f"{resumed_at - crashed_at:.1f} s after the crash; every row done "
            f"{done_at - crashed_at:.0f} s after the crash; {duplicates} duplicates"
        )
        assert at_crash < N, "the crash missed the drain"
        # Sends stop while nothing can be written: at most those in flight went out meanwhile.
        assert held - at_crash <= DEFAULT_CONCURRENCY
        assert set(per_chat) == {*range(FIRST_CHAT, FIRST_CHAT + N), 1}
        assert duplicates <= DEFAULT_CONCURRENCY, per_chat.most_common(5)
        assert resumed_at - promoting_at < 20
        assert states(engine) == {"kutmoqda": 0, "bajarilmoqda": 0, "bajarildi": N + 1, "xato": 0}
        log = relay.stdout + relay.stderr
        assert "connection lost" in log, log
        assert "Traceback" not in log, log
        assert PASSWORD not in log, log
        assert not any(PASSWORD in arg for arg in relay.argv)
    finally:
        if engine is not None:
            engine.dispose()
        if standby is not None:
            standby.close()
        primary.close()
