"""The vazifalar service and its reminder messages, against a real PostgreSQL.

Here the db tier's tests (PostgreSQL, in the test's process); the others are in
``reminders/tests/unit/test_reminders.py``.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest
import sqlalchemy as sa
from sqlalchemy.orm import Session

import reminders
from outbox.errors import InvalidInput, NotFound
from reminders.service import reminder_key

HOUR = timedelta(hours=1)
DAY = timedelta(days=1)
MINUTE = timedelta(minutes=1)


def _now() -> datetime:
    return datetime.now(UTC).replace(microsecond=0)


def outbox_rows(engine: sa.Engine) -> list[dict[str, Any]]:
    with engine.connect() as conn:
        result = conn.execute(
            sa.text(
                "SELECT id, kalit, payload, holat, keyingi_urinish, keyingi_urinish <= now() AS due"
                " FROM outbox ORDER BY id"
            )
        )
        return [dict(row._mapping) for row in result]


def count(engine: sa.Engine, table: str) -> int:
    with engine.connect() as conn:
        return int(conn.execute(sa.text(f"SELECT count(*) FROM {table}")).scalar_one())


def mark_sent(engine: sa.Engine, key: str) -> None:
    """What the relay leaves behind after Telegram accepted the message."""
    with engine.begin() as conn:
        conn.execute(sa.text("UPDATE outbox SET holat = 'bajarildi' WHERE kalit = :k"), {"k": key})
        conn.execute(
            sa.text("INSERT INTO yuborilgan (kalit, chat_id, message_id) VALUES (:k, 42, 7)"),
            {"k": key},
        )


def mark_claimed(engine: sa.Engine, key: str) -> None:
    """What a relay's claim leaves behind while it is sending."""
    with engine.begin() as conn:
        conn.execute(
            sa.text(
                "UPDATE outbox SET holat = 'bajarilmoqda', urinish = 1, band_vaqti = now()"
                " WHERE kalit = :k"
            ),
            {"k": key},
        )


@pytest.fixture
def user_id(engine: sa.Engine) -> int:
    with Session(engine) as session, session.begin():
        return reminders.create_user(session, name="Dilnoza", chat_id=42).id


def create(engine: sa.Engine, user_id: int, **kwargs: Any) -> reminders.TaskCreated:
    kwargs.setdefault("title", "Hisobot")
    kwargs.setdefault("due", _now() + 3 * HOUR)
    with Session(engine, expire_on_commit=False) as session, session.begin():
        return reminders.create_task(session, user_id=user_id, **kwargs)


# --- one transaction with the app ------------------------------------------------------------


def test_commit_keeps_the_task_and_its_reminder(engine: sa.Engine, user_id: int) -> None:
    with Session(engine) as session, session.begin():
        reminders.create_task(session, user_id=user_id, title="Hisobot", due=_now() + 3 * HOUR)
    assert count(engine, "vazifa") == 1
    assert count(engine, "outbox") == 1


def test_rollback_leaves_neither_task_nor_reminder(engine: sa.Engine, user_id: int) -> None:
    with Session(engine) as session:
        session.begin()
        reminders.create_task(session, user_id=user_id, title="Hisobot", due=_now() + 3 * HOUR)
        assert count(engine, "outbox") == 0  # not visible before the commit either
        session.rollback()
    assert count(engine, "vazifa") == 0
    assert count(engine, "outbox") == 0


def test_create_does_not_commit(engine: sa.Engine, user_id: int) -> None:
    with Session(engine) as session:
        reminders.create_task(session, user_id=user_id, title="Hisobot", due=_now() + 3 * HOUR)
        session.close()  # no commit: the session's transaction is rolled back
    assert count(engine, "vazifa") == 0


# --- creating --------------------------------------------------------------------------------


