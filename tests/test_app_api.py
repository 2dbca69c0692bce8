"""The app's side: async enqueue with both drivers, payloads refused at enqueue, the operator
functions from Python, and the commands' answers to a missing or secret-bearing database URL."""

from __future__ import annotations

import asyncio
import functools
import os
import signal
import subprocess
import sys
import tempfile
from collections.abc import Awaitable, Callable
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any, TypeVar

import pytest
import sqlalchemy as sa
from sqlalchemy.ext.asyncio import AsyncConnection, AsyncSession, create_async_engine
from sqlalchemy.orm import Session

import outbox
from outbox import migrate
from outbox.cli import main as outbox_main
from outbox.db import create_engine
from outbox.errors import InvalidPayload
from reminders.cli import main as reminders_main
from tests.conftest import TEST_TOKEN
from tests.support import insert_raw, wait_until

T = TypeVar("T")
AsyncAppConn = AsyncSession | AsyncConnection


# outbox.configure (and an in-process CLI's --schema) set a process-wide value.
pytestmark = pytest.mark.usefixtures("schema_setting_restored")


def _run_async(url: str, driver: str, kind: str, work: Callable[[AsyncAppConn], Awaitable[T]]) -> T:
    """``work`` in one transaction of an AsyncSession or AsyncConnection, then commit."""

    async def run() -> T:
        engine = create_async_engine(f"postgresql+{driver}://" + url.split("://", 1)[1])
        try:
            if kind == "session":
                async with AsyncSession(engine) as session, session.begin():
                    return await work(session)
            async with engine.begin() as conn:
                return await work(conn)
        finally:
            await engine.dispose()

    return asyncio.run(run())


def _rows(url: str, schema: str) -> dict[str, tuple[Any, ...]]:
    engine = create_engine(url)
    try:
        with engine.begin() as conn:
            found = conn.execute(
                sa.text(f"SELECT kalit, payload, keyingi_urinish, holat FROM {schema}.outbox")
            )
            return {r[0]: tuple(r[1:]) for r in found}
    finally:
        engine.dispose()


@pytest.mark.parametrize(
    ("driver", "kind", "schema"),
    [
        ("psycopg", "session", "public"),
        ("psycopg", "connection", "jobs"),
        ("asyncpg", "session", "jobs"),
        ("asyncpg", "connection", "public"),
    ],
)
def test_async_enqueue_cancel_and_update_in_the_callers_transaction(
    driver: str, kind: str, schema: str, db_url: str
) -> None:
    if schema != "public":
        migrate.upgrade(db_url, schema=schema)
        outbox.configure(schema=schema)  # the Python-side setting every function honours
    later = datetime.now(UTC) + timedelta(hours=2)

    async def add(conn: AsyncAppConn) -> list[outbox.Enqueued]:
        return [
            await outbox.enqueue_async(conn, key="a", payload={"chat_id": 1, "text": "bir"}),
            await outbox.enqueue_async(conn, key="a", payload={"chat_id": 1, "text": "again"}),
            await outbox.enqueue_async(
                conn, key="b", payload={"chat_id": "@kanal", "text": "ikki"}, run_at=later
            ),
            await outbox.enqueue_async(conn, key="c", payload={"chat_id": 3, "text": "uch"}),
        ]

    first, again, _, _ = _run_async(db_url, driver, kind, add)
    assert first.created and not again.created and again.id == first.id

    async def change(conn: AsyncAppConn) -> tuple[bool, bool, int, int]:
        new = {"chat_id": "@kanal", "text": "ikki!", "parse_mode": "HTML"}
        return (
            await outbox.update_pending_async(conn, "b", new),
            await outbox.update_pending_async(conn, "nope", new),
            await outbox.cancel_async(conn, ["c", "nope"]),
            await outbox.cancel_async(conn, []),
        )

    assert _run_async(db_url, driver, kind, change) == (True, False, 1, 0)

    async def rolled_back(conn: AsyncAppConn) -> None:
        await outbox.enqueue_async(conn, key="d", payload={"chat_id": 4, "text": "to'rt"})
        raise LookupError("the app's request failed")

    with pytest.raises(LookupError):
        _run_async(db_url, driver, kind, rolled_back)

    rows = _rows(db_url, schema)
    assert set(rows) == {"a", "b"}
    assert rows["a"][0] == {"chat_id": 1, "text": "bir"}
    assert rows["b"][0] == {"chat_id": "@kanal", "text": "ikki!", "parse_mode": "HTML"}
    assert rows["b"][1] == later


