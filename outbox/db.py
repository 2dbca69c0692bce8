"""Database URLs, engines and connections; driver errors become ``OutboxError`` here."""

from __future__ import annotations

import contextlib
import sys
from collections.abc import AsyncIterator, Iterator
from pathlib import Path
from typing import TYPE_CHECKING, Any
from urllib.parse import SplitResult, parse_qsl, unquote, urlsplit

import psycopg
from psycopg.rows import namedtuple_row

from outbox import queries
from outbox.errors import ConfigError, DatabaseUnavailable, SchemaMissing
from outbox.redact import redact_url, register_password
from outbox.schema import schema_problem

if TYPE_CHECKING:
    import sqlalchemy as sa

__all__ = [
    "EMBEDDED",
    "async_connect",
    "check_schema",
    "check_schema_sync",
    "connect_errors",
    "create_engine",
    "normalize_url",
    "operator_connection",
    "operator_connection_async",
    "redact_url",
    "resolve_url",
    "sqlalchemy_url",
    "with_database",
]

_SCHEMES = ("postgresql", "postgres", "postgresql+psycopg")


def _register_password(url: str) -> None:
    """Teach the log redaction this URL's password, found in any driver message that quotes it."""
    try:
        parts = urlsplit(url)
    except ValueError:
        return
    if parts.password:
        register_password(unquote(parts.password))
        register_password(parts.password)
    for name, value in parse_qsl(parts.query):
        if name.lower() == "password" and value:
            register_password(value)


def normalize_url(url: str) -> str:
    """Validate a PostgreSQL URL and return it in libpq form (``postgresql://...``); it may
    name several servers as libpq reads them (``a:5432,b:5432``, or ``host=a,b`` in the query)."""
    try:
        parts = urlsplit(url.strip())
        _servers(parts)  # raises ValueError on a non-numeric port
    except ValueError as err:
        # urllib's reason can quote a piece of a misplaced password (as the "port"): not shown.
        if "port" in str(err).lower():
            problem = "the port is not a number; percent-encode any of : / ? # @ in the password"
        else:
            problem = "percent-encode any of : / ? # @ [ ] in the user name or password"
        raise ConfigError(f"database URL does not parse: {redact_url(url)} ({problem})") from None
    if parts.scheme not in _SCHEMES:
        raise ConfigError(f"database URL must start with postgresql://, got {redact_url(url)!r}")
    _register_password(url)
    return _unsplit(parts._replace(scheme="postgresql"))


def _servers(parts: SplitResult) -> list[tuple[str, str]]:
    """The (host, port) pairs of the URL's authority, as typed (a port may be empty)."""
    servers = []
    for server in parts.netloc.rpartition("@")[2].split(","):
        host, port = server, ""
        if server.startswith("["):  # [IPv6] or [IPv6]:port
            end = server.find("]")
            if end < 0:
                raise ValueError("Invalid IPv6 URL")
            host, port = server[1:end], server[end + 1 :].removeprefix(":")
        elif ":" in server:
            host, port = server.rsplit(":", 1)
        if port and not (port.isascii() and port.isdigit() and int(port) <= 65535):
            raise ValueError(f"Port could not be cast to integer value as {port!r}")
        servers.append((host, port))
    return servers


def _unsplit(parts: SplitResult) -> str:
    # urlunsplit drops the "//" of a URL without a host (postgresql:///db?host=/run/pg),
    # which libpq then cannot read.
    query = f"?{parts.query}" if parts.query else ""
    return f"{parts.scheme}://{parts.netloc}{parts.path}{query}"


def with_database(url: str, name: str) -> str:
    """The same server, another database."""
    return _unsplit(urlsplit(normalize_url(url))._replace(path="/" + name))


EMBEDDED = "embedded"


def resolve_url(url: str | None) -> str:
    """The given URL; ``embedded`` (or ``embedded:DIR``) asks for the embedded server. No URL
    at all is refused: a server whose configuration lost its URL must not run on an empty one."""
    url = (url or "").strip()
    if not url:
        raise ConfigError(
            "no database: set OUTBOX_DATABASE_URL or --database-url to a postgresql:// URL "
            "(or to 'embedded' for the development server in ./.outbox)"
        )
    if url == EMBEDDED or url.startswith(EMBEDDED + ":"):
        from outbox.embedded import embedded_url  # noqa: PLC0415 - only on demand

        folder = url.removeprefix(EMBEDDED).removeprefix(":")
        try:
            return embedded_url(Path(folder) if folder else None)
        except ModuleNotFoundError as err:
            if err.name != "pgserver":
                raise
            raise ConfigError(
                "the embedded server needs the 'embedded' extra (pgserver is missing): "
                "pip install 'outbox-telegram[embedded]', or give a postgresql:// URL"
            ) from None
    return normalize_url(url)


