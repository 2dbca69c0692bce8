"""The command line a newcomer expects: ``--version``, ``python -m``, options after the command,
defaults in ``--help``, a bad value in one line that names its flag, ``reminders user list``,
and the relay saying which Bot API it talks to.

Here the e2e tier's tests (processes); the others are in ``tests/db/test_cli_newcomer.py``,
``tests/unit/test_cli_newcomer.py``.
"""

from __future__ import annotations

import os
from pathlib import Path

from tests.support import TEST_TOKEN, Relays, run_module, wait_until


def clean_env(**extra: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("OUTBOX_", "TELEGRAM_"))}
    return {**env, **extra}


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


def test_python_dash_m_outbox_runs_a_command(db_url: str, tmp_path: Path) -> None:
    done = run_module("outbox", "status", env=clean_env(OUTBOX_DATABASE_URL=db_url), cwd=tmp_path)
    assert done.returncode == 0, done.stderr
    assert "kutmoqda" in done.stdout
