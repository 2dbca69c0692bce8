"""Operator commands: mistakes get one line and a documented exit code; replay beside relays.

Here the unit tier's tests (no database); the others are in ``tests/db/test_admin_cli.py``.
"""

from __future__ import annotations

import os

import pytest

from tests.support import run_module
from tests.support.admin import run

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


def test_json_is_a_switch_that_takes_no_id_as_its_value() -> None:
    from outbox.cli import build_parser

    args = build_parser().parse_args(["replay", "--json", "1", "2"])
    assert (args.json, args.ids) == (True, [1, 2])
    assert build_parser().parse_args(["list"]).json is False
