"""The app's side: async enqueue with both drivers, payloads refused at enqueue, the operator
functions from Python, and the commands' answers to a missing or secret-bearing database URL.

Here the unit tier's tests (no database); the others are in ``tests/db/test_app_api.py``,
``tests/e2e/test_app_api.py``.
"""

from __future__ import annotations

import asyncio
import inspect
import os
import sys
from typing import Any

import pytest

from outbox.cli import main as outbox_main
from reminders.cli import main as reminders_main
from tests.support import TEST_TOKEN

# outbox.configure (and an in-process CLI's --schema) set a process-wide value.
pytestmark = pytest.mark.usefixtures("schema_setting_restored")


# --- the commands: no URL, and a URL with a password in it -------------------------------------

OUTBOX_COMMANDS = [["migrate"], ["relay", "--drain"], ["status"], ["replay", "1"]]
REMINDERS_COMMANDS = [
    ["migrate"],
    ["list"],
    ["user", "add", "--name", "Aziz", "--chat-id", "5"],
    ["add", "hisobot", "--user", "1", "--due", "2030-01-01 10:00"],
    ["done", "1"],
]


def _one_line(err: str, prefix: str) -> str:
    assert err.count("\n") == 1 and err.startswith(prefix) and "Traceback" not in err, err
    return err


@pytest.mark.parametrize(
    ("program", "argv"),
    [("outbox", argv) for argv in OUTBOX_COMMANDS]
    + [("reminders", argv) for argv in REMINDERS_COMMANDS],
    ids=lambda value: value if isinstance(value, str) else " ".join(value[:2]),
)
def test_a_missing_database_url_is_one_line_and_never_the_embedded_server(
    program: str,
    argv: list[str],
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
    tmp_path: Any,
) -> None:
    for name in list(os.environ):
        if name.startswith("OUTBOX_"):
            monkeypatch.delenv(name)
    monkeypatch.setenv("TELEGRAM_BOT_TOKEN", TEST_TOKEN)
    monkeypatch.chdir(tmp_path)
    main = outbox_main if program == "outbox" else reminders_main
    code = main(argv)
    err = capsys.readouterr().err
    assert code == 3
    assert "no database: set OUTBOX_DATABASE_URL" in _one_line(err, f"{program}: no database")
    assert not (tmp_path / ".outbox").exists()  # no embedded server was started


@pytest.mark.parametrize("program", ["outbox", "reminders"])
def test_embedded_without_its_extra_is_one_line_naming_the_extra(
    program: str,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
    tmp_path: Any,
) -> None:
    monkeypatch.setitem(sys.modules, "pgserver", None)  # as on a plain `pip install`
    main = outbox_main if program == "outbox" else reminders_main
    code = main(["migrate", "--database-url", f"embedded:{tmp_path}"])
    err = capsys.readouterr().err
    assert code == 3
    assert "pip install 'outbox-telegram[embedded]'" in _one_line(err, f"{program}: ")


# --- the sync and async twins: one body, the same parameters -----------------------------------

TWINS = [
    "cancel",
    "clear_quiet_hours",
    "enqueue",
    "enqueue_many",
    "get_quiet_hours",
    "set_quiet_hours",
    "unblock_chat",
    "update_pending",
]


@pytest.mark.parametrize("name", TWINS)
def test_each_twin_takes_the_connection_then_the_same_parameters(name: str) -> None:
    import outbox

    sync, awaited = getattr(outbox, name), getattr(outbox, f"{name}_async")
    assert (sync.__name__, awaited.__name__) == (name, f"{name}_async")
    assert not inspect.iscoroutinefunction(sync) and inspect.iscoroutinefunction(awaited)
    ours, theirs = inspect.signature(sync), inspect.signature(awaited)
    assert next(iter(ours.parameters)) == next(iter(theirs.parameters)) == "conn"
    assert ours.parameters["conn"].annotation == "SyncConn"
    assert theirs.parameters["conn"].annotation == "AsyncAppConn"
    assert list(ours.parameters.values())[1:] == list(theirs.parameters.values())[1:]
    assert sync.__doc__ and f"``{name}`` for an ``AsyncSession``" in awaited.__doc__


def test_a_twin_checks_its_arguments_before_the_connection_is_used() -> None:
    import outbox
    from outbox.errors import InvalidInput

    # No connection at all: the refusal comes first, and conn may be given by name.
    with pytest.raises(InvalidInput, match="chat_id takes a Telegram chat id"):
        outbox.unblock_chat(conn=None, chat_id="not a chat")  # type: ignore[call-arg]
    with pytest.raises(InvalidInput, match="non-empty key"):
        asyncio.run(outbox.enqueue_async(None, key="", payload={}))  # type: ignore[arg-type]
