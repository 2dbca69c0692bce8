"""The operator's commands: list, show, replay and status. Safe while relays run.

Each parses, opens the database, calls one operation of ``outbox.ops`` and prints. Exit codes
(docs/cli.md lists them): 0 done; 2 invalid input or unknown id; 3 bad database URL; 4 database
unreachable; 5 schema missing; 7 replay refused for a row (the reason is printed); 8 ``status``
found a problem.
"""

from __future__ import annotations

import argparse
from typing import Any

from outbox import ops
from outbox.commands.common import answer, answer_newest, complain, print_json, run_operation
from outbox.commands.options import (
    BIGINT_MAX,
    Commands,
    Parser,
    add_bot_filter,
    add_lease,
    add_priority_filter,
    add_queue_filter,
    duration,
    message_id,
    state_name,
    whole_number,
)
from outbox.errors import InvalidInput, NotFound, Refused, Unhealthy
from outbox.ops.views import bots as bots_view
from outbox.ops.views import message as view
from outbox.ops.views import pause as pause_view
from outbox.ops.views import status as status_view
from outbox.ops.views._text import span

__all__ = ["register"]

DEFAULT_LIST_LIMIT = 50
MAX_LIST_LIMIT = 1_000_000
DEFAULT_MAX_LAG = 300.0


def _row_filter(args: argparse.Namespace) -> dict[str, Any]:
    """The rows that --tur, --queue, --priority and --bot keep, as the operations take them."""
    return {"kind": args.tur, "queue": args.queue, "priority": args.priority, "bot": args.bot}


def cmd_list(args: argparse.Namespace) -> int:
    filters = {"state": args.holat, **_row_filter(args)}
    # One row more than shown tells whether there are more.
    found = run_operation(args, ops.list_messages, limit=args.limit + 1, **filters)
    return answer_newest(
        args,
        found,
        view.message_json,
        view.messages_table,
        more="more match",
        none="no outbox messages match",
    )


def cmd_show(args: argparse.Namespace) -> int:
    message = run_operation(args, ops.get_message, args.id)
    if message is None:
        raise NotFound(f"no outbox message with id {args.id}")
    return answer(args, view.message_json(message), view.message_lines(message))


def cmd_replay(args: argparse.Namespace) -> int:
    bulk = args.all_failed
    if bulk and args.ids:
        raise InvalidInput("give message ids or --all-failed, not both")
    if not bulk and not args.ids:
        raise InvalidInput("give one or more message ids, or --all-failed")
    filters = _row_filter(args)
    if not bulk and any(f is not None for f in (*filters.values(), args.since)):
        raise InvalidInput("--tur, --queue, --bot, --priority and --since only filter --all-failed")
    ids = None if bulk else args.ids
    results = run_operation(
        args, ops.replay, ids, force=args.force, failed_within_seconds=args.since, **filters
    )
    refused = [r for r in results if not r.replayed]
    if args.json:
        print_json(view.replay_json(results))
    else:
        if bulk:
            replayed = sum(r.replayed for r in results)
            print(f"replayed {replayed} failed messages{_bulk_filter(args)}")
        else:
            for result in results:
                if result.replayed:
                    print(view.replayed_line(result, forced=args.force))
        for result in sorted(refused, key=lambda r: r.state is None):
            complain(view.replay_refusal(result))
    if any(r.state is None for r in results):
        return NotFound.exit_code
    return Refused.exit_code if refused else 0


def _bulk_filter(args: argparse.Namespace) -> str:
    filters = [
        f"{name} {value}"
        for name, value in (
            ("tur", args.tur),
            ("navbat", args.queue),
            ("bot", args.bot),
            ("ustuvorlik", args.priority),
        )
        if value is not None
    ]
    if args.since is not None:
        filters.append(f"failed in the last {span(args.since)}")
    return f" ({', '.join(filters)})" if filters else ""


