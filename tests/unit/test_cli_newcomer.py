"""The command line a newcomer expects: ``--version``, ``python -m``, options after the command,
defaults in ``--help``, a bad value in one line that names its flag, ``reminders user list``,
and the relay saying which Bot API it talks to.

Here the unit tier's tests (no database); the others are in ``tests/db/test_cli_newcomer.py``,
``tests/e2e/test_cli_newcomer.py``.
"""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from outbox.version import package_version
from reminders.cli import main as reminders_main
from tests.support import run_cli, run_module


def clean_env(**extra: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("OUTBOX_", "TELEGRAM_"))}
    return {**env, **extra}


@pytest.mark.parametrize("module", ["outbox", "outbox.cli", "reminders"])
def test_version_and_python_dash_m(module: str, tmp_path: Path) -> None:
    done = run_module(module, "--version", env=clean_env(), cwd=tmp_path)
    assert done.returncode == 0, done.stderr
    program = module.split(".", maxsplit=1)[0]
    assert done.stdout.strip() == f"{program} {package_version()} (outbox-telegram)"
    assert package_version() != "unknown"


def test_help_shows_the_defaults(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit):
        run_cli(capsys, "relay", "--help")
    text = " ".join(capsys.readouterr().out.split())
    assert "(default 128)" in text  # --concurrency
    assert "(default 10s)" in text  # --grace, a duration shown as one is typed
    assert "(default 5s)" in text  # --heartbeat
    assert "(default 127.0.0.1)" in text  # --metrics-host
    with pytest.raises(SystemExit):
        run_cli(capsys, "--help")
    text = " ".join(capsys.readouterr().out.split())
    assert "(default INFO)" in text and "(default text)" in text
    assert reminders_main(["bot", "--help"]) == 0
    text = " ".join(capsys.readouterr().out.split())
    assert "(default 10; env REMINDERS_POLL_TIMEOUT)" in text


@pytest.mark.parametrize(
    ("argv", "flag"),
    [
        (["relay", "--concurrency", "many"], "--concurrency"),
        (["relay", "--heartbeat", "1m"], "--heartbeat"),
        (["list", "--limit", "0"], "--limit"),
        (["status", "--max-lag", "soon"], "--max-lag"),
    ],
)
def test_a_bad_value_is_one_line_naming_its_flag(
    capsys: pytest.CaptureFixture[str], argv: list[str], flag: str
) -> None:
    code, out, err = run_cli(capsys, *argv, "--database-url", "postgresql://u@127.0.0.1:1/x")
    assert code in {2, 3} and not out
    assert len(err.strip().splitlines()) == 1, err
    assert flag in err and "usage:" not in err


@pytest.mark.parametrize(("flag", "value"), [("--port", "http"), ("--poll-timeout", "soon")])
def test_the_bots_bad_value_is_named_before_anything_else(
    capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch, flag: str, value: str
) -> None:
    monkeypatch.delenv("TELEGRAM_BOT_TOKEN", raising=False)
    monkeypatch.delenv("TELEGRAM_BOT_TOKEN_FILE", raising=False)
    code = reminders_main(["bot", "--database-url", "postgresql://u@127.0.0.1:1/x", flag, value])
    err = capsys.readouterr().err
    assert code == 2
    assert len(err.strip().splitlines()) == 1, err
    assert flag in err and "token" not in err
