"""The ``reminders`` command line, in-process and as the installed script.

Here the unit tier's tests (no database); the others are in
``reminders/tests/db/test_reminders_cli.py``, ``reminders/tests/e2e/test_reminders_cli.py``.
"""

from __future__ import annotations

import pytest

from reminders.cli import main


def test_an_unreachable_database_is_one_line(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setenv("OUTBOX_DATABASE_URL", "postgresql://nobody@127.0.0.1:1/none")
    assert main(["list"]) == 4
    err = capsys.readouterr().err
    assert err.startswith("reminders: cannot reach the database")
    assert len(err.splitlines()) == 1