def test_two_offsets_give_two_reminders_at_their_moments(engine: sa.Engine, user_id: int) -> None:
    due = _now() + 3 * DAY
    created = create(engine, user_id, due=due, remind_before=[HOUR, DAY])
    task_id = created.task.id
    assert not created.overdue
    rows = outbox_rows(engine)
    assert [r["kalit"] for r in rows] == [
        reminder_key(task_id, 86400, due),
        reminder_key(task_id, 3600, due),
    ]
    assert [r["keyingi_urinish"] for r in rows] == [due - DAY, due - HOUR]
    assert [r["holat"] for r in rows] == ["kutmoqda", "kutmoqda"]
    assert "1 kun qoldi" in rows[0]["payload"]["text"]
    assert "1 soat qoldi" in rows[1]["payload"]["text"]
    assert all(r["payload"]["chat_id"] == 42 for r in rows)
    assert all(r["payload"]["parse_mode"] == "HTML" for r in rows)


def test_a_passed_reminder_moment_goes_out_at_once(engine: sa.Engine, user_id: int) -> None:
    created = create(engine, user_id, due=_now() + timedelta(minutes=30), remind_before=[HOUR])
    assert not created.overdue
    [row] = outbox_rows(engine)
    assert row["due"]
    assert "30 daqiqa qoldi" in row["payload"]["text"]


def test_several_passed_moments_send_one_reminder(engine: sa.Engine, user_id: int) -> None:
    due = _now() + timedelta(minutes=30)
    created = create(engine, user_id, due=due, remind_before=[DAY, HOUR, 10 * MINUTE])
    rows = outbox_rows(engine)
    assert len(rows) == 2
    assert [r.offset for r in created.reminders] == [timedelta(minutes=10), HOUR]
    assert rows[1]["kalit"] == reminder_key(created.task.id, 3600, due)
    assert rows[1]["due"] and not rows[0]["due"]


def test_an_overdue_task_is_saved_and_sends_nothing(engine: sa.Engine, user_id: int) -> None:
    created = create(engine, user_id, due=_now() - timedelta(minutes=1))
    assert created.overdue
    assert created.reminders == ()
    assert count(engine, "vazifa") == 1
    assert count(engine, "outbox") == 0


def test_repeated_offsets_are_one_reminder(engine: sa.Engine, user_id: int) -> None:
    created = create(engine, user_id, remind_before=[HOUR, timedelta(minutes=60)])
    assert created.task.remind_before_seconds == [3600]
    assert count(engine, "outbox") == 1


# --- rescheduling ----------------------------------------------------------------------------


def test_reschedule_withdraws_pending_and_enqueues_new(engine: sa.Engine, user_id: int) -> None:
    old_due = _now() + 3 * HOUR
    task_id = create(engine, user_id, due=old_due).task.id
    new_due = old_due + DAY
    with Session(engine) as session, session.begin():
        changed = reminders.reschedule_task(session, task_id, new_due)
        assert changed.cancelled == 1
        assert [r.key for r in changed.reminders] == [reminder_key(task_id, 3600, new_due)]
    [row] = outbox_rows(engine)
    assert row["kalit"] == reminder_key(task_id, 3600, new_due)
    assert row["keyingi_urinish"] == new_due - HOUR


def test_reschedule_after_a_sent_reminder_makes_exactly_one_new(
    engine: sa.Engine, user_id: int
) -> None:
    old_due = _now() + 30 * MINUTE  # its 1h reminder went out at once
    task_id = create(engine, user_id, due=old_due).task.id
    sent_key = reminder_key(task_id, 3600, old_due)
    mark_sent(engine, sent_key)
    new_due = old_due + DAY
    with Session(engine) as session, session.begin():
        changed = reminders.reschedule_task(session, task_id, new_due)
        assert changed.cancelled == 0
    rows = outbox_rows(engine)
    # The sent reminder is edited to say the task moved (a follow-up named by its key).
    assert [(r["kalit"], r["holat"]) for r in rows if "method" not in r["payload"]] == [
        (sent_key, "bajarildi"),
        (reminder_key(task_id, 3600, new_due), "kutmoqda"),
    ]
    assert [r["payload"]["message_key"] for r in rows if "method" in r["payload"]] == [sent_key]


