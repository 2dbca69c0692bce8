"""A fake Telegram Bot API server that speaks Telegram's real HTTP protocol.

python-telegram-bot runs its real HTTP stack against it: ``/bot<token>/getMe`` and
``/bot<token>/sendMessage`` with form, JSON or multipart bodies, Telegram's exact JSON envelopes
and status codes. Faults can be scripted per chat, Telegram's rate limits can be enforced, and
every request and delivery is recorded with timestamps. A small control API under ``/_fake/``
drives a fake running in another process.

For a bot that receives updates the fake also plays the people: a test posts a user's message
(``post_message``) or a press of an inline button (``press_button``), and the bot reads them
with ``getUpdates`` (offsets and long polling as Telegram does them) or receives them on its
webhook (``setWebhook``: the fake POSTs each update with the secret-token header until the bot
answers 200). ``answerCallbackQuery`` and ``editMessageText`` answer as the real server does,
errors included (a query answered twice, a message not modified). Unlike the real server, two
bots may long-poll at once: Telegram answers the second with 409 Conflict, the fake hands both
the same updates, which is the worst case a bot's own duplicate check must survive.

Rate limits (``enforce_limits``), kept for each bot (the numeric part of its token) apart, as
Telegram keeps them: 30 messages in any 1 s window per bot, 1 message in any 1 s window per
private chat (no burst, so a second message within a second is refused), 20 messages in any 60 s
window per group (negative chat id). Limits are checked before scripted faults; a refused
message consumes no fault and takes no slot.
"""

from __future__ import annotations

import asyncio
import contextlib
import copy
import hashlib
import hmac
import json
import math
import re
import secrets
import signal
import threading
import time
from collections import deque
from collections.abc import Callable
from dataclasses import asdict, dataclass, replace
from http import HTTPStatus
from typing import Any

from aiohttp import web

TOKEN_RE = re.compile(r"\d+:[A-Za-z0-9_-]+")
MAX_TEXT_LENGTH = 4096
_METHODS = {
    name.lower(): name
    for name in (
        "getMe",
        "sendMessage",
        "getUpdates",
        "answerCallbackQuery",
        "editMessageText",
        "setWebhook",
        "deleteWebhook",
        "getWebhookInfo",
        "setMyCommands",
    )
}
_QUERY_INVALID = "Bad Request: query is too old and response timeout expired or query ID is invalid"
_NOT_MODIFIED = (
    "Bad Request: message is not modified: specified new message content and reply markup are "
    "exactly the same as a current content and reply markup of the message"
)
_COMMAND_RE = re.compile(r"/[A-Za-z0-9_]{1,32}(?:@[A-Za-z0-9_]{1,32})?")
_MAX_CALLBACK_DATA = 64
_PARSE_MODES = frozenset({"html", "markdown", "markdownv2"})
_ALLOWED_TAGS = frozenset(
    {"b", "strong", "i", "em", "u", "ins", "s", "strike", "del", "a", "code", "pre"}
    | {"tg-spoiler", "span", "blockquote"}
)
_SPECIAL_RE = re.compile(r"[<&]")
_TAG_RE = re.compile(r"<(/?)([A-Za-z][A-Za-z0-9-]*)(?:\s[^<>]*)?>")
_ENTITY_RE = re.compile(r"&(?:(lt|gt|amp|quot)|#([0-9]{1,7})|#[xX]([0-9A-Fa-f]{1,6}));")
_NAMED_ENTITIES = {"lt": "<", "gt": ">", "amp": "&", "quot": '"'}
_INT64 = 2**63
_BOT_USER = {"is_bot": True, "first_name": "Fake Bot", "username": "fake_outbox_bot"}
_BOT_ME = dict.fromkeys(
    ("can_read_all_group_messages", "supports_inline_queries", "can_connect_to_business"), False
) | {"can_join_groups": True, "has_main_web_app": False}
_NGINX_502 = (
    "<html>\r\n<head><title>502 Bad Gateway</title></head>\r\n<body>\r\n"
    "<center><h1>502 Bad Gateway</h1></center>\r\n<hr><center>nginx</center>\r\n"
    "</body>\r\n</html>\r\n"
)


@dataclass(frozen=True, slots=True)
class Delivered:
    chat_id: int
    text: str
    message_id: int
    at: float  # time.monotonic() when accepted
    wall: float  # time.time() when accepted
    parse_mode: str | None
    reply_markup: dict[str, Any] | None = None  # the inline keyboard, as Telegram's JSON
    bot_id: int = 0  # the numeric part of the token that sent it: which bot (or test relay)


@dataclass(frozen=True, slots=True)
class Edited:
    """An editMessageText the fake accepted."""

    chat_id: int
    message_id: int
    text: str
    reply_markup: dict[str, Any] | None
    wall: float


@dataclass(frozen=True, slots=True)
class CallbackAnswer:
    """An answerCallbackQuery the fake accepted."""

    callback_query_id: str
    text: str | None
    show_alert: bool


@dataclass(frozen=True, slots=True)
class RequestRecord:
    chat_id: int | None
    method: str  # never contains the token
    at: float  # time.monotonic() when the request arrived
    status: int  # HTTP status answered; 0 when the connection was dropped
    bot_id: int = 0  # the numeric part of the token; 0 when the token was malformed


