"""Order per chat with real processes: two relays of one bot, the fake Bot API answering some
chats' first messages with a 500 or a 429, and one relay killed with SIGKILL mid-run. Each
chat must receive its messages in the order they were enqueued, each of them."""

from __future__ import annotations

import itertools
from pathlib import Path

import sqlalchemy as sa

from outbox import enqueue
from outbox_testing.fake_telegram import FakeTelegram, Fault
from tests.support import Relays, relay_env, states, text, wait_until

CHATS = range(8000, 8060)
STEPS = 5
CONCURRENCY = 4


def received(fake: FakeTelegram, chat: int) -> list[int]:
    """The step numbers a chat received, a message sent again right after itself counted once
    (at-least-once: a relay killed between Telegram's answer and its marker sends it again, and
    the chat's next message waits for that)."""
    steps = [int(d.text.rsplit("/", 1)[1]) for d in fake.delivered_to(chat)]
    return [step for step, _ in itertools.groupby(steps)]


def test_two_relays_a_kill_and_failures_keep_each_chats_order(
    engine: sa.Engine, db_url: str, fake_telegram: FakeTelegram, tmp_path: Path
) -> None:
    fake_telegram.latency = 0.02  # keeps sends in flight at the kill
    for n, chat in enumerate(CHATS):
        if n % 3 == 0:
            fake_telegram.script(chat, Fault.server_error(500))  # step 1 retried after 2 s
        elif n % 10 == 1:
            fake_telegram.script(chat, Fault.retry_after(1))  # the bot paused for 1 s
    with engine.begin() as conn:  # chat by chat: a chat's five steps next to each other
        for chat in CHATS:
            for step in range(1, STEPS + 1):
                enqueue(conn, key=f"c{chat}-{step}", payload=text(chat, step))
    total = len(CHATS) * STEPS
    settings = {
        "OUTBOX_CONCURRENCY": str(CONCURRENCY),
        "OUTBOX_BATCH_SIZE": str(CONCURRENCY),
        # A short lease, so the killed relay's claims come back soon; it covers a send.
        "OUTBOX_LEASE": "3s",
        # 2 s, not less: a loaded machine can hold the in-process fake's answers back for a
        # second, and a send that times out is sent again (a duplicate without a crash).
        "OUTBOX_TELEGRAM_TIMEOUT": "2s",
        "OUTBOX_GRACE": "0.5s",
        "OUTBOX_MAX_ATTEMPTS": "8",
    }
    with Relays(relay_env(db_url, fake_telegram.api_url, **settings), tmp_path).running() as fleet:
        doomed, survivor = fleet.start(), fleet.start()
        wait_until(lambda: fake_telegram.count() >= total // 3, 60, "a third delivered",
                   explain=fleet.describe)  # fmt: skip
        assert doomed.alive(), doomed.describe()
        doomed.kill()
        wait_until(
            lambda: states(engine)["bajarildi"] == total,
            90,
            "every message sent",
            explain=fleet.describe,
        )
        assert survivor.stop() == 0, fleet.describe()
    out_of_order = {
        chat: got for chat in CHATS if (got := received(fake_telegram, chat)) != [1, 2, 3, 4, 5]
    }
    assert not out_of_order, out_of_order
    # Each once, but for the sends the killed relay had in flight (at most its concurrency) and
    # those that timed out (sent again: they may have gone twice).
    resent = fake_telegram.count() - total
    assert 0 <= resent <= CONCURRENCY + len(fleet.timed_out()), resent
    assert states(engine)["xato"] == 0
