"""Operator commands: mistakes get one line and a documented exit code; replay beside relays."""

from __future__ import annotations

import asyncio
import os

import pytest
import sqlalchemy as sa

from outbox.cli import main
from outbox_testing.fake_telegram import FakeTelegram
from tests.support import eventually, make_relay, run_module
from tests.test_admin import add, add_failed, add_marker, row, run

UNREACHABLE = "postgresql://outbox:secret@127.0.0.1:1/outbox"
COMMANDS = [["list"], ["show", "1"], ["replay", "1"], ["status"], ["reap"], ["prune"]]


def one_line(err: str) -> str:
    assert err.count("\n") == 1 and "Traceback" not in err, err
    return err


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (["list", "--holat", "foo"], "--state: unknown state 'foo': use one of kutmoqda "
         "(pending), bajarilmoqda (in progress), bajarildi (done), xato (failed)"),
        (["list", "--limit", "ten"], "--limit: 'ten' is not a whole number"),
        (["list", "--limit", "0"], "--limit: '0' must be at least 1"),
        (["status", "--max-lag", "5 minutes"], "--max-lag: cannot read duration '5 minutes'"),
        (["status", "--lease=-5m"], "--lease: cannot read duration '-5m'"),
        (["prune", "--older-than", "7x"], "--older-than: cannot read duration '7x'"),
        (["prune", "--batch-size", "1e3"], "--batch-size: '1e3' is not a whole number"),
        (["reap", "--max-attempts", "many"], "--max-attempts: 'many' is not a whole number"),
    ],
)  # fmt: skip
def test_malformed_flags_are_one_line_and_exit_2(
    argv: list[str], message: str, capsys: pytest.CaptureFixture[str]
) -> None:
    # No database is needed to reject these: input is checked before connecting.
    code, out, err = run(capsys, *argv, "--database-url", UNREACHABLE)
    assert (code, out) == (2, "")
    assert one_line(err).startswith(f"outbox: {message}")


def test_a_bad_environment_twin_names_the_variable(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setenv("OUTBOX_MAX_LAG", "soon")
    code, _, err = run(capsys, "status", "--database-url", UNREACHABLE)
    assert code == 2
    assert one_line(err).startswith("outbox: OUTBOX_MAX_LAG: cannot read duration 'soon'")


@pytest.mark.parametrize(
    "url", ["postgresql://localhost:port/outbox", "mysql://localhost/outbox", "localhost"]
)
@pytest.mark.parametrize("argv", COMMANDS, ids=lambda argv: argv[0])
def test_a_database_url_that_does_not_parse_exits_3(
    url: str, argv: list[str], capsys: pytest.CaptureFixture[str]
) -> None:
    code, out, err = run(capsys, *argv, "--database-url", url)
    assert (code, out) == (3, "")
    assert one_line(err).startswith("outbox: database URL ")


@pytest.mark.parametrize("argv", COMMANDS, ids=lambda argv: argv[0])
def test_a_database_that_does_not_answer_exits_4_without_the_password(
    argv: list[str], monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setenv("OUTBOX_DATABASE_URL", UNREACHABLE)
    code, out, err = run(capsys, *argv)
    assert (code, out) == (4, "")
    assert one_line(err).startswith("outbox: cannot reach the database at postgresql://outbox:***@")
    assert "secret" not in err


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


@pytest.mark.parametrize(
    ("argv", "code", "message"),
    [
        (["status", "--database-url", UNREACHABLE], 4, "outbox: cannot reach the database"),
        (["replay", "seven", "--database-url", UNREACHABLE], 2, "outbox: 'seven' is not a"),
    ],
)
def test_the_real_command_prints_no_traceback(argv: list[str], code: int, message: str) -> None:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("OUTBOX_", "TELEGRAM_"))}
    done = run_module("outbox.cli", *argv, env=env)
    assert done.returncode == code
    assert done.stdout == ""
    assert one_line(done.stderr).startswith(message)


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


def test_json_is_a_switch_that_takes_no_id_as_its_value() -> None:
    from outbox.cli import build_parser

    args = build_parser().parse_args(["replay", "--json", "1", "2"])
    assert (args.json, args.ids) == (True, [1, 2])
    assert build_parser().parse_args(["list"]).json is False
