"""The vazifalar API: called inside the app's own session and transaction, never commits.

Every change to a task and to its reminders in the outbox happens in the caller's transaction:
commit and both are there, roll back and neither is. A task row is locked (``SELECT ... FOR
UPDATE``) before it changes, so that concurrent changes of one task happen one after another.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import UTC, datetime, time, timedelta
from typing import Any
from zoneinfo import ZoneInfo, ZoneInfoNotFoundError

import sqlalchemy as sa
from sqlalchemy.orm import Session, selectinload

import outbox
from outbox.errors import InvalidInput, NotFound
from reminders.messages import (
    EDIT_KIND,
    TELEGRAM_TEXT_LIMIT,
    Change,
    ReminderPayload,
    changed_reminder_text,
    reminder_edit,
    reminder_payload,
    telegram_length,
)
from reminders.models import DEFAULT_TIME_ZONE, Task, User
from reminders.parsing import BIGINT_MAX

__all__ = [
    "ANNOUNCEMENT_KIND",
    "DEFAULT_REMIND_BEFORE",
    "REMINDER_PRIORITY",
    "REPLY_PRIORITY",
    "ScheduledReminder",
    "SignUp",
    "Snoozed",
    "TaskChanged",
    "TaskCreated",
    "announce",
    "clear_quiet_hours",
    "complete_task",
    "create_task",
    "create_user",
    "database_now",
    "delete_task",
    "find_user_by_chat",
    "get_task",
    "get_user",
    "list_tasks",
    "list_users",
    "reminder_key",
    "rename_task",
    "reschedule_task",
    "set_quiet_hours",
    "set_time_zone",
    "sign_up",
    "snooze_key",
    "snooze_task",
    "validate_time_zone",
]

DEFAULT_REMIND_BEFORE: tuple[timedelta, ...] = (timedelta(hours=1),)

# The bot's lanes within its one Telegram budget: a person's reply first, reminders next, bulk
# (the outbox's default, 0) last, so that /start answers at once during a broadcast.
REPLY_PRIORITY = 10
REMINDER_PRIORITY = 5
# Bulk messages (an announcement to every user) wait for the person's quiet hours (/quiet); a
# reminder the person scheduled, and the bot's replies, do not.
ANNOUNCEMENT_KIND = "elon"
# A reminder before the due time may go a little early when a peak (everyone's 09:00) would
# otherwise make it late: a sixtieth of its lead, at most a minute ("in 1 hour" a minute
# early). The at-due reminder never goes early.
_MAX_EARLY = timedelta(minutes=1)

# Dues a day inside datetime's range: shown in any time zone, they stay within it.
_EARLIEST_DUE = datetime(1, 1, 2, tzinfo=UTC)
_LATEST_DUE = datetime(9999, 12, 30, tzinfo=UTC)
_INTEGER_MAX = 2**31 - 1  # eslatma_oldin is integer[]
# Names the zone database accepts that do not name a place: the host's own zone and a stub.
_NOT_PLACES = frozenset({"localtime", "posixrules", "Factory"})


@dataclass(frozen=True, slots=True)
class ScheduledReminder:
    """One reminder of a task, as enqueued in the outbox."""

    offset: timedelta  # how long before the due time
    key: str  # the outbox key: (task, offset, due time)
    outbox_id: int
    run_at: datetime  # not sent before this; the transaction's time when the moment has passed
    created: bool  # False: the outbox already held this message (for example, already sent)


@dataclass(frozen=True, slots=True)
class TaskCreated:
    task: Task
    reminders: tuple[ScheduledReminder, ...]
    overdue: bool  # the due time had already passed: no reminder was enqueued


@dataclass(frozen=True, slots=True)
class TaskChanged:
    task: Task
    reminders: tuple[ScheduledReminder, ...]  # enqueued by this change
    cancelled: int  # unsent reminders withdrawn from the outbox by this change
    overdue: bool  # the (new) due time has passed: no new reminder was enqueued
    updated: int = 0  # waiting reminders whose text this change rewrote (rename)
    edited: int = 0  # reminders already sent whose message this change edits (via the outbox)


@dataclass(frozen=True, slots=True)
class Snoozed:
    task: Task
    reminder: ScheduledReminder | None  # None: the task is done, nothing was put off
    cancelled: int  # an earlier put-off reminder not sent yet, replaced by this one


@dataclass(frozen=True, slots=True)
class SignUp:
    user: User
    state: str  # "new", "back" (was inactive: reminders resume) or "known"
    reminders: int = 0  # reminders enqueued again for a returning user


def reminder_key(task_id: int, offset_seconds: int, due: datetime) -> str:
    """The outbox key of one reminder: a reminder is its moment (task, offset, due time).

    A retried or re-enqueued reminder is the same message, so the relay's sent marker stops a
    second send: rescheduling A -> B -> A finds A's reminder sent and does not send it again.
    A rescheduled reminder is a new message (new due time, new key).
    """
    return f"vazifa:{task_id}:{offset_seconds}:{math.floor(due.timestamp())}"


def snooze_key(task_id: int, snooze: int) -> str:
    """The key of the task's ``snooze``-th put-off reminder; the count only grows."""
    return f"vazifa:{task_id}:keyinroq:{snooze}"


