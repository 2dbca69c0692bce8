"""``outbox fake-telegram``: a local stand-in for the Bot API, for development and tests.

The one place the command line imports the fake (a testing tool with an extra of its own).
"""

from __future__ import annotations

import argparse
import asyncio
import os

from outbox.commands.options import Commands, duration, flag_bool, port
from outbox.errors import ConfigError

__all__ = ["register"]

MAX_LATENCY = 3600.0


def register(commands: Commands) -> None:
    fake = commands.add(
        "fake-telegram", _cmd_fake_telegram, "a local stand-in for the Bot API", database=False
    )
    fake.add("--host", env="OUTBOX_FAKE_HOST", default="127.0.0.1", help="address to bind")
    fake.add("--port", env="OUTBOX_FAKE_PORT", default=8081, convert=port, help="port to bind")
    fake.add(
        "--latency",
        env="OUTBOX_FAKE_LATENCY",
        default=0.0,
        convert=duration(MAX_LATENCY),
        help="delay every answer, e.g. 100ms",
    )
    fake.add(
        "--enforce-limits",
        env="OUTBOX_FAKE_ENFORCE_LIMITS",
        default=False,
        convert=flag_bool,
        nargs="?",
        const=True,
        help="answer 429 over Telegram's limits",
    )


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
