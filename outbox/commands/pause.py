"""The operator's pauses and batches: ``outbox pause``, ``resume``, ``pauses`` and ``batch``.

Each parses, opens the database, calls ``outbox.ops`` and prints. A pause holds for every
relay from its commit on (their claims read it) and survives restarts; ``resume`` wakes them.
Exit codes as for the other operator commands: 0 done; 2 invalid input (or, for ``batch``, a
batch with no rows); 3-5 the database.
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Callable

from outbox import ops
from outbox.commands.common import answer, open_database, print_json, run_operation
from outbox.commands.options import Commands, Parser, queue_name
from outbox.errors import InvalidInput, NotFound
from outbox.ops.views import batch as batch_view
from outbox.ops.views import pause as view
from outbox.queries import Scope
from outbox.queries.pause import check_batch_name, check_name
from outbox.schema import current_schema

__all__ = ["register"]


def _on_scope(
    args: argparse.Namespace, act: Callable[..., bool]
) -> tuple[dict[str, str], str, bool]:
    """Pause or resume (``act``) the one scope the flags name: its JSON fields, its words
    (``queue mail``) and whether that changed anything."""
    chosen = [(scope, getattr(args, scope.option)) for scope in Scope]
    given = [(scope, value) for scope, value in chosen if value is not None]
    if len(given) != 1:
        raise InvalidInput("name one of --queue, --bot, --tur or --batch")
    scope, value = given[0]
    changed = run_operation(args, act, scope, value)
    return {"scope": scope.option, "value": value}, f"{scope.option} {value}", changed


def cmd_pause(args: argparse.Namespace) -> int:
    named, what, new = _on_scope(args, ops.pause)
    return answer(
        args,
        {**named, "paused": True, "already": not new},
        f"paused {what}: no relay claims its rows until `outbox resume --{what}`"
        if new
        else f"{what} was paused already",
    )


def cmd_resume(args: argparse.Namespace) -> int:
    if args.paid is not None:
        return _resume_paid(args)
    named, what, lifted = _on_scope(args, ops.resume)
    return answer(
        args,
        {**named, "resumed": lifted},
        f"resumed {what}: the relays claim its rows again" if lifted else f"{what} was not paused",
    )


def _resume_paid(args: argparse.Namespace) -> int:
    if any(getattr(args, scope.option) is not None for scope in Scope):
        raise InvalidInput("--paid resumes a bot's paid lane alone: leave out the other scopes")
    lifted = run_operation(args, ops.resume_paid_lane, args.paid)
    return answer(
        args,
        {"scope": "paid", "value": args.paid, "resumed": lifted},
        f"resumed the paid lane of bot {args.paid}: the relays send its paid rows again"
        if lifted
        else f"the paid lane of bot {args.paid} was not stopped",
    )


def cmd_pauses(args: argparse.Namespace) -> int:
    with open_database(args) as conn:
        found = ops.list_pauses(conn, schema=current_schema())
        stops = ops.paid_lane_stops(conn, schema=current_schema())
    return answer(
        args,
        [view.pause_json(p) for p in found] + [view.paid_stop_json(s) for s in stops],
        view.pauses_lines(found) + view.paid_stops_lines(stops)
        if found or stops
        else "nothing is paused",
    )


def cmd_batch(args: argparse.Namespace) -> int:
    name = check_batch_name(args.name)
    if args.csv and (args.json or args.cancel):
        raise InvalidInput("--csv writes the report alone: leave out --json and --cancel")
    if args.csv:
        return _batch_report(args, name)
    cancelled, progress = run_operation(args, ops.batch, name, cancel=args.cancel)
    if progress.total == 0:
        raise NotFound(f"no outbox rows in batch {name!r}")
    if args.json:
        document = batch_view.batch_json(progress)
        if cancelled is not None:
            document["cancelled_now"] = cancelled
        print_json(document)
        return 0
    if cancelled is not None:
        print(batch_view.cancelled_line(progress, cancelled))
    print("\n".join(batch_view.batch_lines(progress)))
    return 0


def _batch_report(args: argparse.Namespace, name: str) -> int:
    with open_database(args) as conn:
        _, progress = ops.batch(conn, name, schema=current_schema())
        if progress.total == 0:
            raise NotFound(f"no outbox rows in batch {name!r}")
        sys.stdout.write(batch_view.report_csv([], header=True))
        for page in ops.batch_report(conn, name, schema=current_schema()):
            sys.stdout.write(batch_view.report_csv(page))
    return 0


def _add_scope(parser: Parser, verb: str) -> None:
    # No environment twins: a variable left set must never pause (or resume) anything.
    parser.add_argument(
        "--queue", type=queue_name, default=None, metavar="QUEUE", help=f"{verb} a queue (navbat)"
    )
    parser.add_argument(
        "--bot",
        type=check_name,
        default=None,
        metavar="BOT_ID",
        help=f"{verb} every queue of a bot (its public id, the token's part before ':')",
    )
    parser.add_argument(
        "--tur", type=check_name, default=None, metavar="KIND", help=f"{verb} a kind of message"
    )
    parser.add_argument(
        "--batch", type=check_batch_name, default=None, metavar="NAME", help=f"{verb} a batch"
    )


def register(commands: Commands) -> None:
    pause = commands.add(
        "pause",
        cmd_pause,
        "stop every relay claiming a queue's, bot's, kind's or batch's rows (they stay kutmoqda)",
        json=True,
    )
    _add_scope(pause, "pause")
    resume = commands.add("resume", cmd_resume, "lift a pause: the rows are sent again", json=True)
    _add_scope(resume, "resume")
    resume.add_argument(
        "--paid",
        type=check_name,
        default=None,
        metavar="BOT_ID",
        help="start a bot's paid lane again, stopped when Telegram refused a paid broadcast "
        "(Stars balance, audience); it starts by itself after an hour",
    )
    commands.add("pauses", cmd_pauses, "what is paused, and since when", json=True)
    batch = commands.add(
        "batch",
        cmd_batch,
        "a batch's progress: total, sent, failed, waiting, paused, rate, expected end",
        json=True,
    )
    batch.add_argument("name", metavar="NAME", help="the batch (enqueue(..., batch=NAME))")
    # No environment twin, as for replay --all-failed.
    batch.add_argument(
        "--cancel",
        action="store_true",
        help="cancel every waiting row of the batch (xato 'cancelled by operator', replayable)",
    )
    batch.add_argument(
        "--csv",
        action="store_true",
        help="write a line per message still in the table, as CSV: "
        + ", ".join(batch_view.REPORT_COLUMNS),
    )
