"""Maintenance commands: migrate, and the relay's own maintenance steps (reap, prune) run once.

Safe while relays run: reap and prune take the same lock and run the same SQL as a relay's
maintenance round.
"""

from __future__ import annotations

import argparse
import sys
from typing import TYPE_CHECKING

from outbox import ops, queries
from outbox.commands.common import answer, database_url, print_json, run_async, run_operation
from outbox.commands.options import Commands, add_lease, duration, whole_number
from outbox.config import (
    DEFAULT_MARKER_RETENTION,
    DEFAULT_RETENTION,
    MAX_ATTEMPTS,
    MAX_BATCH_SIZE,
)
from outbox.errors import InvalidInput
from outbox.ops.views._text import span
from outbox.ops.views.maintenance import pruned_json, reaped_json, reaped_text
from outbox.progress import ProgressLine, on_terminal
from outbox.queries import AsyncConn
from outbox.retry import RetryPolicy
from outbox.schema import current_schema

if TYPE_CHECKING:
    from outbox.relay.maintenance import Reaper, Retention

__all__ = ["register", "register_migrate"]

DEFAULT_PRUNE_BATCH = 1000
DEFAULT_MAX_ATTEMPTS = RetryPolicy().max_attempts


def cmd_migrate(args: argparse.Namespace) -> int:
    from outbox.migrate import upgrade  # noqa: PLC0415 - Alembic only when migrating

    done = upgrade(database_url(args))
    print(done.describe(f"the outbox tables in schema {current_schema()}"))
    return 0


def _reaper(args: argparse.Namespace) -> Reaper:
    from outbox.relay.maintenance import Reaper  # noqa: PLC0415 - the relay's imports are heavy

    return Reaper(schema=current_schema(), lease_seconds=args.lease, max_attempts=args.max_attempts)


def _retention(args: argparse.Namespace) -> Retention:
    from outbox.relay.maintenance import Retention  # noqa: PLC0415

    return Retention(
        schema=current_schema(),
        done_older_than=args.older_than,  # None: keep them (OUTBOX_RETENTION=0)
        markers_older_than=args.markers_older_than,
        batch_size=args.batch_size,
    )


def cmd_reap(args: argparse.Namespace) -> int:
    reaped = run_async(
        args,
        lambda conn: _reaper(args).run_once(conn),
    )
    return answer(args, reaped_json(reaped), f"reaped: {reaped_text(reaped)}")


def cmd_prune(args: argparse.Namespace) -> int:
    keep_done = args.older_than is None
    if not keep_done and args.markers_older_than < args.older_than:
        raise InvalidInput(
            f"--markers-older-than ({span(args.markers_older_than)}) must not be "
            f"shorter than --older-than ({span(args.older_than)}): a marker is what "
            "stops a key enqueued again from being sent twice"
        )
    removed = run_async(args, lambda conn: _prune(conn, args))
    done, markers = removed.done_rows, removed.markers
    failed = run_operation(args, ops.count_failed)
    if args.json:
        print_json({**pruned_json(removed), "xato_kept": failed})
        return 0
    markers_line = f"{markers} sent markers older than {span(args.markers_older_than)}"
    if keep_done:
        print(f"kept every bajarildi row (OUTBOX_RETENTION=0); pruned {markers_line}")
    else:
        print(f"pruned {done} bajarildi rows older than {span(args.older_than)} and {markers_line}")
    if failed:
        print(f"kept {failed} xato rows: never pruned; see `outbox list --holat xato`")
    return 0


async def _prune(conn: AsyncConn, args: argparse.Namespace) -> queries.Pruned:
    """The relay's retention step, with a progress line when stderr is a terminal."""
    retention = _retention(args)
    if not on_terminal():
        return await retention.run_once(conn)
    total = await queries.count_prunable(
        conn,
        schema=retention.schema,
        done_older_than_seconds=retention.done_older_than,
        markers_older_than_seconds=retention.markers_older_than,
    )
    line = ProgressLine("prune", sys.stderr)
    done = 0

    def batch_done(n: int) -> None:
        nonlocal done
        done += n
        line.update(done, max(total - done, 0))

    with line.above_logs():
        line.show(0, total)
        removed = await retention.run_once(conn, on_batch=batch_done)
    line.finish(done, max(total - done, 0))
    return removed


def _retention_twin(raw: str) -> float | None:
    return duration()(raw) or None


def register_migrate(commands: Commands) -> None:
    commands.add("migrate", cmd_migrate, "apply the database migrations")


def register(commands: Commands) -> None:
    reap = commands.add("reap", cmd_reap, "return expired claims to the queue, once", json=True)
    add_lease(reap, "a claim older than this is expired")
    reap.add(
        "--max-attempts",
        env="OUTBOX_MAX_ATTEMPTS",
        default=DEFAULT_MAX_ATTEMPTS,
        convert=whole_number(1, MAX_ATTEMPTS),
        help=f"expired claims with this many attempts go to xato (default {DEFAULT_MAX_ATTEMPTS})",
        metavar="N",
    )

    prune = commands.add(
        "prune", cmd_prune, "delete old bajarildi rows and sent markers", json=True
    )
    prune.add(
        "--older-than",
        env="OUTBOX_RETENTION",
        default=DEFAULT_RETENTION,
        convert=duration(),
        # The relay's variable, read as the relay reads it: 0 keeps the done rows.
        env_convert=_retention_twin,
        help=f"delete bajarildi rows unchanged this long (default {span(DEFAULT_RETENTION)}; "
        "OUTBOX_RETENTION=0 keeps them, as for the relay; --older-than 0s deletes them all)",
        metavar="DURATION",
    )
    prune.add(
        "--markers-older-than",
        env="OUTBOX_MARKER_RETENTION",
        default=DEFAULT_MARKER_RETENTION,
        convert=duration(),
        help=f"delete sent markers older than this (default {span(DEFAULT_MARKER_RETENTION)}) "
        "unless their row can still be sent",
        metavar="DURATION",
    )
    prune.add(
        "--batch-size",
        env="OUTBOX_PRUNE_BATCH_SIZE",
        default=DEFAULT_PRUNE_BATCH,
        convert=whole_number(1, MAX_BATCH_SIZE),
        help=f"rows deleted per transaction (default {DEFAULT_PRUNE_BATCH})",
        metavar="N",
    )
