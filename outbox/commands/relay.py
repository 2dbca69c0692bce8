"""``outbox relay``: its settings (each with its range and environment twin), and the relay
run until stopped, with signals, metrics and a progress line.

A setting out of range is a configuration error (exit 3), refused before anything starts.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import dataclasses
import faulthandler
import io
import logging
import signal
import sys
from collections.abc import Iterator
from typing import TYPE_CHECKING, Any

from outbox.commands.common import database_url
from outbox.commands.options import (
    Commands,
    Converter,
    Parser,
    add_lease,
    direct_url,
    duration,
    flag_bool,
    number,
    port,
    queue_names,
    tokens_dir,
    whole_number,
)
from outbox.config import (
    DEFAULT_BATCH_SIZE,
    DEFAULT_CLAIM_AHEAD,
    DEFAULT_CONCURRENCY,
    DEFAULT_GRACE,
    DEFAULT_HEARTBEAT,
    DEFAULT_MARKER_RETENTION,
    DEFAULT_POLL_INTERVAL,
    DEFAULT_POLL_ONLY_INTERVAL,
    DEFAULT_RETENTION,
    DEFAULT_SLOT_HORIZON,
    DEFAULT_TELEGRAM_TIMEOUT,
    MAX_ATTEMPTS,
    MAX_BATCH_SIZE,
    MAX_CONCURRENCY,
    MAX_GROUP_RATE,
    MAX_HEARTBEAT,
    MAX_RATE,
    MAX_WAIT,
    RelayConfig,
    read_token,
    telegram_api_url,
)
from outbox.errors import ConfigError
from outbox.ratelimit import RateLimits
from outbox.redact import redact, redact_url
from outbox.retry import RetryPolicy
from outbox.schema import DEFAULT_QUEUE
from outbox.tracing import configure_from_env

if TYPE_CHECKING:
    from outbox.relay import Relay

__all__ = ["register"]

_LIMITS = RateLimits()
_RETRY = RetryPolicy()


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


def register(commands: Commands) -> None:
    relay = commands.add(
        "relay",
        _cmd_relay,
        "send due messages to Telegram until stopped",
        refusal=ConfigError,
    )
    _relay_flags(relay)


# The relay's settings in --help's order: flag, default, range, meaning and any other argparse
# keyword; each has its environment twin OUTBOX_<FLAG> unless it names another (env).
_Setting = (
    tuple[str, Any, Converter[Any], str] | tuple[str, Any, Converter[Any], str, dict[str, Any]]
)
_CLAIMING: tuple[_Setting, ...] = (
    (
        "--concurrency",
        DEFAULT_CONCURRENCY,
        whole_number(1, MAX_CONCURRENCY),
        f"sends in flight at once (at most {MAX_CONCURRENCY})",
    ),
    (
        "--batch-size",
        DEFAULT_BATCH_SIZE,
        whole_number(1, MAX_BATCH_SIZE),
        f"rows a claim takes at most (at most {MAX_BATCH_SIZE})",
    ),
    (
        "--claim-ahead",
        DEFAULT_CLAIM_AHEAD,
        whole_number(0, MAX_BATCH_SIZE),
        "rows claimed beyond the free send slots at most, so a freed slot starts at once",
    ),
    (
        "--poll-only",
        False,
        flag_bool,
        "no LISTEN/NOTIFY (PgBouncer transaction pooling)",
        {"nargs": "?", "const": True},
    ),
    (
        "--listen-database-url",
        None,
        direct_url,
        "LISTEN on this URL (PostgreSQL itself) while claims and writes go through "
        "--database-url (PgBouncer in transaction pooling): wake-ups in milliseconds, not polls; "
        "with a password, prefer the variable",
        {"metavar": "URL"},
    ),
    (
        "--poll-interval",
        None,
        duration(MAX_WAIT, positive=True),
        "look for due rows at least this often (default 30s, 1s with --poll-only)",
    ),
    (
        "--queue",
        None,
        queue_names,
        "the queues this relay serves, all of its bot (the token): they share the bot's "
        "limits and flood pause; repeat or separate with commas (default: default)",
        {"env": "OUTBOX_QUEUES", "action": _QueuesAction, "dest": "queues"},
    ),
    (
        "--tokens-dir",
        None,
        tokens_dir,
        "serve every bot whose token is in a file of DIR (one token per file; files added, "
        "replaced or removed are picked up while the relay runs): the rows that name the bot "
        "(enqueue(bot=ID)); without it, the one bot of TELEGRAM_BOT_TOKEN sends the rows that "
        "name no bot",
        {"metavar": "DIR"},
    ),
    (
        "--slot-horizon",
        DEFAULT_SLOT_HORIZON,
        duration(60, positive=True),
        "how far ahead a claim reserves the bot's send slots for its relays; a reply "
        "of a higher priority waits about this long behind a broadcast",
    ),
    (
        "--rate-limit",
        _LIMITS.per_bot,
        number(0, MAX_RATE),
        f"messages/s per bot, for all its relays together (at most {MAX_RATE:g}); "
        "0 switches it off",
    ),
    (
        "--paid-rate-limit",
        _LIMITS.paid_per_bot,
        number(0, MAX_RATE),
        "messages/s per bot for the rows sent with allow_paid_broadcast, a budget of "
        f"their own beside --rate-limit (Telegram: up to 1,000/s, for Stars; 950 leaves room "
        f"for sends a moment late; at most {MAX_RATE:g}); 0: no paid lane, they share "
        "--rate-limit",
    ),
    (
        "--chat-rate-limit",
        _LIMITS.per_chat,
        number(0, MAX_RATE),
        f"messages/s per private chat (at most {MAX_RATE:g}); 0: off",
    ),
    (
        "--group-rate-limit",
        _LIMITS.per_group_per_minute,
        number(0, MAX_GROUP_RATE),
        f"messages/min per group (at most {MAX_GROUP_RATE:g}); 0: off",
    ),
    (
        "--max-attempts",
        _RETRY.max_attempts,
        whole_number(1, MAX_ATTEMPTS),
        f"attempts before a row goes to xato (at most {MAX_ATTEMPTS})",
    ),
    (
        "--backoff-base",
        _RETRY.base_seconds,
        duration(MAX_WAIT),
        "first retry delay; doubles each attempt",
    ),
)
# After --lease (add_lease, shared with the operator commands).
_RUNNING: tuple[_Setting, ...] = (
    (
        "--grace",
        DEFAULT_GRACE,
        duration(MAX_WAIT),
        "on SIGTERM, how long in-flight sends may finish (a second SIGTERM: at once)",
    ),
    (
        "--telegram-timeout",
        DEFAULT_TELEGRAM_TIMEOUT,
        duration(MAX_WAIT, positive=True),
        "how long to wait for the Bot API's answer (no answer: maybe delivered, retried)",
    ),
    (
        "--retention",
        DEFAULT_RETENTION,
        duration(),
        "delete bajarildi rows older than this (0: keep them)",
    ),
    (
        "--marker-retention",
        DEFAULT_MARKER_RETENTION,
        duration(),
        "delete sent markers older than this",
    ),
    (
        "--heartbeat",
        DEFAULT_HEARTBEAT,
        duration(MAX_HEARTBEAT, positive=True),
        "how often the relay writes its heartbeat into the fleet's register (outbox "
        "relays); also how often /healthz checks the database",
    ),
    (
        "--metrics-port",
        0,
        port,
        "serve Prometheus metrics, /healthz and /readyz on this port (0: none)",
    ),
    (
        "--metrics-host",
        "127.0.0.1",
        str,
        "address the metrics endpoint listens on (0.0.0.0: every interface)",
    ),
)


def _add_settings(parser: Parser, settings: tuple[_Setting, ...]) -> None:
    for flag, default, convert, help, *extra in settings:
        twin = "OUTBOX_" + flag.removeprefix("--").upper().replace("-", "_")
        options = {"env": twin, **(extra[0] if extra else {})}
        parser.add(flag, **options, default=default, convert=convert, help=help)


def _relay_flags(parser: Parser) -> None:
    mode = parser.add_mutually_exclusive_group()
    mode.add_argument("--once", action="store_true", help="claim and send one batch, then exit")
    mode.add_argument("--drain", action="store_true", help="exit once nothing is due")
    _add_settings(parser, _CLAIMING)
    add_lease(parser, "a claim older than this is reaped")
    _add_settings(parser, _RUNNING)


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
        listen_database_url=args.listen_database_url,
        poll_interval=poll_interval,
        lease_seconds=args.lease,
        grace_seconds=args.grace,
        telegram_timeout=args.telegram_timeout,
        retention_seconds=args.retention,
        marker_retention_seconds=args.marker_retention,
        retry=RetryPolicy(max_attempts=args.max_attempts, base_seconds=args.backoff_base),
        queues=tuple(args.queues or (DEFAULT_QUEUE,)),
        slot_horizon=args.slot_horizon,
        heartbeat_interval=args.heartbeat,
        rate_limits=RateLimits(
            per_bot=args.rate_limit,
            paid_per_bot=args.paid_rate_limit,
            per_chat=args.chat_rate_limit,
            per_group_per_minute=args.group_rate_limit,
        ),
    )


def _cmd_relay(args: argparse.Namespace) -> int:
    from outbox.progress import drain_progress, on_terminal  # noqa: PLC0415
    from outbox.relay import Relay  # noqa: PLC0415 - heavy imports only for the relay
    from outbox.relay.lanes import BotSource, GivenBots, TokenBots  # noqa: PLC0415
    from outbox.relay.tokens import TokenFolder  # noqa: PLC0415
    from outbox.telegram import TelegramPool, TelegramSender  # noqa: PLC0415

    # A folder of tokens or one token: with the folder, TELEGRAM_BOT_TOKEN is not read.
    token = None if args.tokens_dir is not None else read_token()
    api_url = telegram_api_url()
    # The settings are checked before the database is named (or an embedded one started): a
    # refused setting is the only line.
    settings = _relay_config(args, url="")
    # Traces only when OTEL_* variables ask for them (outbox.tracing); None: no spans at all.
    tracer_provider = configure_from_env("outbox-relay")
    config = dataclasses.replace(settings, database_url=database_url(args))
    if config.listen_database_url is not None:
        logging.getLogger("outbox").info("LISTEN on %s", redact_url(config.listen_database_url))
    size, timeout = config.concurrency, config.telegram_timeout
    bots: BotSource
    if token is None:
        pool = TelegramPool(api_url=api_url, pool_size=size, read_timeout=timeout)
        bots = TokenBots(TokenFolder(args.tokens_dir), pool)
        which = f"the bots of the tokens in {args.tokens_dir}"
    else:
        sender = TelegramSender(token, api_url=api_url, pool_size=size, read_timeout=timeout)
        bots, which = GivenBots([sender]), f"bot {sender.bot_id}"
    # Which Bot API, said once: a relay pointed at the fake (or a local Bot API server) by a
    # leftover variable is seen at once. The token is part of every request URL, never of this.
    logging.getLogger("outbox.relay").info("Bot API %s, %s", redact(api_url.rstrip("/")), which)

    async def run() -> int:
        relay = Relay(config, bots, tracer_provider=tracer_provider)
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
            if tracer_provider is not None:
                # The last spans, exported before the process ends (not left to atexit).
                tracer_provider.shutdown()
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
