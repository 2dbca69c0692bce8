"""Operator commands: list, show, replay, status, reap and prune. Safe while relays run.

Each command parses, opens the database, calls one function of ``outbox.queries`` and prints.
Exit codes (the README lists them): 0 done; 2 invalid input or unknown id; 3 bad database URL;
4 database unreachable; 5 schema missing; 7 replay refused for a row (the reason is printed);
8 ``status`` found a problem.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import sys
from collections.abc import Awaitable, Callable, Iterator
from typing import TYPE_CHECKING, Any, TypeVar

from sqlalchemy.engine import Engine

from outbox import api, queries
from outbox import presentation as out
from outbox.config import DEFAULT_LEASE, DEFAULT_MARKER_RETENTION, DEFAULT_RETENTION
from outbox.db import (
    async_connect,
    check_schema,
    check_schema_sync,
    connect_errors,
    create_engine,
    resolve_url,
)
from outbox.durations import parse_duration
from outbox.errors import ConfigError, InvalidInput, NotFound, Refused, Unhealthy
from outbox.progress import ProgressLine, on_terminal
from outbox.queries import AsyncConn
from outbox.retry import RetryPolicy
from outbox.schema import current_schema, validate_queue
from outbox.states import State

if TYPE_CHECKING:
    from outbox.relay.maintenance import Reaper, Retention

__all__ = ["add_commands"]

T = TypeVar("T")

# A health check must answer, not hang on a host that drops packets.
CONNECT_TIMEOUT_SECONDS = 10
DEFAULT_LIST_LIMIT = 50
DEFAULT_MAX_LAG = 300.0
DEFAULT_PRUNE_BATCH = 1000
DEFAULT_MAX_ATTEMPTS = RetryPolicy().max_attempts

_STATE_ALIASES = {state.name.lower().replace("_", "-"): state.value for state in State}


# --- input: every mistake is an InvalidInput with one clear line ------------------------------


def message_id(raw: str) -> int:
    try:
        value = int(raw)
    except ValueError:
        value = 0
    if value < 1:
        raise InvalidInput(f"{raw!r} is not a message id: ids are whole numbers like 42")
    return value


def state_name(raw: str) -> str:
    """A state as the database spells it; the English names are accepted too."""
    text = raw.strip().lower().replace("_", "-")
    if text in {state.value for state in State}:
        return text
    if text in _STATE_ALIASES:
        return _STATE_ALIASES[text]
    raise InvalidInput(
        f"unknown state {raw!r}: use one of kutmoqda (pending), bajarilmoqda (in progress), "
        "bajarildi (done), xato (failed)"
    )


def positive_count(raw: str) -> int:
    try:
        value = int(raw)
    except ValueError:
        raise InvalidInput(f"{raw!r} is not a whole number") from None
    if value < 1:
        raise InvalidInput(f"{raw!r} must be at least 1")
    return value


def seconds(raw: str) -> float:
    return parse_duration(raw).total_seconds()


def _option(
    parser: Any,
    flag: str,
    *,
    env: str,
    default: Any,
    help: str,
    convert: Callable[[str], Any] = str,
    metavar: str | None = None,
) -> None:
    """A flag with its environment twin; a bad value is one line naming where it came from."""

    def from_source(source: str) -> Callable[[str], Any]:
        def checked(raw: str) -> Any:
            try:
                return convert(raw)
            except InvalidInput as err:
                raise InvalidInput(f"{source}: {err}") from None

        return checked

    parser.add(
        flag,
        env=env,
        default=default,
        help=help,
        convert=from_source(env),
        type=from_source(flag),
        metavar=metavar,
    )


# --- the database, opened and closed once per command ----------------------------------------


@contextlib.contextmanager
def _database(args: argparse.Namespace) -> Iterator[Engine]:
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


def _print_json(document: Any) -> None:
    print(json.dumps(document, ensure_ascii=False, indent=2))


def _complain(line: str) -> None:
    print(f"outbox: {line}", file=sys.stderr)


# --- commands ------------------------------------------------------------------------------------


def cmd_list(args: argparse.Namespace) -> int:
    with _database(args) as engine, engine.begin() as conn:
        # One row more than shown tells whether there are more.
        found = api.list_messages(
            conn, state=args.holat, kind=args.tur, limit=args.limit + 1, queue=args.queue
        )
    messages = found[: args.limit]
    if args.json:
        _print_json([out.message_json(m) for m in messages])
    elif messages:
        print("\n".join(out.messages_table(messages)))
        if len(found) > args.limit:
            print(f"(the newest {args.limit} shown; more match: --limit N)")
    else:
        print("no outbox messages match")
    return 0


def cmd_show(args: argparse.Namespace) -> int:
    with _database(args) as engine, engine.begin() as conn:
        message = api.get_message(conn, args.id)
    if message is None:
        raise NotFound(f"no outbox message with id {args.id}")
    if args.json:
        _print_json(out.message_json(message))
    else:
        print("\n".join(out.message_lines(message)))
    return 0


def cmd_replay(args: argparse.Namespace) -> int:
    bulk = args.all_failed
    if bulk and args.ids:
        raise InvalidInput("give message ids or --all-failed, not both")
    if not bulk and not args.ids:
        raise InvalidInput("give one or more message ids, or --all-failed")
    if not bulk and (args.tur is not None or args.since is not None or args.queue is not None):
        raise InvalidInput("--tur, --queue and --since only filter --all-failed")
    with _database(args) as engine, engine.begin() as conn:
        results = api.replay(
            conn,
            None if bulk else args.ids,
            force=args.force,
            kind=args.tur,
            failed_within_seconds=args.since,
            queue=args.queue,
        )
    replayed = [r for r in results if r.replayed]
    unknown = [r for r in results if r.state is None]
    refused = [r for r in results if not r.replayed and r.state is not None]
    if args.json:
        _print_json(
            {
                "replayed": [r.id for r in replayed],
                "refused": [
                    {"id": r.id, "holat": r.state, "reason": out.replay_refusal(r)} for r in refused
                ],
                "unknown": [r.id for r in unknown],
            }
        )
    else:
        if bulk:
            print(f"replayed {len(replayed)} failed messages{_bulk_filter(args)}")
        else:
            for result in replayed:
                print(out.replayed_line(result, forced=args.force))
        for result in (*refused, *unknown):
            _complain(out.replay_refusal(result))
    if unknown:
        return NotFound.exit_code
    return Refused.exit_code if refused else 0


def _bulk_filter(args: argparse.Namespace) -> str:
    filters = []
    if args.tur is not None:
        filters.append(f"tur {args.tur}")
    if args.queue is not None:
        filters.append(f"navbat {args.queue}")
    if args.since is not None:
        filters.append(f"failed in the last {out.span(args.since)}")
    return f" ({', '.join(filters)})" if filters else ""


def cmd_status(args: argparse.Namespace) -> int:
    with _database(args) as engine, engine.begin() as conn:
        status = api.queue_status(conn, lease_seconds=args.lease, queue=args.queue)
    problems = []
    if status.lag_seconds > args.max_lag:
        late = _in_queues(status, lambda figures: figures.lag_seconds > args.max_lag)
        problems.append(
            f"lag {out.span(status.lag_seconds)}{late} is over --max-lag "
            f"{out.span(args.max_lag)} (is a relay running?)"
        )
    if status.stuck_claims:
        stuck = _in_queues(status, lambda figures: figures.stuck_claims > 0)
        problems.append(
            f"{status.stuck_claims} claims{stuck} are older than the {out.span(args.lease)} lease "
            "or have no claim time (a relay died or hangs, or a row was claimed by hand; "
            "a running relay reaps them within a minute, or run `outbox reap`)"
        )
    if status.never_due:
        problems.append(
            f"{status.never_due} pending rows are due at infinity and will never be sent "
            "(`outbox list --holat kutmoqda`; set their keyingi_urinish, or cancel them)"
        )
    if args.max_failed is not None and status.counts["xato"] > args.max_failed:
        problems.append(
            f"{status.counts['xato']} failed messages, more than --max-failed {args.max_failed} "
            "(`outbox list --holat xato`)"
        )
    if args.json:
        _print_json(
            {
                "holat": status.counts,
                "lag_seconds": status.lag_seconds,
                "stuck": status.stuck,
                "stuck_claims": status.stuck_claims,
                "never_due": status.never_due,
                "markers": status.markers,
                "estimated": list(status.estimated),
                "failed": status.counts["xato"],
                "healthy": not problems,
                "problems": problems,
                "queues": out.queues_json(status.queues),
            }
        )
    else:
        print("\n".join(out.status_lines(status, lease=args.lease, max_lag=args.max_lag)))
    if problems:
        raise Unhealthy("unhealthy: " + "; ".join(problems))
    return 0


def _in_queues(status: queries.QueueStatus, matches: Callable[[queries.QueueFigures], bool]) -> str:
    """Which queues a problem is in (" in queue bot2"), when the status covers several: each
    bot's relays serve their own queues, so that is where to look."""
    if len(status.queues) < 2:
        return ""
    names = [name for name, figures in status.queues.items() if matches(figures)]
    if not names:
        return ""
    return f" in queue{'s' if len(names) > 1 else ''} {', '.join(names)}"


