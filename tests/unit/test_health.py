"""``/healthz`` and ``/readyz`` of a relay: readiness follows its database (a private
PostgreSQL, stopped and started) and its token, liveness its own loop; the rules themselves as a
unit.

Here the unit tier's tests (no database); the others are in ``tests/e2e/test_health.py``.
"""

from __future__ import annotations

from outbox.metrics import probe_answer
from outbox.relay.health import Health


class Clock:
    def __init__(self) -> None:
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


def test_health_rules() -> None:
    clock = Clock()
    health = Health(stale_after=10, clock=clock)
    assert health.problem() == "starting: the database has not answered yet"
    health.database_ok()
    assert health.problem() == "starting: the Bot API has not accepted the token yet"
    health.token_pending("connect refused")
    assert health.problem() == "the Bot API cannot be reached yet: connect refused"
    health.token_ok()
    assert health.problem() is None
    assert health.not_ready() == "starting: not claiming yet"
    health.running()
    assert health.not_ready() is None
    assert health.not_ready(paused_seconds=12.2) == (
        "flood control: Telegram asked to wait 12 s more"
    )
    # A heartbeat that hangs: unhealthy once the last answer is older than the bound.
    clock.now += 10
    assert health.problem() is None
    clock.now += 1
    assert health.problem() == "database unavailable: no answer for 11 s"
    health.database_ok()
    health.database_failed("heartbeat connection: server closed\nthe connection unexpectedly")
    assert health.problem() == "database unavailable: heartbeat connection: server closed"
    health.database_ok()
    health.stopping()
    assert health.problem() is None and health.not_ready() == "stopping: no new claims"
    health.fatal("the Bot API rejected the bot token (401 Unauthorized)")
    assert health.problem() == "the Bot API rejected the bot token (401 Unauthorized)"


def test_alive_while_the_heartbeat_goes_round_whatever_the_database_says() -> None:
    clock = Clock()
    health = Health(stale_after=10, live_after=60, clock=clock)
    assert health.stuck() is None  # starting: its first heartbeat has a minute
    clock.now += 59
    health.heartbeat_tried()
    health.database_failed("connection refused")
    # An outage: not ready, still alive (a restart would not bring the database back).
    assert health.problem() == "database unavailable: connection refused"
    assert health.stuck() is None
    clock.now += 60
    assert health.stuck() is None
    clock.now += 1
    assert health.stuck() == "stuck: the heartbeat has not run for 61 s"
    health.heartbeat_tried()
    assert health.stuck() is None
    health.fatal("writing outcomes failed")
    assert health.stuck() == "writing outcomes failed"


def test_probe_answers_are_one_line_without_the_token() -> None:
    assert probe_answer(None) == ("200 OK", b"ok\n")
    status, body = probe_answer("the Bot API rejected 123456:AAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAA")
    assert status.startswith("503") and body.count(b"\n") == 1
    assert b"AAAAAAAAAAAA" not in body
