"""Sending through python-telegram-bot, over aiohttp; and ``NullSender``, which sends nothing."""

from __future__ import annotations

import asyncio
import json
import os
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, Protocol, runtime_checkable
from urllib.parse import urlencode, urlsplit
from urllib.request import getproxies_environment, proxy_bypass

import aiohttp
import httpx
from telegram import Bot
from telegram import error as tg
from telegram.request import BaseRequest, RequestData

from outbox.config import DEFAULT_API_URL
from outbox.errors import ConfigError, TelegramUnauthorized, TelegramUnavailable
from outbox.payload import Request, send_message_args
from outbox.redact import redact, register_secret
from outbox.schema import DEFAULT_BOT

# python-telegram-bot 22 warns on every 429 unless retry_after is a timedelta; we accept both
# forms (outbox.classify), so opt in to the future form and keep the logs free of the warning.
os.environ.setdefault("PTB_TIMEDELTA", "1")

__all__ = [
    "MethodSender",
    "NullSender",
    "Prober",
    "Sender",
    "SentMessage",
    "TelegramPool",
    "TelegramSender",
    "send_message_args",
    "sent_of",
]


@dataclass(frozen=True, slots=True)
class SentMessage:
    chat_id: int
    message_id: int
    message_ids: tuple[int, ...] = ()  # an album's messages, in order (message_id is the first)


class Sender(Protocol):
    """What the relay needs from a messenger; python-telegram-bot in production."""

    # Whose limits and flood pause a send counts against: every relay of one bot shares them.
    bot_id: str

    async def start(self) -> None: ...

    async def send(self, args: Mapping[str, Any]) -> SentMessage: ...

    async def close(self) -> None: ...


@runtime_checkable
class MethodSender(Protocol):
    """A sender that sends any checked request (outbox.payload.request_of), not only
    sendMessage; the relay fails other methods' rows on a sender without it."""

    async def call(self, request: Request) -> SentMessage: ...


@runtime_checkable
class Prober(Protocol):
    """A sender that can ask the Bot API something cheap (getMe) to learn whether it answers;
    it raises what a send would raise."""

    async def probe(self) -> None: ...


class _AiohttpRequest(BaseRequest):
    """python-telegram-bot's requests carried by aiohttp instead of httpx, for a third of the
    CPU a request (docs/decisions.md). Errors are raised as ``HTTPXRequest`` raises them,
    ``TimedOut`` or ``NetworkError``, with aiohttp's exception as the cause (``outbox.classify``
    reads it)."""

    __slots__ = ("_connect_timeout", "_connections", "_proxy", "_read_timeout", "_session")

    def __init__(
        self, connections: int, *, api_url: str, connect_timeout: float, read_timeout: float
    ) -> None:
        self._connections = connections
        self._connect_timeout = connect_timeout
        self._read_timeout = read_timeout
        self._proxy = env_proxy(api_url)
        self._session: aiohttp.ClientSession | None = None

    @property
    def read_timeout(self) -> float | None:
        return self._read_timeout

    @staticmethod
    def parse_json_payload(payload: bytes) -> dict[str, Any]:
        """The Bot API's JSON answer; a page that is not JSON (a proxy's 502) raises
        python-telegram-bot's error without its log of the whole page and a traceback."""
        try:
            parsed = json.loads(payload.decode("utf-8", "replace"))
        except ValueError:
            raise tg.TelegramError("Invalid server response") from None
        if not isinstance(parsed, dict):
            raise tg.TelegramError("Invalid server response")
        return parsed

    async def initialize(self) -> None:
        if self._session is None:
            self._session = aiohttp.ClientSession(
                # As many connections as sends in flight; httpx's CA bundle (certifi), so that
                # a slim container without system certificates reaches Telegram as before.
                # Idle connections kept 5 s, as httpx keeps them.
                connector=aiohttp.TCPConnector(
                    limit=self._connections,
                    limit_per_host=0,
                    ssl=httpx.create_ssl_context(),
                    keepalive_timeout=5.0,
                ),
                cookie_jar=aiohttp.DummyCookieJar(),
                headers={"User-Agent": self.USER_AGENT},
            )

    async def shutdown(self) -> None:
        session, self._session = self._session, None
        if session is not None:
            await session.close()

    def _open_session(self) -> aiohttp.ClientSession:
        if self._session is None:
            raise tg.NetworkError("the HTTP client is not started (initialize() first)")
        return self._session

    async def do_request(  # noqa: PLR0917 - python-telegram-bot's signature
        self,
        url: str,
        method: str,
        request_data: RequestData | None = None,
        read_timeout: Any = BaseRequest.DEFAULT_NONE,
        write_timeout: Any = BaseRequest.DEFAULT_NONE,
        connect_timeout: Any = BaseRequest.DEFAULT_NONE,
        pool_timeout: Any = BaseRequest.DEFAULT_NONE,
    ) -> tuple[int, bytes]:
        read = _given(read_timeout, self._read_timeout)
        connect = _given(connect_timeout, self._connect_timeout)
        parts = (connect, _given(pool_timeout, connect), read, _given(write_timeout, read))
        timeout = aiohttp.ClientTimeout(
            # A free connection is waited for as long as a new one takes (``connect``); the
            # whole request never outlasts its parts, so a silent peer mid-write ends too.
            total=None if None in parts else sum(p for p in parts if p is not None),
            connect=connect,
            sock_read=read,
        )
        try:
            async with self._open_session().request(
                method,
                url,
                data=_body(request_data),
                timeout=timeout,
                proxy=self._proxy,
                allow_redirects=False,  # as httpx: a redirect would turn the POST into a GET
            ) as response:
                return response.status, await response.read()
        except TimeoutError as err:  # aiohttp's timeouts are TimeoutErrors too
            raise tg.TimedOut(f"Timed out ({type(err).__name__})") from err
        except aiohttp.ClientError as err:
            # Some of aiohttp's messages quote the URL, whose path holds the token.
            raise tg.NetworkError(f"aiohttp.{type(err).__name__}: {redact(str(err))}") from err


