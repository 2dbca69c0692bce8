"""Named SQL: every statement the outbox sends lives in a ``.sql`` file of this folder.

A file holds blocks that start with a ``-- name: <query>`` line, in plain PostgreSQL a person
can paste into psql: tables unqualified, states as their literals, parameters as psql variables
(``:limit``). At load time, once per schema, tables are qualified (``"tenant".outbox``) and
comments stripped; for psycopg (:func:`sql`, :func:`numbered`) the parameters become
placeholders, for SQLAlchemy's ``text()`` (:func:`sa_sql`) they stay as they are.

The executor (:func:`fetch`, :func:`fetch_one`, :func:`execute`, :func:`stream`) runs a named
query on a psycopg connection: the relay's, the CLI's and the web page's alike.
"""

from __future__ import annotations

import functools
import re
from collections.abc import AsyncIterator, Callable, Iterator, Mapping
from importlib import resources
from typing import TYPE_CHECKING, Any

import psycopg

if TYPE_CHECKING:
    import sqlalchemy as sa

__all__ = [
    "TABLES",
    "execute",
    "fetch",
    "fetch_one",
    "fetch_sync",
    "numbered",
    "query_names",
    "sa_sql",
    "source",
    "sql",
    "stream",
    "stream_sync",
]

# The outbox's own tables, qualified with the schema wherever a statement names them.
TABLES = (
    "outbox",
    "yuborilgan",
    "bot_holati",
    "chat_navbati",
    "relaylar",
    "pauza",
    "tinch_soatlar",
    "bloklangan",
)

_NAME_LINE = re.compile(r"^--\s*name:\s*(\w+)\s*$", re.MULTILINE)
# One lexical token of interest: a string literal, a quoted identifier, a comment, a ::cast,
# a :parameter, a bare word, a literal percent sign. Everything else passes through.
_TOKEN = re.compile(
    r"""(?P<string>'(?:[^']|'')*')
      | (?P<ident>"(?:[^"]|"")*")
      | (?P<comment>--[^\n]*)
      | (?P<cast>::)
      | :(?P<param>[A-Za-z_]\w*)
      | (?P<word>(?<![\w.$])[A-Za-z_]\w*)
      | (?P<percent>%)""",
    re.VERBOSE,
)


@functools.cache
def _queries() -> dict[str, str]:
    """Every named query of the folder's .sql files, as written."""
    found: dict[str, str] = {}
    for entry in sorted(resources.files(__name__).iterdir(), key=lambda e: e.name):
        if not entry.name.endswith(".sql"):
            continue
        parts = _NAME_LINE.split(entry.read_text(encoding="utf-8"))
        for name, body in zip(parts[1::2], parts[2::2], strict=True):
            if name in found:
                raise RuntimeError(f"query {name!r} is named twice in outbox/sql")
            found[name] = body.strip()
    return found


def query_names() -> list[str]:
    """The names of every query, sorted."""
    return sorted(_queries())


def source(name: str) -> str:
    """The query as written in its file (comments and all)."""
    try:
        return _queries()[name]
    except KeyError:
        raise KeyError(f"no query named {name!r} in outbox/sql") from None


def _rewrite(
    text: str,
    schema: str,
    *,
    placeholder: Callable[[str], str] = lambda name: f":{name}",
    double_percent: bool = False,
) -> str:
    """``text`` ready to send: tables qualified, comments gone, each ``:name`` written as
    ``placeholder`` makes it, ``%`` doubled where psycopg reads the text for placeholders."""
    qualified = f'"{schema}".'

    def token(match: re.Match[str]) -> str:
        kind = match.lastgroup
        text = match.group(0)
        if kind == "comment":
            return ""
        if kind == "param":
            return placeholder(match.group("param"))
        if kind in ("percent", "string") and double_percent:
            return text.replace("%", "%%")
        if kind == "word" and text in TABLES:
            return qualified + text
        return text

    text = _TOKEN.sub(token, text)
    # Blank lines and trailing spaces left by the comments: gone, indentation kept.
    return "\n".join(line.rstrip() for line in text.splitlines() if line.strip())


