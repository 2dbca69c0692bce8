"""LISTEN beside PgBouncer: claims and writes through the pooler, the wake-ups on a direct
connection of their own (``--listen-database-url``). Runs through the distribution's pgbouncer
(tests/support/pgbouncer.py); without it the PgBouncer test skips and says so.

Here the unit tier's tests (no database); the others are in ``tests/e2e/test_listen_url.py``.
"""

from __future__ import annotations

import pytest

from outbox.config import RelayConfig
from outbox.errors import ConfigError
from tests.support import run_cli


def test_a_listen_url_with_poll_only_is_refused() -> None:
    with pytest.raises(ConfigError, match="--poll-only"):
        RelayConfig(
            database_url="postgresql:///x", listen_database_url="postgresql:///y", poll_only=True
        )


@pytest.mark.parametrize(
    ("value", "message"),
    [
        ("embedded", "--listen-database-url: give a postgresql:// URL"),
        ("mysql://u:hidden-pw@h/db", "--listen-database-url: give a postgresql:// URL"),
        ("postgresql://u:hidden-pw@h:port/db", "the port is not a number"),
    ],
)
def test_a_bad_listen_url_is_one_line_without_its_password(
    capsys: pytest.CaptureFixture[str], value: str, message: str
) -> None:
    code, _, err = run_cli(capsys, "relay", "--listen-database-url", value)
    assert code in (2, 3) and err.count("\n") == 1, err
    assert message in err and "hidden-pw" not in err, err
