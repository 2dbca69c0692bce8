"""The ``outbox`` command: parses arguments, calls the package, prints the answer.

Every flag has an environment twin (shown in ``--help``). Mistakes a person can make end in
one line on stderr and a non-zero exit code (see the README), never a traceback.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import faulthandler
import io
import logging
import os
import signal
import sys
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from outbox import admin
from outbox.config import (
    DEFAULT_BATCH_SIZE,
    DEFAULT_CLAIM_AHEAD,
    DEFAULT_CONCURRENCY,
    DEFAULT_GRACE,
    DEFAULT_LEASE,
    DEFAULT_MARKER_RETENTION,
    DEFAULT_POLL_INTERVAL,
    DEFAULT_POLL_ONLY_INTERVAL,
    DEFAULT_RETENTION,
    DEFAULT_TELEGRAM_TIMEOUT,
    RelayConfig,
    read_token,
    telegram_api_url,
)
from outbox.db import redact_url, resolve_url
from outbox.durations import parse_duration
from outbox.errors import ConfigError, InvalidInput, OutboxError
from outbox.ratelimit import RateLimits
from outbox.redact import LOG_FORMATS, configure_logging, redact
from outbox.retry import RetryPolicy
from outbox.schema import (
    DEFAULT_QUEUE,
    DEFAULT_SCHEMA,
    configure,
    current_schema,
    validate_schema,
)

if TYPE_CHECKING:
    from outbox.relay import Relay

__all__ = ["main"]

Handler = Callable[[argparse.Namespace], int]
log = logging.getLogger("outbox")
_LIMITS = RateLimits()
_RETRY = RetryPolicy()


@dataclass(frozen=True, slots=True)
class _FromEnv:
    """A default taken from an environment twin, converted only if its command runs.

    Converting at parser build time would let a bad variable meant for one command break
    every other command.
    """

    name: str
    raw: str
    convert: Callable[[str], Any]

    def resolve(self) -> Any:
        try:
            return self.convert(self.raw)
        except (ValueError, argparse.ArgumentTypeError) as err:
            raise InvalidInput(f"{self.name}={self.raw!r} is not valid: {err}") from None


def _resolve_env_defaults(args: argparse.Namespace) -> None:
    for name, value in vars(args).items():
        if isinstance(value, _FromEnv):
            setattr(args, name, value.resolve())


def _flag_bool(raw: str) -> bool:
    value = raw.strip().lower()
    if value in {"1", "true", "yes", "on"}:
        return True
    if value in {"0", "false", "no", "off"}:
        return False
    raise ValueError("expected true or false")


def _seconds(raw: str) -> float:
    try:
        return parse_duration(raw).total_seconds()
    except InvalidInput as err:
        raise argparse.ArgumentTypeError(str(err)) from None


def _whole_number(minimum: int) -> Callable[[str], int]:
    def convert(raw: str) -> int:
        try:
            value = int(raw)
        except ValueError:
            raise argparse.ArgumentTypeError(f"{raw!r} is not a whole number") from None
        if value < minimum:
            raise argparse.ArgumentTypeError(f"{raw!r} must be at least {minimum}")
        return value

    return convert


_positive_int = _whole_number(1)
_non_negative_int = _whole_number(0)


def _port(raw: str) -> int:
    value = _non_negative_int(raw)
    if value > 65535:
        raise argparse.ArgumentTypeError(f"{raw!r} is not a port (0-65535)")
    return value


def _non_negative_float(raw: str) -> float:
    try:
        value = float(raw)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{raw!r} is not a number") from None
    if value < 0:
        raise argparse.ArgumentTypeError(f"{raw!r} cannot be negative")
    return value


def _queue_names(raw: str) -> tuple[str, ...]:
    names = tuple(name.strip() for name in raw.split(",") if name.strip())
    if not names:
        raise argparse.ArgumentTypeError("no queue named")
    return tuple(admin.queue_name(name) for name in names)


class _QueuesAction(argparse.Action):
    """--queue a --queue b,c: every name given; flags given replace the environment twin."""

    def __call__(
        self,
        parser: argparse.ArgumentParser,
        namespace: argparse.Namespace,
        values: Any,
        option_string: str | None = None,
    ) -> None:
        current = getattr(namespace, self.dest)
        names = list(current) if isinstance(current, list) else []
        setattr(namespace, self.dest, [*names, *values])


class _Parser(argparse.ArgumentParser):
    def add(
        self,
        *flags: str,
        env: str,
        default: Any,
        convert: Callable[[str], Any] = str,
        help: str,
        **kwargs: Any,
    ) -> None:
        """A flag whose default comes from its environment twin."""
        kwargs.setdefault("type", convert)
        raw = os.environ.get(env, "")
        if raw:
            default = _FromEnv(env, raw, convert)
        self.add_argument(*flags, default=default, help=f"{help} [env: {env}]", **kwargs)


def _add_database(parser: _Parser) -> None:
    parser.add(
        "--database-url",
        env="OUTBOX_DATABASE_URL",
        default=None,
        help="PostgreSQL URL (required), or 'embedded' for the development server in ./.outbox",
    )
    parser.add(
        "--schema",
        env="OUTBOX_SCHEMA",
        default=None,
        convert=validate_schema,
        help=f"the PostgreSQL schema of the outbox tables (default {DEFAULT_SCHEMA})",
    )


def _database_url(args: argparse.Namespace) -> str:
    """The command's database, named in the log (password redacted) before anything runs."""
    url = resolve_url(args.database_url)
    log.info("database %s, schema %s", redact_url(url), current_schema())
    return url


