"""The payload contract beyond plain sendMessage: every Bot API method the outbox sends (by
Telegram's name in ``"method"``), and the follow-ups that act on a message the outbox sent.

Each method is a table of its fields, each checked by one small function; a field the table
does not name is refused, so a typo is never sent as something Telegram ignores. Media are only
a ``file_id`` or an ``https://`` URL: python-telegram-bot uploads a local file named by a plain
string, and a row written by plain SQL must never make the relay read its host's files.
"""

from __future__ import annotations

import math
import re
from collections.abc import Callable, Mapping
from typing import Any
from urllib.parse import urlsplit

from outbox.payload import (
    MAX_KEY_BYTES,
    MAX_TEXT_LENGTH,
    MalformedPayload,
    Request,
    chat_id_of,
    check_text,
    inline_keyboard,
    message_text,
)
from outbox.payload import check_flag as _flag

__all__ = [
    "ALBUM_SIZES",
    "FOLLOW_UPS",
    "MAX_CAPTION_LENGTH",
    "METHODS",
    "method_request",
]

Check = Callable[[Any, str], Any]  # (value, field name) -> the value to send

MAX_CAPTION_LENGTH = 1024  # Telegram's limit for a caption, after entity parsing
ALBUM_SIZES = range(2, 11)  # sendMediaGroup takes 2 to 10 items
# A file_id is Telegram's own base64url text; anything else (a path, a name) is not one.
_FILE_ID = re.compile(r"[A-Za-z0-9_-]{20,250}")
_DICE = ("🎲", "🎯", "🏀", "⚽", "🎳", "🎰")


def _integer(low: int, high: int) -> Check:
    def check(value: Any, field: str) -> int:
        if isinstance(value, bool) or not isinstance(value, int) or not low <= value <= high:
            raise MalformedPayload(f"{field} must be a whole number from {low} to {high}")
        return value

    return check


def _number(low: float, high: float) -> Check:
    def check(value: Any, field: str) -> float:
        ok = isinstance(value, int | float) and not isinstance(value, bool)
        if not ok or not math.isfinite(value) or not low <= value <= high:
            raise MalformedPayload(f"{field} must be a number from {low:g} to {high:g}")
        return value  # type: ignore[no-any-return]

    return check


def _string(high: int) -> Check:
    def check(value: Any, field: str) -> str:
        if not isinstance(value, str) or not 1 <= len(value) <= high:
            raise MalformedPayload(f"{field} must be a string of 1 to {high} characters")
        return check_text(value, field)

    return check


def _one_of(*choices: str) -> Check:
    def check(value: Any, field: str) -> str:
        if value not in choices:
            raise MalformedPayload(f"{field} must be one of {', '.join(choices)}")
        return str(value)

    return check


def _file(value: Any, field: str) -> str:
    """A Telegram file_id or an https:// URL; never a local path or another scheme."""
    if not isinstance(value, str) or not value:
        raise MalformedPayload(f"{field} must be a file_id or an https:// URL")
    check_text(value, field)
    if value.startswith("https://"):
        host = urlsplit(value).hostname
        if not host or len(value) > 2048 or any(c.isspace() for c in value):
            raise MalformedPayload(f"{field} is not a usable https:// URL")
        return value
    scheme, colon, _ = value.partition(":")
    if colon and re.fullmatch(r"[A-Za-z][A-Za-z0-9+.-]*", scheme):
        raise MalformedPayload(
            f"{field}: {scheme}: is refused; media go as a file_id or an https:// URL"
        )
    if not _FILE_ID.fullmatch(value):
        raise MalformedPayload(
            f"{field} is neither a file_id nor an https:// URL (a local path is never read)"
        )
    return value


def _entities(value: Any, field: str) -> list[dict[str, Any]]:
    if not isinstance(value, list) or len(value) > 100:
        raise MalformedPayload(f"{field} must be a list of at most 100 entities")
    for entity in value:
        if not isinstance(entity, Mapping) or not isinstance(entity.get("type"), str):
            raise MalformedPayload(f"each of {field} must be an object with a type")
        _integer(0, 2**20)(entity.get("offset"), f"{field}: offset")
        _integer(1, 2**20)(entity.get("length"), f"{field}: length")
    return [dict(entity) for entity in value]


