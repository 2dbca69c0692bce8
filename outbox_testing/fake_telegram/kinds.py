"""Every kind of message beyond sendMessage, and the follow-ups on a message already sent.

The fake answers these methods as the real server does: it reads the parameters the way the
Bot API reads them (nested objects as JSON, parsed with python-telegram-bot's own classes where
it has them), answers Telegram's errors in Telegram's words, counts an album's items one by one
against the limits, and keeps the bot's messages as they stand now (edited, pinned, deleted).
A mixin of ``FakeTelegram``: it shares the server's lock, records and scripted faults.
"""

from __future__ import annotations

import base64
import copy
import hashlib
import json
import threading
import time
from collections.abc import Callable
from typing import Any

from aiohttp import web
from telegram import InlineKeyboardMarkup, LinkPreviewOptions, MessageEntity, ReplyParameters

from .checks import _parse_chat_id, parse_html
from .people import _NOT_MODIFIED, _chat, _flag, _People
from .records import Acted, Delivered, Fault
from .wire import _error, _ok

MAX_CAPTION_LENGTH = 1024
DELETE_WINDOW = 48 * 3600  # bots delete their messages for 48 hours (Telegram's rule)
_MEDIA = ("photo", "document", "video", "animation", "audio", "voice", "sticker")
SEND_METHODS = (
    *(f"send{kind.title()}" for kind in _MEDIA),
    "sendLocation",
    "sendVenue",
    "sendContact",
    "sendPoll",
    "sendDice",
    "sendMediaGroup",
    "copyMessage",
    "forwardMessage",
)
FOLLOW_UP_METHODS = (
    "editMessageCaption",
    "editMessageReplyMarkup",
    "editMessageMedia",
    "deleteMessage",
    "deleteMessages",
    "pinChatMessage",
    "unpinChatMessage",
)
_BAD_FILE = "Bad Request: wrong file identifier/HTTP URL specified"
_DICE = {"🎲": 6, "🎯": 6, "🎳": 6, "🏀": 5, "⚽": 5, "🎰": 64}


class _Refused(Exception):
    """A request Telegram answers with 400; the text is its description."""


def _json(params: dict[str, Any], name: str) -> Any:
    raw = params.get(name)
    if raw is None or raw == "":
        return None
    try:
        return json.loads(raw) if isinstance(raw, str) else raw
    except ValueError:
        raise _Refused(f"Bad Request: can't parse {name} JSON object") from None


def _file(value: Any, name: str) -> dict[str, Any]:
    """What Telegram makes of a file_id or a URL: the file's ids (never a local path)."""
    text = str(value or "")
    if text.startswith(("http://", "https://")):
        digest = hashlib.sha256(text.encode()).digest()
        file_id = "AgAC" + base64.urlsafe_b64encode(digest).decode().rstrip("=")
    elif len(text) >= 20 and all(c.isalnum() or c in "-_" for c in text):
        file_id = text
    else:
        raise _Refused(f"Bad Request: {name}: " + _BAD_FILE.removeprefix("Bad Request: "))
    return {"file_id": file_id, "file_unique_id": file_id[-16:]}


def _caption(params: dict[str, Any]) -> str | None:
    caption = params.get("caption")
    if caption is None:
        return None
    plain = str(caption)
    if str(params.get("parse_mode") or "").lower() == "html":
        plain, problem = parse_html(plain)
        if problem is not None:
            raise _Refused(f"Bad Request: {problem}")
    if len(plain) > MAX_CAPTION_LENGTH:
        raise _Refused("Bad Request: message caption is too long")
    return plain


def _check_objects(params: dict[str, Any]) -> dict[str, Any] | None:
    """Parse the nested objects with python-telegram-bot's classes, as the server parses them;
    the inline keyboard comes back as Telegram's JSON."""
    reply = _json(params, "reply_parameters")
    if reply is not None and (not isinstance(reply, dict) or "message_id" not in reply):
        raise _Refused("Bad Request: can't parse reply parameters JSON object")
    if reply is not None:
        ReplyParameters.de_json(reply, None)
    preview = _json(params, "link_preview_options")
    if preview is not None:
        LinkPreviewOptions.de_json(preview, None)
    for name in ("caption_entities", "entities"):
        entities = _json(params, name)
        if entities is not None:
            if not isinstance(entities, list):
                raise _Refused(f"Bad Request: can't parse {name} JSON object")
            MessageEntity.de_list(entities, None)
    markup = _json(params, "reply_markup")
    if markup is None:
        return None
    if not isinstance(markup, dict) or not isinstance(markup.get("inline_keyboard"), list):
        raise _Refused("Bad Request: can't parse inline keyboard markup JSON object")
    parsed = InlineKeyboardMarkup.de_json(markup, None)
    return None if parsed is None else parsed.to_dict()