BAD_PAYLOADS: list[tuple[Any, str]] = [
    ({"chat_id": "abc", "text": "salom"}, "chat_id 'abc'"),
    ({"chat_id": True, "text": "salom"}, "chat_id"),
    ({"text": "salom"}, "chat_id"),
    ({"chat_id": 1, "text": "x" * 5000}, "text is 5000 characters"),
    ({"chat_id": 1, "text": "   "}, "text"),
    ({"chat_id": 1}, "text"),
    ({"chat_id": 1, "text": "salom", "reply_markup": {}}, "reply_markup"),
    ({"chat_id": 1, "text": "salom", "parse_mode": "html"}, "parse_mode"),
    ({"chat_id": 1, "text": "salom", "message_thread_id": 0}, "message_thread_id"),
    ({"chat_id": 1, "text": "salom", "disable_notification": "yes"}, "disable_notification"),
    (["chat_id", "text"], "JSON object"),
]
GOOD = {"chat_id": 1, "text": "yaxshi"}


def _refused(call: Callable[[], object], field: str) -> None:
    with pytest.raises(InvalidPayload) as refused:
        call()
    assert field in str(refused.value)


@pytest.mark.parametrize("kind", ["session", "connection"])
def test_every_bad_payload_is_refused_at_enqueue_and_update_naming_the_field(
    kind: str, engine: sa.Engine
) -> None:
    with Session(engine) if kind == "session" else engine.connect() as conn, conn.begin():
        outbox.enqueue(conn, key="kept", payload=GOOD)
        for n, (payload, field) in enumerate(BAD_PAYLOADS):
            _refused(functools.partial(outbox.enqueue, conn, key=f"bad{n}", payload=payload), field)
            _refused(functools.partial(outbox.update_pending, conn, "kept", payload), field)
    with engine.begin() as conn:
        [(key, payload)] = conn.execute(sa.text("SELECT kalit, payload FROM outbox")).all()
    assert (key, payload) == ("kept", GOOD)


def test_bad_payloads_are_refused_by_the_async_twins_too(db_url: str) -> None:
    async def work(conn: AsyncAppConn) -> None:
        await outbox.enqueue_async(conn, key="kept", payload=GOOD)
        for payload, field in BAD_PAYLOADS:
            with pytest.raises(InvalidPayload, match=field.replace("(", r"\(")):
                await outbox.enqueue_async(conn, key="bad", payload=payload)
            with pytest.raises(InvalidPayload, match=field.replace("(", r"\(")):
                await outbox.update_pending_async(conn, "kept", payload)

    _run_async(db_url, "asyncpg", "session", work)
    assert {k: v[0] for k, v in _rows(db_url, "public").items()} == {"kept": GOOD}


def test_cancel_takes_one_key_as_a_string_not_as_its_characters(engine: sa.Engine) -> None:
    with engine.begin() as conn:
        for key in ("order-5", "o", "r"):
            outbox.enqueue(conn, key=key, payload=GOOD)
    with engine.begin() as conn:
        assert outbox.cancel(conn, "order-5") == 1
    with engine.begin() as conn:
        keys = {k for (k,) in conn.execute(sa.text("SELECT kalit FROM outbox"))}
    assert keys == {"o", "r"}


def test_the_operator_functions_from_python(engine: sa.Engine) -> None:
    with engine.begin() as conn:
        outbox.enqueue(conn, key="ok", payload=GOOD)
        insert_raw(conn, "broken", {"chat_id": 2, "text": "x"})
        conn.execute(
            sa.text(
                "UPDATE outbox SET holat = 'xato', oxirgi_xato = 'chat not found' "
                "WHERE kalit = 'broken'"
            )
        )
    with engine.begin() as conn:
        status = outbox.queue_status(conn)
        assert status.counts["kutmoqda"] == 1 and status.counts["xato"] == 1
        [failed] = outbox.failed_messages(conn)
        assert failed.key == "broken" and failed.last_error == "chat not found"
        message = outbox.get_message(conn, failed.id)
        assert message is not None and message.state == "xato"
        [result] = outbox.replay(conn, [failed.id])
        assert result.replayed
    with engine.begin() as conn:
        assert outbox.queue_status(conn).counts["kutmoqda"] == 2
        assert [m.key for m in outbox.list_messages(conn, state="kutmoqda")] == ["broken", "ok"]


