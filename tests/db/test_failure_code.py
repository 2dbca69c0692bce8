"""Each failure carries a code (xato_turi) and a failed row the time it failed (xato_vaqti).

"Failed within" reads that time: a failed row whose payload the app changes later is not a
recent failure.
"""

from __future__ import annotations

import asyncio
import json
from typing import Any

import psycopg
import sqlalchemy as sa
from alembic import command

from outbox import api, migrate, queries
from outbox.db import async_connect
from outbox.retry import RetryPolicy
from outbox.schema import current_schema
from outbox.states import FailureCode, State
from outbox_testing.fake_telegram import FakeTelegram, Fault
from reminders.migrate import HISTORY
from tests.support import make_relay


def _row(engine: sa.Engine, key: str) -> dict[str, Any]:
    with engine.connect() as conn:
        found = conn.execute(
            sa.text(
                "SELECT holat, xato_turi, xato_vaqti, yangilangan, tarix FROM outbox "
                "WHERE kalit = :k"
            ),
            {"k": key},
        ).one()
    return dict(found._mapping)


def _enqueue(engine: sa.Engine, key: str, chat: int) -> int:
    with engine.begin() as conn:
        return api.enqueue(conn, key=key, payload={"chat_id": chat, "text": key}).id


def test_the_relay_writes_the_code_of_each_failure_and_when_the_row_failed(
    db_url: str, engine: sa.Engine, fake_telegram: FakeTelegram
) -> None:
    _enqueue(engine, "blocked", 11)
    _enqueue(engine, "missing", 12)
    _enqueue(engine, "flaky", 13)
    fake_telegram.script(11, Fault.forbidden("bot was blocked by the user"))
    fake_telegram.script(12, Fault.bad_request("chat not found"))
    fake_telegram.script(13, Fault.server_error(), times=None)

    async def drain() -> None:
        async with make_relay(db_url, fake_telegram, retry=RetryPolicy(base_seconds=0)) as relay:
            await relay.run(drain=True)

    asyncio.run(drain())
    codes = {}
    for key in ("blocked", "missing", "flaky"):
        found = _row(engine, key)
        assert found["holat"] == State.FAILED, key
        assert found["xato_vaqti"] is not None, key
        # Every failure's tarix entry carries its own code.
        assert all("xato_turi" in entry for entry in found["tarix"]), found["tarix"]
        codes[key] = (found["xato_turi"], [e["xato_turi"] for e in found["tarix"]])
    assert codes == {
        "blocked": ("blocked", ["blocked"]),
        "missing": ("chat_not_found", ["chat_not_found"]),
        "flaky": ("too_many_attempts", ["transient", "transient", "too_many_attempts"]),
    }
    # Shown as a field of the message.
    with engine.connect() as conn:
        (message,) = api.failed_messages(conn, queue=None, kind=None, limit=1)
    assert message.error_code == "too_many_attempts" and message.failed_at is not None


def _failed_long_ago(engine: sa.Engine, key: str) -> int:
    row_id = _enqueue(engine, key, 21)
    with engine.begin() as conn:
        conn.execute(
            sa.text(
                "UPDATE outbox SET holat = 'xato', oxirgi_xato = 'old', xato_turi = 'blocked', "
                "xato_vaqti = now() - interval '2 days', yangilangan = now() - interval '2 days' "
                "WHERE id = :id"
            ),
            {"id": row_id},
        )
    return row_id


def test_a_payload_changed_after_the_failure_does_not_make_it_recent(engine: sa.Engine) -> None:
    old = _failed_long_ago(engine, "old")
    recent = _failed_long_ago(engine, "recent")
    with engine.begin() as conn:
        conn.execute(
            sa.text("UPDATE outbox SET xato_vaqti = now() - interval '1 minute' WHERE id = :id"),
            {"id": recent},
        )
        assert api.update_pending(conn, "old", {"chat_id": 21, "text": "new words"})
    assert _row(engine, "old")["xato_vaqti"] < _row(engine, "old")["yangilangan"]
    hour = 3600.0
    with engine.begin() as conn:
        found = api.failed_messages(conn, failed_within_seconds=hour)
        assert [m.id for m in found] == [recent]
        assert {m.id for m in api.failed_messages(conn)} == {old, recent}
        replayed = api.replay(conn, failed_within_seconds=hour)
    assert [(r.id, r.replayed) for r in replayed] == [(recent, True)]
    assert _row(engine, "old")["holat"] == State.FAILED


def test_replay_clears_the_code_and_time_and_keeps_them_in_tarix(engine: sa.Engine) -> None:
    row_id = _failed_long_ago(engine, "k")
    with engine.begin() as conn:
        [result] = api.replay(conn, [row_id])
    assert result.replayed
    found = _row(engine, "k")
    assert (found["holat"], found["xato_turi"], found["xato_vaqti"]) == (State.PENDING, None, None)
    assert found["tarix"][-1]["xato_turi"] == "blocked"


