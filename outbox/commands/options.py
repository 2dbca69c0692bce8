"""The command line's argument machinery, once for every command.

A ``Parser`` whose flags have environment twins (``add``), and the converters every value goes
through, each with its range. A value out of range or unreadable is one line naming the flag
(or the variable) it came from: ``InvalidInput`` (exit 2), or ``ConfigError`` (exit 3) for the
relay's settings. argparse's own complaints are one line too, with any password redacted.
"""

from __future__ import annotations

import argparse
import math
import os
import re
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any, NoReturn, TypeVar

from outbox.api import MAX_PRIORITY, MIN_PRIORITY
from outbox.config import DEFAULT_LEASE, MAX_DURATION
from outbox.durations import format_duration, parse_duration
from outbox.errors import InvalidInput, OutboxError
from outbox.redact import LOG_FORMATS, redact
from outbox.schema import DEFAULT_SCHEMA, checked_queue, validate_schema
from outbox.states import State

__all__ = [
    "BIGINT_MAX",
    "Commands",
    "Handler",
    "Parser",
    "add_bot_filter",
    "add_database",
    "add_lease",
    "add_log_format",
    "add_log_level",
    "add_queue_filter",
    "bot_id",
    "duration",
    "flag_bool",
    "log_format",
    "message_id",
    "number",
    "port",
    "priority",
    "queue_name",
    "queue_names",
    "resolve_env_defaults",
    "state_name",
    "tokens_dir",
    "whole_number",
]

T = TypeVar("T")
Handler = Callable[[argparse.Namespace], int]
Converter = Callable[[str], T]
BIGINT_MAX = 2**63 - 1  # ids and counts are PostgreSQL bigints
_INTEGER = re.compile(r"[+-]?[0-9]+")
_SHOWN = 40  # characters of a refused value echoed back


def _shown(raw: str) -> str:
    return repr(raw if len(raw) <= _SHOWN else raw[:_SHOWN] + "…")


# --- converters: text in, a value in range out, or InvalidInput with the reason -----------------


def whole_number(low: int, high: int = BIGINT_MAX) -> Converter[int]:
    def convert(raw: str) -> int:
        text = raw.strip()
        # Only ASCII digits: int() also reads "١٢".
        if not _INTEGER.fullmatch(text):
            raise InvalidInput(f"{_shown(raw)} is not a whole number")
        # Past 4,300 digits int() itself refuses; past 40 the number is out of range anyway.
        value = int(text) if len(text) <= 40 else (high + 1 if text[0] != "-" else low - 1)
        if value < low:
            raise InvalidInput(f"{_shown(raw)} must be at least {low}")
        if value > high:
            raise InvalidInput(f"{_shown(raw)} must be at most {high}")
        return value

    return convert


def number(low: float, high: float) -> Converter[float]:
    """A finite number between ``low`` and ``high`` (``nan`` and ``inf`` are refused)."""

    def convert(raw: str) -> float:
        try:
            value = float(raw)
        except ValueError:
            raise InvalidInput(f"{_shown(raw)} is not a number") from None
        if not math.isfinite(value):
            raise InvalidInput(f"{_shown(raw)} is not a finite number")
        if value < low:
            raise InvalidInput(
                f"{_shown(raw)} cannot be negative"
                if low == 0
                else f"{_shown(raw)} must be at least {low:g}"
            )
        if value > high:
            raise InvalidInput(f"{_shown(raw)} must be at most {high:g}")
        return value

    return convert


@dataclass(frozen=True, slots=True)
class _Duration:
    """Seconds from a duration as people type it; shown in ``--help`` the same way."""

    high: float
    positive: bool

    def __call__(self, raw: str) -> float:
        seconds = parse_duration(raw).total_seconds()
        if self.positive and seconds <= 0:
            raise InvalidInput(f"duration {_shown(raw)} must be longer than 0s")
        if seconds > self.high:
            raise InvalidInput(
                f"duration {_shown(raw)} is longer than {format_duration(self.high)}"
            )
        return seconds


def duration(high: float = MAX_DURATION, *, positive: bool = False) -> Converter[float]:
    """Seconds from a duration as people type it (``90``, ``5m``, ``1h30m``), at most ``high``."""
    return _Duration(high, positive)


def flag_bool(raw: str) -> bool:
    value = raw.strip().lower()
    if value in {"1", "true", "yes", "on"}:
        return True
    if value in {"0", "false", "no", "off"}:
        return False
    raise InvalidInput(f"{_shown(raw)} is not true or false")


port = whole_number(0, 65535)
priority = whole_number(MIN_PRIORITY, MAX_PRIORITY)  # ustuvorlik, as the table's check has it


def message_id(raw: str) -> int:
    text = raw.strip()
    if not _INTEGER.fullmatch(text) or len(text) > 40 or not 1 <= int(text) <= BIGINT_MAX:
        raise InvalidInput(f"{_shown(raw)} is not a message id: ids are whole numbers like 42")
    return int(text)