def _object(fields: Mapping[str, Check], *, required: tuple[str, ...] = ()) -> Check:
    def check(value: Any, field: str) -> dict[str, Any]:
        if not isinstance(value, Mapping):
            raise MalformedPayload(f"{field} must be an object")
        return _fields(value, fields, required, where=f"{field}.")

    return check


def _chat(value: Any, _field: str) -> int | str:
    return chat_id_of(value)


def _keyboard(value: Any, _field: str) -> dict[str, Any]:
    return inline_keyboard(value)


def _text(value: Any, _field: str) -> str:
    # The length is checked with the parse mode known (_lengths): markup is not counted.
    return message_text(value, "HTML")


def _caption(value: Any, field: str) -> str:
    if not isinstance(value, str):
        raise MalformedPayload(f"{field} must be a string")
    return check_text(value, field)


def _lengths(args: Mapping[str, Any], where: str) -> None:
    """Text and caption lengths as Telegram counts them: without a parse mode, every
    character; with one, the markup is stripped first, so only a generous bound here."""
    loose = 8 if args.get("parse_mode") else 1
    for field, limit in (("text", MAX_TEXT_LENGTH), ("caption", MAX_CAPTION_LENGTH)):
        value = args.get(field)
        if value is not None and len(value) > limit * loose:
            raise MalformedPayload(
                f"{where}{field} is {len(value)} characters; Telegram allows {limit}"
            )


_PARSE_MODE = _one_of("HTML", "Markdown", "MarkdownV2")
_MESSAGE_ID = _integer(1, 2**31 - 1)
_REPLY = _object(
    {
        "message_id": _MESSAGE_ID,
        "chat_id": _chat,
        "allow_sending_without_reply": _flag,
        "quote": _string(1024),
        "quote_parse_mode": _PARSE_MODE,
        "quote_entities": _entities,
        "quote_position": _integer(0, 2**20),
        "checklist_task_id": _integer(1, 2**31 - 1),
    },
    required=("message_id",),
)
_LINK_PREVIEW = _object(
    {
        "is_disabled": _flag,
        "url": _file,
        "prefer_small_media": _flag,
        "prefer_large_media": _flag,
        "show_above_text": _flag,
    }
)
_SEND = {
    "chat_id": _chat,
    "message_thread_id": _integer(1, 2**31 - 1),
    "direct_messages_topic_id": _integer(1, 2**62),
    "business_connection_id": _string(256),
    "disable_notification": _flag,
    "protect_content": _flag,
    "allow_paid_broadcast": _flag,
    "message_effect_id": _string(64),
    "reply_parameters": _REPLY,
    "reply_markup": _keyboard,
}
_CAPTIONED = {"caption": _caption, "parse_mode": _PARSE_MODE, "caption_entities": _entities}
_VISUAL = {**_CAPTIONED, "show_caption_above_media": _flag, "has_spoiler": _flag}
_SIZE = {"duration": _integer(0, 2**31), "width": _integer(1, 10**5), "height": _integer(1, 10**5)}
_LOCATION = {"latitude": _number(-90, 90), "longitude": _number(-180, 180)}
# Each kind of media's fields beside the file itself, as its send method (and InputMedia) take them.
_MEDIA: dict[str, dict[str, Check]] = {
    "photo": _VISUAL,
    "video": {**_VISUAL, **_SIZE, "thumbnail": _file, "cover": _file,
              "start_timestamp": _integer(0, 2**31), "supports_streaming": _flag},
    "animation": {**_VISUAL, **_SIZE, "thumbnail": _file},
    "audio": {**_CAPTIONED, "duration": _SIZE["duration"], "performer": _string(256),
              "title": _string(256), "thumbnail": _file},
    "document": {**_CAPTIONED, "thumbnail": _file, "disable_content_type_detection": _flag},
    "voice": {**_CAPTIONED, "duration": _SIZE["duration"]},
    "sticker": {"emoji": _string(16)},
}  # fmt: skip


def _media_item(types: tuple[str, ...]) -> Check:
    """One InputMedia object (an album's item, editMessageMedia's media)."""

    def check(value: Any, field: str) -> dict[str, Any]:
        if not isinstance(value, Mapping) or value.get("type") not in types:
            raise MalformedPayload(
                f"{field} must be an object whose type is one of {', '.join(types)}"
            )
        kind = str(value["type"])
        fields = {"type": _one_of(kind), "media": _file, **_MEDIA[kind]}
        return _fields(value, fields, ("type", "media"), where=f"{field}.")

    return check


