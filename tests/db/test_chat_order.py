"""Order per chat in the claim, and the latest edit winning: each test enqueues through the
public API, claims through the relay's own statements and writes outcomes as the relay does,
on a real database. No chat spacing and no rate: the case where nothing else keeps order."""

from __future__ import annotations

import asyncio
from collections.abc import Sequence
from datetime import datetime, timedelta
from typing import Any

import psycopg
import pytest
import sqlalchemy as sa

from outbox import enqueue, enqueue_many, replay
from outbox.queries import ClaimLimits, Outcome, bots_timing, claim_due, ensure_bot, record_outcomes
from outbox.states import FailureCode, State
from tests.support import insert_raw, text

SCHEMA = "public"
pytestmark = pytest.mark.filterwarnings("error")


def claim(db_url: str, limit: int = 50) -> list[str]:
    """Claim once as a relay with one token does (no limits); the keys claimed, sorted."""

    async def run() -> list[str]:
        async with await psycopg.AsyncConnection.connect(db_url, autocommit=True) as conn:
            await ensure_bot(conn, "default", schema=SCHEMA)
            rows = await claim_due(conn, limit, schema=SCHEMA, limits=ClaimLimits())
            return sorted(r.key for r in rows)

    return asyncio.run(run())


def write(db_url: str, key: str, state: str, **details: Any) -> None:
    """Write the outcome of the claimed row ``key`` as the relay's completer does."""

    async def run() -> None:
        async with await psycopg.AsyncConnection.connect(db_url, autocommit=True) as conn:
            cursor = await conn.execute(
                "SELECT id, urinish, band_vaqti FROM outbox "
                "WHERE kalit = %s AND holat = 'bajarilmoqda'",
                (key,),
            )
            found = await cursor.fetchone()
            assert found is not None, f"{key} is not claimed"
            row_id, attempts, claimed_at = found
            marker = {"key": key, "chat_id": 1, "message_id": row_id} if state == State.DONE else {}
            outcome = Outcome(row_id, attempts, state, claimed_at=claimed_at, **marker, **details)
            assert await record_outcomes(conn, [outcome], schema=SCHEMA) == 1

    asyncio.run(run())


def retry_later(db_url: str, key: str, seconds: float = 60.0) -> None:
    """A transient failure (a 500, or a 429's retry_after): the row waits ``seconds``."""
    write(
        db_url,
        key,
        State.PENDING,
        delay_seconds=seconds,
        error="500: Internal Server Error",
        error_code=FailureCode.TRANSIENT,
    )


def time_passes(engine: sa.Engine, key: str) -> None:
    """The row's retry falls due (its wait is over)."""
    with engine.begin() as conn:
        conn.execute(
            sa.text("UPDATE outbox SET keyingi_urinish = now() WHERE kalit = :k"), {"k": key}
        )


def now_plus(engine: sa.Engine, seconds: float) -> datetime:
    with engine.connect() as conn:
        now: datetime = conn.execute(sa.text("SELECT now()")).scalar_one()
    return now + timedelta(seconds=seconds)


def steps(engine: sa.Engine, chat: int, n: int = 5, prefix: str = "step", **lane: Any) -> list[str]:
    keys = [f"{prefix}-{chat}-{i}" for i in range(1, n + 1)]
    with engine.begin() as conn:
        for i, key in enumerate(keys, 1):
            enqueue(conn, key=key, payload=text(chat, i), **lane)
    return keys


def drain_in_order(db_url: str, keys: Sequence[str]) -> None:
    """Each claim takes the next of ``keys`` only, which is then sent."""
    for key in keys:
        assert claim(db_url) == [key]
        write(db_url, key, State.DONE)
    assert claim(db_url) == []


def states(engine: sa.Engine, keys: Sequence[str]) -> list[tuple[str, str | None, str | None]]:
    with engine.connect() as conn:
        rows = conn.execute(
            sa.text(
                "SELECT kalit, holat, xato_turi, oxirgi_xato FROM outbox "
                "WHERE kalit = ANY(:keys) ORDER BY id"
            ),
            {"keys": list(keys)},
        )
        return [(r[1], r[2], r[3]) for r in rows]