def _add_json(parser: _Parser) -> None:
    # A plain switch: with an optional value, `replay --json 1 2` would read the id 1 as "true".
    raw = os.environ.get("OUTBOX_JSON", "")
    parser.add_argument(
        "--json",
        action="store_true",
        default=_FromEnv("OUTBOX_JSON", raw, _flag_bool) if raw else False,
        help="print JSON instead of a table [env: OUTBOX_JSON]",
    )


def _relay_flags(parser: _Parser) -> None:
    mode = parser.add_mutually_exclusive_group()
    mode.add_argument("--once", action="store_true", help="claim and send one batch, then exit")
    mode.add_argument("--drain", action="store_true", help="exit once nothing is due")
    parser.add(
        "--concurrency",
        env="OUTBOX_CONCURRENCY",
        default=DEFAULT_CONCURRENCY,
        convert=_positive_int,
        help="sends in flight at once",
    )
    parser.add(
        "--batch-size",
        env="OUTBOX_BATCH_SIZE",
        default=DEFAULT_BATCH_SIZE,
        convert=_positive_int,
        help="rows claimed per round trip at most",
    )
    parser.add(
        "--claim-ahead",
        env="OUTBOX_CLAIM_AHEAD",
        default=DEFAULT_CLAIM_AHEAD,
        convert=_non_negative_int,
        help="rows claimed beyond the free send slots at most, so a freed slot starts at once",
    )
    parser.add(
        "--poll-only",
        env="OUTBOX_POLL_ONLY",
        default=False,
        convert=_flag_bool,
        nargs="?",
        const=True,
        help="no LISTEN/NOTIFY (PgBouncer transaction pooling)",
    )
    parser.add(
        "--poll-interval",
        env="OUTBOX_POLL_INTERVAL",
        default=None,
        convert=_seconds,
        help="look for due rows at least this often (default 30s, 1s with --poll-only)",
    )
    parser.add(
        "--queue",
        env="OUTBOX_QUEUES",
        default=None,
        convert=_queue_names,
        action=_QueuesAction,
        dest="queues",
        help="the queues this relay serves, all of its bot (the token): they share the bot's "
        "limits and flood pause; repeat or separate with commas (default: default)",
    )
    parser.add(
        "--slot-horizon",
        env="OUTBOX_SLOT_HORIZON",
        default=1.0,
        convert=_seconds,
        help="how far ahead a claim reserves the bot's send slots for its relays",
    )
    parser.add(
        "--rate-limit",
        env="OUTBOX_RATE_LIMIT",
        default=_LIMITS.per_bot,
        convert=_non_negative_float,
        help="messages/s per bot, for all its relays together; 0 switches it off",
    )
    parser.add(
        "--chat-rate-limit",
        env="OUTBOX_CHAT_RATE_LIMIT",
        default=_LIMITS.per_chat,
        convert=_non_negative_float,
        help="messages/s per private chat; 0: off",
    )
    parser.add(
        "--group-rate-limit",
        env="OUTBOX_GROUP_RATE_LIMIT",
        default=_LIMITS.per_group_per_minute,
        convert=_non_negative_float,
        help="messages/min per group; 0: off",
    )
    parser.add(
        "--max-attempts",
        env="OUTBOX_MAX_ATTEMPTS",
        default=_RETRY.max_attempts,
        convert=_positive_int,
        help="attempts before a row goes to xato",
    )
    parser.add(
        "--backoff-base",
        env="OUTBOX_BACKOFF_BASE",
        default=_RETRY.base_seconds,
        convert=_seconds,
        help="first retry delay; doubles each attempt",
    )
    parser.add(
        "--lease",
        env="OUTBOX_LEASE",
        default=DEFAULT_LEASE,
        convert=_seconds,
        help="a claim older than this is reaped",
    )
    parser.add(
        "--grace",
        env="OUTBOX_GRACE",
        default=DEFAULT_GRACE,
        convert=_seconds,
        help="on SIGTERM, how long in-flight sends may finish (a second SIGTERM: at once)",
    )
    parser.add(
        "--telegram-timeout",
        env="OUTBOX_TELEGRAM_TIMEOUT",
        default=DEFAULT_TELEGRAM_TIMEOUT,
        convert=_seconds,
        help="how long to wait for the Bot API's answer (no answer: maybe delivered, retried)",
    )
    parser.add(
        "--retention",
        env="OUTBOX_RETENTION",
        default=DEFAULT_RETENTION,
        convert=_seconds,
        help="delete bajarildi rows older than this (0: keep them)",
    )
    parser.add(
        "--marker-retention",
        env="OUTBOX_MARKER_RETENTION",
        default=DEFAULT_MARKER_RETENTION,
        convert=_seconds,
        help="delete sent markers older than this",
    )
    parser.add(
        "--metrics-port",
        env="OUTBOX_METRICS_PORT",
        default=0,
        convert=_port,
        help="serve Prometheus metrics on this port (0: no metrics)",
    )
    parser.add(
        "--metrics-host",
        env="OUTBOX_METRICS_HOST",
        default="127.0.0.1",
        convert=str,
        help="address the metrics endpoint listens on (0.0.0.0: every interface)",
    )


