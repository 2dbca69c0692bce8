"""Logs a log system can read (``--log-format json``) and progress lines on a terminal."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import sqlalchemy as sa

from outbox_testing.fake_telegram import FakeTelegram, Fault
from tests.support import (
    TEST_TOKEN,
    relay_env,
    run_module,
)


def _json_lines(text: str) -> list[dict[str, Any]]:
    lines = [line for line in text.splitlines() if line.strip()]
    return [json.loads(line) for line in lines]  # every line is one JSON object


def test_the_relay_logs_json_lines_about_each_message(
    db_url: str, engine: sa.Engine, fake_telegram: FakeTelegram, tmp_path: Path
) -> None:
    fake_telegram.script(777, Fault.forbidden())
    with engine.begin() as conn:
        conn.execute(
            sa.text(
                "INSERT INTO outbox (kalit, payload) VALUES "
                '(\'blocked-user\', \'{"chat_id": 777, "text": "salom"}\')'
            )
        )
    done = run_module(
        "outbox.cli",
        *("relay", "--drain", "--log-format", "json"),
        env=relay_env(db_url, fake_telegram.api_url),
        cwd=tmp_path,
        timeout=120,
    )
    assert done.returncode == 0, done.stderr
    lines = _json_lines(done.stderr)
    assert all({"time", "level", "logger", "message"} <= set(line) for line in lines)
    failed = [line for line in lines if "failed for good" in line["message"]]
    assert len(failed) == 1, lines
    assert failed[0]["level"] == "WARNING" and failed[0]["logger"] == "outbox.relay"
    assert (failed[0]["key"], failed[0]["chat_id"]) == ("blocked-user", 777)
    assert isinstance(failed[0]["outbox_id"], int)
    assert TEST_TOKEN not in done.stderr
    assert "drain:" not in done.stderr  # not a terminal: no progress line
