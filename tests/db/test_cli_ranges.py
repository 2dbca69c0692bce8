"""Every value the command line takes has a range, and global options work before the command.

Out-of-range numbers, ids beyond bigint, ``inf``, ``nan`` and absurd durations are one line
naming the flag (or variable): exit 2, or 3 for the relay's settings; never a traceback.

Here the db tier's tests (PostgreSQL, in the test's process); the others are in
``tests/unit/test_cli_ranges.py``.
"""

from __future__ import annotations

import asyncio

import pytest
import sqlalchemy as sa

from outbox import queries
from outbox import schema as outbox_schema
from outbox.db import async_connect
from reminders.cli import main as reminders_main
from tests.support import add_rows_for_retention, rows_and_markers
from tests.support.admin import add_failed, run

UNREACHABLE = "postgresql://outbox:s3cret@127.0.0.1:1/outbox"


def one_line(err: str) -> str:
    assert err.count("\n") == 1 and "Traceback" not in err, err
    return err


# --- issue-19 defects ----------------------------------------------------------------------------


def test_global_options_work_before_the_command(
    db_url: str, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(outbox_schema, "_configured", None)  # --schema sets a process-wide value
    code, out, _ = run(capsys, "--database-url", db_url, "status")
    assert code == 0 and "kutmoqda" in out
    code, _, err = run(capsys, "--database-url", db_url, "--schema", "jobs", "status")
    assert code == 5
    assert one_line(err).startswith("outbox: the outbox tables are missing in schema jobs")


def test_max_failed_0_is_unhealthy_at_the_first_failure(
    engine: sa.Engine, db_url: str, capsys: pytest.CaptureFixture[str]
) -> None:
    code, _, _ = run(capsys, "status", "--max-failed", "0", "--database-url", db_url)
    assert code == 0
    add_failed(engine, "a")
    code, _, err = run(capsys, "status", "--max-failed", "0", "--database-url", db_url)
    assert code == 8
    assert "1 failed messages, more than --max-failed 0" in err


def test_retention_0_keeps_the_done_rows_for_prune_as_for_the_relay(
    engine: sa.Engine,
    db_url: str,
    capsys: pytest.CaptureFixture[str],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    add_rows_for_retention(engine)
    monkeypatch.setenv("OUTBOX_RETENTION", "0")
    code, out, _ = run(capsys, "prune", "--database-url", db_url)
    assert code == 0
    assert out.startswith("kept every bajarildi row (OUTBOX_RETENTION=0); pruned 1 sent markers")
    assert rows_and_markers(engine) == (["failed-long-ago", "old", "recent"], ["recent"])


def test_migrate_says_what_it_did(
    empty_db_url: str, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("OUTBOX_LOG_LEVEL", "WARNING")
    code, out, _ = run(capsys, "migrate", "--database-url", empty_db_url)
    assert code == 0
    assert out.startswith("created the outbox tables in schema public (revision outbox_0")
    code, out, _ = run(capsys, "migrate", "--database-url", empty_db_url)
    assert out.startswith("the outbox tables in schema public are up to date (revision outbox_")


def test_reminders_migrate_says_what_it_did(
    empty_db_url: str, capsys: pytest.CaptureFixture[str]
) -> None:
    assert reminders_main(["migrate", "--database-url", empty_db_url]) == 0
    first = capsys.readouterr().out.splitlines()
    assert first[0].startswith("created the outbox tables (revision outbox_")
    assert first[1].startswith("created the vazifalar tables (revision reminders_")
    assert reminders_main(["migrate", "--database-url", empty_db_url]) == 0
    again = capsys.readouterr().out.splitlines()
    assert [line.split(" (")[0] for line in again] == [
        "the outbox tables are up to date",
        "the vazifalar tables are up to date",
    ]


def test_reminders_takes_the_database_before_the_command_and_never_echoes_its_password(
    db_url: str, capsys: pytest.CaptureFixture[str]
) -> None:
    assert reminders_main(["--database-url", db_url, "list"]) == 0
    capsys.readouterr()
    assert reminders_main(["--databse-url", UNREACHABLE, "list"]) == 2
    err = capsys.readouterr().err
    assert "s3cret" not in one_line(err)
    assert "postgresql://outbox:***@127.0.0.1:1/outbox" in err


def test_the_prune_count_keeps_the_done_rows_with_retention_0(
    engine: sa.Engine, db_url: str
) -> None:
    """The progress line's total (shown on a terminal) agrees with what prune deletes."""
    add_rows_for_retention(engine)

    async def count(done: float | None) -> int:
        conn = await async_connect(db_url, prepare=False)
        try:
            return await queries.count_prunable(
                conn,
                schema="public",
                done_older_than_seconds=done,
                markers_older_than_seconds=30 * 86400.0,
            )
        finally:
            await conn.close()

    assert asyncio.run(count(None)) == 1  # the old marker only
    assert asyncio.run(count(7 * 86400.0)) == 2  # and the done row 8 days old
