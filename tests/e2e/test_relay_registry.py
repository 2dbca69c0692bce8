"""The fleet's register: relays list themselves, heartbeat, leave on a clean stop, and are shown
as gone when killed. Relays are real processes; the register is read by ``outbox relays``."""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

import pytest
import sqlalchemy as sa

from outbox import enqueue
from outbox.queries.registry import MISSED_BEATS
from outbox_testing.fake_telegram import FakeTelegram
from tests.support import Relays, relay_env, run_cli, run_module, wait_until
from tests.support.pgbouncer import PgBouncer
from tests.support.webpage import running_web

# Fast heartbeats, so that a killed relay is called gone within a few seconds.
FAST = {"OUTBOX_HEARTBEAT": "0.5s"}


def listed(capsys: pytest.CaptureFixture[str], url: str) -> list[dict[str, Any]]:
    code, stdout, stderr = run_cli(capsys, "relays", "--json", "--database-url", url)
    assert code == 0, stderr
    found: list[dict[str, Any]] = json.loads(stdout)
    return found


def by_pid(capsys: pytest.CaptureFixture[str], url: str) -> dict[int, dict[str, Any]]:
    return {relay["pid"]: relay for relay in listed(capsys, url)}


def when_true(found: dict[int, dict[str, Any]], condition: bool) -> dict[int, dict[str, Any]]:
    """``found`` if ``condition`` holds, else an empty register (for ``wait_until``)."""
    return found if condition else {}


def test_two_relays_are_listed_and_a_clean_stop_removes_one(
    capsys: pytest.CaptureFixture[str], db_url: str, relays: Relays
) -> None:
    first = relays.start(OUTBOX_QUEUES="default,bot2", **FAST)
    second = relays.start(**FAST)
    fleet = wait_until(
        lambda: when_true(found := by_pid(capsys, db_url), found.keys() == {first.pid, second.pid}),
        30,
        "both relays in the register",
        explain=relays.describe,
    )
    one = fleet[first.pid]
    assert one["queues"] == ["default", "bot2"]
    assert fleet[second.pid]["queues"] == ["default"]
    for relay in fleet.values():
        assert relay["alive"] is True
        assert relay["host"] and relay["version"] and relay["last_seen"] and relay["started_at"]
        assert relay["bots"] == ["123456"]  # the token's public part, never the secret
        assert relay["in_flight"] == 0 and relay["totals"]["sent"] == 0

    assert first.stop() == 0, first.describe()
    # Gone from the list at once: the stop took the row with it.
    assert set(by_pid(capsys, db_url)) == {second.pid}

    code, table, _ = run_cli(capsys, "relays", "--database-url", db_url)
    assert code == 0
    header, line = table.splitlines()
    assert header.split()[:5] == ["host", "pid", "queues", "bots", "state"]
    assert f" {second.pid} " in line and " 123456 " in line and " alive " in line
    assert second.stop() == 0, second.describe()
    code, table, _ = run_cli(capsys, "relays", "--database-url", db_url)
    assert code == 0 and table.startswith("no relay is registered")


def test_a_relay_killed_is_shown_gone_then_forgotten_and_status_warns(
    capsys: pytest.CaptureFixture[str], db_url: str, engine: sa.Engine, relays: Relays
) -> None:
    doomed = relays.start(OUTBOX_QUEUES="bot2", **FAST)
    survivor = relays.start(**FAST)
    wait_until(
        lambda: by_pid(capsys, db_url).keys() == {doomed.pid, survivor.pid},
        30,
        "both relays in the register",
        explain=relays.describe,
    )
    code, _, stderr = run_cli(capsys, "status", "--database-url", db_url)
    assert code == 0 and "warning" not in stderr

    doomed.kill()  # kill -9: no goodbye
    # MISSED_BEATS heartbeats of 0.5 s: gone after about 2 s; the deadline only bounds a hang.
    assert MISSED_BEATS * 0.5 < 30
    gone = wait_until(
        lambda: when_true(
            found := by_pid(capsys, db_url), found.get(doomed.pid, {}).get("alive") is False
        ),
        30,
        "the killed relay shown as gone",
        explain=relays.describe,
    )
    assert gone[survivor.pid]["alive"] is True
    assert gone[doomed.pid]["silent_seconds"] > 0

    # Its queue has due work and nobody to send it: status warns (and still exits 0).
    with engine.begin() as conn:
        enqueue(conn, key="orphan", payload={"chat_id": 1, "text": "x"}, queue="bot2")
        enqueue(conn, key="served", payload={"chat_id": 2, "text": "y"})
    code, stdout, stderr = run_cli(capsys, "status", "--json", "--database-url", db_url)
    assert code == 0, stderr
    assert json.loads(stdout)["unserved_queues"] == {"bot2": 1}
    assert "warning: due rows wait and no live relay serves their queue: 1 in bot2" in stderr

    # Maintenance forgets a relay silent for an hour (its row backdated here).
    with engine.begin() as conn:
        conn.execute(
            sa.text(
                "UPDATE relaylar SET oxirgi_signal = now() - interval '2 hours' WHERE pid = :pid"
            ),
            {"pid": doomed.pid},
        )
    code, _, stderr = run_cli(capsys, "reap", "--database-url", db_url)
    assert code == 0, stderr
    assert set(by_pid(capsys, db_url)) == {survivor.pid}
    assert survivor.stop() == 0, survivor.describe()


