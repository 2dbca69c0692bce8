"""Database URLs, engines and connections; driver errors become ``OutboxError`` here."""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from urllib.parse import SplitResult, urlsplit, urlunsplit

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
    return _unsplit(parts._replace(scheme="postgresql"))


def _unsplit(parts: SplitResult) -> str:
    # urlunsplit drops the "//" of a URL without a host (postgresql:///db?host=/run/pg),
    # which libpq then cannot read.
    query = f"?{parts.query}" if parts.query else ""
    return f"{parts.scheme}://{parts.netloc}{parts.path}{query}"


def with_database(url: str, name: str) -> str:
    """The same server, another database."""
    return _unsplit(urlsplit(normalize_url(url))._replace(path="/" + name))


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


# A connection whose peer vanished without a word (a failover, a dropped NAT entry) must fail
# within seconds, not after the kernel's two hours: TCP keepalives and a cap on unacknowledged
# data. URL parameters of the same names win. Unix sockets ignore them.
_LIVENESS = {
    "connect_timeout": "10",
    "keepalives": "1",
    "keepalives_idle": "10",
    "keepalives_interval": "5",
    "keepalives_count": "3",
    "tcp_user_timeout": "30000",
}


async def async_connect(
    url: str, *, autocommit: bool = True, prepare: bool = True
) -> psycopg.AsyncConnection[object]:
    """A psycopg async connection for the relay's hot path.

    ``prepare``: the server prepares the statements the relay repeats after their second use.
    Off behind a transaction-pooling PgBouncer, whose server connections change under us.
    """
    conninfo = normalize_url(url)
    given = psycopg.conninfo.conninfo_to_dict(conninfo)
    extra = {k: v for k, v in _LIVENESS.items() if k not in given}
    with connect_errors(url):
        return await psycopg.AsyncConnection.connect(
            psycopg.conninfo.make_conninfo(conninfo, **extra),
            autocommit=autocommit,
            prepare_threshold=2 if prepare else None,
        )


async def check_schema(url: str) -> None:
    """Fail with one clear line if the database is unreachable or not migrated."""
    conn = await async_connect(url)
    try:
        with connect_errors(url):
            await conn.execute("SELECT 1 FROM outbox JOIN yuborilgan USING (kalit) LIMIT 0")
    finally:
        await conn.close()
