"""``reminders migrate``: the outbox's tables, then the domain's own, each with its history.

The domain is an app that uses the outbox, like any host: it runs ``outbox.migrate.upgrade``
beside its own Alembic history (version table ``reminders_alembic_version``).
"""

from __future__ import annotations

import sqlalchemy as sa

from outbox import migrate
from outbox.db import connect_errors, create_engine

__all__ = ["DOMAIN_TABLES", "migrate_all"]

HISTORY = "reminders.migrations"
BASELINE = "reminders_0001"
DOMAIN_TABLES = ("foydalanuvchi", "vazifa")


def migrate_all(url: str) -> tuple[migrate.Upgraded, migrate.Upgraded]:
    """Bring the outbox and the domain tables up to date; safe to run again. Says what each
    upgrade did (the outbox's, the domain's)."""
    outbox = migrate.upgrade(url)
    if _made_by_shared_history(url):
        # Version 0.1 created the domain tables in the outbox's history: keep them and their
        # rows, and let the domain's own history take over from its first revision.
        migrate.upgrade_history(url, HISTORY, BASELINE, stamp=True)
    return outbox, migrate.upgrade_history(url, HISTORY)


def _made_by_shared_history(url: str) -> bool:
    engine = create_engine(url)
    try:
        with connect_errors(url), engine.connect() as conn:
            found = conn.execute(
                sa.text(
                    "SELECT to_regclass('foydalanuvchi') IS NOT NULL "
                    "AND to_regclass('vazifa') IS NOT NULL "
                    "AND to_regclass('reminders_alembic_version') IS NULL"
                )
            ).scalar()
        return bool(found)
    finally:
        engine.dispose()
