"""LISTEN beside PgBouncer: claims and writes through the pooler, the wake-ups on a direct
connection of their own (``--listen-database-url``). Runs through the distribution's pgbouncer
(tests/support/pgbouncer.py); without it the PgBouncer test skips and says so.

Here the e2e tier's tests (processes); the others are in ``tests/unit/test_listen_url.py``.
"""

from __future__ import annotations

from collections.abc import Iterator
from functools import partial
from pathlib import Path

import pytest
import sqlalchemy as sa

from outbox import enqueue
from outbox_testing.fake_telegram import FakeTelegram
from tests.support import Relays, backends, relay_env, states, text, wait_until
from tests.support.pgbouncer import PgBouncer


@pytest.fixture
def bouncer(server_url: str) -> Iterator[PgBouncer]:
    with PgBouncer.running(server_url) as running:
        yield running


def with_password(url: str, password: str) -> str:
    """The URL with a password for its user (the test server trusts local connections and
    ignores it): what the log must not show."""
    head, rest = url.split("://", 1)
    user, at, tail = rest.partition("@")
    return f"{head}://{user}:{password}{at}{tail}" if at else url


def test_behind_pgbouncer_a_direct_listen_url_wakes_the_relay_long_before_its_poll(
    engine: sa.Engine,
    db_url: str,
    bouncer: PgBouncer,
    fake_telegram: FakeTelegram,
    tmp_path: Path,
) -> None:
    env = relay_env(
        bouncer.url(db_url),
        fake_telegram.api_url,
        OUTBOX_LISTEN_DATABASE_URL=with_password(db_url, "listen-secret-7"),
        OUTBOX_POLL_INTERVAL="30s",  # a delivery within the deadline below cannot be a poll
    )

    def asleep() -> bool:
        # LISTENing on the direct connection, and the claimer's last question (when is work
        # due?) is half a second old: it sleeps until a NOTIFY or the poll.
        listening = backends(engine, "state = 'idle' AND starts_with(query, 'LISTEN')")
        idle = backends(
            engine,
            "state = 'idle' AND strpos(query, 'CROSS JOIN LATERAL') > 0 "
            "AND query_start < now() - interval '0.5 s'",
        )
        return bool(listening and idle)

    with Relays(env, tmp_path).running() as fleet:
        relay = fleet.start()
        wait_until(asleep, 30, "the relay to listen and sleep", explain=fleet.describe)
        for n in range(3):
            with engine.begin() as conn:
                enqueue(conn, key=f"k{n}", payload=text(700 + n))
            wait_until(
                partial(lambda n: states(engine)["bajarildi"] == n + 1, n),
                10,  # a third of the poll interval
                f"message {n} delivered on its NOTIFY",
                explain=lambda: relay.describe() + bouncer.describe(),
            )
        assert relay.stop() == 0, relay.describe()
    log = relay.stderr
    assert "LISTEN on " in log and "listen-secret-7" not in log, log
    # Claims and writes went through PgBouncer: it served the relay's transactions.
    assert any(
        int(pool["sv_used"]) + int(pool["sv_idle"]) > 0 for pool in bouncer.admin("SHOW POOLS")
    )
