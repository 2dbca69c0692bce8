"""The shop's database settings: one URL, shared with the outbox's commands."""

from __future__ import annotations

import os
from typing import TYPE_CHECKING

import sqlalchemy as sa

if TYPE_CHECKING:
    from sqlalchemy.ext.asyncio import AsyncEngine

# The same variable the outbox's commands read, so the shop and its relay cannot disagree on
# the database. The outbox's schema comes from OUTBOX_SCHEMA (or outbox.configure) likewise.
URL_VARIABLE = "OUTBOX_DATABASE_URL"


def database_url(driver: str = "psycopg") -> str:
    """The URL with the SQLAlchemy driver named (``psycopg`` or ``asyncpg``)."""
    url = os.environ.get(URL_VARIABLE, "").strip()
    if not url:
        raise SystemExit(f"hostapp: set {URL_VARIABLE} to a postgresql:// URL")
    _, _, rest = url.partition("://")
    return f"postgresql+{driver}://{rest}"


def engine() -> sa.Engine:
    return sa.create_engine(database_url())


def async_engine(driver: str = "psycopg") -> AsyncEngine:
    # SQLAlchemy's asyncio support needs greenlet (sqlalchemy[asyncio]): only async code pays.
    from sqlalchemy.ext.asyncio import create_async_engine  # noqa: PLC0415

    return create_async_engine(database_url(driver))