def test_rescheduling_back_to_a_sent_time_does_not_send_again(
    engine: sa.Engine, user_id: int
) -> None:
    due = _now() + 3 * HOUR
    task_id = create(engine, user_id, due=due).task.id
    mark_sent(engine, reminder_key(task_id, 3600, due))
    with Session(engine) as session, session.begin():
        reminders.reschedule_task(session, task_id, due + DAY)
    with Session(engine) as session, session.begin():
        changed = reminders.reschedule_task(session, task_id, due)
        assert [r.created for r in changed.reminders] == [False]
    sends = [r for r in outbox_rows(engine) if "method" not in r["payload"]]
    assert [r["holat"] for r in sends] == ["bajarildi"]


def test_reschedule_into_the_past_says_overdue(engine: sa.Engine, user_id: int) -> None:
    task_id = create(engine, user_id).task.id
    with Session(engine) as session, session.begin():
        changed = reminders.reschedule_task(session, task_id, _now() - HOUR)
    assert changed.overdue and changed.cancelled == 1 and changed.reminders == ()
    assert count(engine, "outbox") == 0


def test_reschedule_can_change_the_offsets(engine: sa.Engine, user_id: int) -> None:
    due = _now() + 3 * DAY
    task_id = create(engine, user_id, due=due).task.id
    with Session(engine) as session, session.begin():
        reminders.reschedule_task(session, task_id, due, remind_before=[DAY, 2 * HOUR])
    assert [r["kalit"] for r in outbox_rows(engine)] == [
        reminder_key(task_id, 86400, due),
        reminder_key(task_id, 7200, due),
    ]


def test_a_done_task_cannot_be_rescheduled(engine: sa.Engine, user_id: int) -> None:
    task_id = create(engine, user_id).task.id
    with Session(engine) as session, session.begin():
        reminders.complete_task(session, task_id)
    with Session(engine) as session, session.begin(), pytest.raises(InvalidInput, match="done"):
        reminders.reschedule_task(session, task_id, _now() + DAY)


# --- renaming --------------------------------------------------------------------------------


def test_rename_rewrites_pending_text_and_keeps_sent(engine: sa.Engine, user_id: int) -> None:
    due = _now() + 3 * DAY
    task_id = create(engine, user_id, due=due, remind_before=[DAY, HOUR]).task.id
    day_key, hour_key = reminder_key(task_id, 86400, due), reminder_key(task_id, 3600, due)
    mark_sent(engine, day_key)
    with Session(engine) as session, session.begin():
        changed = reminders.rename_task(session, task_id, "Yangi <nom>")
        assert (changed.updated, changed.cancelled, changed.reminders) == (1, 0, ())
    rows = {r["kalit"]: r for r in outbox_rows(engine)}
    assert "Hisobot" in rows[day_key]["payload"]["text"]
    assert rows[day_key]["holat"] == "bajarildi"
    assert "Yangi &lt;nom&gt;" in rows[hour_key]["payload"]["text"]
    assert rows[hour_key]["holat"] == "kutmoqda"
    assert rows[hour_key]["keyingi_urinish"] == due - HOUR


def test_rename_keeps_a_claimed_reminder_with_its_relay(engine: sa.Engine, user_id: int) -> None:
    # Replacing a row that a relay is sending would let a second relay send it again: the row
    # stays the relay's claim, and only a later attempt of it would carry the new text.
    task_id = create(engine, user_id).task.id
    [claimed] = outbox_rows(engine)
    mark_claimed(engine, claimed["kalit"])
    with Session(engine) as session, session.begin():
        changed = reminders.rename_task(session, task_id, "Boshqa")
    assert changed.updated == 1
    [row] = outbox_rows(engine)
    assert (row["id"], row["holat"]) == (claimed["id"], "bajarilmoqda")
    assert "Boshqa" in row["payload"]["text"]


# --- completing and deleting -------------------------------------------------------------------


