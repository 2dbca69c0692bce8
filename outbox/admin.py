"""Operator commands: status and one-shot maintenance. Safe while relays run."""

from __future__ import annotations

import argparse
import json
from collections.abc import Callable
from typing import Any

from outbox import queries
from outbox.config import DEFAULT_LEASE
from outbox.db import connect_errors, create_engine, resolve_url
from outbox.retry import RetryPolicy

__all__ = ["add_commands"]

Command = Callable[..., Any]


def _engine(args: argparse.Namespace) -> tuple[str, Any]:
    url = resolve_url(args.database_url)
    return url, create_engine(url)


def cmd_status(args: argparse.Namespace) -> int:
    url, engine = _engine(args)
    with connect_errors(url), engine.begin() as conn:
        counts = queries.count_by_state(conn)
    engine.dispose()
    if args.json:
        print(json.dumps({"holat": counts}))
    else:
        for state, count in counts.items():
            print(f"{state:<13} {count:>8}")
    return 0


def cmd_reap(args: argparse.Namespace) -> int:
    url, engine = _engine(args)
    with connect_errors(url), engine.begin() as conn:
        reaped = queries.reap_stale(conn, lease_seconds=args.lease, max_attempts=args.max_attempts)
    engine.dispose()
    print(f"reaped: {reaped['kutmoqda']} back to kutmoqda, {reaped['xato']} to xato")
    return 0


def add_commands(
    command: Callable[..., Any],
    add_database: Callable[[Any], None],
    add_json: Callable[[Any], None],
) -> None:
    """Register the operator subcommands on the ``outbox`` parser."""
    from outbox.cli import _seconds  # noqa: PLC0415 - shared flag converters

    status = command("status", cmd_status, "rows per state")
    add_database(status)
    add_json(status)
    reap = command("reap", cmd_reap, "return expired claims to the queue, once")
    add_database(reap)
    reap.add(
        "--lease",
        env="OUTBOX_LEASE",
        default=DEFAULT_LEASE,
        convert=_seconds,
        help="a claim older than this is expired",
    )
    reap.add(
        "--max-attempts",
        env="OUTBOX_MAX_ATTEMPTS",
        default=RetryPolicy().max_attempts,
        convert=int,
        help="expired claims with this many attempts go to xato",
    )
