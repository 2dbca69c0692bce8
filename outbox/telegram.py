"""Sending through python-telegram-bot, and the payload contract of an outbox row."""

from __future__ import annotations

import asyncio
import json
import math
import os
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, Protocol

import httpx
from telegram import Bot, InlineKeyboardButton, InlineKeyboardMarkup
from telegram import error as tg
from telegram.request import BaseRequest, HTTPXRequest, RequestData

from outbox.errors import TelegramUnauthorized, TelegramUnavailable
from outbox.payload import send_message_args
from outbox.redact import redact, register_secret
from outbox.schema import DEFAULT_BOT

# python-telegram-bot 22 warns on every 429 unless retry_after is a timedelta; we accept both
# forms (outbox.classify), so opt in to the future form and keep the logs free of the warning.
os.environ.setdefault("PTB_TIMEDELTA", "1")

__all__ = ["NullSender", "Sender", "SentMessage", "TelegramSender", "send_message_args"]

DEFAULT_API_URL = "https://api.telegram.org"


@dataclass(frozen=True, slots=True)
class SentMessage:
    chat_id: int
    message_id: int


class Sender(Protocol):
    """What the relay needs from a messenger; python-telegram-bot in production."""

    # Whose limits and flood pause a send counts against: every relay of one bot shares them.
    bot_id: str

    async def start(self) -> None: ...

    async def send(self, args: Mapping[str, Any]) -> SentMessage: ...

    async def close(self) -> None: ...


class _SpreadRequest(BaseRequest):
    """python-telegram-bot's httpx requests, spread over several small connection pools.

    httpcore walks every connection of its pool when a request starts and when a response ends,
    and asks each idle one whether its socket is still open. With the relay's 64 or more
    connections in one pool that walk costs more CPU than the rest of python-telegram-bot
    together (about 10 ms a message against a Bot API answering in 100 ms, instead of about
    1.3 ms). Pools of a few connections keep the walk short. Each request goes to the pool with
    the fewest requests in flight, so none waits for a connection while another pool has one
    free; errors are python-telegram-bot's own, raised by ``HTTPXRequest``.
    """

    __slots__ = ("_busy", "_pools")

    CONNECTIONS_PER_POOL = 4

    def __init__(self, pools: list[HTTPXRequest]) -> None:
        self._pools = pools
        self._busy = [0] * len(pools)

    @classmethod
    def over(
        cls, connections: int, *, connect_timeout: float, read_timeout: float, pool_timeout: float
    ) -> _SpreadRequest:
        count = max(1, math.ceil(connections / cls.CONNECTIONS_PER_POOL))
        size = math.ceil(connections / count)
        # One TLS context for all pools: building one loads the CA bundle (about 25 ms).
        tls = httpx.create_ssl_context()
        return cls(
            [
                HTTPXRequest(
                    connection_pool_size=size,
                    connect_timeout=connect_timeout,
                    read_timeout=read_timeout,
                    write_timeout=read_timeout,
                    pool_timeout=pool_timeout,
                    httpx_kwargs={"verify": tls},
                )
                for _ in range(count)
            ]
        )

    @property
    def read_timeout(self) -> float | None:
        return self._pools[0].read_timeout

    @staticmethod
    def parse_json_payload(payload: bytes) -> dict[str, Any]:
        """The Bot API's JSON answer. A page that is not JSON (a proxy's 502) raises the same
        error python-telegram-bot raises, without its log of the whole page and a traceback
        on every such answer: the relay logs the failure once, in one line."""
        try:
            parsed = json.loads(payload.decode("utf-8", "replace"))
        except ValueError:
            raise tg.TelegramError("Invalid server response") from None
        if not isinstance(parsed, dict):
            raise tg.TelegramError("Invalid server response")
        return parsed

    async def initialize(self) -> None:
        for pool in self._pools:
            await pool.initialize()

    async def shutdown(self) -> None:
        for pool in self._pools:
            await pool.shutdown()

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
        index = self._busy.index(min(self._busy))
        self._busy[index] += 1
        try:
            return await self._pools[index].do_request(
                url,
                method,
                request_data,
                read_timeout=read_timeout,
                write_timeout=write_timeout,
                connect_timeout=connect_timeout,
                pool_timeout=pool_timeout,
            )
        finally:
            self._busy[index] -= 1


class TelegramSender:
    """python-telegram-bot's real HTTP stack, with a connection pool sized for the relay."""

    def __init__(
        self,
        token: str,
        *,
        api_url: str = DEFAULT_API_URL,
        pool_size: int = 128,  # connections; the relay keeps up to --concurrency sends in flight
        connect_timeout: float = 5.0,
        read_timeout: float = 10.0,
    ) -> None:
        register_secret(token)
        self.bot_id = bot_id_of(token)
        request = _SpreadRequest.over(
            pool_size,
            connect_timeout=connect_timeout,
            read_timeout=read_timeout,
            pool_timeout=connect_timeout,
        )
        self._bot = Bot(token, base_url=api_url.rstrip("/") + "/bot", request=request)

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

    async def send(self, args: Mapping[str, Any]) -> SentMessage:
        markup = args.get("reply_markup")
        if markup is not None:
            args = {**args, "reply_markup": _keyboard(markup)}
        message = await self._bot.send_message(**args)
        return SentMessage(chat_id=message.chat_id, message_id=message.message_id)

    async def close(self) -> None:
        await self._bot.shutdown()


def _keyboard(markup: Mapping[str, Any]) -> InlineKeyboardMarkup:
    """The payload's checked ``inline_keyboard`` (outbox.payload) as python-telegram-bot's."""
    return InlineKeyboardMarkup(
        [[InlineKeyboardButton(**button) for button in row] for row in markup["inline_keyboard"]]
    )


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
        return SentMessage(
            chat_id=chat_id if isinstance(chat_id, int) else 0, message_id=self._next_id
        )

    async def close(self) -> None:
        return None