@dataclass(frozen=True, slots=True)
class Fault:
    """One scripted answer to a sendMessage; build it with the constructors below."""

    kind: str
    status: int = 0
    description: str = ""
    parameters: tuple[tuple[str, int], ...] = ()
    delay: float = 0.0
    delivered: bool = False

    @classmethod
    def retry_after(cls, seconds: int) -> Fault:
        return cls(
            "retry_after",
            429,
            f"Too Many Requests: retry after {seconds}",
            (("retry_after", int(seconds)),),
        )

    @classmethod
    def forbidden(cls, description: str = "bot was blocked by the user") -> Fault:
        return cls("forbidden", 403, _prefixed("Forbidden: ", description))

    @classmethod
    def bad_request(cls, description: str = "chat not found") -> Fault:
        return cls("bad_request", 400, _prefixed("Bad Request: ", description))

    @classmethod
    def migrate(cls, new_chat_id: int) -> Fault:
        return cls(
            "migrate",
            400,
            "Bad Request: group chat was upgraded to a supergroup chat",
            (("migrate_to_chat_id", int(new_chat_id)),),
        )

    @classmethod
    def server_error(cls, status: int = 500) -> Fault:
        if not 500 <= status <= 599 or status not in HTTPStatus.__members__.values():
            raise ValueError("server_error needs a known 5xx status")
        return cls("server_error", status, HTTPStatus(status).phrase)

    @classmethod
    def bad_gateway_html(cls) -> Fault:
        return cls("bad_gateway_html", 502, _NGINX_502)

    @classmethod
    def unauthorized(cls) -> Fault:
        return cls("unauthorized", 401, "Unauthorized")

    @classmethod
    def slow(cls, seconds: float) -> Fault:
        # The message is delivered at once; only the answer is late.
        return cls("slow", delay=float(seconds), delivered=True)

    @classmethod
    def drop(cls, delivered: bool = False) -> Fault:
        # Connection closed without an answer; ``delivered`` says whether Telegram got it.
        return cls("drop", delivered=bool(delivered))

    def after(self, seconds: float) -> Fault:
        """The same answer, given ``seconds`` late (a Bot API that hangs, then refuses)."""
        return replace(self, delay=float(seconds))

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> Fault:
        """Build from the control API shape ``{"kind": ..., **constructor args}``."""
        args = dict(data)
        kind = args.pop("kind", None)
        if kind not in _FAULT_KINDS:
            raise ValueError(f"unknown fault kind {kind!r}")
        fault: Fault = getattr(cls, kind)(**args)
        return fault


_FAULT_KINDS = frozenset(
    {"retry_after", "forbidden", "bad_request", "migrate", "server_error", "bad_gateway_html"}
    | {"unauthorized", "slow", "drop"}
)


def _prefixed(prefix: str, description: str) -> str:
    return description if description.startswith(prefix) else prefix + description


def _json_response(
    status: int, payload: Any, headers: dict[str, str] | None = None
) -> web.Response:
    body = json.dumps(payload, separators=(",", ":"), ensure_ascii=False).encode()
    return web.Response(body=body, status=status, headers=headers, content_type="application/json")


def _ok(result: Any, description: str | None = None) -> web.Response:
    payload: dict[str, Any] = {"ok": True, "result": result}
    if description is not None:
        payload["description"] = description
    return _json_response(200, payload)


def _error(status: int, description: str, parameters: dict[str, int] | None = None) -> web.Response:
    payload: dict[str, Any] = {"ok": False, "error_code": status, "description": description}
    headers = None
    if parameters:
        payload["parameters"] = parameters
        if "retry_after" in parameters:
            headers = {"Retry-After": str(parameters["retry_after"])}
    return _json_response(status, payload, headers)


def parse_html(text: str) -> tuple[str, str | None]:
    """Check Telegram-style HTML; return (plain text, error description or None)."""
    out: list[str] = []
    stack: list[str] = []
    i, problem = 0, None
    while problem is None and (found := _SPECIAL_RE.search(text, i)) is not None:
        out.append(text[i : found.start()])
        problem, i = _html_token(text, found.start(), out, stack)
    if problem is None and stack:
        problem = f'Can\'t find end tag corresponding to start tag "{stack[-1]}"'
    if problem is not None:
        return "", "can't parse entities: " + problem
    out.append(text[i:])
    return "".join(out), None


def _html_token(text: str, k: int, out: list[str], stack: list[str]) -> tuple[str | None, int]:
    """Consume the entity or tag at ``k``: (problem or None, next index)."""
    at = f"at byte offset {len(text[:k].encode())}"  # Telegram counts UTF-8 bytes
    if text[k] == "&":
        m = _ENTITY_RE.match(text, k)
        if m is None or (char := _decode_entity(m)) is None:
            return f"Unexpected character '&' {at}", k
        out.append(char)
        return None, m.end()
    m = _TAG_RE.match(text, k)
    if m is None:
        return f"Unexpected character '<' {at}", k
    closing, name = m.group(1) == "/", m.group(2).lower()
    problem = None
    if name not in _ALLOWED_TAGS:
        problem = f'Unsupported {"end" if closing else "start"} tag "{name}" {at}'
    elif not closing:
        stack.append(name)
    elif not stack:
        problem = f"Unexpected end tag {at}"
    elif stack[-1] != name:
        problem = f'Unmatched end tag {at}, expected "</{stack[-1]}>", found "</{name}>"'
    else:
        stack.pop()
    return problem, m.end()


