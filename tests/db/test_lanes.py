"""Lanes in the claim: priority, the starvation bound, delivery windows, expiry, a handed-back
row's place and chats that may not receive yet. Each test claims through the relay's own
statement on a real database (the relay processes have tests of their own)."""

from __future__ import annotations

import asyncio
from collections.abc import Sequence
from datetime import UTC, datetime, timedelta

import psycopg
import pytest
import sqlalchemy as sa

from outbox import enqueue, replay
from outbox.queries import (
    ClaimLimits,
    Outcome,
    bots_timing,
    claim_due,
    ensure_bot,
    record_outcomes,
)
from outbox.queries.claim import RESERVED_SHARE, ClaimLane
from outbox.states import FailureCode, State
from tests.support import text

SCHEMA = "public"
FAST = ClaimLimits(per_bot=10.0, horizon=10.0)  # slots 0.1 s apart, 100 of them a claim


def claim(db_url: str, limit: int, limits: ClaimLimits = ClaimLimits()) -> list[str]:  # noqa: B008
    """Claim once, as a relay does; the keys claimed, in slot order (with a per-bot rate)."""

    async def run() -> list[str]:
        async with await psycopg.AsyncConnection.connect(db_url, autocommit=True) as conn:
            await ensure_bot(conn, "default", schema=SCHEMA)
            rows = await claim_due(conn, limit, schema=SCHEMA, limits=limits)
            return [r.key for r in sorted(rows, key=lambda r: r.wait)]

    return asyncio.run(run())


def hand_back(db_url: str, keys: Sequence[str]) -> None:
    """Write 'handed back unsent, no delay' for claimed rows, as the send pool does."""

    async def run() -> None:
        async with await psycopg.AsyncConnection.connect(db_url, autocommit=True) as conn:
            cursor = await conn.execute(
                "SELECT id, urinish, band_vaqti FROM outbox WHERE kalit = ANY(%s)", (list(keys),)
            )
            outcomes = [
                Outcome(i, n, State.PENDING, new_attempts=n - 1, claimed_at=at)
                for i, n, at in await cursor.fetchall()
            ]
            assert await record_outcomes(conn, outcomes, schema=SCHEMA) == len(keys)

    asyncio.run(run())


def row(engine: sa.Engine, key: str) -> dict[str, object]:
    with engine.connect() as conn:
        found = conn.execute(
            sa.text(
                "SELECT id, holat, urinish, oxirgi_xato, xato_turi, ustuvorlik, keyingi_urinish, "
                "eng_erta, eskirish FROM outbox WHERE kalit = :k"
            ),
            {"k": key},
        )
        return dict(found.mappings().one())


def ago(engine: sa.Engine, seconds: float) -> datetime:
    with engine.connect() as conn:
        now: datetime = conn.execute(sa.text("SELECT now()")).scalar_one()
    return now - timedelta(seconds=seconds)


def add(engine: sa.Engine, key: str, chat: int, **lane: object) -> None:
    with engine.begin() as conn:
        enqueue(conn, key=key, payload=text(chat), **lane)  # type: ignore[arg-type]


def test_a_higher_priority_goes_first_whatever_its_time(engine: sa.Engine, db_url: str) -> None:
    add(engine, "bulk", 1, run_at=ago(engine, 60))
    add(engine, "reply", 2, priority=10)
    add(engine, "reminder", 3, priority=5, run_at=ago(engine, 30))
    # (All fit in the claim: no slot is reserved for the oldest, which may be any slot.)
    assert claim(db_url, 3, FAST) == ["reply", "reminder", "bulk"]


def test_a_stream_of_higher_priorities_cannot_starve_a_lower_one(
    engine: sa.Engine, db_url: str
) -> None:
    add(engine, "low", 1, run_at=ago(engine, 5), priority=-10)
    # The budget is full of higher-priority rows, and more keep coming: one claimed, one new.
    for n in range(3):
        add(engine, f"high-{n}", 100 + n, priority=10)
    # The bot's budget is full: every claim takes the next slot of its clock.
    full = ClaimLimits(per_bot=2.0, horizon=60.0)
    claimed: list[str] = []
    for n in range(3, 3 + 3 * RESERVED_SHARE):
        claimed += claim(db_url, 1, full)
        add(engine, f"high-{n}", 100 + n, priority=10)
        if "low" in claimed:
            break
    # One slot in RESERVED_SHARE of the bot's goes to the oldest due row.
    assert "low" in claimed, claimed
    assert claimed.index("low") < RESERVED_SHARE + 1, claimed
    assert all(key.startswith("high") for key in claimed[: claimed.index("low")])


