"""The ``reminders`` command: parse, call the service in one transaction, print.

Every command runs in one transaction, so a mistake found halfway changes nothing.
"""

from __future__ import annotations

import argparse
import json
import logging
import os
import re
import sys
from collections.abc import Callable, Sequence
from datetime import datetime, timedelta
from typing import Any, NoReturn
from zoneinfo import ZoneInfo

import sqlalchemy as sa
from sqlalchemy.orm import Session

from outbox.db import connect_errors, create_engine, redact_url, resolve_url
from outbox.errors import OutboxError
from outbox.redact import redact
from outbox.version import package_version
from reminders import service
from reminders.models import DEFAULT_TIME_ZONE, Task, User
from reminders.parsing import (
    format_duration,
    parse_chat_id,
    parse_due,
    parse_durations,
    parse_id,
)

__all__ = ["build_parser", "main"]

PROG = "reminders"
# Environment twins of the flags.
ENV_DATABASE_URL = "OUTBOX_DATABASE_URL"
ENV_USER = "REMINDERS_USER"
ENV_TIME_ZONE = "REMINDERS_TZ"
ENV_REMIND_BEFORE = "REMINDERS_REMIND_BEFORE"
ENV_POLL_TIMEOUT = "REMINDERS_POLL_TIMEOUT"
ENV_WEBHOOK_URL = "REMINDERS_WEBHOOK_URL"
ENV_WEBHOOK_LISTEN = "REMINDERS_WEBHOOK_LISTEN"
ENV_WEBHOOK_PORT = "REMINDERS_WEBHOOK_PORT"
ENV_WEBHOOK_SECRET = "REMINDERS_WEBHOOK_SECRET"  # noqa: S105 - a name; the secret: env only
ENV_LOG_LEVEL = "REMINDERS_LOG_LEVEL"
_SECRET = re.compile(r"[A-Za-z0-9_-]{1,256}")  # what Telegram accepts as a webhook secret

Handler = Callable[[Session, argparse.Namespace], None]
_URL_HELP = (
    "PostgreSQL URL, or 'embedded' for the development server in ./.outbox; with a password, "
    "prefer the variable: argv is visible in ps"
)


class UsageError(Exception):
    """Command-line syntax that argparse rejected."""


class _Parser(argparse.ArgumentParser):
    # One line instead of argparse's usage block: the error is what the person needs to see.
    def error(self, message: str) -> NoReturn:
        # argparse quotes what it could not place, a database URL with its password included.
        raise UsageError(f"{self.prog}: {redact(message)} (see {self.prog} --help)")


def _plural(count: int, noun: str) -> str:
    return f"{count} {noun}" if count == 1 else f"{count} {noun}s"


def _local_time(moment: datetime, time_zone: str) -> str:
    return f"{moment.astimezone(ZoneInfo(time_zone)):%Y-%m-%d %H:%M %Z}"


def _remind_before(args: argparse.Namespace) -> list[timedelta] | None:
    """The offsets from the flags, else from the environment, else None (the default)."""
    texts = args.remind_before or (
        [os.environ[ENV_REMIND_BEFORE]] if os.environ.get(ENV_REMIND_BEFORE) else []
    )
    return parse_durations(texts) if texts else None


def _say_overdue(task: Task) -> None:
    print(
        f"{PROG}: task {task.id} is overdue (it was due "
        f"{_local_time(task.due, task.user.time_zone)}): no reminder will be sent",
        file=sys.stderr,
    )


# --- commands ----------------------------------------------------------------------------------


def _user_add(session: Session, args: argparse.Namespace) -> None:
    user = service.create_user(
        session, name=args.name, chat_id=parse_chat_id(args.chat_id), tz=args.tz
    )
    print(user.id)


def _add(session: Session, args: argparse.Namespace) -> None:
    offsets = _remind_before(args)
    user = service.get_user(session, parse_id("user", args.user))
    due = parse_due(args.due, user.time_zone)
    created = service.create_task(
        session,
        user_id=user.id,
        title=args.title,
        due=due,
        remind_before=service.DEFAULT_REMIND_BEFORE if offsets is None else offsets,
    )
    print(created.task.id)
    if created.overdue:
        _say_overdue(created.task)


def _announce(session: Session, args: argparse.Namespace) -> None:
    added = service.announce(session, args.text, batch=args.batch)
    print(
        f"{_plural(added, 'announcement')} enqueued in batch {args.batch} "
        "(each waits for its user's quiet hours; progress: outbox batch NAME)"
    )


def _done(session: Session, args: argparse.Namespace) -> None:
    changed = service.complete_task(session, parse_id("task", args.id))
    print(
        f"task {changed.task.id} is done; {_plural(changed.cancelled, 'unsent reminder')} withdrawn"
    )