@pytest.mark.parametrize("claimed", [False, True], ids=["pending", "claimed"])
def test_complete_withdraws_unsent_reminders(
    engine: sa.Engine, user_id: int, claimed: bool
) -> None:
    due = _now() + 3 * DAY
    task_id = create(engine, user_id, due=due, remind_before=[DAY, HOUR]).task.id
    if claimed:
        mark_claimed(engine, reminder_key(task_id, 86400, due))
    with Session(engine) as session, session.begin():
        changed = reminders.complete_task(session, task_id)
        assert changed.cancelled == 2
        assert changed.task.done
    assert outbox_rows(engine) == []


@pytest.mark.parametrize("claimed", [False, True], ids=["pending", "claimed"])
def test_delete_withdraws_unsent_reminders(engine: sa.Engine, user_id: int, claimed: bool) -> None:
    task = create(engine, user_id).task
    if claimed:
        mark_claimed(engine, outbox_rows(engine)[0]["kalit"])
    with Session(engine) as session, session.begin():
        assert reminders.delete_task(session, task.id) == 1
    assert count(engine, "vazifa") == 0
    assert outbox_rows(engine) == []


def test_complete_keeps_a_sent_reminder(engine: sa.Engine, user_id: int) -> None:
    due = _now() + 3 * DAY
    task_id = create(engine, user_id, due=due, remind_before=[DAY, HOUR]).task.id
    mark_sent(engine, reminder_key(task_id, 86400, due))
    with Session(engine) as session, session.begin():
        assert reminders.complete_task(session, task_id).cancelled == 1
    rows = outbox_rows(engine)
    assert [r["holat"] for r in rows] == ["bajarildi", "kutmoqda"]
    # The sent one is edited (through the outbox) to say the task is done.
    assert rows[1]["payload"]["method"] == "editMessageText"
    assert rows[1]["payload"]["message_key"] == rows[0]["kalit"]


def test_a_rolled_back_completion_keeps_the_reminders(engine: sa.Engine, user_id: int) -> None:
    task_id = create(engine, user_id).task.id
    with Session(engine) as session:
        session.begin()
        reminders.complete_task(session, task_id)
        session.rollback()
    assert [r["holat"] for r in outbox_rows(engine)] == ["kutmoqda"]


def _wait_until_someone_waits_for_a_lock(engine: sa.Engine) -> None:
    deadline = time.monotonic() + 30
    query = sa.text(
        "SELECT count(*) FROM pg_stat_activity"
        " WHERE datname = current_database() AND wait_event_type = 'Lock'"
    )
    while time.monotonic() < deadline:
        with engine.connect() as conn:
            if conn.execute(query).scalar_one():
                return
        time.sleep(0.01)
    pytest.fail("the second change never waited for the first")


def test_a_completion_waits_for_a_concurrent_reschedule(engine: sa.Engine, user_id: int) -> None:
    """Without the row lock the completion would withdraw the old reminders only, and the
    reminder enqueued by the reschedule would go out for a done task."""
    due = _now() + 3 * HOUR
    task_id = create(engine, user_id, due=due).task.id
    with ThreadPoolExecutor(max_workers=1) as pool:
        with Session(engine) as first, first.begin():
            reminders.reschedule_task(first, task_id, due + DAY)

            def complete() -> int:
                with Session(engine) as second, second.begin():
                    return reminders.complete_task(second, task_id).cancelled

            completion = pool.submit(complete)
            _wait_until_someone_waits_for_a_lock(engine)
        # The reschedule committed; the completion now sees the new due time.
        assert completion.result(timeout=30) == 1
    assert outbox_rows(engine) == []


# --- reading ---------------------------------------------------------------------------------


def test_list_tasks_by_due_time_and_by_user(engine: sa.Engine, user_id: int) -> None:
    with Session(engine) as session, session.begin():
        other = reminders.create_user(session, name="Bobur", chat_id=-100123, tz="Europe/Berlin")
        later = reminders.create_task(session, user_id=user_id, title="B", due=_now() + DAY)
        sooner = reminders.create_task(session, user_id=other.id, title="A", due=_now() + HOUR * 2)
        other_id, later_id, sooner_id = other.id, later.task.id, sooner.task.id
    with Session(engine) as session:
        assert [t.id for t in reminders.list_tasks(session)] == [sooner_id, later_id]
        assert [t.id for t in reminders.list_tasks(session, other_id)] == [sooner_id]
        with pytest.raises(NotFound, match="user 999 does not exist"):
            reminders.list_tasks(session, 999)