def test_the_operator_functions_tell_and_filter_queues(engine: sa.Engine) -> None:
    with engine.begin() as conn:
        outbox.enqueue(conn, key="plain", payload=GOOD)
        outbox.enqueue(conn, key="shop", payload=GOOD, queue="shop_bot")
        conn.execute(sa.text("UPDATE outbox SET holat = 'xato'"))
    with engine.begin() as conn:
        [shop] = outbox.failed_messages(conn, queue="shop_bot")
        assert (shop.key, shop.queue) == ("shop", "shop_bot")
        message = outbox.get_message(conn, shop.id)
        assert message is not None and message.queue == "shop_bot"
        assert {m.key: m.queue for m in outbox.failed_messages(conn)} == {
            "plain": "default",
            "shop": "shop_bot",
        }
        status = outbox.queue_status(conn)
        assert {name: figures.counts["xato"] for name, figures in status.queues.items()} == {
            "default": 1,
            "shop_bot": 1,
        }
        assert list(outbox.queue_status(conn, queue="shop_bot").queues) == ["shop_bot"]


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


SECRET = "Qs-s3cret-77"
SECRET_URLS = {
    # Unreachable (port 1): the error line names the server, not the password.
    "query": (f"postgresql://outbox@127.0.0.1:1/outbox?sslmode=disable&password={SECRET}", 4),
    "user-part": (f"postgresql://outbox:{SECRET}@127.0.0.1:1/outbox", 4),
    # Does not parse as a URL: an unencoded "/" in the password made urllib read a port.
    "malformed": (f"postgresql://outbox:{SECRET[:3]}/{SECRET[3:]}@127.0.0.1/outbox", 3),
    "conninfo": (f"host=127.0.0.1 port=1 password={SECRET}", 3),
}


@pytest.mark.parametrize("which", list(SECRET_URLS))
@pytest.mark.parametrize(
    "argv",
    [
        ["outbox", "migrate"],
        ["outbox", "relay", "--drain"],
        ["outbox", "status"],
        ["outbox", "replay", "1"],
        ["reminders", "migrate"],
        ["reminders", "list"],
    ],
    ids=" ".join,
)
def test_a_database_password_is_never_printed(which: str, argv: list[str]) -> None:
    url, exit_code = SECRET_URLS[which]
    env = {k: v for k, v in os.environ.items() if not k.startswith("OUTBOX_")}
    env.update(OUTBOX_DATABASE_URL=url, TELEGRAM_BOT_TOKEN=TEST_TOKEN, OUTBOX_LOG_LEVEL="DEBUG")
    program, *rest = argv
    if rest[0] == "relay" and exit_code == 4:
        # A relay waits for an unreachable database (it may be starting too), saying so.
        code, output = _until_it_waits(env, [f"{program}.cli", *rest])
        assert code == 0, output  # stopped by SIGTERM while waiting
    else:
        done = subprocess.run(
            [sys.executable, "-m", f"{program}.cli", *rest],
            env=env,
            capture_output=True,
            text=True,
            timeout=60,
            check=False,
        )
        output = done.stdout + done.stderr
        assert done.returncode == exit_code, output
    assert "Traceback" not in output
    for piece in (SECRET, SECRET[:3] + "/", SECRET[3:]):
        assert piece not in output, output
    assert "***" in output  # the URL is shown, redacted, so the operator knows which one


def _until_it_waits(env: dict[str, str], argv: list[str]) -> tuple[int, str]:
    """Run a command until it logs that it waits for the database, then SIGTERM it."""
    with tempfile.TemporaryDirectory() as folder:
        path = Path(folder) / "output"
        with path.open("w") as out:
            proc = subprocess.Popen([sys.executable, "-m", *argv], env=env, stdout=out, stderr=out)
        try:
            wait_until(lambda: "waiting for" in path.read_text(), 30, "a line saying it waits")
        finally:
            proc.send_signal(signal.SIGTERM)
            code = proc.wait(timeout=30)
        return code, path.read_text()