def _relay_config(args: argparse.Namespace, url: str) -> RelayConfig:
    if args.poll_interval is not None:
        poll_interval = args.poll_interval
    else:
        poll_interval = DEFAULT_POLL_ONLY_INTERVAL if args.poll_only else DEFAULT_POLL_INTERVAL
    return RelayConfig(
        database_url=url,
        concurrency=args.concurrency,
        batch_size=args.batch_size,
        claim_ahead=args.claim_ahead,
        poll_only=args.poll_only,
        poll_interval=poll_interval,
        lease_seconds=args.lease,
        grace_seconds=args.grace,
        telegram_timeout=args.telegram_timeout,
        retention_seconds=args.retention,
        marker_retention_seconds=args.marker_retention,
        retry=RetryPolicy(max_attempts=args.max_attempts, base_seconds=args.backoff_base),
        queues=tuple(args.queues or (DEFAULT_QUEUE,)),
        slot_horizon=args.slot_horizon,
        rate_limits=RateLimits(
            per_bot=args.rate_limit,
            per_chat=args.chat_rate_limit,
            per_group_per_minute=args.group_rate_limit,
        ),
    )


def _cmd_relay(args: argparse.Namespace) -> int:
    from outbox.progress import drain_progress, on_terminal  # noqa: PLC0415
    from outbox.relay import Relay  # noqa: PLC0415 - heavy imports only for the relay
    from outbox.telegram import TelegramSender  # noqa: PLC0415

    token = read_token()
    api_url = telegram_api_url()
    config = _relay_config(args, _database_url(args))
    sender = TelegramSender(
        token, api_url=api_url, pool_size=config.concurrency, read_timeout=config.telegram_timeout
    )

    async def run() -> int:
        relay = Relay(config, sender)
        _stop_on_signals(relay, grace=config.grace_seconds)
        try:
            with _metrics(relay, args):
                async with relay:
                    if args.once:
                        summary = await relay.run_once()
                    elif args.drain and on_terminal():
                        progress = drain_progress(
                            relay, config.database_url, schema=config.schema, stream=sys.stderr
                        )
                        async with progress:
                            summary = await relay.run(drain=True)
                    else:
                        summary = await relay.run(drain=args.drain)
        finally:
            faulthandler.cancel_dump_traceback_later()
        print(
            f"relay stopped: {summary.sent} sent, {summary.already_sent} already sent, "
            f"{summary.retried} to retry, {summary.failed} failed, "
            f"{summary.released} released"
        )
        return 0

    return asyncio.run(run())


