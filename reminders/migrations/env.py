"""Alembic environment of the vazifalar domain: its own version table beside the outbox's."""

from __future__ import annotations

from outbox.migrate import run_migrations

run_migrations(version_table="reminders_alembic_version", own_schema=False)
