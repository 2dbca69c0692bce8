"""Relays and operator commands behind a real PgBouncer in transaction pooling mode.

``--poll-only`` is the PgBouncer mode: no LISTEN, no server-side prepared statements, and
every lock the relay relies on lasts one transaction; relays of one bot still keep its limits
and its flood pause together, through the database. These tests run it through the
distribution's pgbouncer (tests/support/pgbouncer.py); without it they skip and say so.

Here the e2e tier's tests (processes); the others are in ``tests/unit/test_pgbouncer.py``.
"""

from __future__ import annotations

import contextlib
import json
import re
import subprocess
import sys
import threading
from collections import Counter
from collections.abc import Iterator
from functools import partial
from pathlib import Path
from typing import Any

import psycopg
import pytest
import sqlalchemy as sa
from alembic.runtime.migration import MigrationContext

from outbox import enqueue, migrate
from outbox.telegram import bot_id_of
from outbox_testing.fake_telegram import FakeTelegram, Fault
from tests.support import (
    DEFAULT_LIMITS,
    TEST_TOKEN,
    RelayProcess,
    Relays,
    add_rows_for_retention,
    enqueue_numbered,
    insert_raw,
    relay_env,
    row,
    rows_and_markers,
    run_module,
    states,
    wait_until,
)
from tests.support.pgbouncer import PgBouncer


@pytest.fixture
def bouncer(server_url: str) -> Iterator[PgBouncer]:
    with PgBouncer.running(server_url) as running:
        yield running


def poll_only(bouncer: PgBouncer, db_url: str, fake: FakeTelegram, tmp_path: Path) -> Relays:
    """Relay processes that reach the database only through PgBouncer."""
    return Relays(
        {**relay_env(bouncer.url(db_url), fake.api_url), "OUTBOX_POLL_ONLY": "1"}, tmp_path
    )


def outbox(url: str, *args: str, cwd: Path) -> subprocess.CompletedProcess[str]:
    """An ``outbox`` command in a process of its own; a non-zero exit fails the test."""
    env = relay_env(url, "http://127.0.0.1:1")
    done = run_module("outbox.cli", *args, env=env, cwd=cwd)
    assert done.returncode == 0, f"outbox {' '.join(args)}: {done.returncode}\n{done.stderr}"
    return done


def advisory_locks(engine: sa.Engine) -> int:
    with engine.begin() as conn:
        return int(
            conn.exec_driver_sql(
                "SELECT count(*) FROM pg_locks WHERE locktype = 'advisory'"
            ).scalar_one()
        )


def connected(relay: RelayProcess) -> bool:
    return "claim connection to the database is up" in relay.stderr


def start_two(relays: Relays, **settings: str) -> list[RelayProcess]:
    """Two relays of the bot, both connected through PgBouncer."""
    started = [relays.start(**settings) for _ in range(2)]
    for relay in started:
        wait_until(
            partial(connected, relay),
            30,
            f"{relay.name} to connect through pgbouncer",
            explain=relays.describe,
        )
    return started


def sent_by(relay: RelayProcess) -> int:
    """The messages a stopped relay says it sent."""
    return int(re.findall(r"relay stopped: (\d+) sent", relay.stderr + relay.stdout)[-1])


def only_done(n: int) -> dict[str, int]:
    """The counts by state when ``n`` rows are done and none is in any other state."""
    return {"kutmoqda": 0, "bajarilmoqda": 0, "bajarildi": n, "xato": 0}


def settled(engine: sa.Engine) -> bool:
    """No row waits to be sent or is being sent."""
    counts = states(engine)
    return counts["kutmoqda"] + counts["bajarilmoqda"] == 0


def paused(engine: sa.Engine) -> bool:
    """The test bot's state row says it is paused now."""
    with engine.begin() as conn:
        return bool(
            conn.exec_driver_sql(
                "SELECT coalesce(bool_or(pauza_tugashi > now()), false) FROM bot_holati "
                "WHERE bot = %(bot)s",
                {"bot": bot_id_of(TEST_TOKEN)},
            ).scalar_one()
        )


def busiest_second(moments: list[float]) -> int:
    """The most of ``moments`` (seconds) that fall within any 1 s."""
    ordered, most, first = sorted(moments), 0, 0
    for last, moment in enumerate(ordered):
        while moment - ordered[first] >= 1.0:
            first += 1
        most = max(most, last - first + 1)
    return most


