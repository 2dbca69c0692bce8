"""The ``reminders`` command line, in-process and as the installed script.

Here the db tier's tests (PostgreSQL, in the test's process); the others are in
``reminders/tests/e2e/test_reminders_cli.py``, ``reminders/tests/unit/test_reminders_cli.py``.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

import pytest
import sqlalchemy as sa

from reminders.cli import main


@dataclass(frozen=True)
class Ran:
    code: int
    out: str
    err: str


Run = Callable[..., Ran]


@pytest.fixture
def run(monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str], db_url: str) -> Run:
    monkeypatch.setenv("OUTBOX_DATABASE_URL", db_url)
    for name in ("REMINDERS_USER", "REMINDERS_TZ", "REMINDERS_REMIND_BEFORE"):
        monkeypatch.delenv(name, raising=False)

    def run(*argv: str) -> Ran:
        code = main(list(argv))
        captured = capsys.readouterr()
        return Ran(code, captured.out, captured.err)

    return run


def snapshot(engine: sa.Engine) -> list[Any]:
    """Every row of the tables the command could touch."""
    with engine.connect() as conn:
        return [
            conn.execute(sa.text(f"SELECT * FROM {table} ORDER BY 1")).all()
            for table in ("foydalanuvchi", "vazifa", "outbox", "yuborilgan")
        ]


def outbox_rows(engine: sa.Engine) -> list[Any]:
    with engine.connect() as conn:
        return list(conn.execute(sa.text("SELECT kalit, payload, holat FROM outbox ORDER BY id")))


def add_user(run: Run, *extra: str) -> int:
    ran = run("user", "add", "--name", "Dilnoza", "--chat-id", "42", *extra)
    assert ran.code == 0, ran.err
    return int(ran.out)


def add_task(run: Run, user: int, *extra: str, title: str = "Hisobot") -> int:
    ran = run("add", title, "--user", str(user), "--due", "2099-01-15 09:00", *extra)
    assert ran.code == 0, ran.err
    return int(ran.out)


def test_user_add_and_add_print_new_ids(run: Run, engine: sa.Engine) -> None:
    user = add_user(run)
    task = add_task(run, user)
    assert (user, task) == (1, 1)
    [(key, payload, state)] = outbox_rows(engine)
    assert key.startswith(f"vazifa:{task}:3600:")
    assert state == "kutmoqda"
    assert payload["chat_id"] == 42
    assert "15.01.2099, 09:00 (Asia/Tashkent)" in payload["text"]


def test_due_is_read_in_the_users_time_zone(run: Run, engine: sa.Engine) -> None:
    user = add_user(run, "--tz", "Europe/Berlin")
    add_task(run, user)
    with engine.connect() as conn:
        due = conn.execute(sa.text("SELECT muddat FROM vazifa")).scalar_one()
    assert due == datetime(2099, 1, 15, 8, 0, tzinfo=UTC)


def test_an_iso_time_with_an_offset_is_taken_as_is(run: Run, engine: sa.Engine) -> None:
    user = add_user(run, "--tz", "Europe/Berlin")
    ran = run("add", "T", "--user", str(user), "--due", "2099-01-15T09:00+05:00")
    assert ran.code == 0, ran.err
    with engine.connect() as conn:
        due = conn.execute(sa.text("SELECT muddat FROM vazifa")).scalar_one()
    assert due == datetime(2099, 1, 15, 4, 0, tzinfo=UTC)


def test_repeated_remind_before_gives_one_reminder_each(run: Run, engine: sa.Engine) -> None:
    user = add_user(run)
    task = add_task(run, user, "--remind-before", "1d", "--remind-before", "1h30m")
    keys = [key for key, _, _ in outbox_rows(engine)]
    assert [k.split(":")[:3] for k in keys] == [
        ["vazifa", str(task), "86400"],
        ["vazifa", str(task), "5400"],
    ]


def test_environment_twins(run: Run, engine: sa.Engine, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("REMINDERS_TZ", "Europe/Berlin")
    user = add_user(run)
    monkeypatch.setenv("REMINDERS_USER", str(user))
    monkeypatch.setenv("REMINDERS_REMIND_BEFORE", "1d,30m")
    ran = run("add", "T", "--due", "2099-01-15 09:00")
    assert ran.code == 0, ran.err
    assert len(outbox_rows(engine)) == 2
    listed = json.loads(run("list", "--json").out)
    assert listed[0]["time_zone"] == "Europe/Berlin"
    assert listed[0]["remind_before_seconds"] == [86400, 1800]


def test_an_overdue_task_is_created_and_says_so(run: Run, engine: sa.Engine) -> None:
    user = add_user(run)
    ran = run("add", "Eski", "--user", str(user), "--due", "2001-01-01 09:00")
    assert ran.code == 0
    assert ran.out.strip() == "1"
    assert "overdue" in ran.err and "no reminder will be sent" in ran.err
    assert outbox_rows(engine) == []


def test_done_delete_rename_reschedule(run: Run, engine: sa.Engine) -> None:
    user = add_user(run)
    first, second = add_task(run, user), add_task(run, user, title="Ikkinchi")

    ran = run("rename", str(first), "Yangi & <nom>")
    assert (ran.code, ran.out) == (0, f"task {first} renamed; 1 unsent reminder updated\n")
    assert "Yangi &amp; &lt;nom&gt;" in outbox_rows(engine)[0][1]["text"]

    ran = run("reschedule", str(first), "--due", "2099-02-01 10:00")
    assert ran.code == 0, ran.err
    assert "now due 2099-02-01 10:00 +05" in ran.out
    assert "1 reminder scheduled, 1 unsent reminder withdrawn" in ran.out

    ran = run("done", str(first))
    assert (ran.code, ran.out) == (0, f"task {first} is done; 1 unsent reminder withdrawn\n")

    ran = run("delete", str(second))
    assert (ran.code, ran.out) == (0, f"task {second} deleted; 1 unsent reminder withdrawn\n")
    assert outbox_rows(engine) == []


def test_list_as_a_table_and_as_json(run: Run) -> None:
    user = add_user(run)
    other = add_user(run, "--tz", "Europe/Berlin")
    add_task(run, user, "--remind-before", "1d", "--remind-before", "1h")
    add_task(run, other, title="Berlin\nvazifasi")
    run("done", "2")

    table = run("list").out.splitlines()
    assert table[0].split() == ["ID", "USER", "DUE", "REMIND", "DONE", "TITLE"]
    assert table[1].split() == ["1", "1", "2099-01-15", "09:00", "+05", "1d,1h", "no", "Hisobot"]
    assert table[2].split() == [
        "2",
        "2",
        "2099-01-15",
        "09:00",
        "CET",
        "1h",
        "yes",
        "Berlin",
        "vazifasi",
    ]
    # Aligned: every column starts at the same place on every line.
    assert table[0].index("TITLE") == table[1].index("Hisobot") == table[2].index("Berlin")

    listed = json.loads(run("list", "--user", str(other), "--json").out)
    assert listed == [
        {
            "id": 2,
            "user_id": other,
            "title": "Berlin\nvazifasi",
            "due": "2099-01-15T09:00:00+01:00",
            "time_zone": "Europe/Berlin",
            "remind_before_seconds": [3600],
            "done": True,
        }
    ]
    assert run("list", "--user", "1", "--json").code == 0


BAD_INPUT: dict[str, tuple[list[str], str]] = {
    "chat id not a number": (
        ["user", "add", "--name", "X", "--chat-id", "abc"],
        "chat id must be a number",
    ),
    "unknown zone": (
        ["user", "add", "--name", "X", "--chat-id", "5", "--tz", "Mars/Olympus"],
        "unknown time zone 'Mars/Olympus'",
    ),
    "empty name": (["user", "add", "--name", " ", "--chat-id", "5"], "name is empty"),
    "empty title": (["add", "", "--user", "1", "--due", "2099-01-15 09:00"], "title is empty"),
    "unknown user": (
        ["add", "T", "--user", "999", "--due", "2099-01-15 09:00"],
        "user 999 does not exist",
    ),
    "user not a number": (
        ["add", "T", "--user", "me", "--due", "2099-01-15 09:00"],
        "user id must be a whole number",
    ),
    "unparseable time": (["add", "T", "--user", "1", "--due", "tomorrow"], "cannot read the due"),
    "date without time": (["add", "T", "--user", "1", "--due", "2099-01-15"], "no time of day"),
    "time skipped by the clocks": (
        ["add", "T", "--user", "2", "--due", "2099-03-29 02:30"],
        "does not exist in Europe/Berlin",
    ),
    "bad duration": (
        ["add", "T", "--user", "1", "--due", "2099-01-15 09:00", "--remind-before", "5x"],
        "cannot read duration '5x'",
    ),
    "done unknown": (["done", "999"], "task 999 does not exist"),
    "done not a number": (["done", "abc"], "task id must be a whole number"),
    "delete unknown": (["delete", "999"], "task 999 does not exist"),
    "rename unknown": (["rename", "999", "X"], "task 999 does not exist"),
    "rename to empty": (["rename", "1", "   "], "title is empty"),
    "reschedule unknown": (
        ["reschedule", "999", "--due", "2099-01-15 09:00"],
        "task 999 does not exist",
    ),
    "reschedule to nonsense": (["reschedule", "1", "--due", "soon"], "cannot read the due"),
    "list unknown user": (["list", "--user", "999"], "user 999 does not exist"),
    "missing flag": (["add", "T", "--user", "1"], "the following arguments are required: --due"),
    "unknown command": (["frobnicate"], "invalid choice"),
    "no command": ([], "required"),
}


@pytest.mark.parametrize("case", BAD_INPUT)
def test_bad_input_gives_one_line_and_changes_nothing(
    run: Run, engine: sa.Engine, case: str
) -> None:
    add_user(run)
    add_user(run, "--tz", "Europe/Berlin")
    add_task(run, 1)
    before = snapshot(engine)
    argv, message = BAD_INPUT[case]
    ran = run(*argv)
    assert ran.code == 2
    assert ran.out == ""
    assert len(ran.err.splitlines()) == 1, ran.err
    assert message in ran.err
    assert ran.err.startswith("reminders")
    assert snapshot(engine) == before


def test_a_database_without_the_schema_says_to_migrate(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str], empty_db_url: str
) -> None:
    monkeypatch.setenv("OUTBOX_DATABASE_URL", empty_db_url)
    assert main(["list"]) == 5
    err = capsys.readouterr().err
    assert "outbox migrate" in err
    assert len(err.splitlines()) == 1


def test_help_exits_zero(run: Run) -> None:
    ran = run("add", "--help")
    assert ran.code == 0
    assert "--remind-before" in ran.out