def cmd_status(args: argparse.Namespace) -> int:
    report = run_operation(
        args,
        ops.status,
        lease_seconds=args.lease,
        max_lag=args.max_lag,
        queue=args.queue,
        bot=args.bot,
    )
    warnings, problems = status_view.health(
        report, lease=args.lease, max_lag=args.max_lag, max_failed=args.max_failed
    )
    for warning in warnings:
        complain(f"warning: {warning}")
    if args.json:
        print_json(status_view.status_json(report, warnings, problems))
    else:
        print(
            "\n".join(
                status_view.status_lines(report.status, lease=args.lease, max_lag=args.max_lag)
            )
        )
        if report.bots:
            print("\n".join(bots_view.bots_lines(report.bots)))
        if report.paused or report.paid_stops:
            lines = pause_view.pauses_lines(report.paused)
            print("\n".join(lines + pause_view.paid_stops_lines(report.paid_stops)))
    if problems:
        raise Unhealthy("unhealthy: " + "; ".join(problems))
    return 0


def _add_kind_filter(parser: Parser, env: str, help: str) -> None:
    """--kind (the column's --tur too), with the command's own twin."""
    parser.add("--kind", "--tur", dest="tur", env=env, default=None, help=help, metavar="KIND")


def register(commands: Commands) -> None:
    listing = commands.add("list", cmd_list, "messages, newest first", json=True)
    listing.add(
        "--state",
        "--holat",
        dest="holat",
        env="OUTBOX_LIST_HOLAT",
        default=None,
        convert=state_name,
        help="only this state: kutmoqda, bajarilmoqda, bajarildi or xato",
        metavar="STATE",
    )
    _add_kind_filter(listing, "OUTBOX_LIST_TUR", "only this kind, e.g. eslatma")
    listing.add(
        "--limit",
        env="OUTBOX_LIST_LIMIT",
        default=DEFAULT_LIST_LIMIT,
        convert=whole_number(1, MAX_LIST_LIMIT),
        help=f"at most this many rows (default {DEFAULT_LIST_LIMIT}, at most {MAX_LIST_LIMIT:,})",
        metavar="N",
    )
    add_queue_filter(listing, "only this queue")
    add_bot_filter(listing, "only the rows this bot sends (its public id)")
    add_priority_filter(listing, "only rows of this priority (ustuvorlik, -10 to 10)")

    show = commands.add("show", cmd_show, "one message in full, with its sent marker", json=True)
    show.add_argument("id", type=message_id, help="the message id")

    replay = commands.add(
        "replay", cmd_replay, "send failed (xato) messages again: back to kutmoqda", json=True
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
    _add_kind_filter(replay, "OUTBOX_REPLAY_TUR", "with --all-failed: only this kind")
    replay.add(
        "--since",
        env="OUTBOX_REPLAY_SINCE",
        default=None,
        convert=duration(),
        help="with --all-failed: only rows that failed within this long, e.g. 1h",
        metavar="DURATION",
    )
    add_queue_filter(replay, "with --all-failed: only this queue")
    add_bot_filter(replay, "with --all-failed: only the rows of this bot (its public id)")
    add_priority_filter(replay, "with --all-failed: only the rows of this priority (-10 to 10)")

    status = commands.add(
        "status", cmd_status, "health: rows per state, lag, stuck claims", json=True
    )
    add_lease(status, "a claim older than this is expired")
    add_queue_filter(status, "only this queue")
    add_bot_filter(status, "only this bot in the table of bots (its public id)")
    status.add(
        "--max-lag",
        env="OUTBOX_MAX_LAG",
        default=DEFAULT_MAX_LAG,
        convert=duration(),
        help=f"exit 8 when the oldest due row is older (default {span(DEFAULT_MAX_LAG)})",
        metavar="DURATION",
    )
    status.add(
        "--max-failed",
        env="OUTBOX_MAX_FAILED",
        default=None,
        convert=whole_number(0, BIGINT_MAX),
        help="exit 8 when more rows than this are in xato (0: at the first; default: no limit)",
        metavar="N",
    )
