"""The command line a newcomer expects: ``--version``, ``python -m``, options after the command,
defaults in ``--help``, a bad value in one line that names its flag, ``reminders user list``,
and the relay saying which Bot API it talks to.

Here the db tier's tests (PostgreSQL, in the test's process); the others are in
``tests/e2e/test_cli_newcomer.py``, ``tests/unit/test_cli_newcomer.py``.
"""

from __future__ import annotations

import json

import pytest

from reminders.cli import main as reminders_main
from tests.support import run_cli


def test_global_options_after_the_command(capsys: pytest.CaptureFixture[str], db_url: str) -> None:
    code, _, err = run_cli(capsys, "status", "--log-level", "warning", "--database-url", db_url)
    assert code == 0, err
    code, _, err = run_cli(capsys, "relays", "--log-format", "json", "--database-url", db_url)
    assert code == 0, err
    # Read where given: a bad level after the command is refused as one before it is.
    code, _, err = run_cli(capsys, "status", "--log-level", "loud", "--database-url", db_url)
    assert code == 2
    assert err.strip() == "outbox: unknown log level 'LOUD': use DEBUG, INFO, WARNING or ERROR"


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
