"""What the commands share beyond their arguments: the database, opened and named once per
command, and how they print JSON and complaints."""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import logging
import sys
from collections.abc import Awaitable, Callable, Iterator, Sequence
from typing import Any, TypeVar

import psycopg

from outbox import ops
from outbox.db import async_connect, check_schema, connect_errors, redact_url, resolve_url
from outbox.queries import AsyncConn
from outbox.schema import current_schema

__all__ = [
    "answer",
    "answer_newest",
    "complain",
    "database_url",
    "open_database",
    "print_json",
    "run_async",
    "run_operation",
]

T = TypeVar("T")
log = logging.getLogger("outbox")


def database_url(args: argparse.Namespace) -> str:
    """The command's database, named in the log (password redacted) before anything runs."""
    url = resolve_url(args.database_url)
    log.info("database %s, schema %s", redact_url(url), current_schema())
    return url


@contextlib.contextmanager
def open_database(args: argparse.Namespace) -> Iterator[psycopg.Connection[Any]]:
    """The command's connection, its schema checked; its work is one transaction, committed
    when the body returns. Connection and missing-schema errors become one OutboxError."""
    with ops.connect(resolve_url(args.database_url), schema=current_schema()) as conn:
        yield conn


def run_async(args: argparse.Namespace, work: Callable[[AsyncConn], Awaitable[T]]) -> T:
    """Run ``work`` once on a connection of its own (the relay's maintenance steps, the same
    code and SQL, from a command)."""
    url = resolve_url(args.database_url)

    async def run() -> T:
        await check_schema(url, schema=current_schema())
        conn = await async_connect(url, prepare=False)
        try:
            with connect_errors(url):
                return await work(conn)
        finally:
            await conn.close()

    return asyncio.run(run())


def run_operation(args: argparse.Namespace, op: Callable[..., T], *given: Any, **named: Any) -> T:
    """One operation (``outbox.ops``) on the command's database and schema, committed when it
    returns."""
    with open_database(args) as conn:
        return op(conn, *given, schema=current_schema(), **named)


def print_json(document: Any) -> None:
    print(json.dumps(document, ensure_ascii=False, indent=2))


def answer(args: argparse.Namespace, document: Any, text: str | Sequence[str]) -> int:
    """A command's answer: ``document`` as JSON with --json, else ``text`` (a line, or lines);
    exit status 0."""
    if args.json:
        print_json(document)
    else:
        print(text if isinstance(text, str) else "\n".join(text))
    return 0


def answer_newest(
    args: argparse.Namespace,
    found: Sequence[T],
    as_json: Callable[[T], Any],
    as_lines: Callable[[Sequence[T]], Sequence[str]],
    *,
    more: str,
    none: str,
) -> int:
    """A list's answer: the first ``args.limit`` of ``found``, which holds one row more when
    more match (``more`` says so), or ``none`` when nothing does."""
    shown = found[: args.limit]
    if args.json or not shown:
        return answer(args, [as_json(item) for item in shown], none)
    print("\n".join(as_lines(shown)))
    if len(found) > args.limit:
        print(f"(the newest {args.limit} shown; {more}: --limit N)")
    return 0


def complain(line: str) -> None:
    print(f"outbox: {line}", file=sys.stderr)
