"""The lanes as an operator sees them: ``outbox list`` (its columns, --priority, --json),
``outbox status`` (its lines and --json) and the page's overview; and that an outbox without
lanes shows none of it, as before.

Here the unit tier's tests (no database); the others are in ``tests/db/test_lanes_views.py``.
"""

from __future__ import annotations

from datetime import datetime, timedelta

from outbox import queries
from outbox.ops.views.message import window_of
from outbox.states import State


def message(**fields: object) -> queries.Message:
    base: dict[str, object] = {
        "id": 1,
        "kind": "eslatma",
        "key": "k",
        "payload": {},
        "state": State.PENDING,
        "attempts": 0,
        "next_attempt_at": datetime.fromisoformat("2030-01-01T09:00:00+00:00"),
        "claimed_at": None,
        "last_error": None,
        "history": [],
        "created_at": None,
        "updated_at": None,
        "marker": None,
    }
    return queries.Message(**{**base, **fields})  # type: ignore[arg-type]


def test_the_window_cell_is_relative_to_the_rows_time_and_absolute_without_one() -> None:
    nine = datetime.fromisoformat("2030-01-01T09:00:00+00:00")
    assert window_of(message()) == "-"
    assert window_of(message(earliest=nine - timedelta(seconds=70))) == "-1m10s.."
    assert window_of(message(earliest=nine, expires_at=nine)) == "-0s..+0s"
    # A time written by hand as infinity is read as None: the times themselves, then.
    assert window_of(message(next_attempt_at=None, expires_at=nine)) == "..2030-01-01 09:00:00Z"
