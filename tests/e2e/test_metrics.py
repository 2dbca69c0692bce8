"""The relay's Prometheus endpoint: a real relay process, scraped over HTTP."""

from __future__ import annotations

import socket

import httpx
import pytest
import sqlalchemy as sa

from outbox import enqueue
from outbox_testing.fake_telegram import FakeTelegram, Fault
from tests.support import Relays, free_port, states, wait_until


def scrape(port: int) -> dict[str, float]:
    """Samples by name and labels, e.g. 'outbox_relay_messages_total{outcome="sent"}'."""
    text = httpx.get(f"http://127.0.0.1:{port}/metrics", timeout=5).text
    samples = {}
    for line in text.splitlines():
        if line and not line.startswith("#"):
            name, value = line.rsplit(" ", 1)
            samples[name] = float(value)
    return samples


def test_a_relay_reports_what_it_did(
    engine: sa.Engine, fake_telegram: FakeTelegram, relays: Relays
) -> None:
    fake_telegram.script(2, Fault.forbidden())
    with engine.begin() as conn:
        for chat in (1, 2, 3):
            enqueue(conn, key=f"m{chat}", payload={"chat_id": chat, "text": "eslatma"})
    port = free_port()
    relay = relays.start(OUTBOX_METRICS_PORT=str(port))
    wait_until(
        lambda: states(engine)["bajarildi"] + states(engine)["xato"] == 3,
        20,
        "every row to end",
        explain=relays.describe,
    )

    def settled() -> dict[str, float] | None:
        samples = scrape(port)
        return samples if samples['outbox_relay_messages_total{outcome="sent"}'] == 2 else None

    samples = wait_until(settled, 10, "the counters", explain=relays.describe)
    assert samples['outbox_relay_messages_total{outcome="claimed"}'] == 3
    assert samples['outbox_relay_messages_total{outcome="failed"}'] == 1
    assert samples['outbox_relay_messages_total{outcome="retried"}'] == 0
    assert samples["outbox_relay_in_flight"] == 0
    assert samples["outbox_relay_unwritten_outcomes"] == 0
    assert samples["outbox_relay_flood_control_seconds"] == 0
    assert samples["outbox_relay_unreachable_bots"] == 0
    assert relay.stop() == 0, relay.describe()


def test_a_taken_metrics_port_is_one_clear_line(
    engine: sa.Engine, fake_telegram: FakeTelegram, relays: Relays
) -> None:
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        relay = relays.start(OUTBOX_METRICS_PORT=str(port))
        assert relay.wait(timeout=20) == 3
    assert (
        relay.stderr.strip()
        .splitlines()[-1]
        .startswith(f"outbox: cannot serve metrics on 127.0.0.1:{port}: ")
    ), relay.describe()
    assert "Traceback" not in relay.stderr


@pytest.mark.parametrize("port", ["-1", "65536", "http"])
def test_a_bad_metrics_port_is_refused(relays: Relays, port: str) -> None:
    relay = relays.start(OUTBOX_METRICS_PORT=port)
    assert relay.wait(timeout=20) == 3  # a relay setting: configuration
    assert "OUTBOX_METRICS_PORT" in relay.stderr and "Traceback" not in relay.stderr
