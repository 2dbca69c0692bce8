"""The ``reminders`` command line as the installed script and as ``python -m reminders``, in
processes of their own.

Here the e2e tier's tests (processes); the others are in
``reminders/tests/db/test_reminders_cli.py``, ``reminders/tests/unit/test_reminders_cli.py``.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
import sqlalchemy as sa


def outbox_rows(engine: sa.Engine) -> list[Any]:
    with engine.connect() as conn:
        return list(conn.execute(sa.text("SELECT kalit, payload, holat FROM outbox ORDER BY id")))


def _script(name: str) -> list[str]:
    installed = Path(sys.executable).parent / name
    return [str(installed)] if installed.exists() else [sys.executable, "-m", name]


@pytest.mark.parametrize(
    "command", [_script("reminders"), [sys.executable, "-m", "reminders"]], ids=["script", "-m"]
)
def test_the_installed_command(db_url: str, engine: sa.Engine, command: list[str]) -> None:
    env = {**os.environ, "OUTBOX_DATABASE_URL": db_url}

    def call(*argv: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            [*command, *argv], env=env, capture_output=True, text=True, timeout=120, check=False
        )

    user = call("user", "add", "--name", "Dilnoza", "--chat-id", "42")
    assert user.returncode == 0, user.stderr
    task = call("add", "Hisobot", "--user", user.stdout.strip(), "--due", "2099-01-15 09:00")
    assert task.returncode == 0, task.stderr
    listed = call("list", "--json")
    assert json.loads(listed.stdout)[0]["title"] == "Hisobot"
    bad = call("add", "T", "--user", "1", "--due", "someday")
    assert bad.returncode == 2
    assert bad.stdout == ""
    assert bad.stderr.startswith("reminders: cannot read the due time 'someday'")
    assert "Traceback" not in bad.stderr
    assert len(outbox_rows(engine)) == 1