def _album(value: Any, field: str) -> list[dict[str, Any]]:
    if not isinstance(value, list) or len(value) not in ALBUM_SIZES:
        size = len(value) if isinstance(value, list) else "not a list"
        raise MalformedPayload(
            f"{field} must be a list of {ALBUM_SIZES.start} to {ALBUM_SIZES.stop - 1} "
            f"items ({size})"
        )
    item = _media_item(("photo", "video", "audio", "document"))
    items = [item(entry, f"{field}[{i}]") for i, entry in enumerate(value)]
    kinds = {entry["type"] for entry in items}
    for alone in ("audio", "document"):
        if alone in kinds and kinds != {alone}:
            raise MalformedPayload(f"{field}: an album with {alone} items takes only {alone}")
    return items


def _poll_options(value: Any, field: str) -> list[dict[str, Any]]:
    if not isinstance(value, list) or not 2 <= len(value) <= 12:
        raise MalformedPayload(f"{field} must be a list of 2 to 12 options")
    options = []
    for i, option in enumerate(value):
        text = option.get("text") if isinstance(option, Mapping) else option
        options.append({"text": _string(100)(text, f"{field}[{i}]")})
    return options


def _sends(**fields: Check) -> dict[str, Check]:
    return {**_SEND, **fields}


def _sends_media(media: str) -> tuple[dict[str, Check], tuple[str, ...]]:
    return {**_SEND, media: _file, **_MEDIA[media]}, ("chat_id", media)


# method -> (its fields, the fields it requires). Follow-ups name their message by message_key.
METHODS: dict[str, tuple[dict[str, Check], tuple[str, ...]]] = {
    "sendMessage": (
        _sends(text=_text, parse_mode=_PARSE_MODE, entities=_entities,
               link_preview_options=_LINK_PREVIEW),
        ("chat_id", "text"),
    ),
    "sendPhoto": _sends_media("photo"),
    "sendDocument": _sends_media("document"),
    "sendVideo": _sends_media("video"),
    "sendAnimation": _sends_media("animation"),
    "sendAudio": _sends_media("audio"),
    "sendVoice": _sends_media("voice"),
    "sendSticker": _sends_media("sticker"),
    "sendLocation": (
        _sends(**_LOCATION, horizontal_accuracy=_number(0, 1500), live_period=_integer(60, 2**31),
               heading=_integer(1, 360), proximity_alert_radius=_integer(1, 100000)),
        ("chat_id", "latitude", "longitude"),
    ),
    "sendVenue": (
        _sends(**_LOCATION, title=_string(256), address=_string(256),
               foursquare_id=_string(256), foursquare_type=_string(256),
               google_place_id=_string(256), google_place_type=_string(256)),
        ("chat_id", "latitude", "longitude", "title", "address"),
    ),
    "sendContact": (
        _sends(phone_number=_string(64), first_name=_string(64), last_name=_string(64),
               vcard=_string(2048)),
        ("chat_id", "phone_number", "first_name"),
    ),
    "sendPoll": (
        _sends(question=_string(300), question_parse_mode=_PARSE_MODE, options=_poll_options,
               is_anonymous=_flag, type=_one_of("regular", "quiz"),
               allows_multiple_answers=_flag, correct_option_id=_integer(0, 11),
               explanation=_string(200), explanation_parse_mode=_PARSE_MODE,
               open_period=_integer(5, 600), close_date=_integer(0, 2**40), is_closed=_flag),
        ("chat_id", "question", "options"),
    ),
    "sendDice": (_sends(emoji=_one_of(*_DICE)), ("chat_id",)),
    "sendMediaGroup": (
        {key: check for key, check in _SEND.items() if key != "reply_markup"} | {"media": _album},
        ("chat_id", "media"),
    ),
    "copyMessage": (
        _sends(from_chat_id=_chat, message_id=_MESSAGE_ID, **_CAPTIONED,
               show_caption_above_media=_flag, video_start_timestamp=_integer(0, 2**31)),
        ("chat_id", "from_chat_id", "message_id"),
    ),
    "forwardMessage": (
        {key: _SEND[key] for key in ("chat_id", "message_thread_id", "direct_messages_topic_id",
                                     "disable_notification", "protect_content")}
        | {"from_chat_id": _chat, "message_id": _MESSAGE_ID,
           "video_start_timestamp": _integer(0, 2**31), "message_effect_id": _string(64)},
        ("chat_id", "from_chat_id", "message_id"),
    ),
}  # fmt: skip
_TARGET = {"business_connection_id": _string(256)}
# Follow-ups: they act on a message already sent, named by its key (or by chat_id + message_id).
FOLLOW_UPS: dict[str, tuple[dict[str, Check], tuple[str, ...]]] = {
    "editMessageText": (
        {**_TARGET, "text": _text, "parse_mode": _PARSE_MODE, "entities": _entities,
         "link_preview_options": _LINK_PREVIEW, "reply_markup": _keyboard},
        ("text",),
    ),
    "editMessageCaption": (
        {**_TARGET, **_CAPTIONED, "show_caption_above_media": _flag, "reply_markup": _keyboard},
        (),
    ),
    "editMessageReplyMarkup": ({**_TARGET, "reply_markup": _keyboard}, ()),
    "editMessageMedia": (
        {**_TARGET, "media": _media_item(("photo", "video", "animation", "audio", "document")),
         "reply_markup": _keyboard},
        ("media",),
    ),
    "deleteMessage": ({}, ()),
    "pinChatMessage": ({**_TARGET, "disable_notification": _flag}, ()),
    "unpinChatMessage": (dict(_TARGET), ()),
}  # fmt: skip
_BY_LOWER = {name.lower(): name for name in (*METHODS, *FOLLOW_UPS)}


