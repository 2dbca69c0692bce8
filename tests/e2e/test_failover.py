"""A failover under a draining relay: a primary and its standby, made with PostgreSQL's own
tools (``pg_basebackup -R``, ``pg_ctl promote``), the primary's postmaster killed with
``kill -9`` mid-drain, the standby promoted. The relay and the app know both servers through
one libpq multi-host URL with ``target_session_attrs=read-write``; the same relay process
carries on by itself. With a synchronous standby nothing is lost; with an asynchronous one
that lags, what the lag held is lost or sent again, as docs/operations.md says.

Run with ``-s`` to see the figures that docs/operations.md quotes.
"""

from __future__ import annotations

import contextlib
import json
import signal
import time
from collections import Counter
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import psycopg
import pytest
from sqlalchemy.orm import Session

from outbox import enqueue, migrate
from outbox.config import DEFAULT_CONCURRENCY
from outbox.db import create_engine
from outbox_testing.fake_telegram import FakeTelegram
from tests.support import (
    DEFAULT_LIMITS,
    OwnPostgres,
    RelayProcess,
    Relays,
    backends,
    enqueue_numbered,
    relay_env,
    run_module,
    start_own_postgres,
    states,
    wait_until,
)

# The servers trust local connections, so the password is never asked for; the relay still
# holds it in its URLs, and it must not appear in anything the relay writes.
PASSWORD = "failover-s3cret"
N, FIRST_CHAT = 2000, 500_000
CRASH_AFTER = 600  # deliveries before the primary dies
# The asynchronous case: deliveries before the standby falls behind, and after (in the lag).
N_ASYNC, IN_LAG = 1000, 300


def multi_host_url(*servers: OwnPostgres, in_query: bool) -> str:
    """One URL for every server, in either of libpq's spellings: the list in the query
    (``?host=a,b&port=1,2``), or in the authority (``a:1,b:2``)."""
    attrs = "target_session_attrs=read-write"
    if in_query:
        hosts = ",".join("127.0.0.1" for _ in servers)
        ports = ",".join(str(s.port) for s in servers)
        return f"postgresql://postgres:{PASSWORD}@/postgres?host={hosts}&port={ports}&{attrs}"
    authority = ",".join(f"127.0.0.1:{s.port}" for s in servers)
    return f"postgresql://postgres:{PASSWORD}@{authority}/postgres?{attrs}"


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


@dataclass
class Pair:
    """A primary and its streaming standby, and one URL naming both."""

    primary: OwnPostgres
    standby: OwnPostgres
    url: str


@contextlib.contextmanager
def replicated(*, synchronous: bool, in_query: bool) -> Iterator[Pair]:
    """A primary and a standby made by pg_basebackup -R, migrated through the multi-host URL;
    both servers are gone afterwards, whatever happened to them."""
    primary = start_own_postgres()
    standby: OwnPostgres | None = None
    try:
        if synchronous:
            # A commit returns once the standby has it on disk.
            admin(
                primary,
                "ALTER SYSTEM SET synchronous_standby_names = '*'",
                "SELECT pg_reload_conf()",
            )
        standby = OwnPostgres(standby_of=primary)
        standby.start()
        # pg_basebackup copied the primary's synchronous_standby_names: once promoted, the
        # standby would wait for a standby of its own that does not exist.
        admin(standby, "ALTER SYSTEM RESET synchronous_standby_names", "SELECT pg_reload_conf()")
        expected = "sync" if synchronous else "async"
        wait_until(
            lambda: setting(primary, "SELECT sync_state FROM pg_stat_replication") == expected,
            30,
            f"the standby to stream ({expected})",
        )
        url = multi_host_url(primary, standby, in_query=in_query)
        migrate.upgrade(url)
        yield Pair(primary, standby, url)
    finally:
        if standby is not None:
            standby.close()
        primary.close()


def relay_settings(url: str, api_url: str, *, listen_url: bool) -> dict[str, str]:
    """The relay's URL (and with ``listen_url`` its LISTEN URL too, as behind PgBouncer) names
    both servers. The only settings changed from the defaults: a drain of some seconds instead
    of Telegram's 28/s, and a claim whose answer died with the primary reaped soon, not in
    5 min."""
    listen = {"OUTBOX_LISTEN_DATABASE_URL": url} if listen_url else {}
    return relay_env(
        url,
        api_url,
        **{**DEFAULT_LIMITS, "OUTBOX_RATE_LIMIT": "500", "OUTBOX_LEASE": "25s", **listen},
    )


def check_log(relay: RelayProcess) -> None:
    log = relay.stdout + relay.stderr
    assert "connection lost" in log, log
    assert "Traceback" not in log, log
    assert PASSWORD not in log, log
    assert not any(PASSWORD in arg for arg in relay.argv)