def _delete(session: Session, args: argparse.Namespace) -> None:
    task_id = parse_id("task", args.id)
    cancelled = service.delete_task(session, task_id)
    print(f"task {task_id} deleted; {_plural(cancelled, 'unsent reminder')} withdrawn")


def _reschedule(session: Session, args: argparse.Namespace) -> None:
    offsets = _remind_before(args)
    task = service.get_task(session, parse_id("task", args.id))
    due = parse_due(args.due, task.user.time_zone)
    changed = service.reschedule_task(session, task.id, due, remind_before=offsets)
    print(
        f"task {task.id} is now due {_local_time(task.due, task.user.time_zone)}; "
        f"{_plural(len(changed.reminders), 'reminder')} scheduled, "
        f"{_plural(changed.cancelled, 'unsent reminder')} withdrawn"
    )
    if changed.overdue:
        _say_overdue(changed.task)


def _rename(session: Session, args: argparse.Namespace) -> None:
    changed = service.rename_task(session, parse_id("task", args.id), args.title)
    print(f"task {changed.task.id} renamed; {_plural(changed.updated, 'unsent reminder')} updated")


def _user_as_json(user: User) -> dict[str, Any]:
    return {
        "id": user.id,
        "name": user.name,
        "chat_id": user.chat_id,
        "time_zone": user.time_zone,
        "active": user.active,
    }


def _user_list(session: Session, args: argparse.Namespace) -> None:
    users = service.list_users(session)
    if args.json:
        print(json.dumps([_user_as_json(u) for u in users], ensure_ascii=False, indent=2))
        return
    if not users:
        print("no users (add one: reminders user add --name NAME --chat-id ID)")
        return
    rows = [("ID", "CHAT", "TIME ZONE", "ACTIVE", "NAME")]
    rows += [
        (str(u.id), str(u.chat_id), u.time_zone, "yes" if u.active else "no", _one_line(u.name))
        for u in users
    ]
    _print_table(rows)


def _print_table(rows: Sequence[Sequence[str]]) -> None:
    widths = [max(len(row[i]) for row in rows) for i in range(len(rows[0]))]
    for row in rows:
        print(
            "  ".join(cell.ljust(width) for cell, width in zip(row, widths, strict=True)).rstrip()
        )


def _task_as_json(task: Task) -> dict[str, Any]:
    return {
        "id": task.id,
        "user_id": task.user_id,
        "title": task.title,
        "due": task.due.astimezone(ZoneInfo(task.user.time_zone)).isoformat(),
        "time_zone": task.user.time_zone,
        "remind_before_seconds": list(task.remind_before_seconds),
        "done": task.done,
    }


def _one_line(text: str, width: int = 60) -> str:
    flat = " ".join(text.split())
    return flat if len(flat) <= width else flat[: width - 1] + "…"


def _list(session: Session, args: argparse.Namespace) -> None:
    user_id = None if args.user is None else parse_id("user", args.user)
    tasks = service.list_tasks(session, user_id)
    if args.json:
        print(json.dumps([_task_as_json(t) for t in tasks], ensure_ascii=False, indent=2))
        return
    if not tasks:
        print("no tasks")
        return
    rows = [("ID", "USER", "DUE", "REMIND", "DONE", "TITLE")]
    rows += [
        (
            str(t.id),
            str(t.user_id),
            _local_time(t.due, t.user.time_zone),
            ",".join(format_duration(s) for s in t.remind_before_seconds),
            "yes" if t.done else "no",
            _one_line(t.title),
        )
        for t in tasks
    ]
    _print_table(rows)


# --- the parser --------------------------------------------------------------------------------


def _env_flag(
    parser: argparse.ArgumentParser,
    flag: str,
    env: str,
    *,
    help_text: str,
    default: str | None = None,
    required: bool = False,
    metavar: str | None = None,
) -> None:
    """A flag whose default comes from the environment; required only if the variable is unset."""
    value = os.environ.get(env) or default
    shown = f"default {default}; " if default is not None else ""
    parser.add_argument(
        flag,
        default=value,
        required=required and value is None,
        metavar=metavar,
        help=f"{help_text} ({shown}env {env})",
    )


def _user_commands(commands: Any, common: argparse.ArgumentParser) -> None:
    """``reminders user add`` and ``reminders user list``."""
    user = commands.add_parser("user", help="manage users")
    user_commands = user.add_subparsers(dest="user_command", required=True, metavar="COMMAND")
    user_add = user_commands.add_parser("add", parents=[common], help="add a user; prints the id")
    user_add.add_argument("--name", required=True, help="the user's name")
    user_add.add_argument("--chat-id", required=True, help="the Telegram chat id (a number)")
    _env_flag(
        user_add, "--tz", ENV_TIME_ZONE, default=DEFAULT_TIME_ZONE, help_text="IANA time zone"
    )
    user_add.set_defaults(handler=_user_add)
    user_list = user_commands.add_parser("list", parents=[common], help="list the users")
    user_list.add_argument("--json", action="store_true", help="print JSON instead of a table")
    user_list.set_defaults(handler=_user_list)