# --- validation: one clear line per mistake --------------------------------------------------


def _check_id(what: str, value: int) -> int:
    if isinstance(value, bool) or not isinstance(value, int):
        raise InvalidInput(f"{what} id must be a whole number, got {value!r}")
    if not 1 <= value <= BIGINT_MAX:
        raise NotFound(f"{what} {value} does not exist")
    return value


def _check_text(what: str, value: str) -> str:
    if not isinstance(value, str) or not value.strip():
        raise InvalidInput(f"the {what} is empty")
    if "\x00" in value:  # PostgreSQL's text cannot hold it
        raise InvalidInput(f"the {what} contains a NUL character")
    return value.strip()


def validate_time_zone(name: str) -> str:
    """``name`` if it is an IANA time zone (``Asia/Tashkent``), else ``InvalidInput``."""
    name = name.strip() if isinstance(name, str) else name
    hint = "use an IANA name such as Asia/Tashkent or Europe/Berlin"
    if not isinstance(name, str) or not name or name in _NOT_PLACES:
        raise InvalidInput(f"unknown time zone {name!r}: {hint}")
    try:
        ZoneInfo(name)
    except (ZoneInfoNotFoundError, ValueError, OSError):
        raise InvalidInput(f"unknown time zone {name!r}: {hint}") from None
    return name


def _check_due(due: datetime) -> datetime:
    if not isinstance(due, datetime):
        raise InvalidInput(f"the due time must be a datetime, got {due!r}")
    if due.tzinfo is None or due.utcoffset() is None:
        raise InvalidInput(
            f"the due time {due.isoformat(sep=' ')} has no time zone: pass an aware datetime"
        )
    try:
        in_range = _EARLIEST_DUE <= due <= _LATEST_DUE
    except OverflowError:
        in_range = False
    if not in_range:
        raise InvalidInput(f"the due time {due.isoformat(sep=' ')} is out of range")
    return due


def _check_offsets(remind_before: Sequence[timedelta]) -> list[int]:
    """Offsets in whole seconds, largest first, without repeats."""
    seconds: set[int] = set()
    for offset in remind_before:
        if not isinstance(offset, timedelta):
            raise InvalidInput(f"a reminder offset must be a timedelta, got {offset!r}")
        if offset < timedelta(0):
            raise InvalidInput(f"a reminder offset cannot be negative, got {offset}")
        if offset.total_seconds() > _INTEGER_MAX:
            raise InvalidInput(f"a reminder offset is too large: {offset}")
        seconds.add(int(offset.total_seconds()))
    if not seconds:
        raise InvalidInput("a task needs at least one reminder offset")
    return sorted(seconds, reverse=True)


# --- reading ------------------------------------------------------------------------------


def get_user(session: Session, user_id: int) -> User:
    user = session.get(User, _check_id("user", user_id))
    if user is None:
        raise NotFound(f"user {user_id} does not exist")
    return user


