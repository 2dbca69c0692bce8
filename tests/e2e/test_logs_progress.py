"""Logs a log system can read (``--log-format json``) and progress lines on a terminal.

Here the e2e tier's tests (processes); the others are in ``tests/unit/test_logs_progress.py``.
"""

from __future__ import annotations

import json
import os
import pty
import subprocess
import sys
import urllib.request
from pathlib import Path
from typing import Any

import sqlalchemy as sa

from outbox_testing.fake_telegram import FakeTelegram, Fault
from tests.support import (
    TEST_TOKEN,
    enqueue_numbered,
    free_port,
    relay_env,
    run_module,
    states,
    wait_until,
)


def _json_lines(text: str) -> list[dict[str, Any]]:
    lines = [line for line in text.splitlines() if line.strip()]
    return [json.loads(line) for line in lines]  # every line is one JSON object


def test_the_fake_bot_api_takes_the_log_format_too(tmp_path: Path) -> None:
    port = free_port()
    env = {k: v for k, v in os.environ.items() if not k.startswith(("OUTBOX_", "TELEGRAM_"))}
    env["OUTBOX_LOG_FORMAT"] = "json"
    log = tmp_path / "fake.log"
    with log.open("wb") as out:
        proc = subprocess.Popen(
            [sys.executable, "-m", "outbox.cli", "fake-telegram", "--port", str(port),
             "--log-format", "json"],
            env=env, stdout=out, stderr=subprocess.STDOUT,
        )  # fmt: skip
    try:

        def answers() -> bool:
            try:
                url = f"http://127.0.0.1:{port}/bot{TEST_TOKEN}/getMe"
                with urllib.request.urlopen(url, timeout=2) as response:
                    return bool(response.status == 200)
            except OSError:
                return proc.poll() is not None

        wait_until(answers, 30, "the fake Bot API", explain=log.read_text)
        assert proc.poll() is None, log.read_text()
    finally:
        proc.terminate()
        proc.wait(10)


def _on_terminal(argv: list[str], env: dict[str, str], cwd: Path) -> tuple[int, str, str]:
    """Run a command whose stderr is a terminal (a pseudo-terminal); its stdout and stderr."""
    master, slave = pty.openpty()
    proc = subprocess.Popen(
        argv, env=env, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=slave, cwd=cwd
    )
    os.close(slave)
    seen = bytearray()
    while True:
        try:
            chunk = os.read(master, 4096)
        except OSError:  # EIO: the command closed the terminal
            break
        if not chunk:
            break
        seen += chunk
    os.close(master)
    assert proc.stdout is not None
    with proc.stdout:
        out = proc.stdout.read().decode()
    return proc.wait(60), out, seen.decode(errors="replace")


def test_a_drain_on_a_terminal_shows_how_far_it_is(
    db_url: str, engine: sa.Engine, fake_telegram: FakeTelegram, tmp_path: Path
) -> None:
    enqueue_numbered(engine, 300, first_chat=5000)
    argv = [sys.executable, "-m", "outbox.cli", "relay", "--drain"]
    code, out, terminal = _on_terminal(argv, relay_env(db_url, fake_telegram.api_url), tmp_path)
    assert code == 0, terminal
    assert "drain: 0 done, 300 left" in terminal  # the first line, before anything is sent
    last = terminal.replace("\r\n", "\n").split("\r")[-1]
    assert last.startswith("drain: 300 done, 0 left, "), terminal
    assert "/s" in last
    assert "relay stopped: 300 sent" in out
    assert states(engine)["bajarildi"] == 300


def test_prune_on_a_terminal_shows_how_far_it_is_and_nothing_elsewhere(
    db_url: str, engine: sa.Engine, tmp_path: Path
) -> None:
    with engine.begin() as conn:
        conn.execute(
            sa.text(
                "INSERT INTO outbox (kalit, payload, holat, yangilangan) "
                "SELECT 'old' || i, '{\"chat_id\": 1, \"text\": \"x\"}', 'bajarildi', "
                "now() - interval '10 days' FROM generate_series(1, 2500) AS i"
            )
        )
    env = relay_env(db_url, "http://127.0.0.1:9")
    argv = [sys.executable, "-m", "outbox.cli", "prune", "--batch-size", "1000"]
    code, out, terminal = _on_terminal(argv, env, tmp_path)
    assert code == 0, terminal
    assert "prune: 0 done, 2,500 left" in terminal
    last = terminal.replace("\r\n", "\n").split("\r")[-1]
    assert last.startswith("prune: 2,500 done, 0 left, "), terminal
    assert "pruned 2500 bajarildi rows" in out

    # Not a terminal: the output is what it always was.
    with engine.begin() as conn:
        conn.execute(
            sa.text(
                "INSERT INTO outbox (kalit, payload, holat, yangilangan) "
                "VALUES ('old', '{\"chat_id\": 1, \"text\": \"x\"}', 'bajarildi', "
                "now() - interval '10 days')"
            )
        )
    done = subprocess.run(
        argv, env=env, capture_output=True, text=True, timeout=120, check=True, cwd=tmp_path
    )
    assert "prune:" not in done.stderr and "pruned 1 bajarildi rows" in done.stdout


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