def _decode_entity(m: re.Match[str]) -> str | None:
    if m.group(1):
        return _NAMED_ENTITIES[m.group(1)]
    code = int(m.group(2), 10) if m.group(2) else int(m.group(3), 16)
    return chr(code) if 0 < code <= 0x10FFFF and not 0xD800 <= code <= 0xDFFF else None


def _check_send(
    params: dict[str, Any],
) -> tuple[int | None, str, str, str | None, str | None]:
    """Validate sendMessage like the real server: (chat_id, text, plain, parse_mode, problem)."""
    raw_chat = params.get("chat_id")
    text = "" if params.get("text") is None else str(params["text"])
    parse_mode = str(params.get("parse_mode") or "") or None
    if raw_chat is None or raw_chat == "":
        return None, text, text, parse_mode, "chat_id is empty"
    chat_id = _parse_chat_id(raw_chat)
    if chat_id is None:
        return None, text, text, parse_mode, "chat not found"
    plain, problem = text, None
    if parse_mode is not None and parse_mode.lower() not in _PARSE_MODES:
        problem = "unsupported parse_mode"
    elif parse_mode is not None and parse_mode.lower() == "html":
        plain, problem = parse_html(text)
    if problem is None and not plain.strip():
        problem = "message text is empty"
    elif problem is None and len(plain) > MAX_TEXT_LENGTH:  # code points, after entity parsing
        problem = "message is too long"
    return chat_id, text, plain, parse_mode, problem


def _read_markup(raw: Any) -> tuple[dict[str, Any] | None, str | None]:
    """An inline keyboard from a request (a JSON string in a form): (markup, problem)."""
    if raw is None or raw == "":
        return None, None
    try:
        markup = json.loads(raw) if isinstance(raw, str) else raw
    except ValueError:
        return None, "can't parse reply keyboard markup JSON object"
    rows = markup.get("inline_keyboard") if isinstance(markup, dict) else None
    if not isinstance(rows, list) or not all(isinstance(row, list) for row in rows):
        return None, "can't parse inline keyboard markup JSON object"
    for row in rows:
        for button in row:
            if not isinstance(button, dict) or not str(button.get("text") or "").strip():
                return None, "can't parse inline keyboard button: Text buttons are unallowed"
            data = button.get("callback_data")
            if data is not None and not 1 <= len(str(data).encode()) <= _MAX_CALLBACK_DATA:
                return None, "BUTTON_DATA_INVALID"
    return {"inline_keyboard": rows}, None


def _parse_chat_id(raw: Any) -> int | None:
    if isinstance(raw, bool):
        return None
    if isinstance(raw, int):
        value = raw
    elif isinstance(raw, str) and re.fullmatch(r"-?[0-9]{1,19}", raw.strip()):
        value = int(raw)
    else:
        return None  # e.g. "@username": no such chat for the fake
    return value if value != 0 and -_INT64 <= value < _INT64 else None


class _Limiter:
    """One bot's sliding-window counters of accepted messages (see the module docstring)."""

    bot_per_second = 30
    private_per_second = 1
    group_per_minute = 20

    def __init__(self) -> None:
        self.bot: deque[float] = deque()
        self.chats: dict[int, deque[float]] = {}

    def admit(self, chat_id: int, now: float) -> int:
        """Take a slot and return 0, or return the retry_after seconds to answer."""
        private = chat_id > 0
        window = 1.0 if private else 60.0
        limit = self.private_per_second if private else self.group_per_minute
        chat = self.chats.setdefault(chat_id, deque())
        for q, span in ((self.bot, 1.0), (chat, window)):
            while q and q[0] <= now - span:
                q.popleft()
        wait = 0.0
        if len(self.bot) >= self.bot_per_second:
            wait = self.bot[0] + 1.0 - now
        if len(chat) >= limit:
            wait = max(wait, chat[0] + window - now)
        if len(self.bot) >= self.bot_per_second or len(chat) >= limit:
            return max(1, math.ceil(wait))
        self.bot.append(now)
        chat.append(now)
        return 0


class _Entry:
    __slots__ = ("fault", "left")

    def __init__(self, fault: Fault, left: int | None) -> None:
        self.fault, self.left = fault, left


class _People:
    """The users' side: updates not yet confirmed by the bot, and the bot's messages as they
    stand now (for button presses and edits)."""

    def __init__(self) -> None:
        self.updates: list[dict[str, Any]] = []
        self.sent_updates: dict[int, dict[str, Any]] = {}  # every update ever posted, by id
        self.next_update_id = 700_000_001
        self.messages: dict[tuple[int, int], dict[str, Any]] = {}
        self.queries: dict[str, bool] = {}  # callback query id -> answered
        self.answers: list[CallbackAnswer] = []
        self.edits: list[Edited] = []
        self.webhook_url = ""
        self.webhook_secret: str | None = None


def _person(user_id: int, first_name: str) -> dict[str, Any]:
    return {"id": user_id, "is_bot": False, "first_name": first_name, "language_code": "uz"}