def get_task(session: Session, task_id: int) -> Task:
    task = session.get(Task, _check_id("task", task_id))
    if task is None:
        raise NotFound(f"task {task_id} does not exist")
    return task


def list_tasks(
    session: Session, user_id: int | None = None, *, include_done: bool = True
) -> list[Task]:
    """Tasks by due time (their users loaded), of one user or of everyone."""
    query = sa.select(Task).options(selectinload(Task.user)).order_by(Task.due, Task.id)
    if user_id is not None:
        query = query.where(Task.user_id == get_user(session, user_id).id)
    if not include_done:
        query = query.where(Task.done.is_(False))
    return list(session.scalars(query))


def list_users(session: Session) -> list[User]:
    """Every user, oldest first."""
    return list(session.scalars(sa.select(User).order_by(User.id)))


# --- reminders in the outbox -----------------------------------------------------------------


def database_now(session: Session) -> datetime:
    """The database's clock: the relay decides what is due by it, and so does the domain."""
    return session.execute(sa.select(sa.func.now())).scalar_one()


def _scheduled_keys(task: Task) -> list[str]:
    return [reminder_key(task.id, s, task.due) for s in task.remind_before_seconds]


def _current_keys(task: Task) -> list[str]:
    """Every key an unsent reminder of the task can have: its schedule's and its last snooze."""
    snoozed = [snooze_key(task.id, task.snoozes)] if task.snoozes else []
    return _scheduled_keys(task) + snoozed


def _payload_at(task: Task, send_at: datetime) -> ReminderPayload:
    return reminder_payload(
        chat_id=task.user.chat_id,
        title=task.title,
        due=task.due,
        time_zone=task.user.time_zone,
        send_at=send_at,
        task_id=task.id,
    )


def _reminder_payload(task: Task, offset_seconds: int, now: datetime) -> ReminderPayload:
    return _payload_at(task, max(task.due - timedelta(seconds=offset_seconds), now))


def _enqueue_reminder(
    session: Session, task: Task, offset_seconds: int, now: datetime
) -> ScheduledReminder:
    moment = task.due - timedelta(seconds=offset_seconds)
    send_at = max(moment, now)
    payload = _reminder_payload(task, offset_seconds, now)
    key = reminder_key(task.id, offset_seconds, task.due)
    run_at = moment if moment > now else None  # None: the outbox's "now", for a passed moment
    before = timedelta(seconds=offset_seconds)
    # A reminder before the due time says "in 1 hour": after the due time it is wrong, so it
    # expires then. The at-due one does not expire: late, it still tells the task is due.
    enqueued = outbox.enqueue(
        session,
        key=key,
        payload=payload,
        run_at=run_at,
        priority=REMINDER_PRIORITY,
        early=min(before / 60, _MAX_EARLY) if run_at is not None and before else None,
        expires_at=task.due if before else None,
    )
    return ScheduledReminder(
        offset=timedelta(seconds=offset_seconds),
        key=key,
        outbox_id=enqueued.id,
        run_at=send_at,
        created=enqueued.created,
    )


def _offsets_to_send(task: Task, now: datetime) -> list[int]:
    """The offsets that get a reminder: all in the future, plus one for the moments passed.

    Several moments that have passed would all go out at once with the same text; the one
    closest to now (the smallest offset) stands for them.
    """
    future = [s for s in task.remind_before_seconds if task.due - timedelta(seconds=s) > now]
    passed = [s for s in task.remind_before_seconds if s not in future]
    return future + ([min(passed)] if passed else [])


def _schedule(
    session: Session, task: Task, now: datetime | None = None
) -> tuple[tuple[ScheduledReminder, ...], bool]:
    """Enqueue the task's reminders for its due time; ``((), True)`` when it is overdue.
    ``now``: the database's clock, when the caller has read it in this transaction.

    Nothing is enqueued for a user who blocked the bot: /start enqueues them again.
    """
    now = database_now(session) if now is None else now
    if task.due <= now:
        return (), True
    if not task.user.active:
        return (), False
    return tuple(
        _enqueue_reminder(session, task, s, now) for s in _offsets_to_send(task, now)
    ), False


