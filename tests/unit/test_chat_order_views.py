"""What holds a pending row and the held rows of a status, as people read them; the opt-out
of the chat's order checked on the way in. Pure functions: no database."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest

from outbox.api import _checked_lane
from outbox.errors import InvalidInput
from outbox.ops.views import message as view
from outbox.ops.views import status as status_view
from outbox.queries import Hold, Message, QueueStatus
from outbox.states import State

NOON = datetime(2026, 3, 1, 12, 0, tzinfo=UTC)


def pending(*holds: Hold) -> Message:
    return Message(
        id=9, kind="eslatma", key="k", payload={"chat_id": 1, "text": "x"}, state=State.PENDING,
        attempts=0, next_attempt_at=NOON, claimed_at=None, last_error=None, history=[],
        created_at=NOON, updated_at=NOON, marker=None, holds=holds,
    )  # fmt: skip


def test_each_reason_in_words() -> None:
    later = NOON + timedelta(minutes=1)
    assert [view.hold_line(h) for h in (
        Hold("earlier", 41, "kutmoqda", later),
        Hold("original", 40, "bajarilmoqda task:5"),
        Hold("pause", detail="tur eslatma"),
        Hold("flood", detail="123456", at=later),
        Hold("chat", detail="-100777", at=later),
        Hold("window", at=later, opens=NOON),
        Hold("due", at=later),
        Hold("something new", detail="x"),
    )] == [
        "an earlier message of its chat: row 41 (kutmoqda, keyingi_urinish 2026-03-01 12:01:00Z)",
        "its original 'task:5': row 40 (bajarilmoqda)",
        "a pause of its tur eslatma (outbox resume)",
        "its bot's flood pause (Telegram's 429, bot 123456) until 2026-03-01 12:01:00Z",
        "its chat's next free moment (-100777): 2026-03-01 12:01:00Z",
        "its window: due 2026-03-01 12:01:00Z, may go from 2026-03-01 12:00:00Z if the bot's "
        "plan needs it",
        "its time: due 2026-03-01 12:01:00Z",
        "something new: x",
    ]  # fmt: skip


def test_show_and_its_json_list_the_holds_of_a_pending_row_only() -> None:
    held = pending(Hold("earlier", 41, "kutmoqda", NOON))
    lines = view.message_lines(held)
    start = lines.index("waits for (1)")
    assert lines[start + 1].startswith("  an earlier message of its chat: row 41 ")
    assert view.message_json(held)["waits_for"] == [
        {
            "reason": "earlier",
            "id": 41,
            "detail": "kutmoqda",
            "until": NOON.isoformat(),
            "opens": None,
            "text": view.hold_line(held.holds[0]),
        }
    ]
    assert "waits for        nothing" in view.message_lines(pending())
    done = Message(**{**{f: getattr(held, f) for f in held.__slots__}, "state": State.DONE})
    assert view.message_json(done)["waits_for"] is None
    assert not any(line.startswith("waits for") for line in view.message_lines(done))


def test_a_status_shows_held_rows_only_when_there_are_some() -> None:
    counts: dict[str, int] = {
        State.PENDING: 5,
        State.IN_PROGRESS: 1,
        State.DONE: 0,
        State.FAILED: 0,
    }
    calm = QueueStatus(counts=counts, lag_seconds=0.0, stuck=0, markers=0)
    assert not any(
        line.startswith("held") for line in status_view.status_lines(calm, lease=60, max_lag=300)
    )
    held = QueueStatus(counts=counts, lag_seconds=0.0, stuck=0, markers=0, held=4)
    lines = status_view.status_lines(held, lease=60, max_lag=300)
    names = [line.split()[0] for line in lines]
    assert names[names.index("lag") + 1] == "held"
    assert lines[names.index("held")].split()[1] == "4"


def test_ordered_must_be_a_bool() -> None:
    assert _checked_lane(run_at=None, priority=0, early=None, expires_at=None).ordered
    lane = _checked_lane(run_at=None, priority=0, early=None, expires_at=None, ordered=False)
    assert lane.ordered is False
    with pytest.raises(InvalidInput, match="ordered must be True or False"):
        _checked_lane(run_at=None, priority=0, early=None, expires_at=None, ordered="no")
