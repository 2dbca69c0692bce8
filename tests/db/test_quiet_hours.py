"""Quiet hours in the claim, on a real database: rows that ask for them are held while their
chat's hours last and come back when the hours end or change; rows that do not ask are neither
held nor kept behind a held one; order holds within the rows that ask. Enqueued through the
public API, claimed through the relay's own statements, outcomes written as the relay does."""

from __future__ import annotations

import asyncio
from datetime import datetime, time, timedelta
from typing import TYPE_CHECKING, Any

import pytest
import sqlalchemy as sa
from sqlalchemy.ext.asyncio import AsyncSession, create_async_engine

import outbox
from outbox import enqueue, enqueue_many, get_message
from outbox.errors import InvalidInput
from outbox.quiet import QuietHours, quiet_until, zone
from outbox.states import State
from tests.db.test_app_api import _run_async
from tests.db.test_chat_order import claim, write
from tests.support import text

if TYPE_CHECKING:
    from outbox.queries import AsyncAppConn

pytestmark = pytest.mark.filterwarnings("error")
ZONE = "Asia/Tashkent"


def db_now(engine: sa.Engine) -> datetime:
    with engine.connect() as conn:
        now: datetime = conn.execute(sa.text("SELECT now()")).scalar_one()
    return now


def around_now(engine: sa.Engine, *, before: int = 60, after: int = 60) -> tuple[time, time]:
    """Hours in ZONE from ``before`` minutes ago to ``after`` minutes on (across midnight if
    that is where now falls)."""
    local = db_now(engine).astimezone(zone(ZONE))
    start = (local - timedelta(minutes=before)).time().replace(second=0, microsecond=0)
    end = (local + timedelta(minutes=after)).time().replace(second=0, microsecond=0)
    return start, end


def set_hours(engine: sa.Engine, chat: int, start: time, end: time, **kw: Any) -> None:
    with engine.begin() as conn:
        outbox.set_quiet_hours(conn, chat, start=start, end=end, tz=ZONE, **kw)


def quiet_now(engine: sa.Engine, chat: int) -> datetime:
    """Give ``chat`` quiet hours that hold now; when they end."""
    start, end = around_now(engine)
    set_hours(engine, chat, start, end)
    ends = quiet_until(db_now(engine), QuietHours(start, end, ZONE))
    assert ends is not None
    return ends


def put(engine: sa.Engine, key: str, chat: int, *, quiet: bool) -> None:
    with engine.begin() as conn:
        enqueue(conn, key=key, payload=text(chat), quiet_hours=quiet)


def held(engine: sa.Engine, key: str) -> tuple[datetime, datetime | None, str]:
    with engine.connect() as conn:
        found = conn.execute(
            sa.text("SELECT keyingi_urinish, tinch_oldin, holat FROM outbox WHERE kalit = :k"),
            {"k": key},
        ).one()
    return found[0], found[1], found[2]


def test_a_bulk_message_waits_for_the_end_and_a_reminder_goes(
    engine: sa.Engine, db_url: str
) -> None:
    ends = quiet_now(engine, 1)
    put(engine, "digest", 1, quiet=True)
    put(engine, "reminder", 1, quiet=False)  # later in the chat's order, of the other kind
    due_before = held(engine, "digest")[0]
    assert claim(db_url) == ["reminder"]  # not kept behind the held digest
    moved, remembered, state = held(engine, "digest")
    assert (moved, remembered, state) == (ends, due_before, State.PENDING)
    assert claim(db_url) == []  # held: not due, not walked
    with engine.begin() as conn:
        conn.execute(sa.text("UPDATE outbox SET tinch_oldin = now() - interval '1 hour'"))
        assert outbox.queue_status(conn).lag_seconds == 0  # not the queue's lag
    with engine.connect() as conn:
        row = get_message(
            conn, conn.execute(sa.text("SELECT id FROM outbox WHERE kalit = 'digest'")).scalar_one()
        )
    assert row is not None
    assert [(h.reason, h.detail, h.at) for h in row.holds] == [("quiet", ZONE, ends)]
    # The hours end (the held row falls due, and they no longer hold now): it goes.
    with engine.begin() as conn:
        conn.execute(sa.text("UPDATE outbox SET keyingi_urinish = now() WHERE kalit = 'digest'"))
    start, end = around_now(engine, before=-60, after=120)  # from an hour on
    with engine.begin() as conn:
        conn.execute(
            sa.text("UPDATE tinch_soatlar SET boshi = :s, oxiri = :e"), {"s": start, "e": end}
        )
    assert claim(db_url) == ["digest"]
    assert held(engine, "digest")[1] is None  # claimed: no longer held


