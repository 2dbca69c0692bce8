"""The vazifalar bot's lanes: replies above reminders, reminders above bulk; a reminder before
the due time may go a little early and expires at the due time; the at-due one does neither.

Here the db tier's tests (PostgreSQL, in the test's process); the others are in
``reminders/tests/unit/test_lanes_reminders.py``.
"""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import sqlalchemy as sa
from sqlalchemy.orm import Session

import reminders
from reminders.service import REMINDER_PRIORITY

HOUR = timedelta(hours=1)


def lanes(engine: sa.Engine) -> list[dict[str, object]]:
    with engine.connect() as conn:
        found = conn.execute(
            sa.text(
                "SELECT keyingi_urinish, ustuvorlik, eng_erta, eskirish FROM outbox "
                "ORDER BY keyingi_urinish"
            )
        )
        return [dict(r) for r in found.mappings()]


def test_a_reminder_before_the_due_time_expires_at_it(engine: sa.Engine) -> None:
    due = (datetime.now(UTC) + 3 * HOUR).replace(microsecond=0)
    with Session(engine) as session, session.begin():
        user = reminders.create_user(session, name="Dilnoza", chat_id=42)
        reminders.create_task(
            session, user_id=user.id, title="Hisobot", due=due, remind_before=[HOUR, timedelta(0)]
        )
    before, at_due = lanes(engine)
    assert before == {
        "keyingi_urinish": due - HOUR,
        "ustuvorlik": REMINDER_PRIORITY,
        "eng_erta": due - HOUR - timedelta(minutes=1),  # a sixtieth of its lead
        "eskirish": due,
    }
    # The at-due reminder goes at the due time, never before, and does not expire.
    assert at_due == {
        "keyingi_urinish": due,
        "ustuvorlik": REMINDER_PRIORITY,
        "eng_erta": None,
        "eskirish": None,
    }