_STATE_ALIASES = {state.name.lower().replace("_", "-"): state.value for state in State}


def state_name(raw: str) -> str:
    """A state as the database spells it; the English names are accepted too."""
    text = raw.strip().lower().replace("_", "-")
    if text in {state.value for state in State}:
        return text
    if text in _STATE_ALIASES:
        return _STATE_ALIASES[text]
    raise InvalidInput(
        f"unknown state {_shown(raw)}: use one of kutmoqda (pending), bajarilmoqda "
        "(in progress), bajarildi (done), xato (failed)"
    )


def queue_name(raw: str) -> str:
    return checked_queue(raw.strip())


def direct_url(raw: str) -> str:
    """A PostgreSQL URL of a server itself (the relay's LISTEN connection): not 'embedded',
    which starts a server of its own."""
    from outbox.db import normalize_url  # noqa: PLC0415 - the database layer, on demand

    url = raw.strip()
    if not url.startswith(("postgresql://", "postgres://", "postgresql+")):
        raise InvalidInput("give a postgresql:// URL of the server the main URL's pooler uses")
    return normalize_url(url)


def tokens_dir(raw: str) -> Path:
    """A folder of bot token files that this process can list and read."""
    folder = Path(raw.strip()).expanduser()
    if not folder.is_dir():
        raise InvalidInput(f"{_shown(raw)} is not a folder")
    if not os.access(folder, os.R_OK | os.X_OK):
        raise InvalidInput(f"the folder {_shown(raw)} cannot be read by this user")
    return folder


def bot_id(raw: str) -> str:
    """A bot's public id (the digits before its token's colon), never the token."""
    value = raw.strip()
    if ":" in value:
        raise InvalidInput("give the bot's public id (the digits before the colon), not a token")
    if not (value.isascii() and value.isdigit() and 0 < len(value) <= 20) or int(value) == 0:
        raise InvalidInput(f"{_shown(raw)} is not a bot id (its digits, as 123456789)")
    return str(int(value))


def queue_names(raw: str) -> tuple[str, ...]:
    names = tuple(name.strip() for name in raw.split(",") if name.strip())
    if not names:
        raise InvalidInput("no queue named")
    return tuple(queue_name(name) for name in names)


def log_format(raw: str) -> str:
    value = raw.strip().lower()
    if value not in LOG_FORMATS:
        raise InvalidInput(f"{_shown(raw)} is not a log format: use text or json")
    return value


# --- the parser ----------------------------------------------------------------------------------


def _from(source: str, convert: Converter[Any], refusal: type[OutboxError]) -> Converter[Any]:
    """``convert`` whose complaint names where the value came from: the flag or the variable."""

    def checked(raw: str) -> Any:
        try:
            return convert(raw)
        except (OutboxError, ValueError) as err:
            # A bad value is the command's refusal; a configuration error (a schema name that
            # is not usable) stays one, whatever the command.
            kind = refusal if isinstance(err, InvalidInput | ValueError) else type(err)
            raise kind(f"{source}: {err}") from None

    return checked


@dataclass(frozen=True, slots=True)
class _FromEnv:
    """A default taken from an environment twin, converted only if its command runs.

    Converting at parser build time would let a bad variable meant for one command break
    every other command.
    """

    raw: str
    convert: Converter[Any]

    def resolve(self) -> Any:
        return self.convert(self.raw)


def _shown_default(default: Any, convert: Converter[Any]) -> str | None:
    """A flag's built-in default as ``--help`` shows it; None when there is none to show."""
    if default is None or default is argparse.SUPPRESS or isinstance(default, bool):
        return None
    if isinstance(convert, _Duration) and isinstance(default, int | float):
        # format_duration rounds to whole seconds: 0.3 would read "0s", which is refused.
        return format_duration(default) if default == round(default) else f"{default:g}s"
    if isinstance(default, float):
        return f"{default:g}"
    if isinstance(default, list | tuple):
        return ",".join(str(item) for item in default) or None
    return str(default) if str(default) else None


def resolve_env_defaults(args: argparse.Namespace) -> None:
    for name, value in vars(args).items():
        if isinstance(value, _FromEnv):
            setattr(args, name, value.resolve())


