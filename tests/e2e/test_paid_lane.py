"""The paid lane beside the free one, with a relay process and the fake Bot API enforcing both of
a bot's limits (30/s free, 1,000/s for allow_paid_broadcast, each counted apart): the paid rows
go at --paid-rate-limit while the free ones keep --rate-limit, and no request is answered 429.
Then the fake refuses paid broadcasts for the Stars balance: the paid lane stops, with one line
in the relay's log, its rows wait with no attempt spent, the free lane goes on; an operator's
resume sends them."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

import sqlalchemy as sa

from outbox import enqueue, ops
from outbox_testing.fake_telegram import Delivered, FakeTelegram
from tests.support import Relays, relay_env, states, wait_until

FREE_CHATS = range(10_000, 10_090)  # 90 at 20/s: about 4.5 s
PAID_CHATS = range(20_000, 21_200)  # 1,200 at 300/s: about 4 s
PAID_RATE = 300


def paid(chat: int) -> dict[str, object]:
    return {"chat_id": chat, "text": f"aksiya {chat}", "allow_paid_broadcast": True}


def most_in_a_second(sent: Sequence[Delivered]) -> int:
    """The most messages Telegram accepted within any one second."""
    times = sorted(d.at for d in sent)
    most, start = 0, 0
    for end, at in enumerate(times):
        while at - times[start] >= 1.0:
            start += 1
        most = max(most, end - start + 1)
    return most


def test_the_paid_lane_beside_the_free_one_within_both_limits(
    engine: sa.Engine, db_url: str, fake_telegram: FakeTelegram, tmp_path: Path
) -> None:
    fake_telegram.latency = 0.05
    fake_telegram.enforce_limits = True
    with engine.begin() as conn:
        for chat in FREE_CHATS:
            enqueue(conn, key=f"free-{chat}", payload={"chat_id": chat, "text": f"eslatma {chat}"})
        for chat in PAID_CHATS:
            enqueue(conn, key=f"paid-{chat}", payload=paid(chat))
    total = len(FREE_CHATS) + len(PAID_CHATS)
    settings = {
        # Under Telegram's 30/s with room for the jitter of one machine running the relay, the
        # fake and the database at once: a send the fake's loop takes late arrives in a bunch
        # (at 25/s a busy machine's stall of some 0.2 s made the fake answer two sends 429).
        "OUTBOX_RATE_LIMIT": "20",
        "OUTBOX_PAID_RATE_LIMIT": str(PAID_RATE),
        "OUTBOX_CHAT_RATE_LIMIT": "1",
        "OUTBOX_CONCURRENCY": "64",
    }
    with Relays(relay_env(db_url, fake_telegram.api_url, **settings), tmp_path).running() as fleet:
        relay = fleet.start()
        wait_until(
            lambda: states(engine)["bajarildi"] == total, 60, "every message sent",
            explain=fleet.describe,
        )  # fmt: skip
        delivered = fake_telegram.delivered
        free = [d for d in delivered if d.text.startswith("eslatma")]
        paid_sent = [d for d in delivered if d.text.startswith("aksiya")]
        assert (len(free), len(paid_sent)) == (len(FREE_CHATS), len(PAID_CHATS))
        assert fake_telegram.rejected_429 == 0, fleet.describe()
        # The free lane kept its rate; the paid one went far past it, within its own.
        assert most_in_a_second(free) <= 30
        assert 150 <= most_in_a_second(paid_sent) <= PAID_RATE + 30
        paid_span = max(d.at for d in paid_sent) - min(d.at for d in paid_sent)
        # At the free 30/s they would have taken 40 s: the paid lane took a few.
        assert paid_span < len(PAID_CHATS) / 60, paid_span

        # Telegram refuses paid broadcasts now (the bot's Stars balance).
        fake_telegram.refuse_paid()
        with engine.begin() as conn:
            for chat in range(30_000, 30_040):
                enqueue(conn, key=f"late-paid-{chat}", payload=paid(chat))
            for chat in range(31_000, 31_020):
                enqueue(conn, key=f"late-free-{chat}", payload={"chat_id": chat, "text": "keyin"})
        wait_until(
            lambda: states(engine)["bajarildi"] == total + 20, 30, "the free lane goes on",
            explain=fleet.describe,
        )  # fmt: skip
        with engine.begin() as conn:
            (stop,) = ops.paid_lane_stops(conn, schema="public")
            waiting = conn.execute(
                sa.text("SELECT holat, urinish FROM outbox WHERE kalit LIKE 'late-paid-%'")
            ).all()
        assert "balance_too_low" in stop.reason.lower()
        assert set(waiting) == {("kutmoqda", 0)}, waiting  # no attempt spent, none failed
        refused = [r for r in fake_telegram.requests if r.status == 400]
        assert 1 <= len(refused) <= 64  # those in flight when the first refusal came, at most
        lines = [ln for ln in relay.stderr.splitlines() if "paid broadcasts stopped" in ln]
        assert len(lines) == 1, relay.describe()

        # The balance is topped up and an operator resumes the paid lane.
        fake_telegram.refuse_paid(None)
        with engine.begin() as conn:
            assert ops.resume_paid_lane(conn, stop.bot, schema="public") is True
        wait_until(
            lambda: states(engine)["bajarildi"] == total + 60, 30, "the paid rows sent",
            explain=fleet.describe,
        )  # fmt: skip
        assert relay.stop() == 0, fleet.describe()
    assert states(engine)["xato"] == 0