@pytest.mark.slow
def test_a_relay_rides_out_a_failover_to_its_synchronous_standby_by_itself(
    fake_telegram: FakeTelegram, tmp_path: Path
) -> None:
    with contextlib.ExitStack() as stack:
        pair = stack.enter_context(replicated(synchronous=True, in_query=True))
        # The app's engine, made before the failover and used after it.
        engine = create_engine(pair.url, pool_pre_ping=True)
        stack.callback(engine.dispose)
        enqueue_numbered(engine, N, first_chat=FIRST_CHAT)
        relays = stack.enter_context(
            Relays(
                relay_settings(pair.url, fake_telegram.api_url, listen_url=True), tmp_path
            ).running()
        )
        relay = relays.start()
        wait_until(
            lambda: fake_telegram.count() >= CRASH_AFTER,
            60,
            f"{CRASH_AFTER} deliveries",
            explain=relays.describe,
        )
        crashed_at = time.monotonic()
        pair.primary.kill_postmaster()
        at_crash = fake_telegram.count()
        # The sends in flight end; no new one starts while nothing can be written.
        held = settled(fake_telegram)
        promoting_at = time.monotonic()
        pair.standby.promote()
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
        # An operator's command finds the new primary through the same URL.
        status = run_module("outbox.cli", "status", "--json", env=relays.env)
        assert status.returncode == 0, status.stderr
        assert json.loads(status.stdout)["holat"]["bajarildi"] == N + 1
        assert PASSWORD not in status.stdout + status.stderr
        assert relay.alive(), "the relay gave up instead of carrying on"
        assert relays.started == [relay]
        assert relay.stop() == 0, relay.describe()

        per_chat = Counter(d.chat_id for d in fake_telegram.delivered)
        duplicates = sum(count - 1 for count in per_chat.values())
        print(
            f"\nfailover: {at_crash} delivered at the crash, {held - at_crash} in flight after "
            f"it; promoted {promoting_at - crashed_at:.1f} s after the crash "
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
        check_log(relay)


def chats_booked(server: OwnPostgres) -> int:
    return int(str(setting(server, "SELECT count(*) FROM chat_navbati")))


@pytest.mark.slow
def test_after_an_asynchronous_failover_the_lag_is_lost_or_sent_again_as_documented(
    fake_telegram: FakeTelegram, tmp_path: Path
) -> None:
    with contextlib.ExitStack() as stack:
        pair = stack.enter_context(replicated(synchronous=False, in_query=False))
        engine = create_engine(pair.url, pool_pre_ping=True)
        stack.callback(engine.dispose)
        enqueue_numbered(engine, N_ASYNC, first_chat=FIRST_CHAT)
        relays = stack.enter_context(
            Relays(
                relay_settings(pair.url, fake_telegram.api_url, listen_url=False), tmp_path
            ).running()
        )
        relay = relays.start()
        wait_until(
            lambda: fake_telegram.count() >= IN_LAG,
            60,
            f"{IN_LAG} deliveries",
            explain=relays.describe,
        )
        # Replication stops: from here on the primary's commits are its own (a lag that
        # grows), as if the crash came while the standby was behind.
        admin(pair.standby, "ALTER SYSTEM SET primary_conninfo = ''", "SELECT pg_reload_conf()")
        wait_until(
            lambda: setting(pair.primary, "SELECT count(*) FROM pg_stat_replication") == 0,
            30,
            "the standby to stop streaming",
        )
        at_cut = fake_telegram.count()
        # The app enqueues in the lag (due later, so that none of them is sent meanwhile).
        with engine.begin() as conn:
            conn.exec_driver_sql(
                "INSERT INTO outbox (kalit, payload, keyingi_urinish) "
                "SELECT 'lag' || i, jsonb_build_object('chat_id', 7, 'text', 'x'), "
                "now() + interval '1 hour' FROM generate_series(1, 20) AS i"
            )
        wait_until(
            lambda: fake_telegram.count() >= at_cut + IN_LAG,
            60,
            "deliveries recorded only on the primary",
            explain=relays.describe,
        )
        booked_before = chats_booked(pair.primary)
        pair.primary.kill_postmaster()
        held = settled(fake_telegram)
        relay.signal(signal.SIGSTOP)  # the new primary as the relay will find it
        pair.standby.promote()
        booked_after = chats_booked(pair.standby)
        lag_rows = setting(pair.standby, "SELECT count(*) FROM outbox WHERE kalit LIKE 'lag%'")
        relay.signal(signal.SIGCONT)
        wait_until(
            lambda: states(engine).get("bajarildi") == N_ASYNC,
            150,
            "every row done on the new primary",
            explain=relays.describe,
        )
        assert backends(engine, "left(query, 6) = 'LISTEN'"), relays.describe()
        assert relay.alive(), "the relay gave up instead of carrying on"
        assert relays.started == [relay]
        assert relay.stop() == 0, relay.describe()

        per_chat = Counter(d.chat_id for d in fake_telegram.delivered)
        duplicates = sum(count - 1 for count in per_chat.values())
        in_lag = held - at_cut
        print(
            f"\nasynchronous failover: {in_lag} messages sent in the lag, {duplicates} sent "
            f"twice; {lag_rows} of the 20 rows enqueued in the lag on the new primary; "
            f"chats booked {booked_before} before, {booked_after} after"
        )
        # What the lag committed is gone: the app's enqueue, and the sends' outcomes, which
        # are sent again (all but those the relay still held and wrote to the new primary).
        assert lag_rows == 0
        assert set(per_chat) == set(range(FIRST_CHAT, FIRST_CHAT + N_ASYNC))
        assert max(per_chat.values()) <= 2
        assert 0 < duplicates <= in_lag + DEFAULT_CONCURRENCY, in_lag
        assert states(engine) == {"kutmoqda": 0, "bajarilmoqda": 0, "bajarildi": N_ASYNC, "xato": 0}
        # The chats' spacing (UNLOGGED) starts empty on the new primary.
        assert booked_before > 0
        assert booked_after == 0
        check_log(relay)
