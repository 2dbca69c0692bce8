"""The operator's views: the shared helpers each view builds on."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

from outbox.ops.views import batch as batch_view
from outbox.ops.views._text import clip, figures, table, when
from outbox.queries import BatchProgress, Pause, Scope

NOON = datetime(2026, 3, 1, 12, 0, tzinfo=UTC)


def test_figures_share_one_right_aligned_column_and_no_trailing_space() -> None:
    assert figures([("total", "1200", "rows"), ("rate", "3.5/s", "")]) == [
        "total          1200  rows",
        "rate          3.5/s",
    ]


def test_a_table_pads_text_left_and_numbers_right() -> None:
    assert table(("name", "n"), [("a", "7"), ("long", "12")], numeric={1}) == [
        "name   n",
        "a      7",
        "long  12",
    ]


def test_text_is_one_clipped_line_and_times_are_utc() -> None:
    assert clip("a\nb  c", 10) == "a b c"
    assert clip("x" * 12, 5) == "xxxx…"
    assert clip(None, 5) == "-"
    assert when(NOON.astimezone(UTC) + timedelta(hours=0)) == "2026-03-01 12:00:00Z"


def test_a_paused_batch_says_which_pause_holds_it() -> None:
    held = Pause(Scope.QUEUE, "q1", NOON)
    progress = BatchProgress(
        name="spring",
        total=4,
        sent=1,
        failed=1,
        cancelled=1,
        sending=0,
        waiting=0,
        paused=2,
        rate=0.0,
        expected_end=None,
        started=NOON,
        last_sent=NOON,
        paused_by=(held,),
    )
    lines = batch_view.batch_lines(progress)
    assert lines[0] == "total             4  rows of batch spring (50.0% done)"
    assert "expected end  none while paused (queue q1): `outbox resume --batch spring`" in lines
    assert batch_view.batch_json(progress)["paused_by"][0]["doira"] == "navbat"