def test_a_change_of_the_hours_brings_held_rows_back_at_once(
    engine: sa.Engine, db_url: str
) -> None:
    quiet_now(engine, 2)
    put(engine, "news-1", 2, quiet=True)
    due_before = held(engine, "news-1")[0]
    assert claim(db_url) == []
    assert held(engine, "news-1")[1] == due_before
    # The person moves the hours to later tonight: the row is back at its old time, and goes.
    start, end = around_now(engine, before=-120, after=180)
    set_hours(engine, 2, start, end)
    assert held(engine, "news-1")[:2] == (due_before, None)
    assert claim(db_url) == ["news-1"]
    write(db_url, "news-1", State.DONE)
    # Cleared hours release too; start == end clears them.
    quiet_now(engine, 2)
    put(engine, "news-2", 2, quiet=True)
    assert claim(db_url) == []
    with engine.begin() as conn:
        outbox.clear_quiet_hours(conn, 2)
    assert claim(db_url) == ["news-2"]
    write(db_url, "news-2", State.DONE)
    quiet_now(engine, 2)
    put(engine, "news-3", 2, quiet=True)
    assert claim(db_url) == []
    set_hours(engine, 2, time(3), time(3))
    with engine.connect() as conn:
        assert conn.execute(sa.text("SELECT count(*) FROM tinch_soatlar")).scalar_one() == 0
    assert claim(db_url) == ["news-3"]


def test_order_holds_within_the_rows_that_ask_and_not_across(
    engine: sa.Engine, db_url: str
) -> None:
    quiet_now(engine, 3)
    with engine.begin() as conn:
        enqueue_many(conn, [(f"bulk-{i}", text(3, i)) for i in (1, 2, 3)], quiet_hours=True)
    put(engine, "asked", 3, quiet=False)
    # Claims hold the bulk rows one by one (each waits for the one before until that is held),
    # and the person's own message is never behind them.
    assert claim(db_url) == ["asked"]
    assert claim(db_url) == []
    assert claim(db_url) == []
    assert all(held(engine, f"bulk-{i}")[1] is not None for i in (1, 2, 3))
    write(db_url, "asked", State.DONE)
    # The hours end: the bulk rows go in their order, one after another.
    with engine.begin() as conn:
        conn.execute(sa.text("DELETE FROM tinch_soatlar"))
        conn.execute(sa.text("UPDATE outbox SET keyingi_urinish = now() WHERE tinch"))
    for key in ("bulk-1", "bulk-2", "bulk-3"):
        assert claim(db_url) == [key]
        write(db_url, key, State.DONE)


def test_rows_without_the_flag_and_other_chats_are_not_held(engine: sa.Engine, db_url: str) -> None:
    quiet_now(engine, 4)
    put(engine, "plain", 4, quiet=False)
    put(engine, "elsewhere", 5, quiet=True)  # chat 5 has no quiet hours
    assert claim(db_url) == ["elsewhere", "plain"]
    with engine.connect() as conn:
        assert (
            conn.execute(
                sa.text("SELECT count(*) FROM outbox WHERE tinch_oldin IS NOT NULL")
            ).scalar_one()
            == 0
        )


def test_hours_belong_to_one_bot(engine: sa.Engine, db_url: str) -> None:
    # Hours set for bot 42 do not hold the rows naming no bot (a relay with one token).
    start, end = around_now(engine)
    set_hours(engine, 6, start, end, bot=42)
    put(engine, "unnamed", 6, quiet=True)
    assert claim(db_url) == ["unnamed"]


def test_a_chat_id_is_one_chat_however_it_is_written(engine: sa.Engine, db_url: str) -> None:
    # Hours set for "0012" hold the rows to chat 12, as every other chat-keyed call reads it.
    start, end = around_now(engine)
    with engine.begin() as conn:
        outbox.set_quiet_hours(conn, "0012", start=start, end=end, tz=ZONE)
        assert outbox.get_quiet_hours(conn, 12) == QuietHours(start, end, ZONE)
    put(engine, "held", 12, quiet=True)
    assert claim(db_url) == []
    with engine.begin() as conn:
        for bad in ("twelve", "@", 10**21):
            with pytest.raises(InvalidInput, match="chat_id takes a Telegram chat id"):
                outbox.set_quiet_hours(conn, bad, start=start, end=end, tz=ZONE)


