"""The vazifalar domain: users, tasks and the Telegram reminders that follow each task.

Call these inside the app's own SQLAlchemy session and transaction; they never commit::

    with Session(engine) as session, session.begin():
        user = reminders.create_user(session, name="Dilnoza", chat_id=42)
        reminders.create_task(session, user_id=user.id, title="Hisobot", due=due)
"""

from __future__ import annotations

from reminders.models import Task, User
from reminders.service import (
    DEFAULT_REMIND_BEFORE,
    ScheduledReminder,
    TaskChanged,
    TaskCreated,
    complete_task,
    create_task,
    create_user,
    delete_task,
    find_user_by_chat,
    get_task,
    get_user,
    list_tasks,
    rename_task,
    reschedule_task,
    set_time_zone,
    sign_up,
    snooze_task,
)

__all__ = [
    "DEFAULT_REMIND_BEFORE",
    "ScheduledReminder",
    "Task",
    "TaskChanged",
    "TaskCreated",
    "User",
    "complete_task",
    "create_task",
    "create_user",
    "delete_task",
    "find_user_by_chat",
    "get_task",
    "get_user",
    "list_tasks",
    "rename_task",
    "reschedule_task",
    "set_time_zone",
    "sign_up",
    "snooze_task",
]