@functools.cache
def sql(name: str, schema: str) -> str:
    """The named query for psycopg (``%(name)s`` placeholders), its tables in ``schema``."""
    return _rewrite(source(name), schema, placeholder=lambda n: f"%({n})s", double_percent=True)


@functools.cache
def numbered(name: str, schema: str) -> tuple[str, tuple[str, ...]]:
    """The named query with ``$1, $2, ...`` placeholders, and the parameters' names in their
    order. The executor sends it on a raw cursor: psycopg then parses nothing (it re-parses
    ``%(name)s`` statements over 4 KiB on every execution)."""
    names: list[str] = []

    def number(name: str) -> str:
        if name not in names:
            names.append(name)
        return f"${names.index(name) + 1}"

    return _rewrite(source(name), schema, placeholder=number), tuple(names)


@functools.cache
def sa_sql(name: str, schema: str) -> sa.TextClause:
    """The named query as SQLAlchemy ``text()`` (``:name`` placeholders), for the app's session."""
    from sqlalchemy import text  # noqa: PLC0415 - loaded by the app's session already

    return text(_rewrite(source(name), schema))


# --- the executor -------------------------------------------------------------------------------

AsyncConn = psycopg.AsyncConnection[Any]
SyncConn = psycopg.Connection[Any]


def _args(name: str, schema: str, params: Mapping[str, Any] | None) -> tuple[str, list[Any]]:
    text, names = numbered(name, schema)
    given = params or {}
    try:
        return text, [given[n] for n in names]
    except KeyError as missing:
        raise TypeError(f"query {name!r} needs parameter {missing}") from None


async def _run(
    conn: AsyncConn, name: str, schema: str, params: Mapping[str, Any] | None
) -> psycopg.AsyncRawCursor[Any]:
    cursor = psycopg.AsyncRawCursor(conn)
    await cursor.execute(*_args(name, schema, params))
    return cursor


async def fetch(
    conn: AsyncConn, name: str, *, schema: str, params: Mapping[str, Any] | None = None
) -> list[tuple[Any, ...]]:
    """Every row the named query returns."""
    return await (await _run(conn, name, schema, params)).fetchall()


async def fetch_one(
    conn: AsyncConn, name: str, *, schema: str, params: Mapping[str, Any] | None = None
) -> tuple[Any, ...] | None:
    """The first row the named query returns, or None."""
    return await (await _run(conn, name, schema, params)).fetchone()


async def execute(
    conn: AsyncConn, name: str, *, schema: str, params: Mapping[str, Any] | None = None
) -> int:
    """Run the named query; the number of rows it touched."""
    return (await _run(conn, name, schema, params)).rowcount


async def stream(
    conn: AsyncConn, name: str, *, schema: str, params: Mapping[str, Any] | None = None
) -> AsyncIterator[tuple[Any, ...]]:
    """The named query's rows one by one, as the server sends them (a long report)."""
    async for row in psycopg.AsyncRawCursor(conn).stream(*_args(name, schema, params)):
        yield row


def stream_sync(
    conn: SyncConn, name: str, *, schema: str, params: Mapping[str, Any] | None = None
) -> Iterator[tuple[Any, ...]]:
    """``stream`` on a synchronous psycopg connection."""
    yield from psycopg.RawCursor(conn).stream(*_args(name, schema, params))


def fetch_sync(
    conn: SyncConn, name: str, *, schema: str, params: Mapping[str, Any] | None = None
) -> list[tuple[Any, ...]]:
    """``fetch`` on a synchronous psycopg connection."""
    cursor = psycopg.RawCursor(conn)
    cursor.execute(*_args(name, schema, params))
    return cursor.fetchall()