def test_five_steps_wait_for_the_first_one_retried(engine: sa.Engine, db_url: str) -> None:
    keys = steps(engine, 1)
    assert claim(db_url) == [keys[0]]  # one per chat, however large the claim
    retry_later(db_url, keys[0])  # Telegram answered 500: retried in a minute
    assert claim(db_url) == []  # steps 2-5 wait for step 1, though they are due
    time_passes(engine, keys[0])
    drain_in_order(db_url, keys)


def test_a_429_on_one_chat_while_others_flow(engine: sa.Engine, db_url: str) -> None:
    slow = steps(engine, 1, 3)
    fast = steps(engine, 2, 3)
    assert claim(db_url) == [slow[0], fast[0]]
    write(db_url, slow[0], State.PENDING, delay_seconds=30.0, error_code=FailureCode.RATE_LIMITED)
    write(db_url, fast[0], State.DONE)
    for key in fast[1:]:  # the other chat goes on, one after the other
        assert claim(db_url) == [key]
        write(db_url, key, State.DONE)
    assert claim(db_url) == []
    time_passes(engine, slow[0])
    drain_in_order(db_url, slow)


def test_a_first_message_failing_for_good_releases_the_chat(engine: sa.Engine, db_url: str) -> None:
    keys = steps(engine, 1, 4)
    assert claim(db_url) == [keys[0]]
    write(db_url, keys[0], State.FAILED, error="400: Bad Request", error_code="bad_request")
    drain_in_order(db_url, keys[1:])


def test_a_message_scheduled_later_never_holds_back_one_due_now(
    engine: sa.Engine, db_url: str
) -> None:
    with engine.begin() as conn:
        enqueue(conn, key="tomorrow", payload=text(1, 1), run_at=now_plus(engine, 3600))
        enqueue(conn, key="now", payload=text(1, 2))  # enqueued after it, due before it
    assert claim(db_url) == ["now"]


def test_a_windowed_message_goes_early_only_behind_nothing_earlier(
    engine: sa.Engine, db_url: str
) -> None:
    with engine.begin() as conn:
        enqueue(conn, key="first", payload=text(1, 1))
        enqueue(
            conn,
            key="windowed",
            payload=text(1, 2),
            run_at=now_plus(engine, 1),
            early=timedelta(minutes=5),
        )
    assert claim(db_url) == ["first"]
    retry_later(db_url, "first")
    # Its window is open and the bot idle, yet an earlier message of its chat still waits.
    with engine.begin() as conn:
        conn.execute(sa.text("UPDATE outbox SET keyingi_urinish = now() WHERE kalit = 'windowed'"))
    assert claim(db_url) == []


def test_ordered_false_goes_as_soon_as_it_can(engine: sa.Engine, db_url: str) -> None:
    keys = steps(engine, 1, 3, ordered=False)
    with engine.begin() as conn:
        enqueue_many(conn, [(f"many-{n}", text(1, 10 + n)) for n in range(2)], ordered=False)
    assert claim(db_url) == sorted([*keys, "many-0", "many-1"])


def test_priorities_do_not_wait_for_each_other(engine: sa.Engine, db_url: str) -> None:
    with engine.begin() as conn:
        enqueue(conn, key="reminder", payload=text(1, 1))
        enqueue(conn, key="reminder-2", payload=text(1, 2))
    assert claim(db_url) == ["reminder"]
    retry_later(db_url, "reminder")
    with engine.begin() as conn:
        enqueue(conn, key="reply", payload=text(1, 3), priority=5)
        enqueue(conn, key="reply-2", payload=text(1, 4), priority=5)
    assert claim(db_url) == ["reply"]  # not held behind the lower priority's retry
    retry_later(db_url, "reply")
    time_passes(engine, "reminder")
    assert claim(db_url) == ["reminder"]  # nor a reminder behind the reply's retry


