"""Relays and operator commands behind a real PgBouncer in transaction pooling mode.

``--poll-only`` is the PgBouncer mode: no LISTEN, no server-side prepared statements, and
every lock the relay relies on lasts one transaction; relays of one bot still keep its limits
and its flood pause together, through the database. These tests run it through the
distribution's pgbouncer (tests/support/pgbouncer.py); without it they skip and say so.

Here the unit tier's tests (no database); the others are in ``tests/e2e/test_pgbouncer.py``.
"""

from __future__ import annotations

import re

import pytest

from tests.support import (
    pgbouncer,
)


def test_without_pgbouncer_the_tests_skip_and_say_why(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("OUTBOX_REQUIRE_SYSTEM_TOOLS", raising=False)  # as on a developer's machine
    monkeypatch.setattr("tests.support.pgbouncer.shutil.which", lambda _name: None)
    monkeypatch.setattr("tests.support.pgbouncer.os.access", lambda _path, _mode: False)
    with pytest.raises(pytest.skip.Exception, match=re.escape(pgbouncer.NOT_INSTALLED)):
        pgbouncer.require_pgbouncer()
    assert pgbouncer.NOT_INSTALLED == "pgbouncer not installed (apt-get install pgbouncer)"