def test_an_unknown_zone_is_refused_and_nothing_written(engine: sa.Engine) -> None:
    with (
        pytest.raises(InvalidInput, match="unknown time zone 'Asia/Samarkandia'"),
        engine.begin() as conn,
    ):
        outbox.set_quiet_hours(conn, 7, start=time(22), end=time(7), tz="Asia/Samarkandia")
    with engine.connect() as conn:
        assert conn.execute(sa.text("SELECT count(*) FROM tinch_soatlar")).scalar_one() == 0


def test_the_async_twins(engine: sa.Engine, db_url: str) -> None:
    start, end = around_now(engine)

    async def run() -> None:
        async_engine = create_async_engine("postgresql+psycopg://" + db_url.split("://", 1)[1])
        try:
            async with AsyncSession(async_engine) as session, session.begin():
                await outbox.set_quiet_hours_async(session, 8, start=start, end=end, tz=ZONE)
                await outbox.enqueue_async(
                    session, key="async-1", payload=text(8), quiet_hours=True
                )
                await outbox.enqueue_many_async(
                    session, [("async-2", text(8, 2))], quiet_hours=True
                )
        finally:
            await async_engine.dispose()

    asyncio.run(run())
    assert claim(db_url) == []
    assert held(engine, "async-1")[1] is not None

    async def clear() -> None:
        async_engine = create_async_engine("postgresql+psycopg://" + db_url.split("://", 1)[1])
        try:
            async with async_engine.begin() as conn:
                await outbox.clear_quiet_hours_async(conn, 8)
        finally:
            await async_engine.dispose()

    asyncio.run(clear())
    assert claim(db_url) == ["async-1"]


@pytest.mark.parametrize(("driver", "kind"), [("psycopg", "session"), ("asyncpg", "connection")])
def test_the_async_reader_reads_what_the_sync_one_does(
    engine: sa.Engine, db_url: str, driver: str, kind: str
) -> None:
    set_hours(engine, 9, time(22, 0, 30), time(7), bot=42)
    with engine.connect() as conn:
        hours = outbox.get_quiet_hours(conn, 9, bot=42)
    assert hours == QuietHours(time(22, 0, 30), time(7), ZONE)

    async def read(conn: AsyncAppConn) -> list[QuietHours | None]:
        return [
            await outbox.get_quiet_hours_async(conn, "9", bot="42"),
            await outbox.get_quiet_hours_async(conn, 9),  # the rows naming no bot have none
            await outbox.get_quiet_hours_async(conn, 10, bot=42),
        ]

    assert _run_async(db_url, driver, kind, read) == [hours, None, None]

    async def refused(conn: AsyncAppConn) -> QuietHours | None:
        return await outbox.get_quiet_hours_async(conn, True)

    with pytest.raises(InvalidInput, match="chat_id takes a Telegram chat id"):
        _run_async(db_url, driver, kind, refused)


def test_a_row_that_expires_inside_the_hours_waits_until_its_expiry(
    engine: sa.Engine, db_url: str
) -> None:
    quiet_now(engine, 9)
    expiry = db_now(engine) + timedelta(minutes=30)  # the hours end in about an hour
    with engine.begin() as conn:
        enqueue(conn, key="sale", payload=text(9), quiet_hours=True, expires_at=expiry)
    assert claim(db_url) == []
    assert held(engine, "sale")[0] == expiry  # then the claim fails it as expired


def test_the_revision_goes_down_releasing_held_rows_and_up_again(
    engine: sa.Engine, db_url: str
) -> None:
    from alembic import command

    from outbox import migrate
    from outbox.schema import current_schema

    quiet_now(engine, 10)
    put(engine, "held", 10, quiet=True)
    due_before = held(engine, "held")[0]
    assert claim(db_url) == []
    config = migrate._config(db_url, migrate.SCRIPT_PACKAGE, current_schema())
    command.downgrade(config, "outbox_0016")
    with engine.connect() as conn:
        assert (
            conn.execute(
                sa.text("SELECT keyingi_urinish FROM outbox WHERE kalit = 'held'")
            ).scalar_one()
            == due_before
        )  # nothing waits for hours no one keeps
    command.upgrade(config, "head")
    assert held(engine, "held") == (due_before, None, State.PENDING)
    assert claim(db_url) == ["held"]