def test_the_pgbouncer_runs_transaction_pooling(bouncer: PgBouncer, db_url: str) -> None:
    url = bouncer.url(db_url)
    with (
        psycopg.connect(url, autocommit=True, prepare_threshold=None) as mine,
        psycopg.connect(url, autocommit=True, prepare_threshold=None) as other,
    ):
        [(first,)] = mine.execute("SELECT pg_backend_pid()").fetchall()
        # The other client's transaction takes the only idle server connection, the one this
        # client used a moment ago; in session pooling this client would still own it.
        with other.transaction():
            [(taken,)] = other.execute("SELECT pg_backend_pid()").fetchall()
            [(second,)] = mine.execute("SELECT pg_backend_pid()").fetchall()
    assert taken == first
    assert second != first
    pools = [p for p in bouncer.admin("SHOW POOLS") if p["database"] == url.rsplit("/", 1)[1]]
    assert [p["pool_mode"] for p in pools] == ["transaction"]


def test_two_poll_only_relays_deliver_every_message_once(
    engine: sa.Engine, db_url: str, bouncer: PgBouncer, fake_telegram: FakeTelegram, tmp_path: Path
) -> None:
    n, first_chat = 400, 50_000
    fake_telegram.latency = 0.02
    # Small batches and no claim-ahead, so that neither relay takes the whole queue at once.
    settings = {"OUTBOX_BATCH_SIZE": "8", "OUTBOX_CLAIM_AHEAD": "0", "OUTBOX_CONCURRENCY": "4"}
    with poll_only(bouncer, db_url, fake_telegram, tmp_path).running() as relays:
        started = start_two(relays, **settings)
        enqueue_numbered(engine, n, first_chat=first_chat)
        wait_until(
            lambda: fake_telegram.count() >= n, 60, f"{n} deliveries", explain=relays.describe
        )
        wait_until(
            lambda: states(engine) == only_done(n),
            30,
            "every row done",
        )
        exits = [relay.stop() for relay in started]
        assert exits == [0, 0], relays.describe()
        sent = [sent_by(relay) for relay in started]
        logs = relays.describe()
    chats = Counter(d.chat_id for d in fake_telegram.delivered)
    assert sorted(chats) == list(range(first_chat, first_chat + n))
    assert set(chats.values()) == {1}
    assert sum(sent) == n and min(sent) > 0, sent  # both relays took part
    assert "Traceback" not in logs and "prepared statement" not in logs, logs


def test_two_poll_only_relays_keep_the_bots_limits_together_through_pgbouncer(
    engine: sa.Engine, db_url: str, bouncer: PgBouncer, fake_telegram: FakeTelegram, tmp_path: Path
) -> None:
    fake_telegram.enforce_limits = True  # Telegram's 30/s per bot and 1/s per private chat
    n, first_chat, busy_chat, to_busy_chat = 240, 60_000, 61_000, 6
    with poll_only(bouncer, db_url, fake_telegram, tmp_path).running() as relays:
        started = start_two(relays, **DEFAULT_LIMITS)
        enqueue_numbered(engine, n, first_chat=first_chat)
        with engine.begin() as conn:
            for k in range(to_busy_chat):
                enqueue(conn, key=f"busy-{k}", payload={"chat_id": busy_chat, "text": f"b{k}"})
        # Until no row waits: a relay over the limits fails rows for good, and says so below.
        wait_until(lambda: settled(engine), 40, "every row settled", explain=relays.describe)
        assert [relay.stop() for relay in started] == [0, 0], relays.describe()
        sent = [sent_by(relay) for relay in started]
        logs = relays.describe()
    assert states(engine) == {
        "kutmoqda": 0,
        "bajarilmoqda": 0,
        "bajarildi": n + to_busy_chat,
        "xato": 0,
    }
    delivered = Counter((d.chat_id, d.text) for d in fake_telegram.delivered)
    assert len(delivered) == n + to_busy_chat and set(delivered.values()) == {1}
    sends = [r for r in fake_telegram.requests if r.method == "sendMessage"]
    refused = [(r.chat_id, round(r.at, 3)) for r in sends if r.status == 429]
    assert len(refused) <= 0.01 * len(sends), (len(sends), refused)
    # Both relays sent, and together no faster than the bot may: 30/s on average, and in any
    # second at most the two late sends the 1 % above allows.
    assert min(sent) > 0, sent
    moments = [r.at for r in sends]
    assert (len(moments) - 1) / (max(moments) - min(moments)) <= 30
    assert busiest_second(moments) <= 32
    assert "Traceback" not in logs and "prepared statement" not in logs, logs