def test_an_operators_cancel_is_coded_cancelled(engine: sa.Engine) -> None:
    row_id = _enqueue(engine, "k", 31)
    with engine.begin() as conn:
        assert queries.cancel_waiting(conn, schema="public", message_id=row_id) == 1
    found = _row(engine, "k")
    assert (found["holat"], found["xato_turi"]) == (State.FAILED, FailureCode.CANCELLED)
    assert found["xato_vaqti"] is not None and found["tarix"][-1]["xato_turi"] == "cancelled"


def test_the_reaper_codes_expired_claims(db_url: str, engine: sa.Engine) -> None:
    for key, attempts in (("retried", 1), ("given_up", 3)):
        row_id = _enqueue(engine, key, 41)
        with engine.begin() as conn:
            conn.execute(
                sa.text(
                    "UPDATE outbox SET holat = 'bajarilmoqda', urinish = :n, egasi = :key, "
                    "band_vaqti = now() - interval '1 hour' WHERE id = :id"
                ),
                {"n": attempts, "key": key, "id": row_id},
            )

    async def reap() -> queries.Reaped:
        conn = await async_connect(db_url)
        try:
            return await queries.reap_stale(conn, schema="public", lease_seconds=60, max_attempts=3)
        finally:
            await conn.close()

    assert asyncio.run(reap()) == queries.Reaped(pending=1, failed=1)
    retried, given_up = _row(engine, "retried"), _row(engine, "given_up")
    assert (retried["holat"], retried["xato_turi"], retried["xato_vaqti"]) == (
        State.PENDING,
        "claim_expired",
        None,
    )
    assert (given_up["holat"], given_up["xato_turi"]) == (State.FAILED, "too_many_attempts")
    assert given_up["xato_vaqti"] is not None
    assert [e["xato_turi"] for e in given_up["tarix"]] == ["too_many_attempts"]


def test_the_upgrade_takes_an_old_failures_time_from_its_tarix(db_url: str) -> None:
    # The domain's trigger reads xato_turi: it goes back first.
    command.downgrade(migrate._config(db_url, HISTORY, current_schema()), "reminders_0002")
    config = migrate._config(db_url, migrate.SCRIPT_PACKAGE, current_schema())
    command.downgrade(config, "outbox_0003")
    entry = {"vaqt": "2026-01-02T03:04:05.123456+00:00", "urinish": 1, "xato": "old"}
    with psycopg.connect(db_url, autocommit=True) as conn:
        conn.execute(
            "INSERT INTO outbox (kalit, payload, holat, oxirgi_xato, tarix) VALUES "
            "('a', '{}', 'xato', 'old', %s), ('b', '{}', 'xato', 'by hand', '[\"x\"]'), "
            "('c', '{}', 'kutmoqda', NULL, '[]')",
            (json.dumps([entry]),),
        )
        conn.execute("UPDATE outbox SET yangilangan = '2026-02-01T00:00:00Z' WHERE kalit = 'b'")
    command.upgrade(config, "outbox_0004")
    with psycopg.connect(db_url) as conn:
        rows = conn.execute(
            "SELECT kalit, xato_vaqti::text, xato_turi FROM outbox ORDER BY kalit"
        ).fetchall()
    assert rows == [
        ("a", "2026-01-02 03:04:05.123456+00", None),
        ("b", "2026-02-01 00:00:00+00", None),
        ("c", None, None),
    ]


def test_a_group_that_moves_again_during_its_resend_is_retried_at_the_chat_it_moved_to(
    db_url: str, engine: sa.Engine, fake_telegram: FakeTelegram
) -> None:
    """The resend after a migration is answered with a second migration: retry.decide sees a
    migrated failure and counts it as transient; the retry starts from the first new chat."""
    _enqueue(engine, "group", -119)
    fake_telegram.script(-119, Fault.migrate(-100_119))
    fake_telegram.script(-100_119, Fault.migrate(-200_119), times=2)

    async def drain() -> None:
        async with make_relay(db_url, fake_telegram, retry=RetryPolicy(base_seconds=0)) as relay:
            await relay.run(drain=True)

    asyncio.run(drain())
    with engine.connect() as conn:
        found = conn.execute(
            sa.text("SELECT holat, urinish, payload, tarix FROM outbox WHERE kalit = 'group'")
        ).one()
    assert (found.holat, found.urinish) == (State.DONE, 2)
    assert found.payload["chat_id"] == -200_119
    assert [entry["xato_turi"] for entry in found.tarix] == ["chat_migrated"]
    assert [d.text for d in fake_telegram.delivered_to(-200_119)] == ["group"]
    assert fake_telegram.delivered_to(-100_119) == [] == fake_telegram.delivered_to(-119)
