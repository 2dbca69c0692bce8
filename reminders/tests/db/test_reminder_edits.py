"""A task that changes after its reminder was sent edits that reminder, through the outbox and
in the same transaction as the change: the person's chat shows the task as it is now."""

from __future__ import annotations

import asyncio
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest
import sqlalchemy as sa
from sqlalchemy.orm import Session

import reminders
from outbox.retry import RetryPolicy
from outbox_testing.fake_telegram import FakeTelegram
from reminders.service import reminder_key
from tests.support import make_relay

CHAT = 4242


def _drain(db_url: str, fake: FakeTelegram) -> None:
    async def run() -> None:
        async with make_relay(db_url, fake, retry=RetryPolicy(base_seconds=0)) as relay:
            await relay.run(drain=True)

    asyncio.run(run())


@pytest.fixture
def sent_reminder(db_url: str, engine: sa.Engine, fake_telegram: FakeTelegram) -> tuple[int, int]:
    """A task whose reminder went out (its moment had passed): (task id, Telegram message id)."""
    due = datetime.now(UTC).replace(microsecond=0) + timedelta(minutes=30)
    with Session(engine, expire_on_commit=False) as session, session.begin():
        user = reminders.create_user(session, name="Dilnoza", chat_id=CHAT)
        task = reminders.create_task(session, user_id=user.id, title="Hisobot", due=due).task
    _drain(db_url, fake_telegram)
    (delivered,) = fake_telegram.delivered_to(CHAT)
    assert delivered.reply_markup is not None  # Bajarildi / Keyinroq
    return task.id, delivered.message_id


def _shown(fake: FakeTelegram, message_id: int) -> dict[str, Any]:
    message = fake.message(CHAT, message_id)
    assert message is not None
    return message


def test_completing_the_task_edits_its_sent_reminder_and_takes_the_buttons(
    db_url: str, engine: sa.Engine, fake_telegram: FakeTelegram, sent_reminder: tuple[int, int]
) -> None:
    task_id, message_id = sent_reminder
    with Session(engine) as session, session.begin():
        assert reminders.complete_task(session, task_id).edited == 1
    _drain(db_url, fake_telegram)
    shown = _shown(fake_telegram, message_id)
    assert shown["text"] == "✅ Bajarildi: Hisobot" and "reply_markup" not in shown


def test_a_rolled_back_change_edits_nothing(
    db_url: str, engine: sa.Engine, fake_telegram: FakeTelegram, sent_reminder: tuple[int, int]
) -> None:
    task_id, message_id = sent_reminder
    with Session(engine) as session:
        session.begin()
        reminders.complete_task(session, task_id)
        session.rollback()
    _drain(db_url, fake_telegram)
    assert fake_telegram.edits == []
    assert _shown(fake_telegram, message_id).get("reply_markup") is not None


def test_rescheduling_the_task_edits_its_sent_reminder(
    db_url: str, engine: sa.Engine, fake_telegram: FakeTelegram, sent_reminder: tuple[int, int]
) -> None:
    task_id, message_id = sent_reminder
    new_due = datetime.now(UTC).replace(microsecond=0) + timedelta(days=2)
    with Session(engine) as session, session.begin():
        changed = reminders.reschedule_task(session, task_id, new_due)
        assert changed.edited == 1 and len(changed.reminders) == 1
    _drain(db_url, fake_telegram)
    shown = _shown(fake_telegram, message_id)
    assert shown["text"].startswith("🔁 Muddat o'zgardi: Hisobot\nYangi muddat: ")
    assert "reply_markup" not in shown


def test_renaming_the_task_edits_its_sent_reminder_and_keeps_the_buttons(
    db_url: str, engine: sa.Engine, fake_telegram: FakeTelegram, sent_reminder: tuple[int, int]
) -> None:
    task_id, message_id = sent_reminder
    with Session(engine) as session, session.begin():
        assert reminders.rename_task(session, task_id, "Yillik hisobot").edited == 1
    _drain(db_url, fake_telegram)
    shown = _shown(fake_telegram, message_id)
    assert "Yillik hisobot" in shown["text"] and shown.get("reply_markup") is not None


def test_deleting_the_task_edits_its_sent_reminder(
    db_url: str, engine: sa.Engine, fake_telegram: FakeTelegram, sent_reminder: tuple[int, int]
) -> None:
    task_id, message_id = sent_reminder
    with Session(engine) as session, session.begin():
        reminders.delete_task(session, task_id)
    _drain(db_url, fake_telegram)
    shown = _shown(fake_telegram, message_id)
    assert shown["text"] == "🗑 Vazifa o'chirildi: Hisobot" and "reply_markup" not in shown


def test_a_change_before_the_reminder_was_sent_edits_nothing(
    db_url: str, engine: sa.Engine, fake_telegram: FakeTelegram
) -> None:
    due = datetime.now(UTC) + timedelta(days=1)
    with Session(engine, expire_on_commit=False) as session, session.begin():
        user = reminders.create_user(session, name="Dilnoza", chat_id=CHAT)
        task = reminders.create_task(session, user_id=user.id, title="Hisobot", due=due).task
    with Session(engine) as session, session.begin():
        changed = reminders.complete_task(session, task.id)
        assert changed.edited == 0 and changed.cancelled == 1
    with engine.connect() as conn:
        keys = conn.execute(sa.text("SELECT kalit FROM outbox")).scalars().all()
    assert keys == []  # withdrawn, and no edit of a message that never went out
    assert reminder_key(task.id, 3600, task.due) not in keys
