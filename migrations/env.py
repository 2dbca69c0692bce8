"""Alembic environment of the outbox: its own version table, in the outbox's schema."""

from __future__ import annotations

from outbox.migrate import VERSION_TABLE, run_migrations

run_migrations(version_table=VERSION_TABLE, own_schema=True)
