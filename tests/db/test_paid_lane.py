"""The paid lane in the claim, on a real database: rows sent with allow_paid_broadcast book
their send slots on the bot's paid clock, the others on the free one, each lane within its own
room; a refusal for the Stars balance stops the paid lane alone, until it is resumed or its hour
passes."""

from __future__ import annotations

import asyncio
import json
import time
from typing import Any

import psycopg
import pytest
import sqlalchemy as sa

from outbox import enqueue, ops
from outbox.queries import (
    ClaimLane,
    ClaimLimits,
    batch_progress,
    bot_status,
    bots_timing,
    claim_due,
    claim_lanes,
    ensure_bot,
    paid_lane_stops,
    resume_paid_lane,
    stop_paid_lane,
)
from tests.support import insert_raw, run_cli

SCHEMA = "public"
BOT = "7123456789"  # its rows name it, so the bots' figures show it
pytestmark = pytest.mark.filterwarnings("error")

# 10 free messages a second and 100 paid ones, a claim books one second ahead: the free lane's
# room is 11 slots, the paid lane's 101 (the slot free now, and those within the horizon).
LIMITS = ClaimLimits(per_bot=10.0, horizon=1.0, paid=100.0)


def paid(chat: int) -> dict[str, Any]:
    return {"chat_id": chat, "text": f"aksiya {chat}", "allow_paid_broadcast": True}


def free(chat: int) -> dict[str, Any]:
    return {"chat_id": chat, "text": f"eslatma {chat}"}


def fill(engine: sa.Engine, *, free_rows: int, paid_rows: int, batch: str | None = None) -> None:
    with engine.begin() as conn:
        for i in range(free_rows):
            enqueue(conn, key=f"free-{i}", payload=free(1000 + i), batch=batch, bot=int(BOT))
        for i in range(paid_rows):
            enqueue(conn, key=f"paid-{i}", payload=paid(5000 + i), batch=batch, bot=int(BOT))


def claim(db_url: str, lane: ClaimLane, limit: int = 500) -> list[str]:
    async def run() -> list[str]:
        async with await psycopg.AsyncConnection.connect(db_url, autocommit=True) as conn:
            await ensure_bot(conn, BOT, schema=SCHEMA)
            rows = await claim_due(conn, limit, schema=SCHEMA, bot=BOT, limits=LIMITS, lane=lane)
            return [r.key for r in rows]

    return asyncio.run(run())


def clocks(engine: sa.Engine) -> tuple[float, float]:
    """Seconds from now to the bot's free and paid clocks' next free slot."""
    with engine.connect() as conn:
        free_at, paid_at = conn.execute(
            sa.text(
                "SELECT (extract(epoch FROM keyingi_slot) - extract(epoch FROM now()))::float8, "
                "(extract(epoch FROM pullik_slot) - extract(epoch FROM now()))::float8 "
                "FROM bot_holati WHERE bot = :b"
            ),
            {"b": BOT},
        ).one()
    return float(free_at), float(paid_at)


def test_a_paid_lane_claims_after_the_free_one_only_with_a_paid_rate() -> None:
    assert claim_lanes(LIMITS) == (ClaimLane.FREE, ClaimLane.PAID)
    assert claim_lanes(LIMITS._replace(paid=0.0)) == (ClaimLane.ALL,)


def test_each_lane_takes_its_own_rows_within_its_own_room(engine: sa.Engine, db_url: str) -> None:
    fill(engine, free_rows=40, paid_rows=300)
    began = time.monotonic()
    got_free = claim(db_url, ClaimLane.FREE)
    assert len(got_free) == 11
    assert all(k.startswith("free-") for k in got_free)
    got_paid = claim(db_url, ClaimLane.PAID)
    assert len(got_paid) == 101
    assert all(k.startswith("paid-") for k in got_paid)
    # Each lane booked its own clock: 11 slots at 10/s, 101 at 100/s, about a second each,
    # less the time the claims took (a busy machine's seconds, not only milliseconds).
    free_at, paid_at = clocks(engine)
    took = time.monotonic() - began
    assert 1.1 - took - 0.05 < free_at <= 1.15
    assert 1.01 - took - 0.05 < paid_at <= 1.05
    # Both rooms are full: only the slots freed since the first claim are room.
    free_room = len(claim(db_url, ClaimLane.FREE))
    assert free_room <= 2 + 10 * (time.monotonic() - began)
    paid_room = len(claim(db_url, ClaimLane.PAID))
    assert paid_room <= 30 + 100 * (time.monotonic() - began)