class _Borrowed(_AiohttpRequest):
    """A relay's shared HTTP client as one bot's: python-telegram-bot starts and shuts down a
    bot's requests with the bot, and this client belongs to the relay (``TelegramPool``)."""

    __slots__ = ("_shared",)

    def __init__(self, shared: _AiohttpRequest) -> None:
        for name in _AiohttpRequest.__slots__:  # its settings; the session is asked for
            setattr(self, name, getattr(shared, name))
        self._shared = shared

    def _open_session(self) -> aiohttp.ClientSession:
        return self._shared._open_session()

    async def initialize(self) -> None:
        return None

    async def shutdown(self) -> None:
        return None


def env_proxy(api_url: str) -> str | None:
    """The proxy the environment names for the Bot API, read as httpx reads it, once (aiohttp's
    ``trust_env`` reads it on every request, twice the CPU). A proxy without a scheme is an
    http:// one; any scheme but http and https (SOCKS) is refused."""
    parts = urlsplit(api_url)
    if proxy_bypass(parts.hostname or ""):
        return None
    proxies = getproxies_environment()
    proxy = proxies.get(parts.scheme) or proxies.get("all")
    if not proxy:
        return None
    if "://" not in proxy:
        proxy = f"http://{proxy}"
    if urlsplit(proxy).scheme not in {"http", "https"}:
        raise ConfigError(
            f"the proxy for {parts.scheme} URLs ({redact(proxy)}) is not an http:// or "
            "https:// proxy: the relay's HTTP client cannot use it"
        )
    return proxy


def _given(value: Any, default: float | None) -> float | None:
    """A timeout python-telegram-bot passed, or ours (its DEFAULT_NONE); None: no limit."""
    if value is BaseRequest.DEFAULT_NONE:
        return default
    return None if value is None else float(value)


def _body(request_data: RequestData | None) -> aiohttp.FormData | aiohttp.Payload | None:
    """The form python-telegram-bot built: urlencoded fields, or multipart with its files."""
    if request_data is None:
        return None
    if not request_data.contains_files:
        # The bytes aiohttp's FormData sends for plain fields, without the multipart writer
        # (and random boundary) it builds first for every request: a fifth of a request's CPU.
        return aiohttp.BytesPayload(
            urlencode(request_data.json_parameters, doseq=True).encode(),
            content_type="application/x-www-form-urlencoded",
        )
    form = aiohttp.FormData(request_data.json_parameters)
    for name, part in request_data.multipart_data.items():
        filename, content, *mimetype = part
        form.add_field(name, content, filename=filename, content_type=next(iter(mimetype), None))
    return form


class TelegramSender:
    """python-telegram-bot's real HTTP stack, with a connection pool sized for the relay (or
    the pool of a ``TelegramPool``, shared by the relay's bots)."""

    def __init__(
        self,
        token: str,
        *,
        api_url: str = DEFAULT_API_URL,
        pool_size: int = 128,  # connections; the relay keeps up to --concurrency sends in flight
        connect_timeout: float = 5.0,
        read_timeout: float = 10.0,
        request: BaseRequest | None = None,
    ) -> None:
        register_secret(token)
        self.bot_id = bot_id_of(token)
        # A relay's shared pool serves getUpdates too (the relay never asks for updates):
        # no second client per bot. A sender of its own keeps python-telegram-bot's default.
        updates = request
        if request is None:
            request = _AiohttpRequest(
                pool_size,
                api_url=api_url,
                connect_timeout=connect_timeout,
                read_timeout=read_timeout,
            )
        self._bot = Bot(
            token,
            base_url=api_url.rstrip("/") + "/bot",
            request=request,
            get_updates_request=updates,
        )

    def __repr__(self) -> str:  # the Bot's own repr shows the token
        return "TelegramSender()"

    async def start(self) -> None:
        """Check the token with getMe; a rejected token is fatal for the relay."""
        try:
            await self._bot.initialize()
        except tg.InvalidToken:
            raise TelegramUnauthorized(
                "Telegram rejected the bot token (check TELEGRAM_BOT_TOKEN)"
            ) from None
        except tg.TelegramError as err:  # unreachable, flood control, a proxy's error page
            raise TelegramUnavailable(
                f"cannot reach the Telegram Bot API (check OUTBOX_TELEGRAM_API_URL): "
                f"{redact(str(err))}"
            ) from None

    async def probe(self) -> None:
        """getMe: the cheapest question the Bot API answers."""
        await self._bot.get_me()

    async def send(self, args: Mapping[str, Any]) -> SentMessage:
        """A checked sendMessage, sent as ``call`` sends any request: ``Bot.send_message``'s
        objects would take about 40 % of a request's CPU (docs/decisions.md)."""
        return await self.call(Request("sendMessage", dict(args)))

    async def call(self, request: Request) -> SentMessage:
        """Any checked request through python-telegram-bot's HTTP layer, each value as a form
        field: strings as they are (never read as a path), others as JSON text. Not
        ``Bot.do_api_request``: it takes a ``media`` value for its own InputMedia objects, and
        building those from strings could upload a local file named by one."""
        fields = {
            name: value
            if isinstance(value, str)
            else json.dumps(value, ensure_ascii=False, separators=(",", ":"))
            for name, value in request.args.items()
        }
        url = f"{self._bot.base_url}/{request.method}"
        result = await self._bot.request.post(url, _FormFields(fields))
        return sent_of(request, result)

    async def close(self) -> None:
        await self._bot.shutdown()


