"""Quiet hours decided: inside or not, and when they end, across midnight and the two
daylight-saving changes; the claim's step that leaves held rows out; the API's refusals; the
hold in words. Pure functions: no database."""

from __future__ import annotations

from datetime import UTC, datetime, time, timedelta

import pytest
from hypothesis import given
from hypothesis import strategies as st

from outbox.api import _checked_lane
from outbox.errors import InvalidInput, OutboxError
from outbox.ops.views import message as view
from outbox.queries import Hold
from outbox.queries.claim import Candidate, hold_quiet
from outbox.quiet import QuietHours, quiet_until, read_hours, zone
from outbox.quiet_hours import _checked

NIGHT = QuietHours(time(22, 0), time(7, 0), "Asia/Tashkent")  # UTC+5, no daylight saving
NEW_YORK = "America/New_York"  # 2026-03-08 02:00 -> 03:00; 2026-11-01 02:00 -> 01:00


def utc(year: int, month: int, day: int, hour: int, minute: int, second: int = 0) -> datetime:
    return datetime(year, month, day, hour, minute, second, tzinfo=UTC)


def test_across_midnight_in_the_persons_zone() -> None:
    # 23:00 and 01:00 in Tashkent are inside; both end at 07:00 there (02:00 UTC) next morning.
    assert quiet_until(utc(2026, 12, 2, 18, 0), NIGHT) == utc(2026, 12, 3, 2, 0)
    assert quiet_until(utc(2026, 12, 2, 20, 0), NIGHT) == utc(2026, 12, 3, 2, 0)
    # The edges: 22:00 is inside, 07:00 and 21:59:59 are not.
    assert quiet_until(utc(2026, 12, 2, 17, 0), NIGHT) == utc(2026, 12, 3, 2, 0)
    assert quiet_until(utc(2026, 12, 3, 2, 0), NIGHT) is None
    assert quiet_until(utc(2026, 12, 2, 16, 59, 59), NIGHT) is None
    # Noon in Tashkent is 07:00 UTC: outside, whatever the UTC clock says.
    assert quiet_until(utc(2026, 12, 2, 7, 0), NIGHT) is None


def test_hours_within_one_day() -> None:
    lunch = QuietHours(time(13, 0), time(14, 30), "Europe/Berlin")  # UTC+1 in December
    assert quiet_until(utc(2026, 12, 2, 12, 15), lunch) == utc(2026, 12, 2, 13, 30)
    assert quiet_until(utc(2026, 12, 2, 11, 59), lunch) is None
    assert quiet_until(utc(2026, 12, 2, 13, 30), lunch) is None


def test_an_end_the_clocks_skip_moves_to_the_end_of_the_skipped_hour() -> None:
    # New York, 2026-03-08: 02:00 EST jumps to 03:00 EDT; 02:30 does not exist that day.
    hours = QuietHours(time(22, 0), time(2, 30), NEW_YORK)
    at_one = utc(2026, 3, 8, 6, 0)  # 01:00 EST
    assert quiet_until(at_one, hours) == utc(2026, 3, 8, 7, 0)  # 03:00 EDT
    # The day before, 02:30 exists: 02:30 EST.
    assert quiet_until(utc(2026, 3, 7, 6, 0), hours) == utc(2026, 3, 7, 7, 30)


def test_after_the_clocks_go_forward_the_hours_are_an_hour_shorter() -> None:
    hours = QuietHours(time(22, 0), time(7, 0), NEW_YORK)
    # 23:00 EST on the 7th: ends 07:00 EDT on the 8th, 11:00 UTC (8 hours, not 9).
    assert quiet_until(utc(2026, 3, 8, 4, 0), hours) == utc(2026, 3, 8, 11, 0)


def test_an_end_the_clocks_repeat_is_its_first_occurrence() -> None:
    # New York, 2026-11-01: 02:00 EDT goes back to 01:00 EST; 01:30 happens twice.
    hours = QuietHours(time(0, 0), time(1, 30), NEW_YORK)
    first_pass = utc(2026, 11, 1, 5, 15)  # 01:15 EDT
    assert quiet_until(first_pass, hours) == utc(2026, 11, 1, 5, 30)  # 01:30 EDT
    # At 01:15 EST (the second pass) the hours have ended: never longer than written.
    assert quiet_until(utc(2026, 11, 1, 6, 15), hours) is None


def test_after_the_clocks_go_back_the_hours_are_an_hour_longer() -> None:
    hours = QuietHours(time(22, 0), time(7, 0), NEW_YORK)
    # 23:00 EDT on Oct 31 (03:00 UTC): ends 07:00 EST on Nov 1, 12:00 UTC (10 hours).
    assert quiet_until(utc(2026, 11, 1, 3, 0), hours) == utc(2026, 11, 1, 12, 0)