def _maintenance(args: argparse.Namespace, work: Callable[[AsyncConn], Awaitable[T]]) -> T:
    """Run one of the relay's own maintenance steps (the same code, the same SQL) once."""
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


def _reaper(args: argparse.Namespace) -> Reaper:
    from outbox.relay.maintenance import Reaper  # noqa: PLC0415 - the relay's imports are heavy

    return Reaper(schema=current_schema(), lease_seconds=args.lease, max_attempts=args.max_attempts)


def _retention(args: argparse.Namespace) -> Retention:
    from outbox.relay.maintenance import Retention  # noqa: PLC0415

    return Retention(
        schema=current_schema(),
        done_older_than=args.older_than,
        markers_older_than=args.markers_older_than,
        batch_size=args.batch_size,
    )


def cmd_reap(args: argparse.Namespace) -> int:
    reaped = _maintenance(
        args,
        lambda conn: _reaper(args).run_once(conn),
    )
    if args.json:
        _print_json(out.reaped_json(reaped))
    else:
        print(f"reaped: {out.reaped_text(reaped)}")
    return 0


def cmd_prune(args: argparse.Namespace) -> int:
    if args.markers_older_than < args.older_than:
        raise InvalidInput(
            f"--markers-older-than ({out.span(args.markers_older_than)}) must not be "
            f"shorter than --older-than ({out.span(args.older_than)}): a marker is what "
            "stops a key enqueued again from being sent twice"
        )
    removed = _maintenance(args, lambda conn: _prune(conn, args))
    done, markers = removed.done_rows, removed.markers
    with _database(args) as engine, engine.begin() as conn:
        failed = queries.count_failed(conn, schema=current_schema())
    if args.json:
        _print_json({**out.pruned_json(removed), "xato_kept": failed})
        return 0
    print(
        f"pruned {done} bajarildi rows older than {out.span(args.older_than)} and "
        f"{markers} sent markers older than {out.span(args.markers_older_than)}"
    )
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