def test_without_competition_the_share_takes_nothing_from_priority(
    engine: sa.Engine, db_url: str
) -> None:
    for n in range(5):
        add(engine, f"low-{n}", n + 1, run_at=ago(engine, 10 - n))
    add(engine, "high", 50, priority=3)
    # All fit in the claim: the highest first, then in their order.
    assert claim(db_url, 10, FAST) == ["high"] + [f"low-{n}" for n in range(5)]


def test_a_row_handed_back_keeps_its_place(engine: sa.Engine, db_url: str) -> None:
    add(engine, "first", 1, run_at=ago(engine, 10))
    assert claim(db_url, 1) == ["first"]
    add(engine, "later", 2, run_at=ago(engine, 5))  # due after it, before it comes back
    hand_back(db_url, ["first"])
    assert claim(db_url, 1) == ["first"]
    assert row(engine, "first")["urinish"] == 1  # the hand-back spent no attempt


def test_a_throttled_chat_does_not_fill_a_claim(engine: sa.Engine, db_url: str) -> None:
    limits = ClaimLimits(per_bot=10.0, chat_gap=60.0, group_gap=60.0, horizon=10.0)
    for n in range(30):  # one chat's rows ahead of another's (out of the chat's order,
        # which would hold them behind the first: here the chat's spacing alone holds them)
        add(engine, f"busy-{n}", 1, run_at=ago(engine, 100 - n), ordered=False)
    add(engine, "other", 2, run_at=ago(engine, 1))
    assert claim(db_url, 10, limits) == ["busy-0"]
    # The busy chat may not receive for a minute: its rows are left out before the LIMIT.
    assert claim(db_url, 10, limits) == ["other"]
    assert claim(db_url, 10, limits) == []


def test_a_lone_windowed_row_waits_for_its_moment(engine: sa.Engine, db_url: str) -> None:
    moment = ago(engine, -30)
    add(engine, "lone", 1, run_at=moment, early=timedelta(minutes=5))
    assert claim(db_url, 10, ClaimLimits(per_bot=28.0)) == []  # its window is open, no hurry
    assert row(engine, "lone")["holat"] == State.PENDING


def test_a_peak_goes_early_enough_to_be_on_time(engine: sa.Engine, db_url: str) -> None:
    limits = ClaimLimits(per_bot=28.0, horizon=1.0)
    moment = ago(engine, -3)  # 280 rows at 28/s take 10 s: the first must start 7 s before
    with engine.begin() as conn:
        for n in range(280):
            enqueue(
                conn,
                key=f"peak-{n}",
                payload=text(n + 1),
                run_at=moment,
                early=timedelta(seconds=70),
            )
        # Not windowed: not sent early, however far behind the peak is.
        enqueue(conn, key="plain", payload=text(999), run_at=moment)
    claimed = claim(db_url, 100, limits)
    assert claimed, "the peak waited for its moment and would be late"
    assert "plain" not in claimed
    assert len(claimed) <= 29  # a second of the bot's slots (the horizon), no more


def test_a_window_not_yet_open_is_not_sent(engine: sa.Engine, db_url: str) -> None:
    moment = ago(engine, -120)
    with engine.begin() as conn:
        for n in range(300):  # far behind, but the window opens in 60 s
            enqueue(conn, key=f"w-{n}", payload=text(n + 1), run_at=moment, early=timedelta(60))
    assert claim(db_url, 100, ClaimLimits(per_bot=28.0)) == []


def test_an_expired_row_is_failed_never_sent_and_can_be_replayed(
    engine: sa.Engine, db_url: str
) -> None:
    # The relay was down past the expiry.
    add(engine, "stale", 1, run_at=ago(engine, 60), expires_at=ago(engine, 1))
    add(engine, "fresh", 2, run_at=ago(engine, 30), expires_at=ago(engine, -3600))
    # The claim hands the stale row over expired; the relay fails it without sending (as
    # hand_expired does here, the send pool's outcome).
    assert sorted(claim(db_url, 10)) == ["fresh", "stale"]
    hand_expired(db_url, "stale")
    stale = row(engine, "stale")
    assert stale["holat"] == State.FAILED and stale["xato_turi"] == "expired"
    assert "expired" in str(stale["oxirgi_xato"])
    with engine.begin() as conn:
        [result] = replay(conn, [int(str(stale["id"]))])
    assert result.replayed
    assert claim(db_url, 10) == ["stale"]