# --- bad input -------------------------------------------------------------------------------


NAIVE = datetime(2030, 1, 15, 9, 0)
Call = Callable[[Session, int, int], object]  # (session, user id, task id)

BAD_INPUT: dict[str, tuple[type[Exception], str, Call]] = {
    "unknown user": (
        NotFound,
        "user 999 does not exist",
        lambda s, u, t: reminders.create_task(s, user_id=999, title="X", due=_now() + DAY),
    ),
    "empty title": (
        InvalidInput,
        "title is empty",
        lambda s, u, t: reminders.create_task(s, user_id=u, title="  ", due=_now() + DAY),
    ),
    "naive due time": (
        InvalidInput,
        "no time zone",
        lambda s, u, t: reminders.create_task(s, user_id=u, title="X", due=NAIVE),
    ),
    "negative offset": (
        InvalidInput,
        "negative",
        lambda s, u, t: reminders.create_task(
            s, user_id=u, title="X", due=_now() + DAY, remind_before=[-HOUR]
        ),
    ),
    "no offsets": (
        InvalidInput,
        "at least one",
        lambda s, u, t: reminders.create_task(
            s, user_id=u, title="X", due=_now() + DAY, remind_before=[]
        ),
    ),
    "unknown zone": (
        InvalidInput,
        "unknown time zone 'Mars/Olympus'",
        lambda s, u, t: reminders.create_user(s, name="X", chat_id=1, tz="Mars/Olympus"),
    ),
    "host zone": (
        InvalidInput,
        "unknown time zone 'localtime'",
        lambda s, u, t: reminders.create_user(s, name="X", chat_id=1, tz="localtime"),
    ),
    "empty name": (
        InvalidInput,
        "name is empty",
        lambda s, u, t: reminders.create_user(s, name="", chat_id=1),
    ),
    "chat id as text": (
        InvalidInput,
        "chat id must be a whole number",
        lambda s, u, t: reminders.create_user(s, name="X", chat_id="12"),  # type: ignore[arg-type]
    ),
    "complete unknown": (
        NotFound,
        "task 999 does not exist",
        lambda s, u, t: reminders.complete_task(s, 999),
    ),
    "delete unknown": (
        NotFound,
        "task 999 does not exist",
        lambda s, u, t: reminders.delete_task(s, 999),
    ),
    "rename unknown": (
        NotFound,
        "task 999 does not exist",
        lambda s, u, t: reminders.rename_task(s, 999, "X"),
    ),
    "reschedule unknown": (
        NotFound,
        "task 999 does not exist",
        lambda s, u, t: reminders.reschedule_task(s, 999, _now() + DAY),
    ),
    "task id 0": (NotFound, "task 0 does not exist", lambda s, u, t: reminders.get_task(s, 0)),
    "rename to empty": (
        InvalidInput,
        "title is empty",
        lambda s, u, t: reminders.rename_task(s, t, ""),
    ),
    "reschedule to naive": (
        InvalidInput,
        "no time zone",
        lambda s, u, t: reminders.reschedule_task(s, t, NAIVE),
    ),
}


@pytest.mark.parametrize("case", BAD_INPUT)
def test_bad_input_is_refused_with_one_line_and_changes_nothing(
    engine: sa.Engine, user_id: int, case: str
) -> None:
    task_id = create(engine, user_id).task.id
    before = outbox_rows(engine)
    error, message, call = BAD_INPUT[case]
    with Session(engine) as session, session.begin(), pytest.raises(error) as raised:
        call(session, user_id, task_id)
    assert message in str(raised.value)
    assert "\n" not in str(raised.value)
    assert outbox_rows(engine) == before
    assert (count(engine, "foydalanuvchi"), count(engine, "vazifa")) == (1, 1)