class Parser(argparse.ArgumentParser):
    """An argument parser whose mistakes are one line, never a usage block.

    ``refusal`` is what a bad value of this command's flags raises: ``ConfigError`` for the
    relay's settings (exit 3), ``InvalidInput`` (exit 2) for everything else.
    """

    def __init__(self, *args: Any, refusal: type[OutboxError] = InvalidInput, **kwargs: Any):
        super().__init__(*args, **kwargs)
        self.refusal = refusal

    def error(self, message: str) -> NoReturn:
        # argparse quotes what it could not place ("invalid choice: 'postgresql://app:...'").
        raise InvalidInput(f"{redact(message)} (see {self.prog} --help)")

    def add(
        self,
        *flags: str,
        env: str | None,
        default: Any,
        convert: Converter[Any] = str,
        env_convert: Converter[Any] | None = None,
        help: str,
        **kwargs: Any,
    ) -> None:
        """A flag, and its environment twin (``env``) that gives its default; ``env_convert``
        reads the twin where a variable shared with another command means more there."""
        kwargs["type"] = _from(flags[0], convert, self.refusal)
        shown = _shown_default(default, convert)
        if shown is not None and "default" not in help:
            help = f"{help} (default {shown})"
        if env is not None:
            raw = os.environ.get(env, "")
            if raw and default is not argparse.SUPPRESS:
                default = _FromEnv(raw, _from(env, env_convert or convert, self.refusal))
            help = f"{help} [env: {env}]"
        self.add_argument(*flags, default=default, help=help, **kwargs)

    def add_switch(self, flag: str, *, env: str, help: str) -> None:
        """A plain on/off switch with a twin: with an optional value, ``replay --json 1 2``
        would read the id 1 as "true"."""
        raw = os.environ.get(env, "")
        self.add_argument(
            flag,
            action="store_true",
            default=_FromEnv(raw, _from(env, flag_bool, self.refusal)) if raw else False,
            help=f"{help} [env: {env}]",
        )


def add_database(parser: Parser, *, after_command: bool) -> None:
    """--database-url and --schema, given before the command (``outbox --database-url U
    status``) or after it. The twins live on the main parser; a command's copies only count
    when given (argparse would otherwise let the command's default overwrite the main one's)."""
    default: Any = argparse.SUPPRESS if after_command else None
    parser.add(
        "--database-url",
        env="OUTBOX_DATABASE_URL",
        default=default,
        metavar="URL",
        help="PostgreSQL URL (required), or 'embedded' for the development server in "
        "./.outbox; with a password, prefer the variable: argv is visible in ps",
    )
    parser.add(
        "--schema",
        env="OUTBOX_SCHEMA",
        default=default,
        convert=validate_schema,
        help=f"the PostgreSQL schema of the outbox tables (default {DEFAULT_SCHEMA})",
    )


def add_log_level(parser: Parser, default: Any = argparse.SUPPRESS) -> None:
    """On the main parser and again on every command (``outbox status --log-level DEBUG``)."""
    parser.add(
        "--log-level",
        env="OUTBOX_LOG_LEVEL",
        default=default,
        convert=str.upper,
        help="DEBUG, INFO, WARNING or ERROR",
    )


def add_log_format(parser: Parser, default: Any = argparse.SUPPRESS) -> None:
    """On the main parser (``outbox --log-format json relay``) and again on each long-running
    command (``outbox relay --log-format json``); the command's copy only counts when given."""
    parser.add(
        "--log-format",
        env="OUTBOX_LOG_FORMAT",
        default=default,
        convert=log_format,
        help="text for people, json for a log system (one JSON object a line)",
    )


class Commands:
    """The ``outbox`` subcommands: each registers its parser here with its handler."""

    def __init__(self, parser: Parser) -> None:
        self._sub = parser.add_subparsers(dest="command", required=True, parser_class=Parser)

    def add(
        self,
        name: str,
        handler: Handler,
        help: str,
        *,
        database: bool = True,
        json: bool = False,
        refusal: type[OutboxError] = InvalidInput,
    ) -> Parser:
        parser: Parser = self._sub.add_parser(name, help=help, description=help, refusal=refusal)
        parser.set_defaults(handler=handler)
        # The main parser's options after the command too (``outbox status --log-level DEBUG``).
        add_log_level(parser)
        add_log_format(parser)
        if database:
            add_database(parser, after_command=True)
        else:
            # Not the main parser's twins either: a bad OUTBOX_SCHEMA is no business of this one.
            parser.set_defaults(database_url=None, schema=None)
        if json:
            parser.add_switch("--json", env="OUTBOX_JSON", help="print JSON instead of a table")
        return parser


def add_lease(parser: Parser, help: str) -> None:
    """--lease, one declaration for the relay (its claims' lifetime), the page and the operator
    commands (what counts as stuck or expired)."""
    parser.add(
        "--lease",
        env="OUTBOX_LEASE",
        default=DEFAULT_LEASE,
        convert=duration(),
        help=f"{help} (default {format_duration(DEFAULT_LEASE)})",
        metavar="DURATION",
    )


def add_bot_filter(parser: Parser, help: str) -> None:
    # No environment twin, as --queue: a filter left set in the environment hides the rest.
    parser.add("--bot", env=None, default=None, convert=bot_id, help=help, metavar="BOT_ID")


def add_priority_filter(parser: Parser, help: str) -> None:
    # No environment twin, as --queue: a filter left set in the environment hides the rest.
    parser.add("--priority", env=None, default=None, convert=priority, help=help, metavar="N")


def add_queue_filter(parser: Parser, help: str) -> None:
    # No environment twin: OUTBOX_QUEUES is the relay's, and a status filtered by a variable
    # left set would hide the other queues' trouble.
    parser.add("--queue", env=None, default=None, convert=queue_name, help=help, metavar="QUEUE")