def test_a_429_pauses_both_poll_only_relays_through_pgbouncer(
    engine: sa.Engine, db_url: str, bouncer: PgBouncer, fake_telegram: FakeTelegram, tmp_path: Path
) -> None:
    pause, flooded_chat, first_chat, n = 3, 70_000, 71_000, 30
    fake_telegram.script(flooded_chat, Fault.retry_after(pause))
    with poll_only(bouncer, db_url, fake_telegram, tmp_path).running() as relays:
        started = start_two(relays)  # rate limits off: nothing but the pause holds a send back
        with engine.begin() as conn:
            enqueue(conn, key="flooded", payload={"chat_id": flooded_chat, "text": "429"})
        wait_until(
            lambda: fake_telegram.stats()["rejected_429"] == 1,
            20,
            "the 429",
            explain=relays.describe,
        )
        [flooded_at] = [r.at for r in fake_telegram.requests if r.status == 429]
        # Once the pause is in the queue's state, both relays have work and must wait.
        wait_until(lambda: paused(engine), 10, "the pause written", explain=relays.describe)
        enqueue_numbered(engine, n, first_chat=first_chat)
        wait_until(
            lambda: states(engine) == only_done(n + 1),
            30,
            "every row done",
            explain=relays.describe,
        )
        assert [relay.stop() for relay in started] == [0, 0], relays.describe()
    sends = [r for r in fake_telegram.requests if r.method == "sendMessage"]
    during = [round(r.at - flooded_at, 3) for r in sends if flooded_at < r.at < flooded_at + pause]
    assert during == [], relays.describe()
    assert sorted(d.chat_id for d in fake_telegram.delivered) == [
        flooded_chat,
        *range(first_chat, first_chat + n),
    ]
    # One relay got the 429; the other read the pause from the queue's state.
    [flooded] = [r for r in started if "flood control (429)" in r.stderr]
    [other] = [r for r in started if r is not flooded]
    assert "flood control: the bot must wait" in other.stderr, other.describe()


def test_the_reaper_returns_an_expired_claim_through_pgbouncer(
    engine: sa.Engine, db_url: str, bouncer: PgBouncer, fake_telegram: FakeTelegram, tmp_path: Path
) -> None:
    with engine.begin() as conn:
        insert_raw(conn, "abandoned", {"chat_id": 7, "text": "left behind"})
        conn.exec_driver_sql(
            "UPDATE outbox SET holat = 'bajarilmoqda', urinish = 1, "
            "band_vaqti = now() - interval '1 hour' WHERE kalit = 'abandoned'"
        )
    # The lease must cover a send: the Telegram timeout plus the grace.
    settings = {"OUTBOX_LEASE": "3s", "OUTBOX_TELEGRAM_TIMEOUT": "2s", "OUTBOX_GRACE": "1s"}
    with poll_only(bouncer, db_url, fake_telegram, tmp_path).running() as relays:
        relay = relays.start(**settings)
        wait_until(
            lambda: row(engine, "abandoned")["holat"] == "bajarildi",
            30,
            "the abandoned row to be reaped and sent",
            explain=relays.describe,
        )
        assert relay.stop() == 0, relays.describe()
    assert "reaper: expired claims: 1 back to kutmoqda, 0 to xato" in relay.stderr
    assert [d.chat_id for d in fake_telegram.delivered] == [7]
    assert row(engine, "abandoned")["urinish"] == 2
    assert advisory_locks(engine) == 0  # the maintenance lock ended with its transaction


def test_retention_deletes_old_done_rows_through_pgbouncer(
    engine: sa.Engine, db_url: str, bouncer: PgBouncer, fake_telegram: FakeTelegram, tmp_path: Path
) -> None:
    add_rows_for_retention(engine)

    def kept() -> tuple[list[str], list[str]]:
        return rows_and_markers(engine)

    with poll_only(bouncer, db_url, fake_telegram, tmp_path).running() as relays:
        relay = relays.start()
        # The first maintenance round runs at start; the old marker goes last.
        wait_until(lambda: kept()[1] == ["recent"], 30, "retention", explain=relays.describe)
        assert relay.stop() == 0, relays.describe()
    assert kept() == (["failed-long-ago", "recent"], ["recent"])
    assert fake_telegram.count() == 0


