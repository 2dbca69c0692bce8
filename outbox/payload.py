"""The payload contract of an outbox row: which Bot API request it may become.

Used twice: ``enqueue`` and ``update_pending`` refuse a bad payload in the app's own request,
and the relay checks every claimed row again, since plain SQL can write anything. ``"method"``
names the request (absent: sendMessage); the methods beyond it are in ``outbox.payload_methods``.
"""

from __future__ import annotations

import json
import re
from collections.abc import Mapping
from typing import Any, NamedTuple

__all__ = [
    "MAX_CALLBACK_DATA_BYTES",
    "MAX_KEY_BYTES",
    "MAX_PAYLOAD_BYTES",
    "MAX_PAYLOAD_DEPTH",
    "MAX_TEXT_LENGTH",
    "MalformedPayload",
    "Request",
    "UnreadablePayload",
    "check_text",
    "is_basic",
    "read_json",
    "request_of",
    "send_message_args",
]

MAX_TEXT_LENGTH = 4096  # Telegram's limit for a message's text, after entity parsing
# What the outbox table itself accepts (constraints of migration outbox_0002): a payload's
# JSON text at most this many bytes, its values nested at most this many levels deep. Far above
# any sendMessage request; they keep out rows that no relay could even decode.
MAX_PAYLOAD_BYTES = 65536
MAX_PAYLOAD_DEPTH = 32
# Telegram: chat ids have at most 52 significant bits.
_MAX_CHAT_ID = 2**52
# A public channel's username: 5 to 32 letters, digits and underscores, starting with a letter.
_CHANNEL_NAME = re.compile(r"@[A-Za-z][A-Za-z0-9_]{4,31}")
_PARSE_MODES = ("HTML", "Markdown", "MarkdownV2")
_OPTIONAL_FLAGS = ("disable_notification", "protect_content")
_ALLOWED_KEYS = {
    "chat_id",
    "text",
    "parse_mode",
    "message_thread_id",
    "reply_markup",
    *_OPTIONAL_FLAGS,
}
# A key is unique in the table (a btree index, whose entries must stay well under 2,700 bytes).
MAX_KEY_BYTES = 1024
MAX_CALLBACK_DATA_BYTES = 64  # Telegram's limit for a button's callback_data, in UTF-8 bytes
_BUTTON_KINDS = ("callback_data", "url")  # the inline buttons a stored message may carry


class MalformedPayload(ValueError):
    """The payload cannot become a sendMessage request; the text names the field."""


class UnreadablePayload(NamedTuple):
    """JSON text from the table that Python cannot decode (nested too deeply, say), standing in
    for the value: the row fails alone with ``reason``, not the whole batch or the relay."""

    reason: str
    text: str


def read_json(text: str | None) -> Any:
    """Decode JSON text read from the table; undecodable text becomes an UnreadablePayload."""
    if text is None:
        return None
    try:
        return json.loads(text)
    except RecursionError:
        reason = f"payload is nested too deeply to decode ({len(text)} characters of JSON)"
    except ValueError as err:
        reason = f"payload is not valid JSON ({err})"
    return UnreadablePayload(reason, text)


def check_text(value: str, field: str) -> str:
    """A string PostgreSQL can store: no NUL character (text and jsonb refuse it) and no lone
    surrogate (not UTF-8)."""
    if "\x00" in value:
        raise MalformedPayload(f"{field} contains a NUL character (\\x00), which cannot be stored")
    try:
        value.encode()
    except UnicodeEncodeError:
        raise MalformedPayload(f"{field} is not valid Unicode (a lone surrogate)") from None
    return value


def check_flag(value: Any, field: str) -> bool:
    if not isinstance(value, bool):
        raise MalformedPayload(f"{field} must be true or false")
    return value


def chat_id_of(value: Any) -> int | str:
    if isinstance(value, str) and value.startswith("@"):
        if not _CHANNEL_NAME.fullmatch(value):
            raise MalformedPayload(
                f"chat_id {value[:40]!r} is not an @channel name (5 to 32 letters, digits "
                "and _, starting with a letter)"
            )
        return value
    if isinstance(value, str):
        try:
            value = int(value)
        except ValueError:
            raise MalformedPayload(f"chat_id {value[:40]!r} is not a number") from None
    if isinstance(value, bool) or not isinstance(value, int):
        raise MalformedPayload("chat_id must be an integer or an @channel name")
    if value == 0 or abs(value) > _MAX_CHAT_ID:
        raise MalformedPayload(f"chat_id {value} is not a Telegram chat id")
    return value


