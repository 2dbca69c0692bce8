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

from sqlalchemy.engine import Engine

from outbox.db import (
    async_connect,
    check_schema,
    check_schema_sync,
    connect_errors,
    create_engine,
    redact_url,
    resolve_url,
)
from outbox.queries import AsyncConn
from outbox.schema import current_schema

__all__ = ["complain", "database_url", "open_database", "print_json", "run_async"]

T = TypeVar("T")
log = logging.getLogger("outbox")

# A health check must answer, not hang on a host that drops packets.
CONNECT_TIMEOUT_SECONDS = 10


def database_url(args: argparse.Namespace) -> str:
    """The command's database, named in the log (password redacted) before anything runs."""
    url = resolve_url(args.database_url)
    log.info("database %s, schema %s", redact_url(url), current_schema())
    return url


@contextlib.contextmanager
def open_database(args: argparse.Namespace) -> Iterator[Engine]:
    """An engine whose connection and missing-schema errors become one clear OutboxError."""
    url = resolve_url(args.database_url)
    options = {} if "connect_timeout" in url else {"connect_timeout": CONNECT_TIMEOUT_SECONDS}
    engine = create_engine(url, connect_args=options)
    try:
        with connect_errors(url):
            with engine.connect() as conn:
                check_schema_sync(conn, schema=current_schema())
            yield engine
    finally:
        engine.dispose()


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
