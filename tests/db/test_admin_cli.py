"""Operator commands: mistakes get one line and a documented exit code; replay beside relays.

Here the db tier's tests (PostgreSQL, in the test's process); the others are in
``tests/unit/test_admin_cli.py``.
"""

from __future__ import annotations

import asyncio

import pytest
import sqlalchemy as sa

from outbox.cli import main
from outbox_testing.fake_telegram import FakeTelegram
from tests.support import eventually, make_relay
from tests.support.admin import add, add_failed, add_marker, row, run

COMMANDS = [["list"], ["show", "1"], ["replay", "1"], ["status"], ["reap"], ["prune"]]


def one_line(err: str) -> str:
    assert err.count("\n") == 1 and "Traceback" not in err, err
    return err


@pytest.mark.parametrize("argv", COMMANDS, ids=lambda argv: argv[0])
def test_a_database_without_the_schema_exits_5(
    argv: list[str],
    empty_db_url: str,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    monkeypatch.setenv("OUTBOX_DATABASE_URL", empty_db_url)
    code, out, err = run(capsys, *argv)
    assert (code, out) == (5, "")
    assert one_line(err) == (
        "outbox: the outbox tables are missing in schema public of this database: "
        "run `outbox migrate` first\n"
    )


# --- replay beside running relays ----------------------------------------------------------------


def listening_relays(engine: sa.Engine) -> int:
    with engine.begin() as conn:
        return int(
            conn.exec_driver_sql(
                "SELECT count(*) FROM pg_stat_activity WHERE datname = current_database() "
                "AND state = 'idle' AND query = 'LISTEN \"outbox\"'"
            ).scalar_one()
        )


def test_replay_while_relays_run_is_delivered_exactly_once(
    engine: sa.Engine,
    db_url: str,
    fake_telegram: FakeTelegram,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    monkeypatch.setenv("OUTBOX_DATABASE_URL", db_url)
    failed = add_failed(engine, "failed-reminder", chat_id=7001)
    sent = add_failed(engine, "sent-reminder", chat_id=7002)
    add_marker(engine, "sent-reminder")  # delivered, but the relay lost its claim before that
    add(engine, "warm-up", chat_id=7000)

    def replay(*argv: str) -> int:
        return main(["replay", *argv])

    async def scenario() -> list[int]:
        # The default 30 s poll interval: a replayed row that goes out at once was woken by
        # NOTIFY.
        relays = [make_relay(db_url, fake_telegram, concurrency=4) for _ in range(2)]
        for relay in relays:
            await relay.open()
        running = [asyncio.create_task(relay.run()) for relay in relays]
        try:
            await eventually(lambda: len(fake_telegram.delivered_to(7000)) == 1, 10, "warm-up")
            await eventually(lambda: listening_relays(engine) == 2, 10, "two listeners")
            codes = [await asyncio.to_thread(replay, str(failed), str(sent))]
            await eventually(lambda: row(engine, failed)[0] == "bajarildi", 10, "the replay")
            codes.append(await asyncio.to_thread(replay, str(failed)))  # now done: refused
            codes.append(await asyncio.to_thread(replay, str(sent), "--force"))
            await eventually(lambda: row(engine, sent)[0] == "bajarildi", 10, "the forced one")
            return codes
        finally:
            for relay in relays:
                relay.stop()
            await asyncio.gather(*running)
            for relay in relays:
                await relay.close()

    assert asyncio.run(scenario()) == [7, 7, 0]
    assert [d.text for d in fake_telegram.delivered_to(7001)] == ["eslatma failed-reminder"]
    # Refused while its marker stood; sent again, once, when forced.
    assert [d.text for d in fake_telegram.delivered_to(7002)] == ["eslatma sent-reminder"]
    assert fake_telegram.count() == 3
    err = capsys.readouterr().err
    assert f"message {sent} not replayed: it was already sent" in err
    assert f"message {failed} not replayed: it is bajarildi, not xato" in err
