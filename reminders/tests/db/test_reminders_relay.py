"""The domain and the relay together: a reminder never goes out for a finished task."""

from __future__ import annotations

import asyncio
import time
from datetime import UTC, datetime, timedelta

import sqlalchemy as sa
from sqlalchemy.orm import Session

from outbox.config import RelayConfig
from outbox.ratelimit import RateLimits
from outbox.relay import Relay
from outbox.telegram import TelegramSender
from outbox_testing.fake_telegram import FakeTelegram
from reminders import service
from tests.support import TEST_TOKEN


def pending(engine: sa.Engine) -> int:
    with engine.begin() as conn:
        count = conn.exec_driver_sql("SELECT count(*) FROM outbox WHERE holat = 'kutmoqda'")
        return int(count.scalar_one())


def test_task_completed_while_its_reminder_is_claimed_is_not_reminded(
    engine: sa.Engine, db_url: str, fake_telegram: FakeTelegram
) -> None:
    chat = 5005
    due = datetime.now(UTC) + timedelta(minutes=30)  # both reminders (1h before) are due now
    with Session(engine) as session, session.begin():
        user = service.create_user(session, name="Aziza", chat_id=chat)
        first = service.create_task(session, user_id=user.id, title="Birinchi", due=due).task.id
        second = service.create_task(session, user_id=user.id, title="Ikkinchi", due=due).task.id

    def complete(task: int) -> None:
        with Session(engine) as session, session.begin():
            service.complete_task(session, task)

    async def scenario() -> int:
        # One message per two seconds for the bot, slots reserved 5 s ahead: the second
        # reminder is claimed and then waits for its send slot, which is the moment the user
        # completes the task.
        limits = RateLimits(per_bot=0.5, per_chat=0)
        config = RelayConfig(database_url=db_url, rate_limits=limits, slot_horizon=5.0)
        sender = TelegramSender(TEST_TOKEN, api_url=fake_telegram.api_url)
        async with Relay(config, sender) as relay:
            runner = asyncio.create_task(relay.run())
            # One message per chat per claim: the second reminder comes with the next claim,
            # 2 s of the bot's slots after the first.
            deadline = time.monotonic() + 5
            while time.monotonic() < deadline and not (
                fake_telegram.delivered and not pending(engine)
            ):
                await asyncio.sleep(0.01)
            first_text = fake_telegram.delivered[0].text
            finished = second if "Birinchi" in first_text else first
            with engine.begin() as conn:
                state = conn.exec_driver_sql(
                    "SELECT holat FROM outbox WHERE kalit LIKE %(key)s",
                    {"key": f"vazifa:{finished}:%"},
                ).scalar_one()
            assert state == "bajarilmoqda", "the other reminder should be claimed and waiting"
            # Off the event loop, as an app's request handler runs: the relay's claim holds
            # row locks across its awaits, and a blocking write on the loop would wait for them.
            await asyncio.to_thread(complete, finished)
            await asyncio.sleep(3.0)  # well past the second reminder's slot
            relay.stop()
            summary = await runner
        return summary.cancelled

    cancelled = asyncio.run(scenario())
    assert len(fake_telegram.delivered) == 1
    assert cancelled == 1
    with engine.begin() as conn:
        rows = conn.exec_driver_sql("SELECT holat FROM outbox").scalars().all()
    assert rows == ["bajarildi"]