def _edit_sent(
    session: Session, keys: Sequence[str], text: str, keyboard: dict[str, Any] | None = None
) -> int:
    """Edit every reminder of ``keys`` the outbox already sent, through the outbox and in the
    caller's transaction (an edit is a follow-up named by the reminder's key); return how many.

    Each change is its own edit (its key carries the database's time): a second rename edits
    the message again, and the relay applies the edits of one message in order.
    """
    sent = outbox.sent_keys(session, keys)
    stamp = int(database_now(session).timestamp() * 1_000_000)
    for key in sent:
        outbox.enqueue(
            session, key=f"{key}:tahrir:{stamp}", payload=reminder_edit(key, text, keyboard),
            kind=EDIT_KIND,
        )  # fmt: skip
    return len(sent)


def _edit_sent_for(session: Session, task: Task, keys: Sequence[str], change: Change) -> int:
    text = changed_reminder_text(
        change, title=task.title, due=task.due, time_zone=task.user.time_zone
    )
    return _edit_sent(session, keys, text)


def _lock_task(session: Session, task_id: int) -> Task:
    # populate_existing: the row as it is now that it is locked, not as the session last saw it.
    task = session.get(
        Task, _check_id("task", task_id), with_for_update=True, populate_existing=True
    )
    if task is None:
        raise NotFound(f"task {task_id} does not exist")
    return task


# --- changing ------------------------------------------------------------------------------


def create_user(session: Session, *, name: str, chat_id: int, tz: str = DEFAULT_TIME_ZONE) -> User:
    """Add a user who gets reminders in Telegram chat ``chat_id``, shown in time zone ``tz``."""
    name = _check_text("user's name", name)
    if isinstance(chat_id, bool) or not isinstance(chat_id, int):
        raise InvalidInput(f"the chat id must be a whole number, got {chat_id!r}")
    if not -BIGINT_MAX <= chat_id <= BIGINT_MAX:
        raise InvalidInput(f"the chat id {chat_id} is out of range")
    user = User(name=name, chat_id=chat_id, time_zone=validate_time_zone(tz))
    session.add(user)
    session.flush()
    return user


def create_task(
    session: Session,
    *,
    user_id: int,
    title: str,
    due: datetime,
    remind_before: Sequence[timedelta] = DEFAULT_REMIND_BEFORE,
) -> TaskCreated:
    """Add a task and enqueue one reminder per offset before ``due``.

    A reminder whose moment has already passed goes out at once. If ``due`` itself has
    passed, the task is saved, nothing is enqueued and ``overdue`` says so.
    """
    title = _check_text("task's title", title)
    due = _check_due(due)
    offsets = _check_offsets(remind_before)
    user = get_user(session, user_id)
    task = Task(user_id=user.id, title=title, due=due, remind_before_seconds=offsets)
    session.add(task)
    session.flush()
    reminders, overdue = _schedule(session, task)
    return TaskCreated(task=task, reminders=reminders, overdue=overdue)


def reschedule_task(
    session: Session,
    task_id: int,
    due: datetime,
    *,
    remind_before: Sequence[timedelta] | None = None,
) -> TaskChanged:
    """Move the due time (and optionally the offsets): old unsent reminders are withdrawn.

    A reminder already sent stays sent; the new due time gets its own reminders (new keys).
    """
    due = _check_due(due)
    offsets = None if remind_before is None else _check_offsets(remind_before)
    task = _lock_task(session, task_id)
    if task.done:
        raise InvalidInput(f"task {task_id} is done: there are no reminders to move")
    old_keys = _current_keys(task)
    task.due = due
    if offsets is not None:
        task.remind_before_seconds = offsets
    session.flush()
    # Keys that stay (same due time and offset) keep their message: cancelling one and enqueueing
    # it again could let a second relay send it while the first is still sending it.
    kept = set(_scheduled_keys(task))
    cancelled = outbox.cancel(session, [key for key in old_keys if key not in kept])
    # A reminder already sent for the old due time says the task moved; its buttons go.
    edited = _edit_sent_for(session, task, [k for k in old_keys if k not in kept], "rescheduled")
    reminders, overdue = _schedule(session, task)
    return TaskChanged(
        task=task, reminders=reminders, cancelled=cancelled, overdue=overdue, edited=edited
    )