def _chat(chat_id: int, first_name: str = "") -> dict[str, Any]:
    if chat_id > 0:
        return {"id": chat_id, "first_name": first_name or f"User {chat_id}", "type": "private"}
    kind = "supergroup" if str(chat_id).startswith("-100") else "group"
    return {"id": chat_id, "title": f"Group {chat_id}", "type": kind}


def _bot_id(token: str) -> int:
    """The numeric part of a well-formed token is the bot's user id."""
    return int(token.split(":", 1)[0])


def _flag(value: Any) -> bool:
    return str(value).lower() == "true"


class FakeTelegram:
    """The fake server. Records are read through thread-safe snapshot properties."""

    def __init__(
        self, token: str | None = None, *, latency: float = 0.0, enforce_limits: bool = False
    ) -> None:
        # Only a digest of the expected token is kept, so it cannot leak from this object.
        self._token_digest = None if token is None else hashlib.sha256(token.encode()).digest()
        self.latency = latency
        self.enforce_limits = enforce_limits
        self._lock = threading.Condition()
        self._delivered: list[Delivered] = []
        self._requests: list[RequestRecord] = []
        self._scripts: dict[int | None, deque[_Entry]] = {}
        self._message_ids: dict[int, int] = {}
        self._limiters: dict[int, _Limiter] = {}  # by bot id
        self.rejected_429 = 0
        # Called with the chat id of every well-formed sendMessage before it is answered, on the
        # server's thread: tests inject faults that are not answers (the sender killed mid-send).
        self.on_send: Callable[[int], None] | None = None
        self._people = _People()
        self._host = "127.0.0.1"
        self._port = 0
        self._runner: web.AppRunner | None = None
        self._loop: asyncio.AbstractEventLoop | None = None
        self._thread: threading.Thread | None = None
        self._loop_task: asyncio.Task[None] | None = None

    # ---- records and scripting (callable from any thread) ----

    @property
    def delivered(self) -> list[Delivered]:
        with self._lock:
            return list(self._delivered)

    @property
    def requests(self) -> list[RequestRecord]:
        with self._lock:
            return list(self._requests)

    def delivered_to(self, chat_id: int) -> list[Delivered]:
        with self._lock:
            return [d for d in self._delivered if d.chat_id == chat_id]

    def count(self) -> int:
        with self._lock:
            return len(self._delivered)

    def stats(self) -> dict[str, int]:
        with self._lock:
            return {
                "delivered": len(self._delivered),
                "requests": len(self._requests),
                "rejected_429": self.rejected_429,
            }

    def wait_delivered(self, n: int, timeout: float = 10.0) -> bool:
        """Block (outside the fake's loop) until at least ``n`` messages were delivered."""
        with self._lock:
            return self._lock.wait_for(lambda: len(self._delivered) >= n, timeout)

    def reset(self) -> None:
        """Forget records, scripts, counters and rate windows; keep latency and limits."""
        with self._lock:
            self._delivered.clear()
            self._requests.clear()
            self._scripts.clear()
            self._message_ids.clear()
            self._limiters.clear()
            self.rejected_429 = 0
            self._people = _People()

    def script(self, chat_id: int | None, fault: Fault, times: int | None = 1) -> None:
        """Queue ``fault`` for ``chat_id`` (None: any chat) ``times`` times, or forever if None.

        Per-chat entries are used before wildcard ones; each queue is FIFO, and a forever entry
        holds its queue until reset().
        """
        if times is not None and times < 1:
            raise ValueError("times must be >= 1 or None")
        with self._lock:
            self._scripts.setdefault(chat_id, deque()).append(_Entry(fault, times))

    def _admit(self, bot_id: int, chat_id: int) -> int:
        """The bot's limiter admits the message (0) or names the retry_after; under the lock."""
        limiter = self._limiters.setdefault(bot_id, _Limiter())
        return limiter.admit(chat_id, time.monotonic())

    def _take_fault(self, chat_id: int) -> Fault | None:
        for key in (chat_id, None):
            queue = self._scripts.get(key)
            if queue:
                entry = queue[0]
                if entry.left is not None:
                    entry.left -= 1
                    if entry.left <= 0:
                        queue.popleft()
                return entry.fault
        return None

    # ---- the people: messages and button presses for a bot to receive ----

    @property
    def edits(self) -> list[Edited]:
        with self._lock:
            return list(self._people.edits)

    @property
    def callback_answers(self) -> list[CallbackAnswer]:
        with self._lock:
            return list(self._people.answers)

    def pending_updates(self) -> int:
        """Updates the bot has not confirmed yet (getUpdates offset, or a webhook's 200)."""
        with self._lock:
            return len(self._people.updates)

    def message(self, chat_id: int, message_id: int) -> dict[str, Any] | None:
        """A message of the bot as it stands now (after edits), in Telegram's JSON."""
        with self._lock:
            found = self._people.messages.get((chat_id, message_id))
            return None if found is None else copy.deepcopy(found)

    def post_message(
        self, chat_id: int, text: str, *, first_name: str = "Aziza", user_id: int | None = None
    ) -> int:
        """A person writes ``text`` in ``chat_id`` (a private chat: the user id is the chat id).

        Returns the update id. A leading /command gets its ``bot_command`` entity, as in
        Telegram, which is what command handlers look for.
        """
        sender = _person(chat_id if user_id is None else user_id, first_name)
        with self._lock:
            message: dict[str, Any] = {
                "message_id": self._next_message_id(chat_id),
                "from": sender,
                "chat": _chat(chat_id, first_name),
                "date": int(time.time()),
                "text": text,
            }
            command = _COMMAND_RE.match(text)
            if command is not None:
                length = len(command.group().encode("utf-16-le")) // 2
                message["entities"] = [{"offset": 0, "length": length, "type": "bot_command"}]
            return self._add_update({"message": message})

    def post_migration(self, chat_id: int, new_chat_id: int) -> int:
        """The group ``chat_id`` became the supergroup ``new_chat_id``: its service message."""
        with self._lock:
            message = {
                "message_id": self._next_message_id(chat_id),
                "from": _person(chat_id, "Admin") | {"id": 1},
                "chat": _chat(chat_id),
                "date": int(time.time()),
                "migrate_to_chat_id": new_chat_id,
            }
            return self._add_update({"message": message})

    def press_button(
        self,
        chat_id: int,
        message_id: int,
        *,
        data: str | None = None,
        text: str | None = None,
        first_name: str = "Aziza",
    ) -> str:
        """A person presses an inline button of the bot's message (by its data or its text).

        With ``data`` the press may be of a keyboard the message no longer has: a client still
        showing the old keyboard (a double tap before the edit arrived) sends it so. Returns
        the callback query id, which answerCallbackQuery must name.
        """
        with self._lock:
            message = self._people.messages.get((chat_id, message_id))
            if message is None:
                raise ValueError(f"no message {message_id} in chat {chat_id}")
            if data is None:
                buttons = [
                    b
                    for row in message.get("reply_markup", {}).get("inline_keyboard", [])
                    for b in row
                    if b["text"] == text and "callback_data" in b
                ]
                if not buttons:
                    raise ValueError(f"message {message_id} has no button {text!r}")
                data = str(buttons[0]["callback_data"])
            query_id = str(secrets.randbits(63))
            self._people.queries[query_id] = False
            query = {
                "id": query_id,
                "from": _person(chat_id if chat_id > 0 else 1, first_name),
                "message": copy.deepcopy(message),
                "chat_instance": str(-abs(hash(chat_id)) % 2**62),
                "data": data,
            }
            self._add_update({"callback_query": query})
            return query_id

    def posted_updates(self) -> list[dict[str, Any]]:
        """Every update posted so far (messages and button presses), oldest first."""
        with self._lock:
            return copy.deepcopy(list(self._people.sent_updates.values()))

    def redeliver(self, update_id: int) -> None:
        """Offer an update again, as Telegram does when a bot did not confirm it: a webhook
        that answered too late, or a poller that died before its next getUpdates (a poller
        that lives on confirms it away with its next offset, as with Telegram)."""
        with self._lock:
            self._people.updates.append(copy.deepcopy(self._people.sent_updates[update_id]))
            self._lock.notify_all()

    def _next_message_id(self, chat_id: int) -> int:
        message_id = self._message_ids.get(chat_id, 0) + 1
        self._message_ids[chat_id] = message_id
        return message_id

    def _add_update(self, body: dict[str, Any]) -> int:
        update_id = self._people.next_update_id
        self._people.next_update_id += 1
        self._people.updates.append({"update_id": update_id, **body})
        self._people.sent_updates[update_id] = copy.deepcopy(self._people.updates[-1])
        self._lock.notify_all()
        return update_id

    # ---- Bot API ----

    def _record(
        self, bot_id: int, chat_id: int | None, method: str, at: float, status: int
    ) -> None:
        with self._lock:
            self._requests.append(RequestRecord(chat_id, method, at, status, bot_id))
            if status == 429:
                self.rejected_429 += 1

    async def _answer(
        self,
        bot_id: int,
        chat_id: int | None,
        method: str,
        at: float,
        response: web.Response,
        *,
        delay: float = 0.0,
    ) -> web.Response:
        self._record(bot_id, chat_id, method, at, response.status)
        if self.latency + delay > 0:
            await asyncio.sleep(self.latency + delay)
        return response

    def _bot_user(self, token: str, full: bool) -> dict[str, Any]:
        # The numeric part of a token is the bot's user id; the secret part is never echoed.
        user = {"id": _bot_id(token), **_BOT_USER}
        return {**user, **_BOT_ME} if full else user

    async def _bot_api(self, request: web.Request) -> web.StreamResponse:  # noqa: PLR0911
        at = time.monotonic()
        token = request.match_info["token"]
        raw_method = request.match_info["method"]
        method = _METHODS.get(raw_method.lower(), raw_method[:64])
        if not TOKEN_RE.fullmatch(token):
            return await self._answer(0, None, method, at, _error(404, "Not Found"))
        bot_id = _bot_id(token)
        if self._token_digest is not None and not hmac.compare_digest(
            hashlib.sha256(token.encode()).digest(), self._token_digest
        ):
            return await self._answer(bot_id, None, method, at, _error(401, "Unauthorized"))
        if method == "getMe":
            me = {"ok": True, "result": self._bot_user(token, full=True)}
            return await self._answer(bot_id, None, method, at, _json_response(200, me))
        if method not in _METHODS.values():
            return await self._answer(bot_id, None, method, at, _error(404, "Not Found"))
        try:
            params = await _read_params(request)
        except ValueError:
            bad_json = _error(400, "Bad Request: can't parse JSON object")
            return await self._answer(bot_id, None, method, at, bad_json)
        except ConnectionResetError:
            # The client vanished mid-request (a relay killed with -9): nothing was delivered
            # and nobody is left to answer.
            return web.Response(status=400)
        if method == "sendMessage":
            return await self._send_message(request, token, params, at)
        if method == "getUpdates":
            return await self._answer(bot_id, None, method, at, await self._get_updates(params))
        handler = {
            "answerCallbackQuery": self._answer_callback_query,
            "editMessageText": self._edit_message_text,
            "setWebhook": self._set_webhook,
            "deleteWebhook": self._delete_webhook,
            "getWebhookInfo": self._webhook_info,
            "setMyCommands": self._set_my_commands,
        }[method]
        return await self._answer(bot_id, None, method, at, handler(params, token))

    async def _get_updates(self, params: dict[str, Any]) -> web.Response:
        """Confirm the updates below ``offset``; wait up to ``timeout`` s for newer ones."""
        try:
            offset = int(params.get("offset") or 0)
            limit = min(max(int(params.get("limit") or 100), 1), 100)
            timeout = min(max(float(params.get("timeout") or 0), 0.0), 50.0)
        except ValueError:
            return _error(400, "Bad Request: invalid getUpdates parameters")
        with self._lock:
            if self._people.webhook_url:
                return _error(
                    409,
                    "Conflict: can't use getUpdates method while webhook is active; "
                    "use deleteWebhook to delete the webhook first",
                )
            updates = self._people.updates
            if offset < 0:
                del updates[: max(0, len(updates) + offset)]
            elif offset > 0:
                updates[:] = [u for u in updates if u["update_id"] >= offset]
        deadline = time.monotonic() + timeout
        while True:
            with self._lock:
                batch = list(self._people.updates[:limit])
            if batch or time.monotonic() >= deadline or self._runner is None:
                return _ok(batch)
            await asyncio.sleep(0.02)

    def _answer_callback_query(self, params: dict[str, Any], _token: str) -> web.Response:
        query_id = str(params.get("callback_query_id") or "")
        text = params.get("text")
        with self._lock:
            if self._people.queries.get(query_id, True):  # unknown, or answered already
                return _error(400, _QUERY_INVALID)
            self._people.queries[query_id] = True
            self._people.answers.append(
                CallbackAnswer(
                    query_id, None if text is None else str(text), _flag(params.get("show_alert"))
                )
            )
            self._lock.notify_all()
        return _ok(True)

    def _edit_message_text(self, params: dict[str, Any], _token: str) -> web.Response:
        if params.get("inline_message_id"):
            return _error(400, "Bad Request: the fake has no inline messages")
        chat_id, text, plain, _parse_mode, problem = _check_send(params)
        markup, markup_problem = _read_markup(params.get("reply_markup"))
        problem = problem or markup_problem
        try:
            message_id = int(params.get("message_id") or 0)
        except ValueError:
            message_id = 0
        if problem is not None or chat_id is None:
            return _error(400, f"Bad Request: {problem}")
        with self._lock:
            message = self._people.messages.get((chat_id, message_id))
            if message is None:
                return _error(400, "Bad Request: message to edit not found")
            if message["text"] == plain and message.get("reply_markup") == markup:
                return _error(400, _NOT_MODIFIED)
            # Without reply_markup the edit takes the inline keyboard away, as Telegram does.
            message["text"] = plain
            message.pop("reply_markup", None)
            if markup is not None:
                message["reply_markup"] = markup
            message["edit_date"] = int(time.time())
            self._people.edits.append(Edited(chat_id, message_id, text, markup, time.time()))
            self._lock.notify_all()
            return _ok(copy.deepcopy(message))

    def _set_my_commands(self, _params: dict[str, Any], _token: str) -> web.Response:
        return _ok(True)

    def _set_webhook(self, params: dict[str, Any], _token: str) -> web.Response:
        url = str(params.get("url") or "")
        if url and not url.startswith(("http://", "https://")):
            return _error(
                400, "Bad Request: bad webhook: An HTTPS URL must be provided for webhook"
            )
        with self._lock:
            self._people.webhook_url = url
            self._people.webhook_secret = params.get("secret_token") or None
            if _flag(params.get("drop_pending_updates")):
                self._people.updates.clear()
        if url and self._loop_task is None:
            self._loop_task = asyncio.get_running_loop().create_task(self._push_updates())
        return _ok(True, "Webhook was set" if url else "Webhook was deleted")

    def _delete_webhook(self, params: dict[str, Any], token: str) -> web.Response:
        with self._lock:
            was_set = bool(self._people.webhook_url)
        response = self._set_webhook(
            {"drop_pending_updates": params.get("drop_pending_updates")}, token
        )
        return response if was_set else _ok(True, "Webhook is already deleted")

    def _webhook_info(self, _params: dict[str, Any], _token: str) -> web.Response:
        with self._lock:
            info = {
                "url": self._people.webhook_url,
                "has_custom_certificate": False,
                "pending_update_count": len(self._people.updates),
            }
        return _ok(info)

    async def _push_updates(self) -> None:
        """Deliver updates to the webhook one at a time, each until the bot answers 200."""
        import aiohttp  # noqa: PLC0415 - the client side is needed only with a webhook

        async with aiohttp.ClientSession() as client:
            while self._runner is not None:
                with self._lock:
                    url, secret = self._people.webhook_url, self._people.webhook_secret
                    update = self._people.updates[0] if self._people.updates else None
                if not url or update is None:
                    await asyncio.sleep(0.02)
                    continue
                headers = {} if secret is None else {"X-Telegram-Bot-Api-Secret-Token": secret}
                try:
                    async with client.post(url, json=update, headers=headers) as answer:
                        delivered = answer.status == 200
                except (aiohttp.ClientError, OSError):
                    delivered = False
                if delivered:
                    with self._lock:
                        if self._people.updates and self._people.updates[0] is update:
                            self._people.updates.pop(0)
                else:
                    await asyncio.sleep(0.2)

    async def _send_message(
        self, request: web.Request, token: str, params: dict[str, Any], at: float
    ) -> web.StreamResponse:
        method, bot_id = "sendMessage", _bot_id(token)
        chat_id, text, plain, parse_mode, problem = _check_send(params)
        if problem is not None or chat_id is None:
            bad_request = _error(400, f"Bad Request: {problem}")
            return await self._answer(bot_id, chat_id, method, at, bad_request)
        if self.on_send is not None:
            self.on_send(chat_id)
        with self._lock:
            wait = self._admit(bot_id, chat_id) if self.enforce_limits else 0
            fault = None if wait else self._take_fault(chat_id)
        if wait:
            response = _error(429, f"Too Many Requests: retry after {wait}", {"retry_after": wait})
            return await self._answer(bot_id, chat_id, method, at, response)
        if fault is not None and fault.status:
            if fault.kind == "bad_gateway_html":
                response = web.Response(
                    text=fault.description, status=502, content_type="text/html"
                )
            else:
                response = _error(fault.status, fault.description, dict(fault.parameters))
            return await self._answer(bot_id, chat_id, method, at, response, delay=fault.delay)

        markup, markup_problem = _read_markup(params.get("reply_markup"))
        if markup_problem is not None:
            bad_markup = _error(400, f"Bad Request: {markup_problem}")
            return await self._answer(bot_id, chat_id, method, at, bad_markup)
        message: dict[str, Any] = {}
        if fault is None or fault.delivered:
            message = self._deliver(chat_id, text, plain, parse_mode, token, markup=markup)
        if fault is not None and fault.kind == "drop":
            self._record(bot_id, chat_id, method, at, 0)
            if self.latency > 0:
                await asyncio.sleep(self.latency)
            if request.transport is not None:
                request.transport.close()
            return web.Response()  # never sent: the transport is closed
        sent = _json_response(200, {"ok": True, "result": message})
        delay = fault.delay if fault is not None else 0.0
        return await self._answer(bot_id, chat_id, method, at, sent, delay=delay)

    def _deliver(
        self,
        chat_id: int,
        text: str,
        plain: str,
        parse_mode: str | None,
        token: str,
        *,
        markup: dict[str, Any] | None = None,
    ) -> dict[str, Any]:
        wall = time.time()
        with self._lock:
            message_id = self._next_message_id(chat_id)
            self._delivered.append(
                Delivered(
                    chat_id,
                    text,
                    message_id,
                    time.monotonic(),
                    wall,
                    parse_mode,
                    markup,
                    _bot_id(token),
                )
            )
            message: dict[str, Any] = {
                "message_id": message_id,
                "from": self._bot_user(token, full=False),
                "chat": _chat(chat_id),
                "date": int(wall),
                "text": plain,
            }
            if markup is not None:
                message["reply_markup"] = markup
            self._people.messages[(chat_id, message_id)] = message
            self._lock.notify_all()
            return copy.deepcopy(message)

    # ---- control API ----

    async def _control_get(self, request: web.Request) -> web.Response:
        what = request.match_info["what"]
        if what == "stats":
            return _json_response(200, self.stats())
        if what == "delivered":
            chat = request.query.get("chat_id")
            rows = self.delivered if chat is None else self.delivered_to(int(chat))
            # reply_markup only where there is one: the older records' shape stays as it was.
            return _json_response(
                200,
                [
                    {k: v for k, v in asdict(d).items() if k != "reply_markup" or v is not None}
                    for d in rows
                ],
            )
        if what == "requests":
            return _json_response(200, [asdict(r) for r in self.requests])
        if what == "edits":
            return _json_response(200, [asdict(e) for e in self.edits])
        if what == "answers":
            return _json_response(200, [asdict(a) for a in self.callback_answers])
        return _json_response(404, {"ok": False, "description": "unknown control endpoint"})

    async def _control_post(self, request: web.Request) -> web.Response:
        what = request.match_info["what"]
        try:
            body: Any = await request.json() if request.body_exists else {}
            if what == "reset":
                self.reset()
            elif what == "script":
                chat = body.get("chat_id")
                self.script(
                    None if chat is None else int(chat),
                    Fault.from_dict(body["fault"]),
                    body.get("times", 1),
                )
            elif what == "message":
                update_id = self.post_message(
                    int(body["chat_id"]),
                    str(body["text"]),
                    first_name=body.get("first_name", "Aziza"),
                )
                return _json_response(200, {"ok": True, "update_id": update_id})
            elif what == "press":
                query_id = self.press_button(
                    int(body["chat_id"]),
                    int(body["message_id"]),
                    data=body.get("data"),
                    text=body.get("text"),
                )
                return _json_response(200, {"ok": True, "callback_query_id": query_id})
            elif what == "config":
                self.latency = float(body.get("latency", self.latency))
                self.enforce_limits = bool(body.get("enforce_limits", self.enforce_limits))
                return _json_response(
                    200,
                    {"ok": True, "latency": self.latency, "enforce_limits": self.enforce_limits},
                )
            else:
                return _json_response(404, {"ok": False, "description": "unknown control endpoint"})
        except (ValueError, TypeError, KeyError, AttributeError) as exc:
            return _json_response(400, {"ok": False, "description": f"{type(exc).__name__}: {exc}"})
        return _json_response(200, {"ok": True})

    # ---- running ----

    @property
    def port(self) -> int:
        return self._port

    @property
    def api_url(self) -> str:
        host = f"[{self._host}]" if ":" in self._host else self._host
        return f"http://{host}:{self._port}"

    async def start(self, host: str = "127.0.0.1", port: int = 0) -> None:
        if self._runner is not None:
            raise RuntimeError("the fake Telegram server is already running")
        app = web.Application()
        app.router.add_route("*", "/bot{token}/{method}", self._bot_api)
        app.router.add_get("/_fake/{what}", self._control_get)
        app.router.add_post("/_fake/{what}", self._control_post)
        # No access log (it would hold the token), and a short drain so stop() is quick.
        runner = web.AppRunner(app, access_log=None, handle_signals=False, shutdown_timeout=0.5)
        await runner.setup()
        try:
            await web.TCPSite(runner, host, port).start()
        except BaseException:
            await runner.cleanup()
            raise
        self._runner, self._host = runner, host
        self._port = int(runner.addresses[0][1])

    async def stop(self) -> None:
        runner, self._runner = self._runner, None
        task, self._loop_task = self._loop_task, None
        if task is not None:
            task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await task
        if runner is not None:
            await runner.cleanup()

    def start_in_thread(
        self, host: str = "127.0.0.1", port: int = 0, timeout: float = 10.0
    ) -> FakeTelegram:
        """Run on a private event loop in a daemon thread; return once the port is bound."""
        ready = threading.Event()
        failure: list[BaseException] = []
        loop = asyncio.new_event_loop()

        def run() -> None:
            asyncio.set_event_loop(loop)
            try:
                loop.run_until_complete(self.start(host, port))
            except BaseException as exc:  # noqa: BLE001 - re-raised in the starting thread
                failure.append(exc)
                ready.set()
                loop.close()
                return
            ready.set()
            try:
                loop.run_forever()
            finally:
                loop.run_until_complete(self.stop())
                pending = asyncio.all_tasks(loop)
                for task in pending:
                    task.cancel()
                loop.run_until_complete(asyncio.gather(*pending, return_exceptions=True))
                loop.close()

        thread = threading.Thread(target=run, name="fake-telegram", daemon=True)
        thread.start()
        if not ready.wait(timeout):
            raise RuntimeError("fake Telegram server did not start in time")
        if failure:
            thread.join(timeout)
            raise failure[0]
        self._loop, self._thread = loop, thread
        return self

    def stop_thread(self, timeout: float = 10.0) -> None:
        loop, thread = self._loop, self._thread
        self._loop = self._thread = None
        if loop is None or thread is None:
            return
        with contextlib.suppress(RuntimeError):  # loop already closed
            loop.call_soon_threadsafe(loop.stop)
        thread.join(timeout)