def build_parser() -> argparse.ArgumentParser:
    parser = _Parser(prog=PROG, description="Tasks with Telegram reminders (the vazifalar side).")
    parser.add_argument(
        "--version", action="version", version=f"{PROG} {package_version()} (outbox-telegram)"
    )
    # Before the command (`reminders --database-url URL list`) or after it; the command's copy
    # only counts when given, so that its default does not overwrite the one given before.
    _env_flag(parser, "--database-url", ENV_DATABASE_URL, metavar="URL", help_text=_URL_HELP)
    common = _Parser(add_help=False)
    common.add_argument(
        "--database-url",
        default=argparse.SUPPRESS,
        metavar="URL",
        help=f"{_URL_HELP} (env {ENV_DATABASE_URL})",
    )
    commands = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")

    _user_commands(commands, common)

    due_help = "YYYY-MM-DD HH:MM in the user's time zone, or ISO 8601 with an offset"
    before_help = (
        "remind this long before the due time: 30m, 1h, 1d, 1h30m; repeatable "
        f"(default 1h; env {ENV_REMIND_BEFORE}, comma-separated)"
    )

    add = commands.add_parser("add", parents=[common], help="add a task; prints the id")
    add.add_argument("title", metavar="TITLE")
    _env_flag(add, "--user", ENV_USER, required=True, metavar="ID", help_text="the owner's user id")
    add.add_argument("--due", required=True, metavar="WHEN", help=due_help)
    add.add_argument("--remind-before", action="append", metavar="DURATION", help=before_help)
    add.set_defaults(handler=_add)

    done = commands.add_parser("done", parents=[common], help="complete a task")
    done.add_argument("id", metavar="ID")
    done.set_defaults(handler=_done)

    delete = commands.add_parser("delete", parents=[common], help="delete a task")
    delete.add_argument("id", metavar="ID")
    delete.set_defaults(handler=_delete)

    reschedule = commands.add_parser("reschedule", parents=[common], help="move a due time")
    reschedule.add_argument("id", metavar="ID")
    reschedule.add_argument("--due", required=True, metavar="WHEN", help=due_help)
    reschedule.add_argument(
        "--remind-before", action="append", metavar="DURATION", help=before_help
    )
    reschedule.set_defaults(handler=_reschedule)

    rename = commands.add_parser("rename", parents=[common], help="change a title")
    rename.add_argument("id", metavar="ID")
    rename.add_argument("title", metavar="TITLE")
    rename.set_defaults(handler=_rename)

    announce = commands.add_parser(
        "announce", parents=[common], help="send a text to every active user, as one batch"
    )
    announce.add_argument("text", metavar="TEXT")
    announce.add_argument(
        "--batch", required=True, metavar="NAME", help="the batch's name (outbox batch NAME)"
    )
    announce.set_defaults(handler=_announce)

    listing = commands.add_parser("list", parents=[common], help="list tasks by due time")
    _env_flag(listing, "--user", ENV_USER, metavar="ID", help_text="only this user's tasks")
    listing.add_argument("--json", action="store_true", help="print JSON instead of a table")
    listing.set_defaults(handler=_list)

    migrate = commands.add_parser(
        "migrate", parents=[common], help="create or upgrade the outbox's and the domain's tables"
    )
    migrate.set_defaults(handler=None, standalone=_migrate)
    bot = commands.add_parser(
        "bot",
        parents=[common],
        help="run the vazifalar Telegram bot (long polling, or a webhook with --webhook-url)",
        description=(
            "Run the vazifalar bot. The token comes from TELEGRAM_BOT_TOKEN or "
            "TELEGRAM_BOT_TOKEN_FILE, the Bot API from OUTBOX_TELEGRAM_API_URL, as for the relay; "
            "the replies go out through the outbox, so run `outbox relay` too. The webhook's "
            f"secret token is read from {ENV_WEBHOOK_SECRET} only."
        ),
    )
    _env_flag(
        bot,
        "--poll-timeout",
        ENV_POLL_TIMEOUT,
        default="10",
        metavar="SECONDS",
        help_text="long polling: how long one getUpdates waits for news",
    )
    _env_flag(
        bot,
        "--webhook-url",
        ENV_WEBHOOK_URL,
        metavar="URL",
        help_text="receive updates on this public HTTPS URL instead of polling",
    )
    _env_flag(
        bot,
        "--listen",
        ENV_WEBHOOK_LISTEN,
        default="0.0.0.0",  # noqa: S104 - the webhook server listens for Telegram
        metavar="ADDRESS",
        help_text="webhook mode: the address the local server binds",
    )
    _env_flag(
        bot,
        "--port",
        ENV_WEBHOOK_PORT,
        default="8443",
        metavar="PORT",
        help_text="webhook mode: the local server's port (TLS ends at your proxy)",
    )
    _env_flag(
        bot,
        "--log-level",
        ENV_LOG_LEVEL,
        default="INFO",
        metavar="LEVEL",
        help_text="DEBUG, INFO, WARNING or ERROR",
    )
    bot.set_defaults(handler=None, standalone=_bot)
    demo = commands.add_parser("demo", help="the whole story on the embedded defaults")
    demo.set_defaults(handler=None, standalone=_demo)
    return parser


