"""The payload contract of an outbox row: what a ``sendMessage`` request may be made of.

One implementation, used twice: ``enqueue`` and ``update_pending`` refuse a bad payload at once
(the app hears of its mistake in its own request), and the relay checks every claimed row again,
since plain SQL can write anything into the table.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

__all__ = ["MAX_TEXT_LENGTH", "MalformedPayload", "send_message_args"]

MAX_TEXT_LENGTH = 4096  # Telegram's limit for a message's text, after entity parsing
# Telegram: chat ids have at most 52 significant bits.
_MAX_CHAT_ID = 2**52
_PARSE_MODES = ("HTML", "Markdown", "MarkdownV2")
_OPTIONAL_FLAGS = ("disable_notification", "protect_content")
_ALLOWED_KEYS = {"chat_id", "text", "parse_mode", "message_thread_id", *_OPTIONAL_FLAGS}


class MalformedPayload(ValueError):
    """The payload cannot become a sendMessage request; the text names the field."""


def _chat_id(value: Any) -> int | str:
    if isinstance(value, str) and value.startswith("@"):
        if len(value) < 2:
            raise MalformedPayload("chat_id '@' names no channel")
        return value
    if isinstance(value, str):
        try:
            value = int(value)
        except ValueError:
            raise MalformedPayload(f"chat_id {value!r} is not a number") from None
    if isinstance(value, bool) or not isinstance(value, int):
        raise MalformedPayload("chat_id must be an integer or an @channel name")
    if value == 0 or abs(value) > _MAX_CHAT_ID:
        raise MalformedPayload(f"chat_id {value} is not a Telegram chat id")
    return value


def send_message_args(payload: Any) -> dict[str, Any]:
    """Validate a payload and turn it into ``sendMessage`` arguments."""
    if not isinstance(payload, Mapping):
        # The lesson's plain INSERTs can store any JSON; only an object can be a message.
        raise MalformedPayload(f"payload must be a JSON object, got {type(payload).__name__}")
    unknown = set(payload) - _ALLOWED_KEYS
    if unknown:
        raise MalformedPayload(f"unknown field(s) {', '.join(sorted(map(str, unknown)))}")
    args: dict[str, Any] = {"chat_id": _chat_id(payload.get("chat_id"))}
    text = payload.get("text")
    if not isinstance(text, str) or not text.strip():
        raise MalformedPayload("text must be a non-empty string")
    parse_mode = payload.get("parse_mode")
    if parse_mode is not None and parse_mode not in _PARSE_MODES:
        raise MalformedPayload(f"parse_mode must be one of {', '.join(_PARSE_MODES)} or absent")
    # With a parse mode the markup is stripped before Telegram counts; without one, count here.
    if parse_mode is None and len(text) > MAX_TEXT_LENGTH:
        raise MalformedPayload(f"text is {len(text)} characters; Telegram allows {MAX_TEXT_LENGTH}")
    args["text"] = text
    if parse_mode is not None:
        args["parse_mode"] = parse_mode
    thread = payload.get("message_thread_id")
    if thread is not None:
        if isinstance(thread, bool) or not isinstance(thread, int) or not 0 < thread < 2**31:
            raise MalformedPayload("message_thread_id must be a positive integer")
        args["message_thread_id"] = thread
    for flag in _OPTIONAL_FLAGS:
        value = payload.get(flag)
        if value is not None:
            if not isinstance(value, bool):
                raise MalformedPayload(f"{flag} must be true or false")
            args[flag] = value
    return args