def test_a_replayed_row_takes_its_old_place(engine: sa.Engine, db_url: str) -> None:
    keys = steps(engine, 1, 4)
    assert claim(db_url) == [keys[0]]
    write(db_url, keys[0], State.FAILED, error="403: Forbidden", error_code="forbidden")
    assert claim(db_url) == [keys[1]]
    write(db_url, keys[1], State.DONE)
    with engine.begin() as conn:
        first_id = conn.execute(sa.text("SELECT id FROM outbox WHERE kalit = :k"), {"k": keys[0]})
        [result] = replay(conn, [int(first_id.scalar_one())])
    assert result.replayed
    drain_in_order(db_url, [keys[0], *keys[2:]])  # before the two still pending


def test_a_row_written_by_plain_sql_is_ordered_and_infinity_opts_out(
    engine: sa.Engine, db_url: str
) -> None:
    with engine.begin() as conn:
        insert_raw(conn, "raw-1", text(1, 1))
        insert_raw(conn, "raw-2", text(1, 2))
        conn.execute(
            sa.text(
                "INSERT INTO outbox (kalit, payload, tartib) "
                "VALUES ('raw-free', CAST(:p AS jsonb), 'infinity')"
            ),
            {"p": '{"chat_id": 1, "text": "x"}'},
        )
        places = conn.execute(
            sa.text("SELECT kalit, tartib IS NOT NULL, suhbat FROM outbox ORDER BY id")
        ).all()
    assert [tuple(r) for r in places] == [
        ("raw-1", True, "1"),
        ("raw-2", True, "1"),
        ("raw-free", False, "1"),
    ]
    assert claim(db_url) == ["raw-1", "raw-free"]


def next_due(db_url: str) -> float | None:
    """When the relay's timing says the default bot may next have work (seconds from now)."""

    async def timing() -> float | None:
        async with await psycopg.AsyncConnection.connect(db_url, autocommit=True) as conn:
            found = await bots_timing(
                conn, ["default"], ["default"], schema=SCHEMA, horizon=1.0, unnamed=[True]
            )
            return found["default"].next_due

    return asyncio.run(timing())


def test_a_held_chat_is_no_work_for_the_timing(engine: sa.Engine, db_url: str) -> None:
    keys = steps(engine, 1, 3)
    assert claim(db_url) == [keys[0]]
    retry_later(db_url, keys[0], 30.0)

    due = next_due(db_url)
    # Steps 2-3 are due but held: the relay waits for step 1's retry, it does not spin.
    assert due is not None and due > 20


def test_a_chat_held_behind_its_first_rows_hides_no_other_chat(
    engine: sa.Engine, db_url: str
) -> None:
    busy = steps(engine, 1, 70)  # more than the timing's first rows
    assert claim(db_url) == [busy[0]]  # in flight: the other 69 are held behind it
    with engine.begin() as conn:
        enqueue(conn, key="other", payload=text(2))

    due = next_due(db_url)
    assert due is not None and due <= 0  # the claim's walk looks past them
    assert claim(db_url) == ["other"]


# --- the latest edit wins ---------------------------------------------------------------------


def sent_original(engine: sa.Engine, db_url: str, key: str = "task") -> None:
    with engine.begin() as conn:
        enqueue(conn, key=key, payload=text(7, 0))
    assert claim(db_url) == [key]
    write(db_url, key, State.DONE)


def edit(key: str, n: int, method: str = "editMessageText") -> dict[str, Any]:
    field = {"editMessageCaption": "caption"}.get(method, "text")
    return {"method": method, "message_key": key, field: f"v{n}"}


def test_five_edits_only_the_last_is_sent(engine: sa.Engine, db_url: str) -> None:
    sent_original(engine, db_url)
    with engine.begin() as conn:
        for n in range(5):
            enqueue(conn, key=f"edit-{n}", payload=edit("task", n))
        enqueue(conn, key="caption", payload=edit("task", 9, "editMessageCaption"))
        ids = (
            conn.execute(sa.text("SELECT id FROM outbox WHERE kalit LIKE 'edit-%' ORDER BY id"))
            .scalars()
            .all()
        )
    keys = [f"edit-{n}" for n in range(5)]
    # Each was superseded by the next one enqueued (which names the row to look at next).
    assert states(engine, keys) == [
        (State.DONE, FailureCode.SUPERSEDED, f"superseded by row {newer}") for newer in ids[1:]
    ] + [(State.PENDING, None, None)]
    # Another method is another edit; one per claim, in the chat's order.
    assert claim(db_url) == ["edit-4"]
    write(db_url, "edit-4", State.DONE)
    assert claim(db_url) == ["caption"]