def rename_task(session: Session, task_id: int, title: str) -> TaskChanged:
    """Change the title; every unsent reminder gets the new text.

    A reminder already sent stays sent, and one a relay is sending at this moment goes out
    with the title it had (a retry of it has the new one). The keys stay: same task, offset
    and due time.
    """
    title = _check_text("task's title", title)
    task = _lock_task(session, task_id)
    task.title = title
    session.flush()
    now = database_now(session)
    updated = _rewrite_pending(session, task, now)
    # A reminder already sent shows the new title; its buttons still make sense, so they stay.
    edited = 0
    if not task.done:
        for offset_seconds in task.remind_before_seconds:
            payload = _reminder_payload(task, offset_seconds, now)
            key = reminder_key(task.id, offset_seconds, task.due)
            edited += _edit_sent(session, [key], payload["text"], payload.get("reply_markup"))
    return TaskChanged(
        task=task,
        reminders=(),
        cancelled=0,
        overdue=task.due <= now,
        updated=updated,
        edited=edited,
    )


def _rewrite_pending(session: Session, task: Task, now: datetime) -> int:
    """Give every unsent reminder of the task the text of the task as it is now."""
    updated = sum(
        outbox.update_pending(
            session,
            reminder_key(task.id, offset_seconds, task.due),
            _reminder_payload(task, offset_seconds, now),
        )
        for offset_seconds in task.remind_before_seconds
    )
    # A put-off reminder ("Keyinroq") keeps the text it was given.
    return int(updated)


def complete_task(session: Session, task_id: int) -> TaskChanged:
    """Mark the task done and withdraw its unsent reminders, claimed ones included."""
    task = _lock_task(session, task_id)
    keys = _current_keys(task)
    cancelled = outbox.cancel(session, keys)
    task.done = True
    session.flush()
    edited = _edit_sent_for(session, task, keys, "done")  # says so, and the buttons go
    return TaskChanged(task=task, reminders=(), cancelled=cancelled, overdue=False, edited=edited)


def delete_task(session: Session, task_id: int) -> int:
    """Delete the task and withdraw its unsent reminders; return how many were withdrawn."""
    task = _lock_task(session, task_id)
    keys = _current_keys(task)
    cancelled = outbox.cancel(session, keys)
    _edit_sent_for(session, task, keys, "deleted")  # says so, and the buttons go
    session.delete(task)
    session.flush()
    return cancelled


def snooze_task(session: Session, task_id: int, delay: timedelta) -> Snoozed:
    """Remind again ``delay`` from now ("Keyinroq"); replaces an earlier put-off reminder.

    A done task is not put off (``reminder`` is None).
    """
    if not isinstance(delay, timedelta) or delay <= timedelta(0):
        raise InvalidInput(f"a snooze must be a positive timedelta, got {delay!r}")
    task = _lock_task(session, task_id)
    if task.done:
        return Snoozed(task=task, reminder=None, cancelled=0)
    cancelled = outbox.cancel(session, [snooze_key(task.id, task.snoozes)]) if task.snoozes else 0
    task.snoozes += 1
    session.flush()
    now = database_now(session)
    key = snooze_key(task.id, task.snoozes)
    enqueued = outbox.enqueue(
        session,
        key=key,
        payload=_payload_at(task, now + delay),
        run_at=now + delay,
        priority=REMINDER_PRIORITY,
    )
    reminder = ScheduledReminder(
        offset=task.due - (now + delay),
        key=key,
        outbox_id=enqueued.id,
        run_at=now + delay,
        created=enqueued.created,
    )
    return Snoozed(task=task, reminder=reminder, cancelled=cancelled)


# --- users of the bot --------------------------------------------------------------------------


def find_user_by_chat(session: Session, chat_id: int, *, lock: bool = False) -> User | None:
    """The user whose reminders go to ``chat_id`` (the first, if an operator added several)."""
    query = sa.select(User).where(User.chat_id == chat_id).order_by(User.id).limit(1)
    if lock:
        query = query.with_for_update()
    return session.scalars(query).first()


