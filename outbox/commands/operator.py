"""The operator's commands: list, show, replay and status. Safe while relays run.

Each parses, opens the database, calls one function of ``outbox.api`` and prints. Exit codes
(docs/cli.md lists them): 0 done; 2 invalid input or unknown id; 3 bad database URL; 4 database
unreachable; 5 schema missing; 7 replay refused for a row (the reason is printed); 8 ``status``
found a problem.
"""

from __future__ import annotations

import argparse
from collections.abc import Callable

from outbox import api, queries
from outbox import presentation as out
from outbox import presentation_pause as pause_view
from outbox.commands import pause
from outbox.commands.common import complain, open_database, print_json
from outbox.commands.options import (
    BIGINT_MAX,
    Commands,
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

__all__ = ["register"]

DEFAULT_LIST_LIMIT = 50
MAX_LIST_LIMIT = 1_000_000
DEFAULT_MAX_LAG = 300.0


def cmd_list(args: argparse.Namespace) -> int:
    with open_database(args) as engine, engine.begin() as conn:
        # One row more than shown tells whether there are more.
        found = api.list_messages(
            conn,
            state=args.holat,
            kind=args.tur,
            limit=args.limit + 1,
            queue=args.queue,
            priority=args.priority,
            bot=args.bot,
        )
    messages = found[: args.limit]
    if args.json:
        print_json([out.message_json(m) for m in messages])
    elif messages:
        print("\n".join(out.messages_table(messages)))
        if len(found) > args.limit:
            print(f"(the newest {args.limit} shown; more match: --limit N)")
    else:
        print("no outbox messages match")
    return 0


def cmd_show(args: argparse.Namespace) -> int:
    with open_database(args) as engine, engine.begin() as conn:
        message = api.get_message(conn, args.id)
    if message is None:
        raise NotFound(f"no outbox message with id {args.id}")
    if args.json:
        print_json(out.message_json(message))
    else:
        print("\n".join(out.message_lines(message)))
    return 0


def cmd_replay(args: argparse.Namespace) -> int:
    bulk = args.all_failed
    if bulk and args.ids:
        raise InvalidInput("give message ids or --all-failed, not both")
    if not bulk and not args.ids:
        raise InvalidInput("give one or more message ids, or --all-failed")
    filters = (args.tur, args.since, args.queue, args.bot, args.priority)
    if not bulk and any(f is not None for f in filters):
        raise InvalidInput("--tur, --queue, --bot, --priority and --since only filter --all-failed")
    with open_database(args) as engine, engine.begin() as conn:
        results = api.replay(
            conn,
            None if bulk else args.ids,
            force=args.force,
            kind=args.tur,
            failed_within_seconds=args.since,
            queue=args.queue,
            bot=args.bot,
            priority=args.priority,
        )
    replayed = [r for r in results if r.replayed]
    unknown = [r for r in results if r.state is None]
    refused = [r for r in results if not r.replayed and r.state is not None]
    if args.json:
        print_json(
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
            complain(out.replay_refusal(result))
    if unknown:
        return NotFound.exit_code
    return Refused.exit_code if refused else 0


def _bulk_filter(args: argparse.Namespace) -> str:
    filters = []
    if args.tur is not None:
        filters.append(f"tur {args.tur}")
    if args.queue is not None:
        filters.append(f"navbat {args.queue}")
    if args.bot is not None:
        filters.append(f"bot {args.bot}")
    if args.priority is not None:
        filters.append(f"ustuvorlik {args.priority}")
    if args.since is not None:
        filters.append(f"failed in the last {out.span(args.since)}")
    return f" ({', '.join(filters)})" if filters else ""


def cmd_status(args: argparse.Namespace) -> int:
    with open_database(args) as engine, engine.begin() as conn:
        status = api.queue_status(conn, lease_seconds=args.lease, queue=args.queue)
        unserved = api.unserved_queues(conn)
        bots = api.bot_status(conn, bot=args.bot)
        # A paused row waits on purpose: only the lag of rows no pause holds is a problem.
        paused, lags = pause.lag_outside_pauses(
            conn, status, max_lag=args.max_lag, queue=args.queue
        )
    # A paused queue has no relay at work on purpose: that is no warning either.
    paused_queues = {p.value for p in paused if p.scope is queries.Scope.QUEUE}
    unserved = {
        name: due
        for name, due in unserved.items()
        if name not in paused_queues and (args.queue is None or name == args.queue)
    }
    # A warning, not a problem: the lag says whether the wait has become one (--max-lag).
    warnings = [out.unserved_line(unserved)] if unserved else []
    # A bot's rows wait on purpose while it is paused; with no usable token they wait for good.
    stranded = [b for b in bots if b.pending and b.token is not queries.TokenState.SERVED]
    if stranded:
        warnings.append(out.unserved_bots_line(stranded))
    for warning in warnings:
        complain(f"warning: {warning}")
    problems = []
    lag = max(lags.values(), default=0.0)
    if lag > args.max_lag:
        late = _named(status, [name for name, one in lags.items() if one > args.max_lag])
        problems.append(
            f"lag {out.span(lag)}{late} is over --max-lag "
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
        print_json(
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
                "warnings": warnings,
                "unserved_queues": unserved,
                "queues": out.queues_json(status.queues),
                "lanes": out.lanes_json(status.lanes),
                "bots": [out.bot_json(b) for b in bots],
                "paused": [pause_view.pause_json(p) for p in paused],
            }
        )
    else:
        print("\n".join(out.status_lines(status, lease=args.lease, max_lag=args.max_lag)))
        if bots:
            print("\n".join(out.bots_lines(bots)))
        if paused:
            print("\n".join(pause_view.pauses_lines(paused)))
    if problems:
        raise Unhealthy("unhealthy: " + "; ".join(problems))
    return 0


def _in_queues(status: queries.QueueStatus, matches: Callable[[queries.QueueFigures], bool]) -> str:
    """Which queues a problem is in (" in queue bot2"), when the status covers several: each
    bot's relays serve their own queues, so that is where to look."""
    return _named(status, [name for name, figures in status.queues.items() if matches(figures)])


def _named(status: queries.QueueStatus, names: list[str]) -> str:
    if len(status.queues) < 2 or not names:
        return ""
    return f" in queue{'s' if len(names) > 1 else ''} {', '.join(names)}"


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
    listing.add(
        "--kind",
        "--tur",
        dest="tur",
        env="OUTBOX_LIST_TUR",
        default=None,
        help="only this kind, e.g. eslatma",
        metavar="KIND",
    )
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
    replay.add(
        "--kind",
        "--tur",
        dest="tur",
        env="OUTBOX_REPLAY_TUR",
        default=None,
        help="with --all-failed: only this kind",
        metavar="KIND",
    )
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
        help=f"exit 8 when the oldest due row is older (default {out.span(DEFAULT_MAX_LAG)})",
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
