"""Database URLs, engines and connections; driver errors become ``OutboxError`` here."""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from urllib.parse import urlsplit, urlunsplit

import psycopg
import sqlalchemy as sa
from sqlalchemy.engine import Engine

from outbox.errors import ConfigError, DatabaseUnavailable, SchemaMissing

__all__ = [
    "async_connect",
    "check_schema",
    "connect_errors",
    "create_engine",
    "normalize_url",
    "redact_url",
    "resolve_url",
    "sqlalchemy_url",
    "with_database",
]

_SCHEMES = ("postgresql", "postgres", "postgresql+psycopg")


def redact_url(url: str) -> str:
    """The URL with any password replaced, fit for an error message."""
    try:
        parts = urlsplit(url)
    except ValueError:
        return "<unparseable URL>"
    if parts.password is None:
        return url
    netloc = parts.netloc.replace(f":{parts.password}@", ":***@", 1)
    return urlunsplit(parts._replace(netloc=netloc))


def normalize_url(url: str) -> str:
    """Validate a PostgreSQL URL and return it in libpq form (``postgresql://...``)."""
    try:
        parts = urlsplit(url.strip())
        _ = parts.port  # raises ValueError on a non-numeric port
    except ValueError as err:
        raise ConfigError(f"database URL does not parse: {redact_url(url)} ({err})") from None
    if parts.scheme not in _SCHEMES:
        raise ConfigError(
            f"database URL must start with postgresql://, got {redact_url(url)!r}",
        )
    return urlunsplit(parts._replace(scheme="postgresql"))


def with_database(url: str, name: str) -> str:
    """The same server, another database."""
    return urlunsplit(urlsplit(normalize_url(url))._replace(path="/" + name))


def resolve_url(url: str | None) -> str:
    """The given URL, or the embedded server's when none is given."""
    if url:
        return normalize_url(url)
    from outbox.embedded import embedded_url  # noqa: PLC0415 - starts a server; only on demand

    return embedded_url()


def sqlalchemy_url(url: str) -> str:
    return "postgresql+psycopg://" + normalize_url(url).removeprefix("postgresql://")


def create_engine(url: str, **kwargs: object) -> Engine:
    return sa.create_engine(sqlalchemy_url(url), **kwargs)


@contextlib.contextmanager
def connect_errors(url: str) -> Iterator[None]:
    """Translate connection and missing-schema errors into one clear ``OutboxError``."""
    try:
        yield
    except (psycopg.errors.UndefinedTable, psycopg.errors.UndefinedFunction) as err:
        raise SchemaMissing(
            "the outbox tables are missing in this database: run `outbox migrate` first",
        ) from err
    except sa.exc.ProgrammingError as err:
        if isinstance(err.orig, psycopg.errors.UndefinedTable):
            raise SchemaMissing(
                "the outbox tables are missing in this database: run `outbox migrate` first",
            ) from err
        raise
    except (psycopg.OperationalError, sa.exc.OperationalError, sa.exc.InterfaceError) as err:
        reason = str(getattr(err, "orig", None) or err).strip().splitlines()[0]
        raise DatabaseUnavailable(
            f"cannot reach the database at {redact_url(url)}: {reason}",
        ) from err


async def async_connect(url: str, *, autocommit: bool = True) -> psycopg.AsyncConnection[object]:
    """A psycopg async connection for the relay's hot path."""
    with connect_errors(url):
        return await psycopg.AsyncConnection.connect(
            normalize_url(url),
            autocommit=autocommit,
            # Statements the relay repeats are prepared by the server after their second use.
            prepare_threshold=2,
        )


async def check_schema(url: str) -> None:
    """Fail with one clear line if the database is unreachable or not migrated."""
    conn = await async_connect(url)
    try:
        with connect_errors(url):
            await conn.execute("SELECT 1 FROM outbox JOIN yuborilgan USING (kalit) LIMIT 0")
    finally:
        await conn.close()