def _media_content(kind: str, ref: Any, name: str) -> dict[str, Any]:
    ids = _file(ref, name)
    if kind == "photo":
        return {"photo": [{**ids, "width": 320, "height": 240, "file_size": 1024}]}
    if kind in ("video", "animation"):
        body = {**ids, "width": 320, "height": 240, "duration": 1}
        return {kind: body, **({"document": ids} if kind == "animation" else {})}
    if kind in ("audio", "voice"):
        return {kind: {**ids, "duration": 1}}
    if kind == "sticker":
        sticker = {**ids, "width": 512, "height": 512, "type": "regular"}
        return {"sticker": sticker | {"is_animated": False, "is_video": False}}
    return {"document": ids}


def _int(params: dict[str, Any], name: str) -> int:
    try:
        return int(params.get(name) or 0)
    except (TypeError, ValueError):
        return 0


class _KindsSide:
    """The methods beyond sendMessage (see the module docstring)."""

    # Set by FakeTelegram.__init__.
    _lock: threading.Condition
    _people: _People
    _delivered: list[Delivered]
    _acted: list[Acted]
    enforce_limits: bool
    rejected_429: int
    _next_message_id: Callable[[int], int]
    _take_fault: Callable[[int], Fault | None]
    _admit: Callable[[int, int, bool], int]
    _bot_user: Callable[[str, bool], dict[str, Any]]

    @property
    def acted(self) -> list[Acted]:
        """The follow-ups the fake applied (deletes, pins, caption/markup/media edits)."""
        with self._lock:
            return list(self._acted)

    def _kind(self, method: str, params: dict[str, Any], token: str) -> web.Response:  # noqa: PLR0911 - one answer per outcome
        """Answer one of SEND_METHODS or FOLLOW_UP_METHODS (faults and limits included)."""
        chat_id = _parse_chat_id(params.get("chat_id"))
        if chat_id is None:
            return _error(400, "Bad Request: chat not found")
        with self._lock:
            fault = self._take_fault(chat_id)
        if fault is not None and fault.status:
            return _error(fault.status, fault.description, dict(fault.parameters))
        try:
            if method in FOLLOW_UP_METHODS:
                return self._follow_up(method, chat_id, params)
            items = self._contents(method, chat_id, params)
            markup = None if method == "sendMediaGroup" else _check_objects(params)
        except _Refused as err:
            return _error(400, str(err))
        except (TypeError, ValueError, KeyError) as err:  # PTB's classes refusing an object
            return _error(400, f"Bad Request: can't parse JSON object: {type(err).__name__}")
        if self.enforce_limits:
            paid = _flag(params.get("allow_paid_broadcast"))
            with self._lock:
                for _ in items:  # an album's items count one by one, as Telegram counts them
                    wait = self._admit(int(token.split(":", 1)[0]), chat_id, paid)
                    if wait:
                        return _error(
                            429, f"Too Many Requests: retry after {wait}", {"retry_after": wait}
                        )
        messages = self._deliver_kind(method, chat_id, items, markup, token)
        if method == "sendMediaGroup":
            return _ok(messages)
        if method == "copyMessage":
            return _ok({"message_id": messages[0]["message_id"]})
        return _ok(messages[0])

    def _contents(self, method: str, chat_id: int, params: dict[str, Any]) -> list[dict[str, Any]]:
        """The content of each message the request makes (one, or an album's items)."""
        del chat_id
        kind = method.removeprefix("send").lower()
        if kind in _MEDIA:
            content = _media_content(kind, params.get(kind), kind)
            caption = _caption(params)
            return [content | ({"caption": caption} if caption is not None else {})]
        if method == "sendMediaGroup":
            return self._album(params)
        if method in ("copyMessage", "forwardMessage"):
            source_chat = _parse_chat_id(params.get("from_chat_id"))
            with self._lock:
                source = self._people.messages.get((source_chat or 0, _int(params, "message_id")))
            if source is None:
                verb = "copy" if method == "copyMessage" else "forward"
                raise _Refused(f"Bad Request: message to {verb} not found")
            content = {k: v for k, v in source.items() if k not in _ENVELOPE}
            if method == "forwardMessage":
                content["forward_origin"] = {"type": "chat", "date": source["date"],
                                             "sender_chat": source["chat"]}  # fmt: skip
            return [content]
        return [self._other_content(method, params)]

    def _album(self, params: dict[str, Any]) -> list[dict[str, Any]]:
        media = _json(params, "media")
        if not isinstance(media, list) or not 2 <= len(media) <= 10:
            raise _Refused("Bad Request: media must include 2-10 items")
        kinds = {item.get("type") if isinstance(item, dict) else None for item in media}
        if not kinds <= {"photo", "video", "audio", "document"} or (
            len(kinds) > 1 and kinds & {"audio", "document"}
        ):
            raise _Refused("Bad Request: can't use the media of the specified type in the album")
        group = str(int(time.time() * 1000))
        items = []
        for item in media:
            content = _media_content(str(item["type"]), item.get("media"), "media")
            caption = _caption(item)
            items.append(
                content | {"media_group_id": group}
                | ({"caption": caption} if caption is not None else {})
            )  # fmt: skip
        return items

    def _other_content(self, method: str, params: dict[str, Any]) -> dict[str, Any]:
        if method in ("sendLocation", "sendVenue"):
            try:
                location = {"latitude": float(params["latitude"]),
                            "longitude": float(params["longitude"])}  # fmt: skip
            except (KeyError, ValueError):
                raise _Refused("Bad Request: wrong latitude or longitude") from None
            if not (abs(location["latitude"]) <= 90 and abs(location["longitude"]) <= 180):
                raise _Refused("Bad Request: wrong location specified")
            if method == "sendLocation":
                return {"location": location}
            if not params.get("title") or not params.get("address"):
                raise _Refused("Bad Request: venue title and address must be non-empty")
            venue = {"location": location, "title": params["title"], "address": params["address"]}
            return {"venue": venue, "location": location}
        if method == "sendContact":
            if not params.get("phone_number") or not params.get("first_name"):
                raise _Refused("Bad Request: phone number and first name must be non-empty")
            return {"contact": {"phone_number": params["phone_number"],
                                "first_name": params["first_name"]}}  # fmt: skip
        if method == "sendPoll":
            return {"poll": self._poll(params)}
        emoji = str(params.get("emoji") or "🎲")
        if emoji not in _DICE:
            raise _Refused("Bad Request: invalid dice emoji")
        return {"dice": {"emoji": emoji, "value": 1 + int(time.time()) % _DICE[emoji]}}

    @staticmethod
    def _poll(params: dict[str, Any]) -> dict[str, Any]:
        question = str(params.get("question") or "")
        options = _json(params, "options")
        if not question or len(question) > 300:
            raise _Refused("Bad Request: poll question length must not exceed 300")
        if not isinstance(options, list) or not 2 <= len(options) <= 12:
            raise _Refused("Bad Request: poll must have at least 2 option")
        texts = [str(o.get("text") if isinstance(o, dict) else o) for o in options]
        if any(not t or len(t) > 100 for t in texts):
            raise _Refused("Bad Request: poll options length must not exceed 100")
        return {
            "id": str(abs(hash(question)) % 10**12),
            "question": question,
            "options": [{"text": t, "voter_count": 0} for t in texts],
            "total_voter_count": 0,
            "is_closed": False,
            "is_anonymous": True,
            "type": str(params.get("type") or "regular"),
            "allows_multiple_answers": False,
        }

    def _deliver_kind(
        self,
        method: str,
        chat_id: int,
        items: list[dict[str, Any]],
        markup: dict[str, Any] | None,
        token: str,
    ) -> list[dict[str, Any]]:
        wall = time.time()
        bot_id = int(token.split(":", 1)[0])
        answers = []
        with self._lock:
            for content in items:
                message_id = self._next_message_id(chat_id)
                message = {
                    "message_id": message_id,
                    "from": self._bot_user(token, False),
                    "chat": _chat(chat_id),
                    "date": int(wall),
                    **content,
                }
                if markup is not None:
                    message["reply_markup"] = markup
                self._people.messages[(chat_id, message_id)] = message
                self._delivered.append(
                    Delivered(
                        chat_id,
                        str(content.get("caption") or ""),
                        message_id,
                        time.monotonic(),
                        wall,
                        None,
                        markup,
                        bot_id,
                        method=method,
                        media=_file_of(content),
                    )
                )
                answers.append(copy.deepcopy(message))
            self._lock.notify_all()
        return answers

    # ---- follow-ups ----

    def _follow_up(self, method: str, chat_id: int, params: dict[str, Any]) -> web.Response:
        if method == "deleteMessages":
            ids = _json(params, "message_ids")
            if not isinstance(ids, list) or not 1 <= len(ids) <= 100:
                raise _Refused("Bad Request: message identifiers are not specified")
            with self._lock:
                gone = [i for i in ids if self._people.messages.pop((chat_id, int(i)), None)]
                self._act(method, chat_id, gone)
            return _ok(True)
        message_id = _int(params, "message_id")
        if method == "unpinChatMessage" and not message_id:
            with self._lock:
                self._act(method, chat_id, [])
            return _ok(True)
        with self._lock:
            message = self._people.messages.get((chat_id, message_id))
            if message is None:
                what = {"deleteMessage": "delete", "pinChatMessage": "pin",
                        "unpinChatMessage": "unpin"}.get(method, "edit")  # fmt: skip
                return _error(400, f"Bad Request: message to {what} not found")
            if method == "deleteMessage":
                if time.time() - message["date"] > DELETE_WINDOW:
                    return _error(400, "Bad Request: message can't be deleted for everyone")
                del self._people.messages[(chat_id, message_id)]
            elif method in ("pinChatMessage", "unpinChatMessage"):
                message["is_pinned"] = method == "pinChatMessage"
            else:
                return self._edit(method, chat_id, message, params)
            self._act(method, chat_id, [message_id])
            return _ok(True)

    def _edit(
        self, method: str, chat_id: int, message: dict[str, Any], params: dict[str, Any]
    ) -> web.Response:
        """editMessageCaption, editMessageReplyMarkup, editMessageMedia; under the lock."""
        markup = _check_objects(params)
        before = copy.deepcopy(message)
        if method == "editMessageCaption":
            if "text" in message:
                return _error(400, "Bad Request: there is no caption in the message to edit")
            caption = _caption(params)
            message.pop("caption", None)
            if caption:
                message["caption"] = caption
        elif method == "editMessageMedia":
            media = _json(params, "media")
            if not isinstance(media, dict) or "type" not in media:
                raise _Refused("Bad Request: can't parse InputMedia JSON object")
            for kind in (*_MEDIA, "text", "caption"):
                message.pop(kind, None)
            message.update(_media_content(str(media["type"]), media.get("media"), "media"))
            caption = _caption(media)
            if caption:
                message["caption"] = caption
        message.pop("reply_markup", None)  # an edit without reply_markup removes the keyboard
        if markup is not None:
            message["reply_markup"] = markup
        if message == before:
            return _error(400, _NOT_MODIFIED)
        message["edit_date"] = int(time.time())
        self._act(method, chat_id, [message["message_id"]])
        return _ok(copy.deepcopy(message))

    def _act(self, method: str, chat_id: int, message_ids: list[int]) -> None:
        self._acted.append(Acted(method, chat_id, tuple(message_ids), time.time()))
        self._lock.notify_all()

    def age_message(self, chat_id: int, message_id: int, seconds: float) -> None:
        """Make a message of the bot ``seconds`` older (for Telegram's 48-hour delete rule)."""
        with self._lock:
            self._people.messages[(chat_id, message_id)]["date"] -= int(seconds)


_ENVELOPE = ("message_id", "from", "chat", "date", "edit_date", "is_pinned", "reply_markup")


def _file_of(content: dict[str, Any]) -> str | None:
    for kind in _MEDIA:
        found = content.get(kind)
        if isinstance(found, list):
            return str(found[-1]["file_id"])
        if isinstance(found, dict):
            return str(found["file_id"])
    return None