def test_operator_commands_work_through_pgbouncer(
    server_url: str, empty_db_url: str, bouncer: PgBouncer, tmp_path: Path
) -> None:
    url = bouncer.url(empty_db_url)
    assert "created the outbox tables" in outbox(url, "migrate", cwd=tmp_path).stdout
    direct = sa.create_engine("postgresql+psycopg://" + empty_db_url.removeprefix("postgresql://"))
    try:
        # The migrators' lock must not outlive the command in a pooled server connection,
        # where it would keep the next `outbox migrate` waiting.
        assert advisory_locks(direct) == 0
        outbox(url, "migrate", cwd=tmp_path)  # a second run: nothing to do, and no wait
        with direct.begin() as conn:
            for i in range(8):
                insert_raw(conn, f"k{i}", {"chat_id": i, "text": "x"})
            conn.exec_driver_sql(
                "UPDATE outbox SET holat = 'xato', urinish = 3 WHERE kalit IN ('k0', 'k1', 'k2')"
            )
            failed = (
                conn.exec_driver_sql("SELECT id FROM outbox WHERE holat = 'xato' ORDER BY id")
                .scalars()
                .all()
            )
        status = json.loads(outbox(url, "status", "--json", cwd=tmp_path).stdout)
        assert status["holat"]["xato"] == 3 and status["holat"]["kutmoqda"] == 5
        replayed = json.loads(
            outbox(url, "replay", *map(str, failed), "--json", cwd=tmp_path).stdout
        )
        assert replayed["replayed"] == failed, replayed
        listed = json.loads(outbox(url, "list", "--json", cwd=tmp_path).stdout)
        assert len(listed) == 8
        with direct.begin() as conn:
            conn.exec_driver_sql(
                "UPDATE outbox SET holat = 'bajarilmoqda', urinish = 1, "
                "band_vaqti = now() - interval '1 hour' WHERE kalit = 'k3'"
            )
            conn.exec_driver_sql("UPDATE outbox SET holat = 'bajarildi' WHERE kalit = 'k4'")
        assert (
            "reaped: 1 back to kutmoqda"
            in outbox(url, "reap", "--lease", "1m", cwd=tmp_path).stdout
        )
        pruned = outbox(url, "prune", "--older-than", "0s", cwd=tmp_path).stdout
        assert "pruned 1 bajarildi rows" in pruned
        assert advisory_locks(direct) == 0
    finally:
        direct.dispose()


@contextlib.contextmanager
def busy_neighbours(url: str, n: int = 3) -> Iterator[None]:
    """Other clients of the pool in short transactions back to back, as relays are: a client's
    next transaction may get another server connection than its last."""
    stop = threading.Event()

    def work() -> None:
        with psycopg.connect(url, autocommit=True, prepare_threshold=None) as conn:
            while not stop.is_set():
                with conn.transaction():
                    conn.execute("SELECT pg_sleep(0.002)")

    threads = [threading.Thread(target=work) for _ in range(n)]
    for thread in threads:
        thread.start()
    try:
        yield
    finally:
        stop.set()
        for thread in threads:
            thread.join()


def test_two_migrators_at_once_through_pgbouncer_migrate_once_and_leave_no_lock(
    empty_db_url: str, bouncer: PgBouncer, tmp_path: Path
) -> None:
    url = bouncer.url(empty_db_url)
    env = relay_env(url, "http://127.0.0.1:1")
    argv = [sys.executable, "-m", "outbox.cli", "migrate"]
    with busy_neighbours(url):
        migrators = [
            subprocess.Popen(
                argv,
                env=env,
                cwd=tmp_path,
                stdout=subprocess.PIPE,
                stderr=subprocess.PIPE,
                text=True,
            )
            for _ in range(2)
        ]
        outputs = [m.communicate(timeout=60) for m in migrators]
    assert [m.returncode for m in migrators] == [0, 0], outputs
    direct = sa.create_engine("postgresql+psycopg://" + empty_db_url.removeprefix("postgresql://"))
    try:
        # A lock held across transactions would stay behind in a pooled server connection.
        assert advisory_locks(direct) == 0
    finally:
        direct.dispose()
    assert "up to date" in outbox(url, "migrate", cwd=tmp_path).stdout


def test_migrate_leaves_no_lock_in_a_pooled_server_connection(
    empty_db_url: str, bouncer: PgBouncer, monkeypatch: pytest.MonkeyPatch
) -> None:
    url = bouncer.url(empty_db_url)
    neighbour = psycopg.connect(url, prepare_threshold=None)
    run_migrations = MigrationContext.run_migrations

    def with_a_neighbour(self: MigrationContext, **kw: Any) -> None:
        # Between the migrator's lock and its revisions, another client's transaction takes
        # the server connection the migrator used last (the only idle one).
        neighbour.execute("SELECT 1")
        run_migrations(self, **kw)

    monkeypatch.setattr(MigrationContext, "run_migrations", with_a_neighbour)
    try:
        migrate.upgrade(url)
        neighbour.commit()
        direct = sa.create_engine(
            "postgresql+psycopg://" + empty_db_url.removeprefix("postgresql://")
        )
        try:
            assert advisory_locks(direct) == 0
        finally:
            direct.dispose()
    finally:
        neighbour.close()
