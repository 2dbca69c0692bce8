"""Adopting the outbox in a host app: examples/hostapp, driven as its developer would drive it.

Real ``alembic`` commands in processes of their own, run from the host's folder (which has a
``migrations/`` folder of its own), the host's own code enqueueing in its transactions, and
relay processes sending through the fake Bot API.

Here the db tier's tests (PostgreSQL, in the test's process); the others are in
``tests/e2e/test_adoption.py``, ``tests/unit/test_adoption.py``.
"""

from __future__ import annotations

import psycopg
import pytest
import sqlalchemy as sa

from outbox.schema import SCHEMA_REVISION
from tests.support.legacy import LEGACY_ROWS, legacy_database, snapshot, versions

# outbox.configure (and an in-process CLI's --schema) set a process-wide value.
pytestmark = pytest.mark.usefixtures("schema_setting_restored")


# --- the runtime import graph ---------------------------------------------------------------


def test_an_adoption_that_fails_halfway_leaves_nothing_half_done(empty_db_url: str) -> None:
    from outbox import migrate

    legacy_database(empty_db_url)
    with psycopg.connect(empty_db_url, autocommit=True) as conn:
        conn.execute(LEGACY_ROWS)
        # Creating the version table fails: after the outbox table's comment has been written.
        conn.execute(
            "CREATE FUNCTION no_tables() RETURNS event_trigger LANGUAGE plpgsql AS "
            "$$ BEGIN RAISE EXCEPTION 'no new tables today'; END $$"
        )
        conn.execute(
            "CREATE EVENT TRIGGER no_tables ON ddl_command_start "
            "WHEN TAG IN ('CREATE TABLE') EXECUTE FUNCTION no_tables()"
        )
    before = snapshot(empty_db_url)
    with pytest.raises(sa.exc.ProgrammingError, match="no new tables today"):
        migrate.upgrade(empty_db_url)
    with psycopg.connect(empty_db_url, autocommit=True) as conn:
        conn.execute("DROP EVENT TRIGGER no_tables")

    migrate.upgrade(empty_db_url)  # the next run adopts the tables as if the first had not run
    assert snapshot(empty_db_url) == before
    assert versions(empty_db_url, "outbox_alembic_version") == {SCHEMA_REVISION}