def message_text(text: Any, parse_mode: Any) -> str:
    if not isinstance(text, str) or not text.strip():
        raise MalformedPayload("text must be a non-empty string")
    check_text(text, "text")
    if parse_mode is not None and parse_mode not in _PARSE_MODES:
        raise MalformedPayload(f"parse_mode must be one of {', '.join(_PARSE_MODES)} or absent")
    # With a parse mode the markup is stripped before Telegram counts; without one, count here.
    if parse_mode is None and len(text) > MAX_TEXT_LENGTH:
        raise MalformedPayload(f"text is {len(text)} characters; Telegram allows {MAX_TEXT_LENGTH}")
    # The table refuses larger payloads (the other fields take well under 1 KiB): say so here,
    # in the app's own request. A character takes at most 6 bytes as JSON, so a short text (every
    # text without a parse mode) is not encoded to find out: this runs for every send.
    if (
        len(text) * 6 + 2 > MAX_PAYLOAD_BYTES - 1024
        and (size := len(json.dumps(text, ensure_ascii=False).encode())) > MAX_PAYLOAD_BYTES - 1024
    ):
        raise MalformedPayload(
            f"text takes {size} bytes as JSON; the outbox keeps at most {MAX_PAYLOAD_BYTES - 1024}"
        )
    return text


def send_message_args(payload: Any) -> dict[str, Any]:
    """Validate a payload and turn it into ``sendMessage`` arguments."""
    if isinstance(payload, UnreadablePayload):
        raise MalformedPayload(payload.reason)
    if not isinstance(payload, Mapping):
        # The lesson's plain INSERTs can store any JSON; only an object can be a message.
        raise MalformedPayload(f"payload must be a JSON object, got {type(payload).__name__}")
    unknown = set(payload) - _ALLOWED_KEYS
    if unknown:
        raise MalformedPayload(f"unknown field(s) {', '.join(sorted(map(str, unknown)))}")
    args: dict[str, Any] = {"chat_id": chat_id_of(payload.get("chat_id"))}
    args["text"] = message_text(payload.get("text"), payload.get("parse_mode"))
    if payload.get("parse_mode") is not None:
        args["parse_mode"] = payload["parse_mode"]
    thread = payload.get("message_thread_id")
    if thread is not None:
        if isinstance(thread, bool) or not isinstance(thread, int) or not 0 < thread < 2**31:
            raise MalformedPayload("message_thread_id must be a positive integer")
        args["message_thread_id"] = thread
    for flag in _OPTIONAL_FLAGS:
        if payload.get(flag) is not None:
            args[flag] = check_flag(payload[flag], flag)
    markup = payload.get("reply_markup")
    if markup is not None:
        args["reply_markup"] = inline_keyboard(markup)
    return args


def inline_keyboard(markup: Any) -> dict[str, Any]:
    """An ``InlineKeyboardMarkup`` as JSON: rows of buttons, each with text and one action."""
    if not isinstance(markup, Mapping) or set(markup) != {"inline_keyboard"}:
        raise MalformedPayload("reply_markup must be an object with only inline_keyboard")
    rows = markup["inline_keyboard"]
    if not isinstance(rows, list) or not rows:
        raise MalformedPayload("reply_markup.inline_keyboard must be a non-empty list of rows")
    for row in rows:
        if not isinstance(row, list) or not row:
            raise MalformedPayload("each inline_keyboard row must be a non-empty list of buttons")
        for button in row:
            _check_button(button)
    return {"inline_keyboard": [[dict(button) for button in row] for row in rows]}


def _check_button(button: Any) -> None:
    if not isinstance(button, Mapping):
        raise MalformedPayload("an inline keyboard button must be an object")
    text = button.get("text")
    if not isinstance(text, str) or not text.strip():
        raise MalformedPayload("an inline keyboard button needs a non-empty text")
    check_text(text, "a button's text")
    kinds = [kind for kind in _BUTTON_KINDS if kind in button]
    if len(kinds) != 1 or set(button) != {"text", kinds[0]}:
        raise MalformedPayload(
            f"button {text!r} needs exactly one of {', '.join(_BUTTON_KINDS)} beside its text"
        )
    value = button[kinds[0]]
    if not isinstance(value, str) or not value:
        raise MalformedPayload(f"button {text!r}: {kinds[0]} must be a non-empty string")
    check_text(value, f"button {text!r}: {kinds[0]}")
    if kinds[0] == "callback_data" and len(value.encode()) > MAX_CALLBACK_DATA_BYTES:
        raise MalformedPayload(
            f"button {text!r}: callback_data is {len(value.encode())} bytes; "
            f"Telegram allows {MAX_CALLBACK_DATA_BYTES}"
        )


def request_of(payload: Any) -> Request:
    """Validate a payload and turn it into the Bot API request it names."""
    # The lesson's rows (sendMessage with its basic fields) take the short way, as before.
    if isinstance(payload, Mapping) and (
        "method" in payload or not payload.keys() <= _ALLOWED_KEYS
    ):
        from outbox.payload_methods import method_request  # noqa: PLC0415 - a cycle otherwise

        return method_request(payload)
    return Request("sendMessage", send_message_args(payload))


def is_basic(args: Mapping[str, Any]) -> bool:
    """sendMessage arguments of the lesson's kind: what every sender sends (``Sender.send``)."""
    return args.keys() <= _ALLOWED_KEYS


class Request(NamedTuple):
    """A checked request: Telegram's method name and its arguments."""

    method: str
    args: dict[str, Any]
    # Messages Telegram counts against its limits (an album of N counts N).
    weight: int = 1
    # A follow-up's original (its key): chat_id and message_id come from its sent marker.
    message_key: str | None = None
