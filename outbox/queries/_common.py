"""What every module of ``outbox.queries`` shares: tables named per schema, the runners.

Two kinds of caller, two placeholder styles:

* the app and the operator commands run through SQLAlchemy (sync or async sessions and
  connections, any driver: psycopg, asyncpg), so their statements are ``text()`` with
  ``:name`` parameters and explicit casts that every driver accepts;
* the relay's hot path runs on its own psycopg async connections with ``%(name)s``.

Every statement names its tables through ``{outbox}`` and ``{yuborilgan}``, filled in once per
schema (see ``outbox.schema``): ``_sql`` and ``_text`` here, cached once for the package. A
state is written ``{pending}``, ``{in_progress}``, ``{done}`` or ``{failed}``: the literal comes
from ``outbox.states.State``, the one spelling of the states.
"""

from __future__ import annotations

import functools
from collections.abc import Generator, Mapping, Sequence
from typing import TYPE_CHECKING, Any

import psycopg
import sqlalchemy as sa
from sqlalchemy import Connection
from sqlalchemy.orm import Session

from outbox.schema import notify_channel, pause_channel
from outbox.vocabulary import STATE_LITERALS

if TYPE_CHECKING:
    from sqlalchemy.ext.asyncio import AsyncConnection, AsyncSession

    AsyncAppConn = AsyncConnection | AsyncSession

AsyncConn = psycopg.AsyncConnection[Any]
SyncConn = Connection | Session


@functools.cache
def _sql(template: str, schema: str) -> str:
    """The statement with its tables qualified by ``schema`` (a validated identifier)."""
    return template.format(
        outbox=f'"{schema}".outbox',
        yuborilgan=f'"{schema}".yuborilgan',
        bot_holati=f'"{schema}".bot_holati',
        chat_navbati=f'"{schema}".chat_navbati',
        relaylar=f'"{schema}".relaylar',
        pauza=f'"{schema}".pauza',
        notify_channel=notify_channel(schema),
        pause_channel=pause_channel(schema),
        **STATE_LITERALS,
    )


@functools.cache
def _text(template: str, schema: str) -> sa.TextClause:
    return sa.text(_sql(template, schema))


def _execute(
    conn: SyncConn, schema: str, template: str, params: Mapping[str, Any] | None = None
) -> Any:
    """Run one statement on the caller's sync connection or session, in its transaction."""
    return conn.execute(_text(template, schema), params or {})


# An app-side operation is a generator of (statement, parameters) pairs that receives each
# statement's result: one implementation serves sync and async sessions alike.
Step = tuple[sa.TextClause, Mapping[str, Any]]
Steps = Generator[Step, Any, Any]


def run_sync(conn: SyncConn, steps: Steps) -> Any:
    """Run an operation's statements on a sync connection or session, in its transaction."""
    try:
        statement, params = next(steps)
        while True:
            statement, params = steps.send(conn.execute(statement, params))
    except StopIteration as done:
        return done.value


async def run_async(conn: AsyncAppConn, steps: Steps) -> Any:
    """Run an operation's statements on an async connection or session, in its transaction."""
    try:
        statement, params = next(steps)
        while True:
            statement, params = steps.send(await conn.execute(statement, params))
    except StopIteration as done:
        return done.value


# --- the schema itself -------------------------------------------------------------------------

# Every outbox migration writes "outbox-telegram <revision>" into the outbox table's comment,
# which the relay and the commands check (``outbox.schema.schema_problem``) whichever way the
# migrations ran: ``outbox migrate`` or the host's own Alembic history.
# (the table's comment or '' if it has none, the names of its columns); no row: no table.
_SCHEMA_FACTS = """
SELECT coalesce(obj_description(c.oid, 'pg_class'), ''),
       array(SELECT attname::text FROM pg_attribute
             WHERE attrelid = c.oid AND attnum > 0 AND NOT attisdropped)
FROM (SELECT to_regclass(%(table)s) AS oid) c
WHERE c.oid IS NOT NULL
"""


def _schema_facts(row: Sequence[Any] | None) -> tuple[str, frozenset[str]] | None:
    return None if row is None else (str(row[0]), frozenset(row[1]))


async def schema_facts(conn: AsyncConn, *, schema: str) -> tuple[str, frozenset[str]] | None:
    """The outbox table's comment and columns; None if there is no outbox table."""
    cursor = await conn.execute(_SCHEMA_FACTS, {"table": f'"{schema}".outbox'})
    return _schema_facts(await cursor.fetchone())


def schema_facts_sync(conn: SyncConn, *, schema: str) -> tuple[str, frozenset[str]] | None:
    """``schema_facts`` on an app or operator connection."""
    statement = sa.text(_SCHEMA_FACTS.replace("%(table)s", ":table"))
    return _schema_facts(conn.execute(statement, {"table": f'"{schema}".outbox'}).first())
