"""The app's side: async enqueue with both drivers, payloads refused at enqueue, the operator
functions from Python, and the commands' answers to a missing or secret-bearing database URL.

Here the db tier's tests (PostgreSQL, in the test's process); the others are in
``tests/e2e/test_app_api.py``, ``tests/unit/test_app_api.py``.
"""

from __future__ import annotations

import asyncio
import functools
from collections.abc import Awaitable, Callable
from datetime import UTC, datetime, timedelta
from typing import Any, TypeVar

import pytest
import sqlalchemy as sa
from sqlalchemy.ext.asyncio import AsyncConnection, AsyncSession, create_async_engine
from sqlalchemy.orm import Session

import outbox
from outbox import migrate
from outbox.db import create_engine
from outbox.errors import InvalidPayload
from tests.support import insert_raw

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