def hand_expired(db_url: str, key: str) -> None:
    """Write 'expired before it could be sent' for a claimed row, as the send pool does."""

    async def run() -> None:
        async with await psycopg.AsyncConnection.connect(db_url, autocommit=True) as conn:
            cursor = await conn.execute(
                "SELECT id, urinish, band_vaqti FROM outbox WHERE kalit = %s", (key,)
            )
            (i, n, at) = await cursor.fetchone() or ()
            expired = Outcome(
                i, n, State.FAILED, error="expired before it could be sent",
                error_code=FailureCode.EXPIRED, claimed_at=at,
            )  # fmt: skip
            assert await record_outcomes(conn, [expired], schema=SCHEMA) == 1

    asyncio.run(run())


def test_rows_written_by_hand_with_odd_lanes_cannot_stop_the_claim(
    engine: sa.Engine, db_url: str
) -> None:
    with engine.begin() as conn:
        # The lesson's plain INSERT, and infinities where the lanes' times go.
        conn.execute(
            sa.text("INSERT INTO outbox (tur, kalit, payload) VALUES ('eslatma', 'plain', :p)"),
            {"p": '{"chat_id": 1, "text": "x"}'},
        )
        conn.execute(
            sa.text(
                "INSERT INTO outbox (tur, kalit, payload, keyingi_urinish, eng_erta, eskirish) "
                "VALUES ('eslatma', 'odd', :p, now() - interval '1 s', '-infinity', 'infinity')"
            ),
            {"p": '{"chat_id": 2, "text": "x"}'},
        )
    assert row(engine, "plain")["ustuvorlik"] == 0
    assert sorted(claim(db_url, 10, ClaimLimits(per_bot=28.0))) == ["odd", "plain"]


@pytest.mark.parametrize(
    ("columns", "values", "constraint"),
    [
        ("ustuvorlik", "11", "outbox_ustuvorlik_range"),
        ("ustuvorlik", "-11", "outbox_ustuvorlik_range"),
        ("eng_erta", "now() + interval '1 minute'", "outbox_eng_erta_order"),
        ("eskirish", "now() - interval '1 minute'", "outbox_eskirish_order"),
    ],
)
def test_the_table_refuses_bad_lanes_in_plain_sql(
    engine: sa.Engine, columns: str, values: str, constraint: str
) -> None:
    with pytest.raises(sa.exc.IntegrityError, match=constraint), engine.begin() as conn:
        conn.execute(
            sa.text(
                f"INSERT INTO outbox (tur, kalit, payload, {columns}) "
                f"VALUES ('eslatma', 'bad', '{{}}', {values})"
            )
        )


def test_the_claim_takes_the_edges_of_the_priority_range(engine: sa.Engine, db_url: str) -> None:
    add(engine, "lowest", 1, priority=-10)
    add(engine, "highest", 2, priority=10)
    assert claim(db_url, 5, FAST) == ["highest", "lowest"]


def test_a_moment_at_utc_or_any_offset_is_the_same(engine: sa.Engine) -> None:
    moment = datetime(2030, 1, 1, 9, tzinfo=UTC)
    add(engine, "w", 1, run_at=moment, early=timedelta(seconds=70), expires_at=moment)
    found = row(engine, "w")
    assert found["eng_erta"] == moment - timedelta(seconds=70)
    assert found["eskirish"] == moment == found["keyingi_urinish"]


def test_a_relay_wakes_when_the_plan_says_a_peak_must_start(engine: sa.Engine, db_url: str) -> None:
    moment = ago(engine, -60)  # 2,800 rows at 28/s take 100 s: already 40 s behind
    with engine.begin() as conn:
        for n in range(2800):
            enqueue(conn, key=f"p{n}", payload=text(n + 1), run_at=moment, early=timedelta(120))

    async def timing(rate: float) -> float | None:
        async with await psycopg.AsyncConnection.connect(db_url, autocommit=True) as conn:
            found = await bots_timing(
                conn,
                ["default"],
                ["default"],
                schema=SCHEMA,
                horizon=1.0,
                rate=rate,
                unnamed=[True],
            )
            return found["default"].next_due

    behind = asyncio.run(timing(28.0))
    assert behind is not None and behind <= 0
    # Without a per-bot rate there is no plan: the rows are due at their moment.
    alone = asyncio.run(timing(0.0))
    assert alone is not None and alone > 30