async def _read_params(request: web.Request) -> dict[str, Any]:
    """Merge query string and body (form, multipart or JSON), as the real server does."""
    params: dict[str, Any] = dict(request.query)
    if not request.body_exists:
        return params
    if request.content_type == "application/json":
        data = json.loads(await request.read())  # ValueError on bad JSON
        if not isinstance(data, dict):
            raise ValueError("not a JSON object")
        params.update(data)
    else:
        form = await request.post()
        params.update((k, v) for k, v in form.items() if isinstance(v, str))
    return params


async def serve_forever(
    host: str = "127.0.0.1",
    port: int = 8081,
    token: str | None = None,
    latency: float = 0.0,
    enforce_limits: bool = False,
) -> None:
    """Serve until cancelled or until SIGINT/SIGTERM arrives."""
    fake = FakeTelegram(token, latency=latency, enforce_limits=enforce_limits)
    await fake.start(host, port)
    print(f"fake Telegram Bot API listening on {fake.api_url}", flush=True)
    loop = asyncio.get_running_loop()
    stopping = asyncio.Event()
    installed: list[signal.Signals] = []
    for sig in (signal.SIGINT, signal.SIGTERM):
        with contextlib.suppress(NotImplementedError, RuntimeError, ValueError):
            loop.add_signal_handler(sig, stopping.set)
            installed.append(sig)
    try:
        await stopping.wait()
    finally:
        for sig in installed:
            loop.remove_signal_handler(sig)
        await fake.stop()
