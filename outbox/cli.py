"""The ``outbox`` command: builds the parser from the commands (``outbox.commands``), runs
the one asked for, and turns every mistake a person can make into one line on stderr and an
exit code (docs/cli.md), never a traceback.
"""

from __future__ import annotations

import argparse
import contextlib
import logging
import os
import sys
from collections.abc import Sequence

from outbox.commands import (
    chats,
    dev_db,
    fake_telegram,
    fleet,
    maintenance,
    operator,
    pause,
    relay,
    web,
)
from outbox.commands.options import (
    Commands,
    Handler,
    Parser,
    add_database,
    add_log_format,
    add_log_level,
    resolve_env_defaults,
)
from outbox.errors import InvalidInput, OutboxError
from outbox.redact import configure_logging, redact
from outbox.schema import configure
from outbox.version import package_version

__all__ = ["build_parser", "main"]


def build_parser() -> argparse.ArgumentParser:
    parser = Parser(prog="outbox", description="Transactional outbox relay for Telegram.")
    parser.add_argument(
        "--version", action="version", version=f"outbox {package_version()} (outbox-telegram)"
    )
    add_log_level(parser, default="INFO")
    add_log_format(parser, default="text")
    # Also before the command: `outbox --database-url URL status`.
    add_database(parser, after_command=False)
    commands = Commands(parser)
    maintenance.register_migrate(commands)
    relay.register(commands)
    operator.register(commands)
    chats.register(commands)
    fleet.register(commands)
    pause.register(commands)
    maintenance.register(commands)
    web.register(commands)
    fake_telegram.register(commands)
    dev_db.register(commands)
    return parser


def _log_level(name: str) -> int:
    level = logging.getLevelNamesMapping().get(name)
    if level is None:
        raise InvalidInput(f"unknown log level {name!r}: use DEBUG, INFO, WARNING or ERROR")
    return level


def main(argv: Sequence[str] | None = None) -> int:
    try:
        parser = build_parser()
        args = parser.parse_args(argv)
        resolve_env_defaults(args)
        configure_logging(_log_level(args.log_level), args.log_format)
        if args.schema:
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