def sqlalchemy_url(url: str) -> str:
    """The URL for SQLAlchemy's psycopg dialect; several servers in the authority, which
    SQLAlchemy cannot parse, move to the query as libpq's ``host=a,b&port=5432,5432``."""
    parts = urlsplit(normalize_url(url))
    servers = _servers(parts)
    if len(servers) > 1:
        user = parts.netloc.rpartition("@")[0]
        query = [f"host={','.join(host for host, _ in servers)}"]
        if any(port for _, port in servers):
            query.append(f"port={','.join(port for _, port in servers)}")
        if parts.query:
            query.append(parts.query)
        parts = parts._replace(netloc=f"{user}@" if user else "", query="&".join(query))
    return _unsplit(parts._replace(scheme="postgresql+psycopg"))


def create_engine(url: str, **kwargs: object) -> sa.Engine:
    import sqlalchemy  # noqa: PLC0415 - only the commands that run the app's statements need it

    return sqlalchemy.create_engine(sqlalchemy_url(url), **kwargs)


# SQLAlchemy's errors, when an engine has loaded it; without it none can be raised, and the
# commands that speak psycopg only start without loading it.
def _sqlalchemy_programming_errors() -> tuple[type[sa.exc.ProgrammingError], ...]:
    found = sys.modules.get("sqlalchemy.exc")
    return () if found is None else (found.ProgrammingError,)


def _unreachable_errors() -> tuple[type[Exception], ...]:
    found = sys.modules.get("sqlalchemy.exc")
    extra = () if found is None else (found.OperationalError, found.InterfaceError)
    return (psycopg.OperationalError, *extra)


_TABLES_MISSING = "the outbox tables are missing in this database: run `outbox migrate` first"


@contextlib.contextmanager
def connect_errors(url: str) -> Iterator[None]:
    """Translate connection and missing-schema errors into one clear ``OutboxError``."""
    try:
        yield
    except (psycopg.errors.UndefinedTable, psycopg.errors.UndefinedFunction) as err:
        raise SchemaMissing(_TABLES_MISSING) from err
    except psycopg.errors.InsufficientPrivilege as err:
        raise _not_allowed(url, err) from err
    except _sqlalchemy_programming_errors() as err:
        if isinstance(err.orig, psycopg.errors.UndefinedTable):
            raise SchemaMissing(_TABLES_MISSING) from err
        if isinstance(err.orig, psycopg.errors.InsufficientPrivilege):
            raise _not_allowed(url, err.orig) from err
        raise
    except _unreachable_errors() as err:
        reason = str(getattr(err, "orig", None) or err).strip().splitlines()[0]
        raise DatabaseUnavailable(
            f"cannot reach the database at {redact_url(url)}: {reason}"
        ) from err


def _not_allowed(url: str, err: psycopg.Error) -> ConfigError:
    reason = str(err).strip().splitlines()[0]
    user = urlsplit(url).username or "the default user"
    return ConfigError(
        f"the database refused user {user}: {reason} (grant the privilege, or use the user "
        "that owns the outbox's schema)"
    )


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


def _conninfo(url: str) -> str:
    conninfo = normalize_url(url)
    given = psycopg.conninfo.conninfo_to_dict(conninfo)
    extra = {k: v for k, v in _LIVENESS.items() if k not in given}
    return psycopg.conninfo.make_conninfo(conninfo, **extra)


async def async_connect(
    url: str, *, autocommit: bool = True, prepare: bool = True
) -> psycopg.AsyncConnection[object]:
    """A psycopg async connection for the relay's hot path; ``prepare`` (the statements it
    repeats) is off behind a transaction-pooling PgBouncer, whose server connections change."""
    with connect_errors(url):
        return await psycopg.AsyncConnection.connect(
            _conninfo(url), autocommit=autocommit, prepare_threshold=2 if prepare else None
        )


# The operator's connections (the CLI's, the web page's): rows readable by name; nothing
# prepared, so that they work through any PgBouncer; one transaction, committed on return.


@contextlib.contextmanager
def operator_connection(url: str, *, schema: str) -> Iterator[psycopg.Connection[Any]]:
    """A connection for one operator command, after checking the schema."""
    with connect_errors(url):
        conn = psycopg.connect(_conninfo(url), prepare_threshold=None, row_factory=namedtuple_row)
        with conn:
            check_schema_sync(conn, schema=schema)
            yield conn


@contextlib.asynccontextmanager
async def operator_connection_async(url: str) -> AsyncIterator[psycopg.AsyncConnection[Any]]:
    """A connection for one request of the web page (its schema was checked at start)."""
    with connect_errors(url):
        conn = await psycopg.AsyncConnection.connect(
            _conninfo(url), prepare_threshold=None, row_factory=namedtuple_row
        )
        async with conn:
            yield conn


async def check_schema(url: str, *, schema: str) -> None:
    """Fail with one clear line if the database is unreachable, not migrated, or migrated by
    another version."""
    conn = await async_connect(url)
    try:
        with connect_errors(url):
            problem = schema_problem(schema, await queries.schema_facts(conn, schema=schema))
    finally:
        await conn.close()
    if problem is not None:
        raise problem


def check_schema_sync(conn: queries.AnyConn, *, schema: str) -> None:
    """``check_schema`` on an open connection (an operator command's, or the host's)."""
    problem = schema_problem(schema, queries.schema_facts_sync(conn, schema=schema))
    if problem is not None:
        raise problem
