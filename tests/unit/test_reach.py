"""A Bot API this relay cannot reach: the probe's backoff, and what the probes answer while it
lasts (healthy, not ready). The relay's part runs for real in ``tests/e2e/test_network_cut.py``.
"""

from __future__ import annotations

from outbox.relay.health import Health
from outbox.relay.reach import PROBE_MAX_DELAY, probe_delay


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
    assert health.problem() is None
    assert health.not_ready() == "cannot reach Telegram: could not connect to Telegram: " + (
        "httpx.ConnectTimeout"
    )
    health.telegram_reachable()
    assert health.not_ready() is None
