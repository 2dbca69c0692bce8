"""``outbox fake-telegram``: a local stand-in for the Bot API, for development and tests.

The one place the command line imports the fake (a testing tool outside the runtime package).
"""

from __future__ import annotations

import argparse
import asyncio
import os

from outbox.commands.options import Commands, duration, flag_bool, port

__all__ = ["register"]

MAX_LATENCY = 3600.0

# The control API, as ``outbox fake-telegram --help`` shows it: the one place a user of the
# command learns how to drive the fake from a shell (outbox_testing/fake_telegram/control.py).
CONTROL_HELP = """\
The fake answers the Bot API at http://HOST:PORT/bot<token>/<method>: point a relay or a bot at
it with OUTBOX_TELEGRAM_API_URL=http://127.0.0.1:8081. It accepts any well-formed token, or
only TELEGRAM_BOT_TOKEN when that is set. Everything else goes through its control API under
/_fake/ (JSON in, JSON out):

script a fault: POST /_fake/script {"fault": {"kind": ...}, "chat_id": N, "times": N}
  the next sendMessage(s) to chat_id (any chat without it) get the fault, "times" times
  (default 1; null: until /_fake/reset). Kinds and their arguments:
    retry_after {"seconds": N}        429 Too Many Requests with parameters.retry_after
    forbidden {"description": ...}    403 (default "bot was blocked by the user")
    bad_request {"description": ...}  400 (default "chat not found")
    migrate {"new_chat_id": N}        400 with migrate_to_chat_id (a group became a supergroup)
    server_error {"status": 5xx}      a 5xx of that status (default 500)
    bad_gateway_html                  502 with a proxy's HTML page instead of JSON
    unauthorized                      401 (a revoked token)
    slow {"seconds": S}               delivered at once, answered S seconds late
    drop {"delivered": true|false}    the connection closed without an answer

  curl -s localhost:8081/_fake/script -d '{"fault": {"kind": "retry_after", "seconds": 5}}'
  curl -s localhost:8081/_fake/script -d '{"chat_id": 42, "fault": {"kind": "forbidden"}}'
  curl -s localhost:8081/_fake/script -d '{"fault": {"kind": "server_error", "status": 503}}'
  curl -s localhost:8081/_fake/script -d '{"fault": {"kind": "slow", "seconds": 15}, "times": 3}'

a user's message: POST /_fake/message {"chat_id": N, "text": ..., "first_name": ...}
  an update for the bot's getUpdates (or its webhook); answers the update_id
  curl -s localhost:8081/_fake/message -d '{"chat_id": 42, "text": "/start"}'

a button press: POST /_fake/press {"chat_id": N, "message_id": N, "text" or "data": ...}
  a callback query on a delivered message's inline button, named by its text or its data
  (a chat's message ids count both sides, as Telegram's do: the user's messages take ids too)
  curl -s localhost:8081/_fake/press -d '{"chat_id": 42, "message_id": 5, "text": "✅ Bajarildi"}'

every answer late, or Telegram's limits: POST /_fake/config {"latency": S, "enforce_limits": B}
  curl -s localhost:8081/_fake/config -d '{"latency": 0.1, "enforce_limits": true}'

paid broadcasts refused (a Stars balance too low): POST /_fake/config {"paid_refusal": D}
  every sendMessage with allow_paid_broadcast answered 400 D until {"paid_refusal": null}
  curl -s localhost:8081/_fake/config -d '{"paid_refusal": "BALANCE_TOO_LOW"}'

forget records and scripts: POST /_fake/reset
  curl -s -X POST localhost:8081/_fake/reset

what it saw: GET /_fake/delivered[?chat_id=N], /_fake/requests, /_fake/edits,
/_fake/answers (answerCallbackQuery), /_fake/stats
  curl -s 'localhost:8081/_fake/delivered?chat_id=42'
"""


def register(commands: Commands) -> None:
    fake = commands.add(
        "fake-telegram", _cmd_fake_telegram, "a local stand-in for the Bot API", database=False
    )
    # Kept as written: the examples are meant to be copied.
    fake.formatter_class = argparse.RawDescriptionHelpFormatter
    fake.epilog = CONTROL_HELP
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
        help="answer 429 over Telegram's limits: 30/s a bot (1,000/s for allow_paid_broadcast), "
        "1/s a private chat, 20/min a group",
    )


def _cmd_fake_telegram(args: argparse.Namespace) -> int:
    from outbox_testing.fake_telegram import serve_forever  # noqa: PLC0415 - a development tool

    token = os.environ.get("TELEGRAM_BOT_TOKEN") or None
    asyncio.run(serve_forever(args.host, args.port, token, args.latency, args.enforce_limits))
    return 0
