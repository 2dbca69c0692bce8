"""Every value the command line takes has a range, and global options work before the command.

Out-of-range numbers, ids beyond bigint, ``inf``, ``nan`` and absurd durations are one line
naming the flag (or variable): exit 2, or 3 for the relay's settings; never a traceback.
"""

from __future__ import annotations

import asyncio
import math
import os

import pytest
import sqlalchemy as sa

from outbox import queries
from outbox import schema as outbox_schema
from outbox.commands.options import duration, message_id, number, whole_number
from outbox.config import RelayConfig
from outbox.db import async_connect
from outbox.durations import parse_duration
from outbox.errors import ConfigError, InvalidInput
from outbox.ratelimit import RateLimits
from reminders.cli import main as reminders_main
from tests.support import add_rows_for_retention, rows_and_markers, run_module
from tests.test_admin import add_failed, run

UNREACHABLE = "postgresql://outbox:s3cret@127.0.0.1:1/outbox"
TOKEN = "123456:AAHdqTcvCH1vGWJxfSeofSAs0K5PALDsaw"
HUGE = "99999999999999999999"


def one_line(err: str) -> str:
    assert err.count("\n") == 1 and "Traceback" not in err, err
    return err


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (["replay", HUGE], f"'{HUGE}' is not a message id"),
        (["show", "9223372036854775808"], "'9223372036854775808' is not a message id"),
        (["show", "²"], "'²' is not a message id"),
        (["list", "--limit", HUGE], f"--limit: '{HUGE}' must be at most 1000000"),
        (["status", "--max-lag", "inf"], "--max-lag: duration 'inf' is too long"),
        (["status", "--max-lag", "nan"], "--max-lag: cannot read duration 'nan'"),
        (["status", "--lease", "1e400"], "--lease: duration '1e400' is too long"),
        (["status", "--max-failed", HUGE], "--max-failed: '99999999999999999999' must be at most"),
        (["replay", "--all-failed", "--since", "9" * 14 + "d"], "--since: duration '999"),
        (["replay", "--all-failed", "--since", "4000d"], "--since: duration '4000d' is longer"),
        (["prune", "--older-than", "1e400"], "--older-than: duration '1e400' is too long"),
        (["prune", "--batch-size", HUGE], f"--batch-size: '{HUGE}' must be at most 10000"),
        (["reap", "--max-attempts", "1001"], "--max-attempts: '1001' must be at most 1000"),
        (["web", "--refresh", "inf"], "--refresh: duration 'inf' is too long"),
        (["web", "--port", "65536"], "--port: '65536' must be at most 65535"),
    ],
)  # fmt: skip
def test_operator_values_out_of_range_are_one_line_and_exit_2(
    argv: list[str], message: str, capsys: pytest.CaptureFixture[str]
) -> None:
    code, out, err = run(capsys, *argv, "--database-url", UNREACHABLE)
    assert (code, out) == (2, "")
    assert one_line(err).startswith(f"outbox: {message}")


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (["--rate-limit", "nan"], "--rate-limit: 'nan' is not a finite number"),
        (["--rate-limit", "inf"], "--rate-limit: 'inf' is not a finite number"),
        (["--rate-limit", "1e400"], "--rate-limit: '1e400' is not a finite number"),
        (["--rate-limit", "5000"], "--rate-limit: '5000' must be at most 1000"),
        (["--chat-rate-limit", "nan"], "--chat-rate-limit: 'nan' is not a finite number"),
        (["--group-rate-limit", "-1"], "--group-rate-limit: '-1' cannot be negative"),
        (["--concurrency", "99999999999"], "--concurrency: '99999999999' must be at most 4096"),
        (["--concurrency", "0"], "--concurrency: '0' must be at least 1"),
        (["--batch-size", HUGE], f"--batch-size: '{HUGE}' must be at most 10000"),
        (["--lease", "99999999999999d"], "--lease: duration '99999999999999d' is too long"),
        (["--grace", "inf"], "--grace: duration 'inf' is too long"),
        (["--grace", "2d"], "--grace: duration '2d' is longer than 1d"),
        (["--telegram-timeout", "0"], "--telegram-timeout: duration '0' must be longer than 0s"),
        (["--poll-interval", "nan"], "--poll-interval: cannot read duration 'nan'"),
        (["--retention", "1e400"], "--retention: duration '1e400' is too long"),
        (["--max-attempts", HUGE], f"--max-attempts: '{HUGE}' must be at most 1000"),
        (["--metrics-port", "70000"], "--metrics-port: '70000' must be at most 65535"),
        (["--queue", "no spaces"], "--queue: queue name 'no spaces' is not usable"),
    ],
)  # fmt: skip
def test_relay_settings_out_of_range_are_one_line_and_exit_3(
    argv: list[str],
    message: str,
    capsys: pytest.CaptureFixture[str],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv("TELEGRAM_BOT_TOKEN", TOKEN)
    code, out, err = run(capsys, "relay", *argv, "--database-url", UNREACHABLE)
    assert (code, out) == (3, "")
    assert one_line(err).startswith(f"outbox: {message}")


@pytest.mark.parametrize(
    ("variable", "value", "argv", "code", "message"),
    [
        ("OUTBOX_RATE_LIMIT", "nan", ["relay"], 3, "OUTBOX_RATE_LIMIT: 'nan' is not a finite"),
        ("OUTBOX_CONCURRENCY", "5000", ["relay"], 3, "OUTBOX_CONCURRENCY: '5000' must be at most"),
        ("OUTBOX_LEASE", "inf", ["status"], 2, "OUTBOX_LEASE: duration 'inf' is too long"),
        ("OUTBOX_LIST_LIMIT", HUGE, ["list"], 2, f"OUTBOX_LIST_LIMIT: '{HUGE}' must be at most"),
        ("OUTBOX_REPLAY_SINCE", "1e400", ["replay", "--all-failed"], 2, "OUTBOX_REPLAY_SINCE: "),
    ],
)  # fmt: skip
def test_environment_twins_have_the_same_ranges(
    variable: str,
    value: str,
    argv: list[str],
    code: int,
    message: str,
    capsys: pytest.CaptureFixture[str],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv("TELEGRAM_BOT_TOKEN", TOKEN)
    monkeypatch.setenv(variable, value)
    got, out, err = run(capsys, *argv, "--database-url", UNREACHABLE)
    assert (got, out) == (code, "")
    assert one_line(err).startswith(f"outbox: {message}")


def test_the_library_refuses_absurd_relay_settings_too() -> None:
    for limits in (RateLimits(per_bot=math.nan), RateLimits(per_chat=math.inf)):
        with pytest.raises(ConfigError, match="rate-limit must be between 0 and"):
            RelayConfig(database_url="postgresql:///x", rate_limits=limits)
    with pytest.raises(ConfigError, match="concurrency must be between 1 and 4096"):
        RelayConfig(database_url="postgresql:///x", concurrency=99_999_999_999)
    with pytest.raises(ConfigError, match="grace must be at most"):
        RelayConfig(database_url="postgresql:///x", grace_seconds=math.inf, lease_seconds=1e9)


def test_the_converters() -> None:
    assert whole_number(0)(" 7 ") == 7
    assert number(0, 10)("2.5") == 2.5
    assert duration()("1h30m") == 5400.0
    assert message_id("9223372036854775807") == 2**63 - 1
    for convert, raw in (
        (whole_number(0), "١٢"),  # digits, but not ASCII ones
        (whole_number(0), "9" * 5000),
        (number(0, 10), "nan"),
        (duration(), "-inf"),
        (message_id, "0"),
    ):
        with pytest.raises(InvalidInput):
            convert(raw)


# --- issue-19 defects ----------------------------------------------------------------------------


def test_global_options_work_before_the_command(
    db_url: str, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(outbox_schema, "_configured", None)  # --schema sets a process-wide value
    code, out, _ = run(capsys, "--database-url", db_url, "status")
    assert code == 0 and "kutmoqda" in out
    code, _, err = run(capsys, "--database-url", db_url, "--schema", "jobs", "status")
    assert code == 5
    assert one_line(err).startswith("outbox: the outbox tables are missing in schema jobs")


def test_a_mistyped_option_never_echoes_the_password(capsys: pytest.CaptureFixture[str]) -> None:
    code, out, err = run(capsys, "--databse-url", UNREACHABLE, "status")
    assert (code, out) == (2, "")
    assert "s3cret" not in one_line(err)
    assert "postgresql://outbox:***@127.0.0.1:1/outbox" in err


def test_max_failed_0_is_unhealthy_at_the_first_failure(
    engine: sa.Engine, db_url: str, capsys: pytest.CaptureFixture[str]
) -> None:
    code, _, _ = run(capsys, "status", "--max-failed", "0", "--database-url", db_url)
    assert code == 0
    add_failed(engine, "a")
    code, _, err = run(capsys, "status", "--max-failed", "0", "--database-url", db_url)
    assert code == 8
    assert "1 failed messages, more than --max-failed 0" in err


def test_retention_0_keeps_the_done_rows_for_prune_as_for_the_relay(
    engine: sa.Engine,
    db_url: str,
    capsys: pytest.CaptureFixture[str],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    add_rows_for_retention(engine)
    monkeypatch.setenv("OUTBOX_RETENTION", "0")
    code, out, _ = run(capsys, "prune", "--database-url", db_url)
    assert code == 0
    assert out.startswith("kept every bajarildi row (OUTBOX_RETENTION=0); pruned 1 sent markers")
    assert rows_and_markers(engine) == (["failed-long-ago", "old", "recent"], ["recent"])


def test_a_refused_relay_setting_is_the_only_line() -> None:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("OUTBOX_", "TELEGRAM_"))}
    env.update(TELEGRAM_BOT_TOKEN=TOKEN, OUTBOX_DATABASE_URL=UNREACHABLE)
    done = run_module("outbox.cli", "relay", "--lease", "1s", env=env)
    assert done.returncode == 3
    assert one_line(done.stderr).startswith("outbox: lease (1s) must be at least")


def test_migrate_says_what_it_did(
    empty_db_url: str, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("OUTBOX_LOG_LEVEL", "WARNING")
    code, out, _ = run(capsys, "migrate", "--database-url", empty_db_url)
    assert code == 0
    assert out.startswith("created the outbox tables in schema public (revision outbox_0")
    code, out, _ = run(capsys, "migrate", "--database-url", empty_db_url)
    assert out.startswith("the outbox tables in schema public are up to date (revision outbox_")


def test_reminders_migrate_says_what_it_did(
    empty_db_url: str, capsys: pytest.CaptureFixture[str]
) -> None:
    assert reminders_main(["migrate", "--database-url", empty_db_url]) == 0
    first = capsys.readouterr().out.splitlines()
    assert first[0].startswith("created the outbox tables (revision outbox_")
    assert first[1].startswith("created the vazifalar tables (revision reminders_")
    assert reminders_main(["migrate", "--database-url", empty_db_url]) == 0
    again = capsys.readouterr().out.splitlines()
    assert [line.split(" (")[0] for line in again] == [
        "the outbox tables are up to date",
        "the vazifalar tables are up to date",
    ]


def test_reminders_takes_the_database_before_the_command_and_never_echoes_its_password(
    db_url: str, capsys: pytest.CaptureFixture[str]
) -> None:
    assert reminders_main(["--database-url", db_url, "list"]) == 0
    capsys.readouterr()
    assert reminders_main(["--databse-url", UNREACHABLE, "list"]) == 2
    err = capsys.readouterr().err
    assert "s3cret" not in one_line(err)
    assert "postgresql://outbox:***@127.0.0.1:1/outbox" in err


def test_the_prune_count_keeps_the_done_rows_with_retention_0(
    engine: sa.Engine, db_url: str
) -> None:
    """The progress line's total (shown on a terminal) agrees with what prune deletes."""
    add_rows_for_retention(engine)

    async def count(done: float | None) -> int:
        conn = await async_connect(db_url, prepare=False)
        try:
            return await queries.count_prunable(
                conn,
                schema="public",
                done_older_than_seconds=done,
                markers_older_than_seconds=30 * 86400.0,
            )
        finally:
            await conn.close()

    assert asyncio.run(count(None)) == 1  # the old marker only
    assert asyncio.run(count(7 * 86400.0)) == 2  # and the done row 8 days old


@pytest.mark.parametrize("text", ["\u0663\u0660m", "\u0663", "1h\u0663m"])
def test_a_duration_takes_only_ascii_digits(text: str) -> None:
    with pytest.raises(InvalidInput, match="cannot read duration"):
        parse_duration(text)