def _migrate(args: argparse.Namespace) -> None:
    from reminders.migrate import migrate_all  # noqa: PLC0415 - Alembic only when migrating

    url = resolve_url(args.database_url)
    print(f"database {redact_url(url)}", file=sys.stderr)
    outbox, domain = migrate_all(url)
    print(outbox.describe("the outbox tables"))
    print(domain.describe("the vazifalar tables"))


def _number(flag: str, text: str, low: float, high: float) -> float:
    try:
        value = float(text)
    except ValueError:
        raise UsageError(f"{PROG} bot: {flag} must be a number, got {text!r}") from None
    if not low <= value <= high:
        raise UsageError(f"{PROG} bot: {flag} must be between {low:g} and {high:g}, got {text}")
    return value


def _bot(args: argparse.Namespace) -> None:
    from outbox.config import read_token, telegram_api_url  # noqa: PLC0415
    from outbox.redact import configure_logging  # noqa: PLC0415
    from reminders.bot import BotConfig, run_bot  # noqa: PLC0415 - the bot only when it runs
    from reminders.messages import snooze_choices  # noqa: PLC0415

    level = logging.getLevelName(str(args.log_level).upper())
    if not isinstance(level, int):
        raise UsageError(f"{PROG} bot: unknown --log-level {args.log_level!r}")
    webhook = args.webhook_url or None
    if webhook is not None and not webhook.startswith(("https://", "http://")):
        raise UsageError(f"{PROG} bot: --webhook-url must be an https:// URL, got {webhook!r}")
    secret = os.environ.get(ENV_WEBHOOK_SECRET) or None
    if webhook is not None and (secret is None or not _SECRET.fullmatch(secret)):
        # Without it anyone who finds the URL could post updates in a person's name.
        raise UsageError(
            f"{PROG} bot: webhook mode needs {ENV_WEBHOOK_SECRET}: 1-256 characters of "
            "A-Z, a-z, 0-9, _ and -"
        )
    snooze_choices()  # a bad REMINDERS_SNOOZE is refused now, not at the first reminder
    # The flags' values first: a typing mistake is the one line, whatever else is missing.
    poll_timeout = _number("--poll-timeout", args.poll_timeout, 0, 50)
    port = int(_number("--port", args.port, 1, 65535))
    config = BotConfig(
        database_url=resolve_url(args.database_url),
        token=read_token(),
        api_url=telegram_api_url(),
        poll_timeout=poll_timeout,
        webhook_url=webhook,
        webhook_listen=args.listen,
        webhook_port=port,
        webhook_secret=secret,
    )
    configure_logging(level)
    print(f"database {redact_url(config.database_url)}", file=sys.stderr)
    run_bot(config)


def _demo(_args: argparse.Namespace) -> None:
    from reminders.demo import run_demo  # noqa: PLC0415 - needs the demo extras

    run_demo()


def _run(args: argparse.Namespace) -> None:
    if args.handler is None:
        args.standalone(args)
        return
    handler: Handler = args.handler
    url = resolve_url(args.database_url)
    engine = create_engine(url)
    try:
        with connect_errors(url), Session(engine) as session, session.begin():
            handler(session, args)
    finally:
        engine.dispose()


def main(argv: Sequence[str] | None = None) -> int:
    """Run one command; return the exit code (0 ok, 2 bad input, 3-5 configuration/database)."""
    try:
        _run(build_parser().parse_args(argv))
    except UsageError as err:
        print(err, file=sys.stderr)
        return 2
    except OutboxError as err:
        print(f"{PROG}: {err}", file=sys.stderr)
        return err.exit_code
    except sa.exc.SQLAlchemyError as err:
        reason = str(getattr(err, "orig", None) or err).strip().splitlines()[0]
        print(f"{PROG}: database error: {reason}", file=sys.stderr)
        return 1
    except SystemExit as exit_:  # --help
        return exit_.code if isinstance(exit_.code, int) else 0
    except KeyboardInterrupt:
        return 130
    return 0


if __name__ == "__main__":
    sys.exit(main())
