"""The fault matrix: every scripted Bot API fault ends in the state DESIGN §5 says.

Relays run as real processes (``outbox relay``) against the fake Bot API in this process, so
the fake's request timestamps show when each attempt really reached "Telegram".

Here the db tier's tests (PostgreSQL, in the test's process); the others are in
``tests/e2e/test_delivery_faults.py``.
"""

from __future__ import annotations

import asyncio

import sqlalchemy as sa

from outbox import enqueue
from outbox.retry import RetryPolicy
from outbox_testing.fake_telegram import FakeTelegram, Fault
from tests.support import make_relay, row, text


def test_read_timeout_is_retried_and_may_duplicate(
    engine: sa.Engine, db_url: str, fake_telegram: FakeTelegram
) -> None:
    """No answer in time: maybe delivered; at-least-once sends it again (the documented risk)."""
    chat = 700
    fake_telegram.script(chat, Fault.slow(3.0))
    with engine.begin() as conn:
        enqueue(conn, key="timeout", payload=text(chat))

    async def scenario() -> None:
        relay = make_relay(
            db_url, fake_telegram, retry=RetryPolicy(base_seconds=0.2), telegram_timeout=0.5
        )
        async with relay:
            runner = asyncio.create_task(relay.run())
            while row(engine, "timeout")["holat"] != "bajarildi":
                await asyncio.sleep(0.05)
            relay.stop()
            await runner

    asyncio.run(asyncio.wait_for(scenario(), 20))
    found = row(engine, "timeout")
    assert found["urinish"] == 2
    assert "did not answer in time" in found["tarix"][0]["xato"]
    assert len(fake_telegram.delivered_to(chat)) == 2
