"""`reminders bot` refuses a bad setting with one line, before it touches Telegram."""

from __future__ import annotations

import pytest

from reminders.cli import main


@pytest.mark.parametrize(
    ("args", "env", "message"),
    [
        ([], {}, "no bot token: set TELEGRAM_BOT_TOKEN"),
        ([], {"TELEGRAM_BOT_TOKEN": "nocolon"}, "does not look like a Telegram token"),
        (["--poll-timeout", "soon"], {"TELEGRAM_BOT_TOKEN": "1:a"}, "--poll-timeout must be"),
        (["--poll-timeout", "99"], {"TELEGRAM_BOT_TOKEN": "1:a"}, "between 0 and 50"),
        (["--webhook-url", "bot.example.org"], {"TELEGRAM_BOT_TOKEN": "1:a"}, "https:// URL"),
        (["--webhook-url", "https://b.example"], {"TELEGRAM_BOT_TOKEN": "1:a"}, "needs REMINDERS_"),
        (
            ["--webhook-url", "https://b.example"],
            {"TELEGRAM_BOT_TOKEN": "1:a", "REMINDERS_WEBHOOK_SECRET": "not secret!"},
            "1-256 characters",
        ),
        (["--port", "0"], {"TELEGRAM_BOT_TOKEN": "1:a"}, "--port must be between"),
        (["--log-level", "LOUD"], {"TELEGRAM_BOT_TOKEN": "1:a"}, "unknown --log-level"),
        ([], {"TELEGRAM_BOT_TOKEN": "1:a", "REMINDERS_SNOOZE": "8d"}, "between 1s and 7d"),
    ],
)
def test_bad_settings_get_one_line(
    args: list[str],
    env: dict[str, str],
    message: str,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    for name in (
        "TELEGRAM_BOT_TOKEN",
        "TELEGRAM_BOT_TOKEN_FILE",
        "REMINDERS_SNOOZE",
        "REMINDERS_WEBHOOK_SECRET",
    ):
        monkeypatch.delenv(name, raising=False)
    for name, value in env.items():
        monkeypatch.setenv(name, value)
    code = main(["bot", "--database-url", "postgresql://nobody@127.0.0.1:1/none", *args])
    err = capsys.readouterr().err.strip()
    assert code != 0
    assert message in err and len(err.splitlines()) == 1, err
    assert "1:a" not in err and "not secret!" not in err
