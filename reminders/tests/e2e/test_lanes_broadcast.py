"""A person's reply during a broadcast: real ``reminders bot`` and ``outbox relay`` processes,
the fake Bot API enforcing Telegram's limits. The full-size run (3,000 messages, timings) is
``python -m bench --only lanes``; here the reply must overtake the broadcast, with two relays
of the bot keeping its limits together."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest
import sqlalchemy as sa

from outbox import enqueue
from outbox_testing.fake_telegram import FakeTelegram
from reminders.tests.support import Person, bot_processes
from tests.support import DEFAULT_LIMITS, TEST_TOKEN, Relays, relay_env, text, wait_until

BROADCAST = 400  # about 14 s at the bot's 28/s
FIRST_CHAT = 700_000


@pytest.fixture
def strict_fake() -> Iterator[FakeTelegram]:
    fake = FakeTelegram(token=TEST_TOKEN, enforce_limits=True).start_in_thread()
    yield fake
    fake.stop_thread()


def test_a_reply_overtakes_a_broadcast_and_the_broadcast_goes_on(
    engine: sa.Engine, db_url: str, strict_fake: FakeTelegram, tmp_path: Path
) -> None:
    env = relay_env(db_url, strict_fake.api_url, **DEFAULT_LIMITS, REMINDERS_POLL_TIMEOUT="1")
    relays = Relays(env, tmp_path)
    with relays.running(), bot_processes(env, tmp_path / "bots", strict_fake):
        # Two relays of the bot: they share its budget and its priorities through the claim.
        relays.start()
        relays.start()
        with engine.begin() as conn:
            for n in range(BROADCAST):  # bulk: the outbox's default priority
                enqueue(conn, key=f"news-{n}", payload=text(FIRST_CHAT + n))

        def broadcast_sent() -> int:
            return sum(1 for d in strict_fake.delivered if d.chat_id >= FIRST_CHAT)

        wait_until(lambda: broadcast_sent() >= 20, 60, "the broadcast under way")
        aziza = Person(strict_fake, 501, "Aziza")
        assert "Assalomu alaykum" in aziza.say("/start", timeout=60)
        # The reply went before the broadcast's waiting rows, not behind them.
        at_reply = broadcast_sent()
        assert at_reply < BROADCAST // 2, at_reply
        wait_until(lambda: broadcast_sent() == BROADCAST, 120, "the whole broadcast")
    stats = strict_fake.stats()
    assert stats["rejected_429"] <= 0.01 * stats["requests"], stats
