"""Rescheduling A -> B -> A through a running relay sends A's reminder once."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import sqlalchemy as sa
from sqlalchemy.orm import Session

from outbox_testing.fake_telegram import FakeTelegram
from reminders import service
from tests.support import Relays, wait_until


def _unsent(engine: sa.Engine) -> int:
    with engine.begin() as conn:
        query = "SELECT count(*) FROM outbox WHERE holat IN ('kutmoqda', 'bajarilmoqda')"
        return int(conn.execute(sa.text(query)).scalar_one())


def test_a_b_a_sends_one_reminder_once(
    relays: Relays, fake_telegram: FakeTelegram, engine: sa.Engine
) -> None:
    chat = 7001
    a = datetime.now(UTC).replace(microsecond=0) + timedelta(minutes=30)  # its 1 h reminder: now
    b = a + timedelta(days=1)
    with Session(engine) as session, session.begin():
        user = service.create_user(session, name="Aziza", chat_id=chat)
        task = service.create_task(session, user_id=user.id, title="Hisobot", due=a).task.id
    relays.start()
    wait_until(lambda: fake_telegram.delivered_to(chat), 20, "A's reminder")
    wait_until(lambda: _unsent(engine) == 0, 20, "the relay to record it")
    with Session(engine) as session, session.begin():
        service.reschedule_task(session, task, b)
    with Session(engine) as session, session.begin():
        back = service.reschedule_task(session, task, a)
        assert [r.created for r in back.reminders] == [False]  # A's reminder is the sent one
    wait_until(lambda: _unsent(engine) == 0, 20, "the queue to settle")
    assert len(fake_telegram.delivered_to(chat)) == 1
