r"""What every module of ``outbox.queries`` shares: the runners of named queries, for the app
through its own SQLAlchemy session or connection (``run_sync``, ``run_async``), and for the
operator's reads and actions (the CLI, the web page, ``outbox.api``): :class:`Operation`\ s,
run on a psycopg connection, sync or async, or on the host's SQLAlchemy connection alike.
"""

from __future__ import annotations

import functools
import inspect
from collections.abc import Awaitable, Callable, Coroutine, Generator, Mapping
from typing import TYPE_CHECKING, Any, Concatenate, Generic, ParamSpec, TypeVar

import psycopg

from outbox import sql

AsyncConn = psycopg.AsyncConnection[Any]
if TYPE_CHECKING:
    import sqlalchemy as sa
    from sqlalchemy import Connection
    from sqlalchemy.ext.asyncio import AsyncConnection, AsyncSession
    from sqlalchemy.orm import Session

    AsyncAppConn = AsyncConnection | AsyncSession
    SyncConn = Connection | Session
    # An operator's connection: the CLI's psycopg one, or the host's SQLAlchemy one (outbox.api).
    AnyConn = psycopg.Connection[Any] | Connection | Session
    # An app-side operation is a generator of (statement, parameters) pairs that receives each
    # statement's result: one implementation serves sync and async sessions alike.
    Step = tuple[sa.TextClause, Mapping[str, Any]]
    Steps = Generator[Step, Any, Any]
else:
    # The same names at run time, for annotations only: SQLAlchemy loads when a host's session
    # is used (its own import), not when a command that speaks psycopg starts.
    SyncConn = AnyConn = Step = Steps = Any

P = ParamSpec("P")
T = TypeVar("T")
R = TypeVar("R")


def _drive(steps: Generator[Any, Any, T], answer: Callable[[Any], Any]) -> T:
    """Run ``steps`` to its end, sending it the ``answer`` to each step it yields."""
    try:
        step = next(steps)
        while True:
            step = steps.send(answer(step))
    except StopIteration as done:
        return done.value  # type: ignore[no-any-return]


async def _drive_async(steps: Generator[Any, Any, T], answer: Callable[[Any], Awaitable[Any]]) -> T:
    try:
        step = next(steps)
        while True:
            step = steps.send(await answer(step))
    except StopIteration as done:
        return done.value  # type: ignore[no-any-return]


def run_sync(conn: SyncConn, steps: Steps) -> Any:
    """Run an operation's statements on a sync connection or session, in its transaction."""
    return _drive(steps, lambda step: conn.execute(*step))


async def run_async(conn: AsyncAppConn, steps: Steps) -> Any:
    """Run an operation's statements on an async connection or session, in its transaction."""
    return await _drive_async(steps, lambda step: conn.execute(*step))


def app_twins(
    name: str, steps: Callable[P, Steps], answer: Callable[[Any], R]
) -> tuple[
    Callable[Concatenate[SyncConn, P], R],
    Callable[Concatenate[AsyncAppConn, P], Coroutine[Any, Any, R]],
]:
    """The sync function ``name`` of the app's API and its ``*_async`` twin, one body for both:
    ``steps`` checks the arguments and gives the statements, ``answer`` makes the result of the
    operation the function's. Each takes the app's connection or session, then ``steps``'s own
    parameters (as ``help()`` shows); the sync one has ``steps``'s docstring."""

    def run(conn: SyncConn, *args: P.args, **kwargs: P.kwargs) -> R:
        return answer(run_sync(conn, steps(*args, **kwargs)))

    async def run_awaited(conn: AsyncAppConn, *args: P.args, **kwargs: P.kwargs) -> R:
        return answer(await run_async(conn, steps(*args, **kwargs)))

    own = inspect.signature(steps)
    for function, called, conn_type, doc in (
        (run, name, "SyncConn", steps.__doc__),
        (
            run_awaited,
            f"{name}_async",
            "AsyncAppConn",
            f"``{name}`` for an ``AsyncSession`` or ``AsyncConnection``.",
        ),
    ):
        function.__name__ = function.__qualname__ = called
        function.__module__ = steps.__module__
        function.__doc__ = doc
        conn = inspect.Parameter(
            "conn", inspect.Parameter.POSITIONAL_OR_KEYWORD, annotation=conn_type
        )
        function.__dict__["__signature__"] = own.replace(
            parameters=[conn, *own.parameters.values()], return_annotation=inspect.Signature.empty
        )
    # ``conn`` may still be passed by name, as before; a type checker has it positional only
    # (``Concatenate``), the one way it can add a parameter to ``steps``'s.
    return run, run_awaited  # type: ignore[return-value]


# --- operations: named queries in sequence -----------------------------------------------------

# (query name, schema, parameters); the generator receives the rows, each readable by name
# (``row.id``): psycopg's namedtuple rows (``outbox.db`` opens the operator's connections so)
# or SQLAlchemy's rows.
Query = tuple[str, str, Mapping[str, Any]]
Reading = Generator[Query, list[Any], T]


def _rows(conn: AnyConn, query: Query) -> list[Any]:
    name, schema, params = query
    if isinstance(conn, psycopg.Connection):
        return sql.fetch_sync(conn, name, schema=schema, params=params)
    return list(conn.execute(sql.sa_sql(name, schema), dict(params)).fetchall())


class Operation(Generic[P, T]):
    """An operator's reading or action, written once as a generator of named queries; called on
    a sync connection (``op(conn, ...)``) or awaited on an async one (``op.run_async``). An
    operation composes others with ``yield from other.steps(...)``; it runs in the caller's
    transaction and never commits."""

    def __init__(self, steps: Callable[P, Reading[T]]) -> None:
        self.steps = steps
        functools.update_wrapper(self, steps)

    def __call__(self, conn: AnyConn, /, *args: P.args, **kwargs: P.kwargs) -> T:
        return _drive(self.steps(*args, **kwargs), lambda query: _rows(conn, query))

    async def run_async(self, conn: AsyncConn, /, *args: P.args, **kwargs: P.kwargs) -> T:
        def rows(query: Query) -> Awaitable[list[Any]]:
            name, schema, params = query
            return sql.fetch(conn, name, schema=schema, params=params)

        return await _drive_async(self.steps(*args, **kwargs), rows)


operation = Operation


def app_steps(reading: Reading[T]) -> Steps:
    """An operator's operation as the app's statements (``run_sync``, ``run_async``), so that
    the app's ``AsyncSession`` or ``AsyncConnection`` runs it too."""
    try:
        name, schema, params = next(reading)
        while True:
            result = yield sql.sa_sql(name, schema), params
            rows = list(result.fetchall()) if result.returns_rows else []
            name, schema, params = reading.send(rows)
    except StopIteration as done:
        return done.value


# --- the schema itself -------------------------------------------------------------------------


@operation
def schema_facts_sync(*, schema: str) -> Reading[tuple[str, frozenset[str]] | None]:
    """The outbox table's comment and columns; None if there is no outbox table."""
    rows = yield "schema_facts", schema, {"table": f'"{schema}".outbox'}
    return (str(rows[0][0]), frozenset(rows[0][1])) if rows else None


schema_facts = schema_facts_sync.run_async
