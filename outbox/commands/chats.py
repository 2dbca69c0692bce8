"""``outbox chats``: the chats gone for a bot (blocked by the person, bot removed from the
group), listed, and unblocked by hand."""

from __future__ import annotations

import argparse

from outbox import ops
from outbox.api import chat_column
from outbox.commands.common import answer_newest, run_operation
from outbox.commands.options import Commands, add_bot_filter, whole_number
from outbox.errors import InvalidInput
from outbox.ops.views import chats as view

__all__ = ["register"]

DEFAULT_LIMIT = 1000
MAX_LIMIT = 1_000_000


def cmd_chats(args: argparse.Namespace) -> int:
    if args.blocked == (args.unblock is not None):
        raise InvalidInput("give --blocked (list them) or --unblock CHAT_ID, one of the two")
    if args.unblock is not None:
        if args.json:
            raise InvalidInput("--json goes with --blocked, not --unblock")
        return _unblock(args)
    found = run_operation(args, ops.blocked_chats, bot=args.bot, limit=args.limit + 1)
    none = "no blocked chats" + ("" if args.bot is None else f" for bot {args.bot}")
    return answer_newest(
        args, found, view.blocked_json, view.blocked_lines, more="more are blocked", none=none
    )


def _unblock(args: argparse.Namespace) -> int:
    chat = chat_column(args.unblock)
    whose = "the rows naming no bot" if args.bot is None else f"bot {args.bot}"
    was = run_operation(args, ops.unblock, chat=chat, bot=args.bot)
    if was:
        print(f"unblocked chat {chat} for {whose}: its next messages are sent")
    else:
        print(f"chat {chat} was not blocked for {whose}; nothing changed")
    return 0


def register(commands: Commands) -> None:
    chats = commands.add(
        "chats",
        cmd_chats,
        "chats gone for a bot (blocked, bot removed): list them, or unblock one",
        json=True,
    )
    # No environment twins: a variable left set must not unblock a chat.
    chats.add_argument(
        "--blocked", action="store_true", help="list the blocked chats, newest first"
    )
    chats.add_argument(
        "--unblock",
        default=None,
        metavar="CHAT_ID",
        help="send to this chat again (the person unblocked the bot, the group re-added it)",
    )
    add_bot_filter(
        chats,
        "the bot's public id: with --blocked only its chats; with --unblock the bot it is "
        "unblocked for (default: the rows naming no bot)",
    )
    chats.add(
        "--limit",
        env=None,
        default=DEFAULT_LIMIT,
        convert=whole_number(1, MAX_LIMIT),
        help=f"with --blocked: at most this many (default {DEFAULT_LIMIT:,})",
        metavar="N",
    )