def test_start_equal_to_end_is_no_quiet_hours() -> None:
    assert quiet_until(utc(2026, 12, 2, 20, 0), QuietHours(time(7), time(7), "UTC")) is None


def test_an_unknown_zone_is_refused_in_one_line() -> None:
    for bad in ("Mars/Olympus", "", "Asia/Tashkent ", "../etc/passwd", "x" * 100):
        with pytest.raises(InvalidInput) as caught:
            zone(bad)
        assert isinstance(caught.value, OutboxError)
        assert "\n" not in str(caught.value) and "IANA" in str(caught.value)
    assert read_hours("22:00:00 07:00:00 Mars/Olympus") is None  # written by hand: holds nothing
    assert read_hours("22:00:00 07:00:00 UTC") == QuietHours(time(22), time(7), "UTC")


def test_the_api_refuses_what_is_not_a_wall_clock_time() -> None:
    with pytest.raises(InvalidInput, match=r"start must be a datetime\.time"):
        _checked("22:00", time(7), "UTC")
    with pytest.raises(InvalidInput, match="without tzinfo"):
        _checked(time(22, tzinfo=UTC), time(7), "UTC")
    with pytest.raises(InvalidInput, match="unknown time zone"):
        _checked(time(22), time(7), "Nowhere/Land")
    with pytest.raises(InvalidInput, match="quiet_hours must be True or False"):
        _checked_lane(run_at=None, priority=0, early=None, expires_at=None, quiet_hours="yes")


ZONES = ["UTC", "Asia/Tashkent", NEW_YORK, "Europe/London", "Australia/Lord_Howe", "Asia/Kolkata"]


@given(
    now=st.datetimes(min_value=datetime(2000, 1, 1), max_value=datetime(2040, 1, 1)),
    start=st.times(),
    end=st.times(),
    tz=st.sampled_from(ZONES),
)
def test_the_end_is_after_now_within_a_day_and_outside(
    now: datetime, start: time, end: time, tz: str
) -> None:
    moment = now.replace(tzinfo=UTC)
    hours = QuietHours(start, end, tz)
    ends = quiet_until(moment, hours)
    zi = zone(tz)
    wall = moment.astimezone(zi).time()
    if start == end:
        inside = False
    else:
        inside = start <= wall < end if start < end else (wall >= start or wall < end)
    if ends is None:
        # Outside, or in a repeated hour whose first pass ended them: a clock change is near.
        near = {(moment + timedelta(hours=h)).astimezone(zi).utcoffset() for h in (-26, 0, 26)}
        assert not inside or len(near) > 1
        return
    assert inside
    assert moment < ends <= moment + timedelta(hours=25)
    assert quiet_until(ends, hours) is None or ends.astimezone(zone(tz)).time() == start


def candidate(row_id: int, *, quiet: bool = True, expired: bool = False) -> Candidate:
    return Candidate(row_id, "walk", 0, 0.0, expired, str(row_id), 1, quiet)


def test_the_claims_step_leaves_rows_inside_their_hours_out() -> None:
    at = utc(2026, 12, 2, 20, 0).timestamp()  # 01:00 in Tashkent
    hours = {
        1: "22:00:00 07:00:00 Asia/Tashkent",  # inside: held until 02:00 UTC
        2: "09:00:00 10:00:00 Asia/Tashkent",  # outside: goes
        4: "22:00:00 07:00:00 Asia/Tashkent",  # inside but expired: failed, not held
        5: "22:00:00 07:00:00 Nowhere/Land",  # hours no clock keeps: goes
    }
    rows = [
        candidate(1),
        candidate(2),
        candidate(3, quiet=False),
        candidate(4, expired=True),
        candidate(5),
    ]
    kept, held = hold_quiet(rows, hours, at)
    assert [c.id for c in kept] == [2, 3, 4, 5]
    assert held == [(1, utc(2026, 12, 3, 2, 0).timestamp())]
    assert hold_quiet(rows, {}, at) == (rows, [])


def test_the_hold_in_words_names_the_end_in_the_persons_zone() -> None:
    hold = Hold("quiet", detail="Asia/Tashkent", at=utc(2026, 12, 3, 2, 0))
    assert view.hold_line(hold) == "quiet hours until 2026-12-03 02:00:00Z (07:00 Asia/Tashkent)"
    [shown] = view.holds_json([hold])
    assert shown["reason"] == "quiet" and shown["until"] == "2026-12-03T02:00:00+00:00"
