"""Bad lanes given to enqueue: each refused in one line, before anything reaches the database."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from typing import Any

import pytest

import outbox
from outbox.errors import InvalidInput

T = datetime(2030, 1, 1, 9, tzinfo=UTC)


@pytest.mark.parametrize(
    ("lane", "said"),
    [
        ({"run_at": datetime(2030, 1, 1, 9)}, "run_at must be timezone-aware"),
        ({"run_at": "2030-01-01"}, "run_at must be a datetime"),
        ({"run_at": T, "early": timedelta(seconds=-1)}, "early must not be negative"),
        ({"run_at": T, "early": 70}, "early must be a timedelta"),
        ({"early": timedelta(seconds=70)}, "early needs run_at"),
        ({"run_at": T, "early": timedelta.max}, "reaches before the year 1"),
        ({"run_at": T, "expires_at": T - timedelta(seconds=1)}, "is before run_at"),
        ({"expires_at": datetime(2000, 1, 1, tzinfo=UTC)}, "has already passed"),
        ({"expires_at": datetime(2031, 1, 1)}, "expires_at must be timezone-aware"),
        ({"priority": 11}, "priority 11 is out of range: from -10 to 10"),
        ({"priority": -11}, "priority -11 is out of range"),
        ({"priority": True}, "priority must be a whole number"),
        ({"priority": 1.5}, "priority must be a whole number"),
    ],
)
def test_enqueue_refuses_a_bad_lane_in_one_line(lane: dict[str, Any], said: str) -> None:
    payload = {"chat_id": 1, "text": "x"}
    # No database is needed (nor reached): the arguments are checked first.
    with pytest.raises(InvalidInput, match=said) as refused:
        outbox.enqueue(None, key="k", payload=payload, **lane)  # type: ignore[arg-type]
    assert "\n" not in str(refused.value)


def test_the_edges_of_a_lane_are_accepted() -> None:
    payload = {"chat_id": 1, "text": "x"}
    steps = outbox.api._enqueue_steps(
        key="k",
        payload=payload,
        kind="eslatma",
        run_at=T,
        schema=None,
        queue="default",
        priority=-10,
        early=timedelta(0),
        expires_at=T,
    )
    _statement, params = next(steps)
    assert params["ustuvorlik"] == -10 and params["eng_erta"] == T == params["eskirish"]


def test_show_and_its_json_give_the_lanes() -> None:
    from outbox import queries
    from outbox.ops.views import message as presentation

    message = queries.Message(
        id=1,
        kind="eslatma",
        key="k",
        payload={},
        state="kutmoqda",
        attempts=0,
        next_attempt_at=T,
        claimed_at=None,
        last_error=None,
        history=[],
        created_at=None,
        updated_at=None,
        marker=None,
        priority=5,
        earliest=T - timedelta(minutes=1),
        expires_at=T + timedelta(hours=1),
    )
    shown = presentation.message_json(message)
    assert shown["ustuvorlik"] == 5
    assert shown["eng_erta"] == "2030-01-01T08:59:00+00:00"
    assert shown["eskirish"] == "2030-01-01T10:00:00+00:00"
    lines = presentation.message_lines(message)
    assert any(line.split()[:2] == ["ustuvorlik", "5"] for line in lines)
