"""The vazifalar bot's lanes: replies above reminders, reminders above bulk; a reminder before
the due time may go a little early and expires at the due time; the at-due one does neither.

Here the unit tier's tests (no database); the others are in
``reminders/tests/db/test_lanes_reminders.py``.
"""

from __future__ import annotations

from reminders.service import REMINDER_PRIORITY, REPLY_PRIORITY


def test_replies_go_above_reminders_and_reminders_above_bulk() -> None:
    assert REPLY_PRIORITY > REMINDER_PRIORITY > 0  # 0: the outbox's default, bulk