def test_without_a_paid_lane_flagged_rows_share_the_free_budget(
    engine: sa.Engine, db_url: str
) -> None:
    fill(engine, free_rows=5, paid_rows=20)
    got = claim(db_url, ClaimLane.ALL)
    assert len(got) == 11
    assert {k.split("-")[0] for k in got} == {"free", "paid"}
    _, paid_at = clocks(engine)
    assert paid_at < 0  # the paid clock untouched ('-infinity')


def test_a_row_written_by_plain_sql_is_paid_by_its_payload(engine: sa.Engine, db_url: str) -> None:
    with engine.begin() as conn:
        insert_raw(conn, "raw-paid", paid(7))
        insert_raw(conn, "raw-free", free(8))
        # Only JSON true marks a row paid: a string is no flag (the payload contract refuses it).
        insert_raw(conn, "raw-string", {**free(9), "allow_paid_broadcast": "true"})
    assert claim(db_url, ClaimLane.PAID) == ["raw-paid"]
    assert sorted(claim(db_url, ClaimLane.FREE)) == ["raw-free", "raw-string"]


def stop(db_url: str, reason: str = "Bad Request: BALANCE_TOO_LOW") -> Any:
    async def run() -> Any:
        async with await psycopg.AsyncConnection.connect(db_url, autocommit=True) as conn:
            await ensure_bot(conn, BOT, schema=SCHEMA)
            return await stop_paid_lane.run_async(conn, BOT, reason, schema=SCHEMA)

    return asyncio.run(run())


def test_a_refusal_stops_only_the_paid_lane_until_resumed(engine: sa.Engine, db_url: str) -> None:
    fill(engine, free_rows=3, paid_rows=5)
    assert stop(db_url) is not None
    assert stop(db_url) is None  # stopped already: whoever stops it second says nothing
    assert claim(db_url, ClaimLane.PAID) == []
    assert sorted(claim(db_url, ClaimLane.FREE)) == ["free-0", "free-1", "free-2"]
    with engine.begin() as conn:
        (stopped,) = paid_lane_stops(conn, schema=SCHEMA)
        assert stopped.bot == BOT
        assert "BALANCE_TOO_LOW" in stopped.reason
        (figures,) = bot_status(conn, schema=SCHEMA, bot=BOT)
        assert figures.paid_stopped == "Bad Request: BALANCE_TOO_LOW"
        # The paid rows wait, untouched: pending, no attempt spent.
        waiting = conn.execute(
            sa.text("SELECT holat, urinish FROM outbox WHERE kalit LIKE 'paid-%'")
        ).all()
        assert waiting == [("kutmoqda", 0)] * 5
    with engine.begin() as conn:
        assert ops.resume_paid_lane(conn, BOT, schema=SCHEMA) is True
    with engine.begin() as conn:
        assert resume_paid_lane(conn, BOT, schema=SCHEMA) is False  # running already
        assert paid_lane_stops(conn, schema=SCHEMA) == []
        assert bot_status(conn, schema=SCHEMA, bot=BOT)[0].paid_stopped is None
    assert len(claim(db_url, ClaimLane.PAID)) == 5


def test_a_stopped_paid_lane_starts_again_when_its_hour_has_passed(
    engine: sa.Engine, db_url: str
) -> None:
    fill(engine, free_rows=0, paid_rows=2)
    assert stop(db_url) is not None
    assert claim(db_url, ClaimLane.PAID) == []
    with engine.begin() as conn:
        (until,) = conn.execute(
            sa.text("SELECT extract(epoch FROM pullik_pauza_tugashi - now()) FROM bot_holati")
        ).one()
        assert 3590 < float(until) <= 3600
        conn.execute(sa.text("UPDATE bot_holati SET pullik_pauza_tugashi = now() - interval '1s'"))
    assert sorted(claim(db_url, ClaimLane.PAID)) == ["paid-0", "paid-1"]


