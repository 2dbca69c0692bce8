"""A database the relay can connect to but not use: no reconnect storm, one clear word, and
delivery as soon as it is usable again.

Two ways to get there, both from the field: a read-only database (a relay left on a standby
after a failover) and PostgreSQL stopped behind PgBouncer (PgBouncer still takes the login, the
first statement fails). Reconnects are counted by the server (``pg_stat_database.sessions``)
or by PgBouncer's log, not by the relay's own word.

Here the unit tier's tests (no database); the others are in ``tests/e2e/test_relay_outage.py``.
"""

from __future__ import annotations

import psycopg
import pytest

from outbox.relay.store import OutageLog, backoff_seconds

READ_ONLY_LINE = "the database is read-only: is this a standby?"


def test_the_backoff_grows_to_about_a_second_with_jitter_and_no_further() -> None:
    for failures in range(1, 40):
        waits = {backoff_seconds(failures) for _ in range(20)}
        assert len(waits) > 1  # jitter: relays that lost the database together spread out
        assert all(0.05 <= w <= 1.0 for w in waits), (failures, waits)
    assert max(backoff_seconds(1) for _ in range(50)) < min(backoff_seconds(9) for _ in range(50))


def test_an_outage_is_told_once_then_summed_up_now_and_then(
    caplog: pytest.LogCaptureFixture,
) -> None:
    now = [100.0]
    outage = OutageLog(clock=lambda: now[0])
    read_only = psycopg.errors.ReadOnlySqlTransaction("cannot execute INSERT")
    with caplog.at_level("INFO", logger="outbox.relay"):
        for _ in range(40):  # 80 attempts over 20 s, by two stores
            outage.failed("claim", read_only)
            outage.failed("record", psycopg.OperationalError("server closed the connection"))
            now[0] += 0.5
        outage.recovered()
        outage.recovered()  # a second store back: nothing more to say
    lines = [r.getMessage() for r in caplog.records]
    assert lines[0] == ("claim connection lost (cannot execute INSERT); reconnecting with backoff")
    assert sum(READ_ONLY_LINE in line for line in lines) == 1
    summaries = [line for line in lines if "still unavailable" in line]
    # At 5 s, then 10 s after that (the gaps double up to a minute).
    assert [s.split(" attempts")[0] for s in summaries] == [
        "database still unavailable for 5 s, 21",
        "database still unavailable for 15 s, 61",
    ], lines
    assert lines[-1] == "the database is usable again after 20 s, 80 attempts"
    assert len(lines) == 5, lines