def test_a_pending_delete_supersedes_every_pending_edit(engine: sa.Engine, db_url: str) -> None:
    sent_original(engine, db_url)
    with engine.begin() as conn:
        enqueue(conn, key="edit-0", payload=edit("task", 0))
        enqueue(conn, key="caption", payload=edit("task", 1, "editMessageCaption"))
        enqueue(conn, key="delete", payload={"method": "deleteMessage", "message_key": "task"})
        enqueue(conn, key="edit-late", payload=edit("task", 2))  # pointless as well
        delete = conn.execute(sa.text("SELECT id FROM outbox WHERE kalit = 'delete'")).scalar_one()
    superseded = (State.DONE, FailureCode.SUPERSEDED, f"superseded by row {delete}")
    assert states(engine, ["edit-0", "caption", "delete", "edit-late"]) == [
        superseded,
        superseded,
        (State.PENDING, None, None),
        superseded,
    ]
    assert claim(db_url) == ["delete"]


def test_nothing_is_superseded_once_claimed(engine: sa.Engine, db_url: str) -> None:
    sent_original(engine, db_url)
    with engine.begin() as conn:
        enqueue(conn, key="edit-0", payload=edit("task", 0))
    assert claim(db_url) == ["edit-0"]
    with engine.begin() as conn:
        enqueue(conn, key="edit-1", payload=edit("task", 1))
        enqueue(conn, key="edit-1", payload=edit("task", 5))  # the same key again: no change
    assert states(engine, ["edit-0", "edit-1"]) == [
        (State.IN_PROGRESS, None, None),
        (State.PENDING, None, None),
    ]
    assert claim(db_url) == []  # the newer edit waits for the one in flight
    write(db_url, "edit-0", State.DONE)
    assert claim(db_url) == ["edit-1"]


def test_a_superseded_row_is_no_failure(engine: sa.Engine, db_url: str) -> None:
    from outbox import queue_status

    sent_original(engine, db_url)
    with engine.begin() as conn:
        for n in range(3):
            enqueue(conn, key=f"edit-{n}", payload=edit("task", n))
    with engine.begin() as conn:
        status = queue_status(conn)
    assert status.counts.get(State.FAILED, 0) == 0
    assert status.counts[State.DONE] == 3  # the original and two superseded edits


def test_the_revision_gives_the_rows_still_to_be_sent_their_place(db_url: str) -> None:
    from alembic import command

    from outbox import migrate
    from outbox.schema import current_schema

    config = migrate._config(db_url, migrate.SCRIPT_PACKAGE, current_schema())
    command.downgrade(config, "outbox_0014")
    with psycopg.connect(db_url, autocommit=True) as conn:
        conn.execute(
            "INSERT INTO outbox (kalit, payload, holat, keyingi_urinish) "
            "SELECT 'old-' || g, jsonb_build_object('chat_id', 1, 'text', g::text), "
            "CASE WHEN g = 4 THEN 'bajarildi' ELSE 'kutmoqda' END, "
            "now() - make_interval(secs => 10 - g) FROM generate_series(1, 4) g"
        )
    command.upgrade(config, "head")
    with psycopg.connect(db_url, autocommit=True) as conn:
        places = conn.execute(
            "SELECT kalit, tartib IS NOT NULL, suhbat FROM outbox ORDER BY id"
        ).fetchall()
    assert places == [
        ("old-1", True, "1"),
        ("old-2", True, "1"),
        ("old-3", True, "1"),
        ("old-4", False, None),  # sent: no place needed
    ]
    assert claim(db_url) == ["old-1"]