def test_the_register_works_through_pgbouncer(
    server_url: str, db_url: str, fake_telegram: FakeTelegram, tmp_path: Path
) -> None:
    with PgBouncer.running(server_url) as bouncer:
        url = bouncer.url(db_url)
        env = {**relay_env(url, fake_telegram.api_url), "OUTBOX_POLL_ONLY": "1", **FAST}
        cli_env = relay_env(url, "http://127.0.0.1:1")

        def register() -> dict[int, dict[str, Any]]:
            done = run_module("outbox.cli", "relays", "--json", env=cli_env, cwd=tmp_path)
            assert done.returncode == 0, done.stderr
            return {relay["pid"]: relay for relay in json.loads(done.stdout)}

        with Relays(env, tmp_path).running() as group:
            one, two = group.start(), group.start()
            wait_until(
                lambda: (
                    (found := register()).keys() == {one.pid, two.pid}
                    and all(r["alive"] for r in found.values())
                ),
                30,
                "both relays registered through PgBouncer",
                explain=lambda: group.describe() + bouncer.describe(),
            )
            two.kill()
            wait_until(
                lambda: register()[two.pid]["alive"] is False,
                30,
                "the killed relay shown as gone through PgBouncer",
                explain=group.describe,
            )
            # Heartbeats keep coming through the pooled connections.
            before = register()[one.pid]["last_seen"]
            wait_until(
                lambda: register()[one.pid]["last_seen"] != before,
                30,
                "a later heartbeat",
                explain=group.describe,
            )
            assert one.stop() == 0, one.describe()
            assert set(register()) == {two.pid}


def add_relay(engine: sa.Engine, pid: int, queues: list[str], *, silent: str) -> None:
    """A register row as a relay writes it, its last heartbeat ``silent`` ago."""
    with engine.begin() as conn:
        conn.execute(
            sa.text(
                "INSERT INTO relaylar (id, host, pid, versiya, navbatlar, botlar, oxirgi_signal,"
                " signal_oraligi, jarayonda, jami) VALUES (:id, 'web-host', :pid, '9.9', :queues,"
                " ARRAY['123456'], now() - CAST(:silent AS interval), 5, 3, '{\"sent\": 41}')"
            ),
            {"id": f"{pid:08x}", "pid": pid, "queues": queues, "silent": silent},
        )


def test_the_page_shows_the_relays_and_the_queues_nobody_serves(
    engine: sa.Engine, db_url: str, tmp_path: Path
) -> None:
    add_relay(engine, 4242, ["default"], silent="1 second")
    add_relay(engine, 4343, ["bot2"], silent="10 minutes")
    with engine.begin() as conn:
        enqueue(conn, key="waits", payload={"chat_id": 1, "text": "x"}, queue="bot2")
    with running_web(db_url, tmp_path) as page:
        body = page.get("/").body
    rows = dict(re.findall(r'<tr data-relay="(\d+)" class="([^"]*)">', body))
    assert rows == {"4242": "", "4343": "warn"}
    assert "Relays (1 alive)" in body
    assert re.search(r"<td>bot2</td>\s*<td>gone</td>", body)
    assert re.search(r"<td>default</td>\s*<td>alive</td>", body)
    assert "no live relay serves their queue: 1 in bot2" in body
