"""The command line a newcomer expects: ``--version``, ``python -m``, options after the command,
defaults in ``--help``, a bad value in one line that names its flag, ``reminders user list``,
and the relay saying which Bot API it talks to."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest

from outbox.version import package_version
from reminders.cli import main as reminders_main
from tests.conftest import TEST_TOKEN
from tests.support import Relays, run_cli, run_module, wait_until


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


def test_python_dash_m_outbox_runs_a_command(db_url: str, tmp_path: Path) -> None:
    done = run_module("outbox", "status", env=clean_env(OUTBOX_DATABASE_URL=db_url), cwd=tmp_path)
    assert done.returncode == 0, done.stderr
    assert "kutmoqda" in done.stdout


def test_global_options_after_the_command(capsys: pytest.CaptureFixture[str], db_url: str) -> None:
    code, _, err = run_cli(capsys, "status", "--log-level", "warning", "--database-url", db_url)
    assert code == 0, err
    code, _, err = run_cli(capsys, "relays", "--log-format", "json", "--database-url", db_url)
    assert code == 0, err
    # Read where given: a bad level after the command is refused as one before it is.
    code, _, err = run_cli(capsys, "status", "--log-level", "loud", "--database-url", db_url)
    assert code == 2
    assert err.strip() == "outbox: unknown log level 'LOUD': use DEBUG, INFO, WARNING or ERROR"


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


def test_reminders_user_list(capsys: pytest.CaptureFixture[str], db_url: str) -> None:
    assert reminders_main(["user", "list", "--database-url", db_url]) == 0
    assert capsys.readouterr().out.startswith("no users")
    for name, chat in (("Aziza", "501"), ("Bobur", "502")):
        assert reminders_main(["user", "add", "--database-url", db_url, "--name", name,
                               "--chat-id", chat, "--tz", "Asia/Tashkent"]) == 0  # fmt: skip
    capsys.readouterr()
    assert reminders_main(["user", "list", "--database-url", db_url]) == 0
    lines = capsys.readouterr().out.splitlines()
    assert lines[0].split() == ["ID", "CHAT", "TIME", "ZONE", "ACTIVE", "NAME"]
    assert [line.split()[1:] for line in lines[1:]] == [
        ["501", "Asia/Tashkent", "yes", "Aziza"],
        ["502", "Asia/Tashkent", "yes", "Bobur"],
    ]
    assert reminders_main(["user", "list", "--json", "--database-url", db_url]) == 0
    users = json.loads(capsys.readouterr().out)
    assert [(u["name"], u["chat_id"], u["active"]) for u in users] == [
        ("Aziza", 501, True),
        ("Bobur", 502, True),
    ]


def test_the_relay_says_which_bot_api_it_talks_to(relays: Relays) -> None:
    relay = relays.start()
    line = wait_until(
        lambda: next((s for s in relay.stderr.splitlines() if "Bot API" in s), None),
        30,
        "the Bot API line",
        explain=relays.describe,
    )
    api_url = relays.env["OUTBOX_TELEGRAM_API_URL"].rstrip("/")
    assert f"Bot API {api_url}, bot 123456" in line
    # Stopped once it runs (a SIGTERM before its handlers are in place is a plain kill).
    wait_until(
        lambda: "heartbeat connection" in relay.stderr,
        30,
        "the relay to run",
        explain=relay.describe,
    )
    assert relay.stop() == 0, relay.describe()
    assert TEST_TOKEN not in relay.stderr and TEST_TOKEN.split(":")[1] not in relay.stderr
