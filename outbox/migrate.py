"""Apply the Alembic migrations that ship with the package."""

from __future__ import annotations

from importlib.resources import files

from alembic import command
from alembic.config import Config

from outbox.db import connect_errors, normalize_url

__all__ = ["upgrade"]


def upgrade(url: str, revision: str = "head") -> None:
    """Bring the database at ``url`` up to ``revision``; safe to run again."""
    config = Config()
    config.set_main_option("script_location", str(files("migrations")))
    # Alembic reads the URL through ConfigParser, which treats % as interpolation.
    config.set_main_option("sqlalchemy.url", normalize_url(url).replace("%", "%%"))
    with connect_errors(url):
        command.upgrade(config, revision)
