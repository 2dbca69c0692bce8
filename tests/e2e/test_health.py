"""``/healthz`` and ``/readyz`` of a relay: readiness follows its database (a private
PostgreSQL, stopped and started) and its token, liveness its own loop; the rules themselves as a
unit.

Here the e2e tier's tests (processes); the others are in ``tests/unit/test_health.py``.
"""

from __future__ import annotations

import contextlib
import functools
import socket
import time
from pathlib import Path

import httpx
import pytest

from outbox import migrate
from outbox_testing.fake_telegram import FakeTelegram
from tests.support import Relays, free_port, relay_env, start_own_postgres, wait_until


def probe(port: int, path: str) -> tuple[int, str]:
    try:
        answer = httpx.get(f"http://127.0.0.1:{port}{path}", timeout=5)
    except httpx.TransportError as err:
        return 0, f"no answer: {err!r}"
    return answer.status_code, answer.text


def refusal(port: int, path: str) -> str | None:
    """The reason a probe gives with its 503; None while it answers otherwise."""
    status, body = probe(port, path)
    return body if status == 503 else None


def tried_database(port: int) -> str | None:
    """/readyz's reason once the relay has tried its database; None before (it says it is
    starting, also with a 503) and while it answers otherwise."""
    reason = refusal(port, "/readyz")
    return None if reason is None or reason.startswith("starting: ") else reason


def answers_ok(port: int, path: str) -> bool:
    return probe(port, path) == (200, "ok\n")


@pytest.mark.slow
def test_readiness_follows_the_database_down_and_up_and_the_relay_stays_alive(
    fake_telegram: FakeTelegram, tmp_path: Path
) -> None:
    server = start_own_postgres()
    try:
        migrate.upgrade(server.url)
        port = free_port()
        env = relay_env(
            server.url,
            fake_telegram.api_url,
            OUTBOX_METRICS_PORT=str(port),
            OUTBOX_HEARTBEAT="1s",
        )
        with Relays(env, tmp_path).running() as relays:
            relay = relays.start()
            for path in ("/healthz", "/readyz"):
                wait_until(
                    functools.partial(answers_ok, port, path),
                    30,
                    f"{path} to answer 200",
                    explain=relays.describe,
                )
            server.stop("immediate")
            stopped_at = time.monotonic()
            reason = wait_until(
                lambda: refusal(port, "/readyz"),
                30,  # the relay's promise is 10 s; the deadline only bounds a hang
                "/readyz to answer 503",
                explain=relays.describe,
            )
            print(f"\n/readyz said 503 {time.monotonic() - stopped_at:.1f} s after the stop")
            assert reason.startswith("database unavailable: "), reason
            assert reason.count("\n") == 1  # one line
            assert "postgres@" not in reason  # nothing of the URL beyond what redact allows
            # Alive all along: a liveness probe does not restart a relay for an outage.
            assert answers_ok(port, "/healthz")
            time.sleep(3)  # three heartbeats that fail
            assert answers_ok(port, "/healthz")
            server.start()
            wait_until(
                functools.partial(answers_ok, port, "/readyz"),
                30,
                "/readyz to answer 200 again",
                explain=relays.describe,
            )
            assert relay.alive()
            assert relay.stop() == 0, relay.describe()
    finally:
        server.close()


def test_a_relay_waiting_for_its_database_is_alive_but_not_ready(
    fake_telegram: FakeTelegram, tmp_path: Path
) -> None:
    port = free_port()
    nowhere = f"postgresql://postgres@127.0.0.1:{free_port()}/postgres"
    env = relay_env(nowhere, fake_telegram.api_url, OUTBOX_METRICS_PORT=str(port))
    with Relays(env, tmp_path).running() as relays:
        relay = relays.start()
        reason = wait_until(
            lambda: tried_database(port),
            30,
            "/readyz to answer 503 for the database",
            explain=relays.describe,
        )
        assert reason.startswith("database unavailable: "), reason
        assert answers_ok(port, "/healthz")
        assert relay.stop() == 0, relay.describe()


def test_a_relay_under_systemd_says_ready_and_pings_the_watchdog(
    relays: Relays, tmp_path: Path
) -> None:
    path = str(tmp_path / "notify.sock")
    heard: list[str] = []
    with socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM) as sock:
        sock.bind(path)
        sock.settimeout(0.2)

        def hear(message: str) -> bool:
            with contextlib.suppress(TimeoutError):
                heard.append(sock.recv(4096).decode())
            return message in heard

        relay = relays.start(NOTIFY_SOCKET=path, OUTBOX_HEARTBEAT="0.5s")
        wait_until(lambda: hear("READY=1\nSTATUS=relaying"), 30, "READY", explain=relays.describe)
        wait_until(
            lambda: hear("WATCHDOG=1") and heard.count("WATCHDOG=1") >= 2,
            30,
            "watchdog pings",
            explain=relays.describe,
        )
        assert relay.stop() == 0, relay.describe()
        wait_until(lambda: hear("STOPPING=1"), 10, "STOPPING", explain=relays.describe)
    assert heard[0] == "READY=1\nSTATUS=relaying"
