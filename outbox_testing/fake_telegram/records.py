"""What the fake records (deliveries, edits, answers, requests) and the faults it can be scripted
to answer with."""

from __future__ import annotations

from dataclasses import dataclass, replace
from http import HTTPStatus
from typing import Any

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
    method: str = "sendMessage"  # the Bot API method that made it (an album: one per item)
    media: str | None = None  # the file_id of its photo, document...: Telegram's, from a URL


@dataclass(frozen=True, slots=True)
class Edited:
    """An editMessageText the fake accepted."""

    chat_id: int
    message_id: int
    text: str
    reply_markup: dict[str, Any] | None
    wall: float


@dataclass(frozen=True, slots=True)
class Acted:
    """A follow-up the fake applied: a delete, a pin, an edit of a caption, keyboard or media."""

    method: str
    chat_id: int
    message_ids: tuple[int, ...]
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