def sign_up(session: Session, *, chat_id: int, name: str) -> SignUp:
    """/start: add the person, or make a returning one active and enqueue their reminders again.

    Two /start messages of one chat handled at once by two bot processes queue up on an
    advisory lock of the chat id, so a person is added once.
    """
    lock_key = sa.func.hashtextextended(f"vazifalar-start:{chat_id}", 0)
    session.execute(sa.select(sa.func.pg_advisory_xact_lock(lock_key)))
    user = find_user_by_chat(session, chat_id, lock=True)
    if user is None:
        return SignUp(
            user=create_user(session, name=name or str(chat_id), chat_id=chat_id), state="new"
        )
    if user.active:
        return SignUp(user=user, state="known")
    user.active = True
    session.flush()
    return SignUp(user=user, state="back", reminders=_resume(session, user))


def _resume(session: Session, user: User) -> int:
    """Enqueue again the reminders of a user's open tasks that are still ahead.

    The ones that failed while the bot was blocked are withdrawn first (cancel takes failed
    rows), so that their keys are enqueued afresh; none of them was sent.
    """
    count = 0
    now = database_now(session)
    open_tasks = session.scalars(
        sa.select(Task)
        .where(Task.user_id == user.id, Task.done.is_(False), Task.due > now)
        .order_by(Task.id)
        .with_for_update()
    )
    for task in open_tasks:
        outbox.cancel(session, _current_keys(task))
        reminders, _ = _schedule(session, task, now)
        count += sum(r.created for r in reminders)
    return count


def set_time_zone(session: Session, user_id: int, tz: str) -> tuple[User, int]:
    """Change the user's time zone; unsent reminders are rewritten to show the new local time."""
    tz = validate_time_zone(tz)
    user = session.get(User, _check_id("user", user_id), with_for_update=True)
    if user is None:
        raise NotFound(f"user {user_id} does not exist")
    user.time_zone = tz
    session.flush()
    # Quiet hours are the person's wall clock: they move with the zone.
    hours = outbox.get_quiet_hours(session, user.chat_id)
    if hours is not None:
        outbox.set_quiet_hours(session, user.chat_id, start=hours.start, end=hours.end, tz=tz)
    now = database_now(session)
    tasks = session.scalars(
        sa.select(Task).where(Task.user_id == user.id, Task.done.is_(False)).order_by(Task.id)
    )
    return user, sum(_rewrite_pending(session, task, now) for task in tasks)


# --- quiet hours and announcements -------------------------------------------------------------


def _user(session: Session, user_id: int) -> User:
    user = session.get(User, _check_id("user", user_id), with_for_update=True)
    if user is None:
        raise NotFound(f"user {user_id} does not exist")
    return user


def set_quiet_hours(session: Session, user_id: int, start: time, end: time) -> User:
    """The user's quiet hours, in their time zone (start == end: none): announcements wait
    for their end; reminders the user scheduled do not."""
    user = _user(session, user_id)
    outbox.set_quiet_hours(session, user.chat_id, start=start, end=end, tz=user.time_zone)
    return user


def clear_quiet_hours(session: Session, user_id: int) -> User:
    """No quiet hours for the user: held announcements go now."""
    user = _user(session, user_id)
    outbox.clear_quiet_hours(session, user.chat_id)
    return user


def announce(session: Session, text: str, *, batch: str) -> int:
    """Send ``text`` to every active user as one broadcast (``outbox batch NAME``); each
    message waits for its user's quiet hours. Returns how many were new (a batch enqueued
    again adds nobody twice)."""
    text = _check_text("announcement", text)
    if telegram_length(text) > TELEGRAM_TEXT_LIMIT:
        raise InvalidInput(f"the announcement is longer than Telegram's {TELEGRAM_TEXT_LIMIT}")
    users = session.scalars(sa.select(User).where(User.active).order_by(User.id))
    messages = [(f"elon:{batch}:{u.id}", {"chat_id": u.chat_id, "text": text}) for u in users]
    return outbox.enqueue_many(
        session, messages, batch=batch, kind=ANNOUNCEMENT_KIND, quiet_hours=True
    )
