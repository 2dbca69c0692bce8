"""Every value the command line takes has a range, and global options work before the command.

Out-of-range numbers, ids beyond bigint, ``inf``, ``nan`` and absurd durations are one line
naming the flag (or variable): exit 2, or 3 for the relay's settings; never a traceback.

Here the unit tier's tests (no database); the others are in ``tests/db/test_cli_ranges.py``.
"""

from __future__ import annotations

import math
import os

import pytest

from outbox.commands.options import duration, message_id, number, whole_number
from outbox.config import RelayConfig
from outbox.durations import parse_duration
from outbox.errors import ConfigError, InvalidInput
from outbox.ratelimit import RateLimits
from tests.support import run_module
from tests.support.admin import run

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


def test_a_mistyped_option_never_echoes_the_password(capsys: pytest.CaptureFixture[str]) -> None:
    code, out, err = run(capsys, "--databse-url", UNREACHABLE, "status")
    assert (code, out) == (2, "")
    assert "s3cret" not in one_line(err)
    assert "postgresql://outbox:***@127.0.0.1:1/outbox" in err


def test_a_refused_relay_setting_is_the_only_line() -> None:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("OUTBOX_", "TELEGRAM_"))}
    env.update(TELEGRAM_BOT_TOKEN=TOKEN, OUTBOX_DATABASE_URL=UNREACHABLE)
    done = run_module("outbox.cli", "relay", "--lease", "1s", env=env)
    assert done.returncode == 3
    assert one_line(done.stderr).startswith("outbox: lease (1s) must be at least")


@pytest.mark.parametrize("text", ["\u0663\u0660m", "\u0663", "1h\u0663m"])
def test_a_duration_takes_only_ascii_digits(text: str) -> None:
    with pytest.raises(InvalidInput, match="cannot read duration"):
        parse_duration(text)