# A relay still running this long after its grace period is stuck: it says where.
_STUCK_AFTER_GRACE = 5.0


def _stop_on_signals(relay: Relay, *, grace: float) -> None:
    """SIGTERM and SIGINT stop the relay (a second one at once, without the rest of the grace);
    one that then does not stop logs where it is stuck."""
    loop = asyncio.get_running_loop()
    armed = False

    def stop() -> None:
        nonlocal armed
        relay.stop()
        if not armed:
            armed = True
            stuck_after = grace + _STUCK_AFTER_GRACE
            # Thread stacks from C, even if the event loop is blocked; task stacks if it is not.
            faulthandler.dump_traceback_later(stuck_after, exit=False)
            loop.call_later(stuck_after, _log_task_stacks)

    for sig in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(sig, stop)


def _log_task_stacks() -> None:
    for task in asyncio.all_tasks():
        stack = io.StringIO()
        task.print_stack(file=stack)
        logging.getLogger("outbox.relay").error("still running after stop: %s", stack.getvalue())


@contextlib.contextmanager
def _metrics(relay: Relay, args: argparse.Namespace) -> Iterator[None]:
    if not args.metrics_port:
        yield
        return
    from outbox.metrics import MetricsServer  # noqa: PLC0415

    server = MetricsServer(relay, host=args.metrics_host, port=args.metrics_port)
    try:
        yield
    finally:
        server.close()


def _web_flags(parser: _Parser) -> None:
    parser.add(
        "--host",
        env="OUTBOX_WEB_HOST",
        default="127.0.0.1",
        help="address to listen on; anything but loopback needs a password",
    )
    parser.add("--port", env="OUTBOX_WEB_PORT", default=8080, convert=_port, help="port")
    parser.add(
        "--password-file",
        env="OUTBOX_WEB_PASSWORD_FILE",
        default=None,
        help="file holding the page's password (or set OUTBOX_WEB_PASSWORD; never on argv)",
    )
    parser.add(
        "--trusted-proxy",
        env="OUTBOX_WEB_TRUSTED_PROXY",
        default="",
        help="addresses or networks of the proxy in front of the page (comma-separated): its "
        "X-Forwarded-For names the client, X-Forwarded-Proto https makes the cookie Secure",
    )
    parser.add(
        "--lease",
        env="OUTBOX_LEASE",
        default=DEFAULT_LEASE,
        convert=_seconds,
        help="claims older than this are shown as stuck",
    )
    parser.add(
        "--refresh",
        env="OUTBOX_WEB_REFRESH",
        default=5.0,
        convert=_seconds,
        help="how often the page updates its figures",
    )
    _add_log_format(parser)


def _cmd_web(args: argparse.Namespace) -> int:
    try:
        from outbox.web import WebConfig, read_password, serve  # noqa: PLC0415 - an extra
    except ImportError as err:
        if err.name not in {"aiohttp", "jinja2", "markupsafe"}:
            raise
        raise ConfigError(
            f"the web page needs the 'web' extra ({err.name} is missing): "
            "pip install 'outbox-telegram[web]'"
        ) from None

    config = WebConfig(
        database_url=_database_url(args),
        schema=current_schema(),
        host=args.host,
        port=args.port,
        password=read_password(args.password_file),
        lease_seconds=args.lease,
        refresh_seconds=max(args.refresh, 1.0),
        trusted_proxies=args.trusted_proxy,
    )
    serve(config)
    return 0


def _cmd_migrate(args: argparse.Namespace) -> int:
    from outbox.migrate import upgrade  # noqa: PLC0415

    upgrade(_database_url(args))
    print(f"the outbox tables in schema {current_schema()} are up to date")
    return 0