class TelegramPool:
    """One HTTP connection pool for every bot of a relay (``--tokens-dir``): the connections
    stay as many as the relay's sends in flight, however many bots it serves. The token is
    part of each request's URL, never of the pool."""

    def __init__(
        self,
        *,
        api_url: str = DEFAULT_API_URL,
        pool_size: int = 128,
        connect_timeout: float = 5.0,
        read_timeout: float = 10.0,
    ) -> None:
        self._api_url = api_url
        self._shared = _AiohttpRequest(
            pool_size, api_url=api_url, connect_timeout=connect_timeout, read_timeout=read_timeout
        )

    def __repr__(self) -> str:
        return "TelegramPool()"

    def sender(self, token: str) -> TelegramSender:
        """A sender for ``token`` over the shared pool."""
        return TelegramSender(token, api_url=self._api_url, request=_Borrowed(self._shared))

    async def start(self) -> None:
        await self._shared.initialize()

    async def close(self) -> None:
        await self._shared.shutdown()


# RequestData is final for type checkers only; this adds no state it does not know of.
class _FormFields(RequestData):  # type: ignore[misc]
    """A request's form fields, already in the Bot API's text form: nothing to upload.
    python-telegram-bot's HTTP layer reads only these properties (and ``contains_files``)."""

    __slots__ = ("_fields",)

    def __init__(self, fields: dict[str, str]) -> None:
        super().__init__()
        self._fields = fields

    @property
    def parameters(self) -> dict[str, Any]:
        return dict(self._fields)

    @property
    def json_parameters(self) -> dict[str, str]:
        return dict(self._fields)

    @property
    def multipart_data(self) -> dict[str, Any]:
        return {}


def sent_of(request: Request, result: Any) -> SentMessage:
    """The message a request's answer names: a Message, an album's Messages, a MessageId
    (copyMessage), or True (a delete, a pin, some edits: the message the request named)."""
    args = request.args
    chat = args.get("chat_id")
    own_chat = chat if isinstance(chat, int) else 0
    if isinstance(result, list) and result:
        ids = tuple(int(message["message_id"]) for message in result)
        return SentMessage(int(result[0]["chat"]["id"]), ids[0], ids)
    if isinstance(result, dict):
        chat_id = int(result["chat"]["id"]) if "chat" in result else own_chat
        return SentMessage(chat_id, int(result["message_id"]))
    if result is True:
        named = [int(i) for i in args.get("message_ids") or [args.get("message_id") or 0]]
        return SentMessage(own_chat, named[0], tuple(named) if len(named) > 1 else ())
    raise KeyError(f"no message in the answer to {request.method}")


def bot_id_of(token: str) -> str:
    """The bot's public id, the digits before the token's colon (never the secret part)."""
    head, colon, _ = token.partition(":")
    return head if colon and head.isdigit() else DEFAULT_BOT


class NullSender:
    """Sends nothing and succeeds after ``delay`` seconds: for measuring the database path."""

    bot_id = DEFAULT_BOT

    def __init__(self, delay: float = 0.0) -> None:
        self._delay = delay
        self._next_id = 0

    async def start(self) -> None:
        return None

    async def send(self, args: Mapping[str, Any]) -> SentMessage:
        if self._delay:
            await asyncio.sleep(self._delay)
        self._next_id += 1
        chat_id = args["chat_id"]
        return SentMessage(chat_id if isinstance(chat_id, int) else 0, self._next_id)

    async def call(self, request: Request) -> SentMessage:
        sent = await self.send(request.args)
        if request.weight > 1:
            first = self._next_id
            self._next_id += request.weight - 1
            return SentMessage(sent.chat_id, first, tuple(range(first, self._next_id + 1)))
        return sent

    async def close(self) -> None:
        return None