def _fields(
    value: Mapping[str, Any], fields: Mapping[str, Check], required: tuple[str, ...], where: str
) -> dict[str, Any]:
    unknown = set(value) - set(fields)
    if unknown:
        names = ", ".join(f"{where}{name}" for name in sorted(map(str, unknown)))
        raise MalformedPayload(f"unknown field(s) {names}")
    missing = [name for name in required if value.get(name) is None]
    if missing:
        raise MalformedPayload(f"missing field(s) {', '.join(where + m for m in missing)}")
    args = {
        name: check(value[name], where + name)
        for name, check in fields.items()
        if value.get(name) is not None
    }
    _lengths(args, where)
    return args


def method_request(payload: Mapping[str, Any]) -> Request:
    """The request a payload with ``"method"`` (or sendMessage fields beyond the basic ones)
    names, checked field by field."""
    raw = payload.get("method", "sendMessage")
    if not isinstance(raw, str):
        raise MalformedPayload("method must be a Bot API method name")
    method = _BY_LOWER.get(raw.lower())
    if method is None:
        raise MalformedPayload(
            f"method {raw[:40]!r} is not a message the outbox sends (a send method such as "
            "sendPhoto, or a follow-up such as editMessageText)"
        )
    fields = {key: value for key, value in payload.items() if key != "method"}
    if method in METHODS:
        table, required = METHODS[method]
        args = _fields(fields, table, required, where="")
        weight = len(args["media"]) if method == "sendMediaGroup" else 1
        return Request(method, args, weight)
    return _follow_up(method, fields)


def _follow_up(method: str, fields: dict[str, Any]) -> Request:
    table, required = FOLLOW_UPS[method]
    key = fields.pop("message_key", None)
    if key is None:
        # Named by ids: any message the bot may act on, not only the outbox's own.
        chat_id, message_id = fields.pop("chat_id", None), fields.pop("message_id", None)
        if chat_id is None or message_id is None:
            raise MalformedPayload(
                f"{method} needs message_key (the key of a message the outbox sent), "
                "or chat_id and message_id"
            )
        args = _fields(fields, table, required, where="")
        ids = {"chat_id": chat_id_of(chat_id), "message_id": _MESSAGE_ID(message_id, "message_id")}
        return Request(method, {**ids, **args})
    if "chat_id" in fields or "message_id" in fields:
        raise MalformedPayload("message_key names the message: chat_id and message_id go without")
    # check_text first: a lone surrogate cannot be encoded to count its bytes.
    if (
        not isinstance(key, str)
        or not key
        or len(check_text(key, "message_key").encode()) > MAX_KEY_BYTES
    ):
        raise MalformedPayload(
            f"message_key must be a message's key (at most {MAX_KEY_BYTES} bytes)"
        )
    return Request(method, _fields(fields, table, required, where=""), message_key=key)
