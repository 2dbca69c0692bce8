"""A Bot API this relay cannot reach: the probe's backoff, what the log says, and what the
probes answer while it lasts (healthy, not ready). The relay's part runs for real in
``tests/e2e/test_network_cut.py``.
"""

from __future__ import annotations

import asyncio
import logging
import re

import pytest

from outbox.relay.health import Health
from outbox.relay.reach import PROBE_MAX_DELAY, TelegramReach, probe_delay


def test_probes_back_off_to_a_bound_of_a_few_seconds_and_never_spin() -> None:
    delays = [probe_delay(n) for n in range(8)]
    assert delays[:4] == [0.5, 1.0, 2.0, 4.0]
    assert all(0.5 <= d <= PROBE_MAX_DELAY for d in delays)
    assert delays == sorted(delays)
    assert PROBE_MAX_DELAY <= 5.0  # sending resumes within seconds of a repair


def test_telegram_out_of_reach_is_not_ready_but_still_healthy() -> None:
    health = Health(stale_after=10)
    health.database_ok()
    health.token_ok()
    health.running()
    health.telegram_unreachable("could not connect to Telegram: httpx.ConnectTimeout\nmore")
    # A liveness probe must not restart a relay for Telegram's outage.
    assert health.problem() is None and health.stuck() is None
    assert health.not_ready() == "cannot reach Telegram: could not connect to Telegram: " + (
        "httpx.ConnectTimeout"
    )
    health.telegram_reachable()
    assert health.not_ready() is None


def test_a_cut_is_said_once_probed_until_telegram_answers_and_then_ends(
    caplog: pytest.LogCaptureFixture,
) -> None:
    async def scenario() -> tuple[list[bool], bool, bool]:
        answers = iter([False, True])  # the first probe meets the cut, the second an answer
        changes: list[bool] = []
        wakeup = asyncio.Event()

        async def probe() -> bool:
            return next(answers)

        reach = TelegramReach(
            "bot 123", probe, on_change=lambda: changes.append(reach.down), wakeup=wakeup
        )
        running = asyncio.create_task(reach.run())
        for _ in range(5):  # every send of the bot that cannot connect says so: once in all
            reach.lost("could not connect to Telegram: ConnectError")
            reach.handed_back()
        assert reach.down
        await asyncio.wait_for(wakeup.wait(), 10)
        down_after = reach.down
        reach.stop()
        await running
        return changes, down_after, wakeup.is_set()

    with caplog.at_level(logging.INFO, logger="outbox.relay"):
        changes, down_after, woken = asyncio.run(scenario())
    assert changes == [True, False]
    assert (down_after, woken) == (False, True)
    said = [r.getMessage() for r in caplog.records if r.name == "outbox.relay"]
    assert len(said) == 2, said
    assert said[0] == (
        "cannot reach Telegram for bot 123: could not connect to Telegram: ConnectError; "
        "pausing sends"
    )
    assert re.fullmatch(
        r"Telegram answers again for bot 123 after \d+ s \(2 probes\); 5 rows were handed "
        r"back unsent, 0 retried \(sent as it began: maybe delivered\); sending resumes",
        said[1],
    ), said