# --- the parsers ---------------------------------------------------------------------------------


def add_commands(
    command: Callable[..., Any],
    add_database: Callable[[Any], None],
    add_json: Callable[[Any], None],
) -> None:
    """Register the operator subcommands on the ``outbox`` parser."""

    def operator_command(name: str, handler: Callable[..., int], help: str) -> Any:
        parser = command(name, handler, help)
        add_database(parser)
        add_json(parser)
        return parser

    listing = operator_command("list", cmd_list, "messages, newest first")
    _option(
        listing,
        "--holat",
        env="OUTBOX_LIST_HOLAT",
        default=None,
        convert=state_name,
        help="only this state: kutmoqda, bajarilmoqda, bajarildi or xato",
        metavar="STATE",
    )
    _option(
        listing,
        "--tur",
        env="OUTBOX_LIST_TUR",
        default=None,
        help="only this kind, e.g. eslatma",
        metavar="KIND",
    )
    _option(
        listing,
        "--limit",
        env="OUTBOX_LIST_LIMIT",
        default=DEFAULT_LIST_LIMIT,
        convert=positive_count,
        help=f"at most this many rows (default {DEFAULT_LIST_LIMIT})",
        metavar="N",
    )

    _add_queue(listing, "only this queue (bot)")

    show = operator_command("show", cmd_show, "one message in full, with its sent marker")
    show.add_argument("id", type=message_id, help="the message id")

    replay = operator_command(
        "replay", cmd_replay, "send failed (xato) messages again: back to kutmoqda"
    )
    replay.add_argument("ids", nargs="*", type=message_id, metavar="ID", help="message ids")
    # No environment twins for these two on purpose: a forgotten variable must never make a
    # later replay resend sent messages or act on every failure.
    replay.add_argument(
        "--force",
        action="store_true",
        help="replay even if the key was already sent: it is sent again",
    )
    replay.add_argument("--all-failed", action="store_true", help="replay every xato message")
    _option(
        replay,
        "--tur",
        env="OUTBOX_REPLAY_TUR",
        default=None,
        help="with --all-failed: only this kind",
        metavar="KIND",
    )
    _option(
        replay,
        "--since",
        env="OUTBOX_REPLAY_SINCE",
        default=None,
        convert=seconds,
        help="with --all-failed: only rows that failed within this long, e.g. 1h",
        metavar="DURATION",
    )

    _add_queue(replay, "with --all-failed: only this queue (bot)")

    status = operator_command("status", cmd_status, "health: rows per state, lag, stuck claims")
    _add_lease(status)
    _add_queue(status, "only this queue (bot)")
    _option(
        status,
        "--max-lag",
        env="OUTBOX_MAX_LAG",
        default=DEFAULT_MAX_LAG,
        convert=seconds,
        help=f"exit 8 when the oldest due row is older (default {out.span(DEFAULT_MAX_LAG)})",
        metavar="DURATION",
    )
    _option(
        status,
        "--max-failed",
        env="OUTBOX_MAX_FAILED",
        default=None,
        convert=positive_count,
        help="exit 8 when more rows than this are in xato (default: no limit)",
        metavar="N",
    )

    reap = operator_command("reap", cmd_reap, "return expired claims to the queue, once")
    _add_lease(reap)
    _option(
        reap,
        "--max-attempts",
        env="OUTBOX_MAX_ATTEMPTS",
        default=DEFAULT_MAX_ATTEMPTS,
        convert=positive_count,
        help=f"expired claims with this many attempts go to xato (default {DEFAULT_MAX_ATTEMPTS})",
        metavar="N",
    )

    prune = operator_command("prune", cmd_prune, "delete old bajarildi rows and sent markers")
    _option(
        prune,
        "--older-than",
        env="OUTBOX_RETENTION",
        default=DEFAULT_RETENTION,
        convert=seconds,
        help=f"delete bajarildi rows unchanged this long (default {out.span(DEFAULT_RETENTION)})",
        metavar="DURATION",
    )
    _option(
        prune,
        "--markers-older-than",
        env="OUTBOX_MARKER_RETENTION",
        default=DEFAULT_MARKER_RETENTION,
        convert=seconds,
        help=f"delete sent markers older than this (default {out.span(DEFAULT_MARKER_RETENTION)}) "
        "unless their row can still be sent",
        metavar="DURATION",
    )
    _option(
        prune,
        "--batch-size",
        env="OUTBOX_PRUNE_BATCH_SIZE",
        default=DEFAULT_PRUNE_BATCH,
        convert=positive_count,
        help=f"rows deleted per transaction (default {DEFAULT_PRUNE_BATCH})",
        metavar="N",
    )


def _add_queue(parser: Any, help: str) -> None:
    # No environment twin: OUTBOX_QUEUES is the relay's, and a status filtered by a variable
    # left set would hide the other queues' trouble.
    parser.add_argument("--queue", type=queue_name, default=None, help=help, metavar="QUEUE")


def queue_name(raw: str) -> str:
    try:
        return validate_queue(raw.strip())
    except ConfigError as err:
        raise argparse.ArgumentTypeError(str(err)) from None


def _add_lease(parser: Any) -> None:
    _option(
        parser,
        "--lease",
        env="OUTBOX_LEASE",
        default=DEFAULT_LEASE,
        convert=seconds,
        help=f"a claim older than this is expired (default {out.span(DEFAULT_LEASE)})",
        metavar="DURATION",
    )
