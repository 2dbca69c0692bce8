"""What the commands share beyond their arguments: the database, opened and named once per
command, and how they print JSON and complaints."""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import logging
import sys
from collections.abc import Awaitable, Callable, Iterator
from typing import Any, TypeVar

import psycopg

from outbox import ops
from outbox.db import async_connect, check_schema, connect_errors, redact_url, resolve_url
from outbox.queries import AsyncConn
from outbox.schema import current_schema

__all__ = ["complain", "database_url", "open_database", "print_json", "run_async"]

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


def print_json(document: Any) -> None:
    print(json.dumps(document, ensure_ascii=False, indent=2))


def complain(line: str) -> None:
    print(f"outbox: {line}", file=sys.stderr)