def _cmd_fake_telegram(args: argparse.Namespace) -> int:
    try:
        from outbox_testing.fake_telegram import serve_forever  # noqa: PLC0415 - a development tool
    except ImportError as err:
        raise ConfigError(
            f"the fake Bot API needs the 'fake' extra ({err.name} is missing): "
            "pip install 'outbox-telegram[fake]'"
        ) from None

    token = os.environ.get("TELEGRAM_BOT_TOKEN") or None
    asyncio.run(serve_forever(args.host, args.port, token, args.latency, args.enforce_limits))
    return 0


def build_parser() -> argparse.ArgumentParser:
    parser = _Parser(prog="outbox", description="Transactional outbox relay for Telegram.")
    parser.add(
        "--log-level",
        env="OUTBOX_LOG_LEVEL",
        default="INFO",
        convert=str.upper,
        help="DEBUG, INFO, WARNING or ERROR",
    )
    _add_log_format(parser, default="text")
    sub = parser.add_subparsers(dest="command", required=True, parser_class=_Parser)

    def command(name: str, handler: Handler, help: str) -> _Parser:
        p: _Parser = sub.add_parser(name, help=help, description=help)
        p.set_defaults(handler=handler)
        return p

    _add_database(command("migrate", _cmd_migrate, "apply the database migrations"))
    relay = command("relay", _cmd_relay, "send due messages to Telegram until stopped")
    _add_database(relay)
    _relay_flags(relay)
    admin.add_commands(command, _add_database, _add_json)
    _add_log_format(relay)
    web = command("web", _cmd_web, "the operator's web page: queue, failures, replay")
    _add_database(web)
    _web_flags(web)
    fake = command("fake-telegram", _cmd_fake_telegram, "a local stand-in for the Bot API")
    _add_log_format(fake)
    fake.add("--host", env="OUTBOX_FAKE_HOST", default="127.0.0.1", help="address to bind")
    fake.add("--port", env="OUTBOX_FAKE_PORT", default=8081, convert=int, help="port to bind")
    fake.add(
        "--latency",
        env="OUTBOX_FAKE_LATENCY",
        default=0.0,
        convert=_seconds,
        help="delay every answer, e.g. 100ms",
    )
    fake.add(
        "--enforce-limits",
        env="OUTBOX_FAKE_ENFORCE_LIMITS",
        default=False,
        convert=_flag_bool,
        nargs="?",
        const=True,
        help="answer 429 over Telegram's limits",
    )
    return parser


def _log_format(raw: str) -> str:
    value = raw.strip().lower()
    if value not in LOG_FORMATS:
        raise argparse.ArgumentTypeError(f"{raw!r} is not a log format: use text or json")
    return value


def _add_log_format(parser: _Parser, default: Any = argparse.SUPPRESS) -> None:
    """On the main parser (``outbox --log-format json relay``) and again on each long-running
    command (``outbox relay --log-format json``); the command's copy only counts when given."""
    parser.add(
        "--log-format",
        env="OUTBOX_LOG_FORMAT",
        default=default,
        convert=_log_format,
        help="text for people, json for a log system (one JSON object a line)",
    )


def _log_level(name: str) -> int:
    level = logging.getLevelNamesMapping().get(name)
    if level is None:
        raise InvalidInput(f"unknown log level {name!r}: use DEBUG, INFO, WARNING or ERROR")
    return level


def main(argv: Sequence[str] | None = None) -> int:
    try:
        parser = build_parser()
        args = parser.parse_args(argv)
        _resolve_env_defaults(args)
        configure_logging(_log_level(args.log_level), args.log_format)
        if getattr(args, "schema", None):
            configure(schema=args.schema)
        handler: Handler = args.handler
        return handler(args)
    except OutboxError as err:
        print(f"outbox: {redact(str(err))}", file=sys.stderr)
        return err.exit_code
    except KeyboardInterrupt:
        return 130
    except BrokenPipeError:
        # `outbox list | head`: the reader has gone; nothing left to say to it.
        with contextlib.suppress(OSError):
            os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        return 141
    except Exception:
        # A bug, not a mistake of the user's: keep the traceback, but through the redacting
        # log formatter, so that not even a crash can print the token.
        logging.getLogger("outbox").exception("unexpected error")
        return 1


if __name__ == "__main__":
    sys.exit(main())