def next_due(db_url: str, *, paid: bool) -> float | None:
    """When the relay's timing says the bot may next have work (seconds from now)."""

    async def timing() -> float | None:
        async with await psycopg.AsyncConnection.connect(db_url, autocommit=True) as conn:
            found = await bots_timing(
                conn, [BOT], ["default"], schema=SCHEMA, horizon=1.0, paid=paid
            )
            return found[BOT].next_due

    return asyncio.run(timing())


def test_a_stopped_paid_lane_is_no_work_for_the_timing(engine: sa.Engine, db_url: str) -> None:
    # A drain ends, and an idle relay sleeps, while only a stopped lane's rows wait.
    fill(engine, free_rows=0, paid_rows=2)
    assert stop(db_url) is not None
    assert next_due(db_url, paid=True) is None
    # Without a paid lane the rows are the free lane's, which no refusal stops.
    due = next_due(db_url, paid=False)
    assert due is not None and due <= 0
    with engine.begin() as conn:
        enqueue(conn, key="free-late", payload=free(1), bot=int(BOT))
    due = next_due(db_url, paid=True)
    assert due is not None and due <= 0
    with engine.begin() as conn:
        assert ops.resume_paid_lane(conn, BOT, schema=SCHEMA) is True
        conn.execute(sa.text("DELETE FROM outbox WHERE kalit = 'free-late'"))
    due = next_due(db_url, paid=True)
    assert due is not None and due <= 0


def test_a_batch_counts_its_paid_rows(engine: sa.Engine, db_url: str) -> None:
    fill(engine, free_rows=2, paid_rows=3, batch="aksiya")
    with engine.begin() as conn:
        conn.execute(sa.text("UPDATE outbox SET holat = 'bajarildi' WHERE kalit = 'paid-0'"))
    with engine.begin() as conn:
        progress = batch_progress(conn, "aksiya", [], schema=SCHEMA)
    assert (progress.total, progress.paid, progress.paid_sent) == (5, 3, 1)


def test_the_commands_show_and_resume_a_stopped_paid_lane(
    engine: sa.Engine, db_url: str, capsys: pytest.CaptureFixture[str], monkeypatch: Any
) -> None:
    monkeypatch.setenv("OUTBOX_DATABASE_URL", db_url)
    fill(engine, free_rows=1, paid_rows=2, batch="aksiya")
    assert stop(db_url) is not None
    code, out, _ = run_cli(capsys, "pauses")
    assert code == 0 and f"paid stopped  bot {BOT} until" in out
    assert f"`outbox resume --paid {BOT}`" in out
    code, out, err = run_cli(capsys, "status")
    assert code == 0 and f"paid stopped  bot {BOT}" in out and "BALANCE_TOO_LOW" in out
    assert f"warning: bot {BOT}: paid broadcasts stopped until" in err
    code, out, _ = run_cli(capsys, "batch", "aksiya", "--json")
    assert (json.loads(out)["paid"], json.loads(out)["paid_sent"]) == (2, 0)
    code, out, _ = run_cli(capsys, "batch", "aksiya")
    assert "sent with allow_paid_broadcast, of 2" in out
    code, out, err = run_cli(capsys, "resume", "--paid", BOT, "--queue", "default")
    assert code == 2 and "--paid resumes a bot's paid lane alone" in err
    code, out, _ = run_cli(capsys, "resume", "--paid", BOT)
    assert code == 0 and f"resumed the paid lane of bot {BOT}" in out
    code, out, _ = run_cli(capsys, "resume", "--paid", BOT, "--json")
    assert code == 0 and json.loads(out)["resumed"] is False
    assert run_cli(capsys, "pauses")[1].strip() == "nothing is paused"