def test_a_priority_that_appears_between_claims_is_taken_first(
    engine: sa.Engine, db_url: str
) -> None:
    # A reply enqueued during a broadcast goes before the broadcast's next message.
    for n in range(3):
        add(engine, f"bulk-{n}", 100 + n)

    async def run() -> list[list[str]]:
        async with await psycopg.AsyncConnection.connect(db_url, autocommit=True) as conn:
            await ensure_bot(conn, "default", schema=SCHEMA)

            async def once(limit: int) -> list[str]:
                rows = await claim_due(conn, limit, schema=SCHEMA, limits=FAST)
                return [r.key for r in sorted(rows, key=lambda r: r.wait)]

            first = await once(1)
            early = await asyncio.to_thread(ago, engine, 60)
            await asyncio.to_thread(add, engine, "reply", 1, priority=10, run_at=early)
            await asyncio.to_thread(add, engine, "news", 2, priority=-5, run_at=early)
            # One slot in RESERVED_SHARE, counted on the bot's slot clock, is the oldest row's
            # (here "news"): the clock is set on a whole second so that the next slot is not it.
            await conn.execute(
                f"UPDATE {SCHEMA}.bot_holati SET keyingi_slot ="
                " to_timestamp(ceil(extract(epoch FROM now())) + 1)"
            )
            return [first, await once(1), await once(10)]

    assert asyncio.run(run()) == [["bulk-0"], ["reply"], ["bulk-1", "bulk-2", "news"]]


def test_a_private_chat_keeps_the_chat_gap_and_any_other_the_group_gap(
    engine: sa.Engine, db_url: str
) -> None:
    # A private chat's id is all digits; a group's is negative, a channel's a name, and a
    # chat id written by hand that is neither is spaced as a group (the safer gap).
    chats = {"12345": 10.0, "-100123": 100.0, "@kanal": 100.0, "12a": 100.0, " 7": 100.0}
    with engine.begin() as conn:
        for i, chat in enumerate(chats):
            conn.execute(
                sa.text("INSERT INTO outbox (kalit, payload) VALUES (:k, :p)"),
                {"k": f"c{i}", "p": f'{{"chat_id": "{chat}", "text": "x"}}'},
            )
    assert len(claim(db_url, 10, ClaimLimits(chat_gap=10.0, group_gap=100.0))) == len(chats)
    with engine.connect() as conn:
        kept: dict[str, float] = dict(
            conn.execute(
                sa.text("SELECT chat, extract(epoch FROM keyingi - now()) FROM chat_navbati")
            ).all()
        )
    assert set(kept) == set(chats)
    for chat, gap in chats.items():
        assert gap - 5 < float(kept[chat]) <= gap, (chat, kept[chat])


@pytest.mark.parametrize("lane", [ClaimLane.ALL, ClaimLane.PAID])
@pytest.mark.parametrize("written", ["'infinity'", "'3000-01-01'", "now() + interval '10 s'"])
def test_a_slot_clock_written_by_hand_holds_its_bot_as_far_as_a_claim_could_book(
    engine: sa.Engine, db_url: str, lane: ClaimLane, written: str
) -> None:
    # Plain SQL may set a bot's slot clock anywhere. Within a day it is honoured as a booking
    # (a fleet's clock: no slot before it); a day ahead it is no claim's booking and counts as
    # booked up to the horizon: the bot sends at its rate again, and its next claim writes the
    # clock back where the slots are.
    paid = lane is ClaimLane.PAID
    clock = "pullik_slot" if paid else "keyingi_slot"
    for n in range(3):
        payload = {**text(100 + n), "allow_paid_broadcast": True} if paid else text(100 + n)
        with engine.begin() as conn:
            enqueue(conn, key=f"m-{n}", payload=payload)
    limits = ClaimLimits(per_bot=10.0, horizon=1.0, paid=10.0 if paid else 0.0)

    async def run() -> tuple[float | None, int, float]:
        async with await psycopg.AsyncConnection.connect(db_url, autocommit=True) as conn:
            await ensure_bot(conn, "default", schema=SCHEMA)
            await conn.execute(f"UPDATE {SCHEMA}.bot_holati SET {clock} = {written}")
            timing = await bots_timing(
                conn,
                ["default"],
                ["default"],
                schema=SCHEMA,
                horizon=1.0,
                rate=10.0,
                unnamed=[True],
                paid=paid,
            )
            rows = await claim_due(conn, 3, schema=SCHEMA, limits=limits, lane=lane)
            cursor = await conn.execute(
                f"SELECT extract(epoch FROM {clock} - now())::float8 FROM {SCHEMA}.bot_holati"
            )
            ahead = await cursor.fetchone()
            assert ahead is not None
            return timing["default"].next_due, len(rows), ahead[0]

    next_due, claimed, ahead = asyncio.run(run())
    assert next_due is not None
    if written.startswith("now()"):
        # When the horizon reaches the clock (a bot's timing: with a paid lane, its free
        # clock, free now, may free a slot first).
        assert next_due <= 0.0 if paid else 8.0 < next_due <= 9.0
        assert claimed == 0
        assert 9.0 < ahead <= 10.0  # left as written
    else:
        assert next_due <= 0.0
        assert claimed == 1  # the one slot at the horizon's edge
        assert 0.0 < ahead <= 1.5
