"""The relay's HTTP client under python-telegram-bot (aiohttp), against real local sockets: a
connection that cannot be made means Telegram is out of reach (nothing was sent); one that
breaks or goes silent after the request went out may have delivered it."""

from __future__ import annotations

import asyncio
import socket
from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import asynccontextmanager

import pytest
from telegram import Bot

from outbox.classify import Failure, FailureKind, classify
from outbox.errors import ConfigError
from outbox.telegram import _AiohttpRequest, env_proxy
from tests.support import TEST_TOKEN

Handler = Callable[[asyncio.StreamReader, asyncio.StreamWriter], Awaitable[None]]
_, SECRET = TEST_TOKEN.split(":")


@asynccontextmanager
async def server(handler: Handler) -> AsyncIterator[str]:
    """A local TCP server running ``handler`` per connection (each closed at the end); yields
    its base URL."""
    ended = asyncio.Event()
    tasks: set[asyncio.Task[None]] = set()

    async def serve(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        tasks.add(asyncio.current_task())  # type: ignore[arg-type]
        try:
            await handler(reader, writer)
            await ended.wait()
        finally:
            writer.close()

    srv = await asyncio.start_server(serve, "127.0.0.1", 0)
    port = srv.sockets[0].getsockname()[1]
    try:
        yield f"http://127.0.0.1:{port}"
    finally:
        ended.set()
        srv.close()
        await asyncio.gather(*tasks, return_exceptions=True)
        await srv.wait_closed()


async def silent(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
    await reader.read(65536)  # the request arrives; no answer ever does


async def hang_up(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
    await reader.read(65536)  # the request arrives; the connection closes without an answer
    writer.close()


async def ok(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
    await reader.read(65536)
    body = b'{"ok":true,"result":{"message_id":7,"date":0,"chat":{"id":42,"type":"private"}}}'
    writer.write(b"HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nContent-Length: ")
    writer.write(str(len(body)).encode() + b"\r\n\r\n" + body)
    await writer.drain()


async def send(base_url: str, *, connections: int = 4, concurrent: int = 1) -> list[object]:
    """Send ``concurrent`` messages at once through python-telegram-bot; what each gave."""
    request = _AiohttpRequest(connections, api_url=base_url, connect_timeout=0.3, read_timeout=0.3)
    await request.initialize()
    bot = Bot(TEST_TOKEN, base_url=base_url + "/bot", request=request)
    try:
        sends = [bot.send_message(chat_id=42, text="salom") for _ in range(concurrent)]
        return list(await asyncio.gather(*sends, return_exceptions=True))
    finally:
        await request.shutdown()


def classified(outcome: object) -> Failure:
    assert isinstance(outcome, Exception), outcome
    failure = classify(outcome)
    assert SECRET not in failure.reason
    return failure


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def test_an_answer_is_read_through_python_telegram_bot() -> None:
    async def run() -> list[object]:
        async with server(ok) as url:
            return await send(url)

    [message] = asyncio.run(run())
    assert getattr(message, "message_id", None) == 7


def test_a_refused_connection_is_out_of_reach_and_sent_nothing() -> None:
    [outcome] = asyncio.run(send(f"http://127.0.0.1:{free_port()}"))
    failure = classified(outcome)
    assert failure.kind is FailureKind.UNREACHABLE
    assert not failure.maybe_delivered


def test_no_free_connection_in_time_is_out_of_reach() -> None:
    # One connection, held by a send the server never answers: the second waits for it no
    # longer than the connect timeout, and nothing of it went out.
    async def run() -> list[object]:
        async with server(silent) as url:
            return await send(url, connections=1, concurrent=2)

    outcomes = asyncio.run(run())
    kinds = sorted(classified(o).kind.value for o in outcomes)
    assert kinds == sorted([FailureKind.UNREACHABLE.value, FailureKind.TRANSIENT.value])


def test_silence_after_the_request_may_have_delivered_it() -> None:
    async def run() -> list[object]:
        async with server(silent) as url:
            return await send(url)

    [outcome] = asyncio.run(run())
    failure = classified(outcome)
    assert failure.kind is FailureKind.TRANSIENT
    assert failure.maybe_delivered


def test_a_connection_closed_before_the_answer_may_have_delivered_it() -> None:
    async def run() -> list[object]:
        async with server(hang_up) as url:
            return await send(url)

    [outcome] = asyncio.run(run())
    failure = classified(outcome)
    assert failure.kind is FailureKind.TRANSIENT
    assert failure.maybe_delivered
    assert "connection to Telegram broke" in failure.reason


def test_the_proxy_is_the_environments_unless_no_proxy_names_the_host(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    for name in ("HTTPS_PROXY", "HTTP_PROXY", "ALL_PROXY", "NO_PROXY"):
        monkeypatch.delenv(name.lower(), raising=False)
        monkeypatch.delenv(name, raising=False)
    assert env_proxy("https://api.telegram.org") is None
    monkeypatch.setenv("HTTPS_PROXY", "http://proxy.internal:3128")
    assert env_proxy("https://api.telegram.org") == "http://proxy.internal:3128"
    assert env_proxy("http://127.0.0.1:8081") is None  # an http URL: HTTP_PROXY's, unset
    monkeypatch.setenv("NO_PROXY", "api.telegram.org")
    assert env_proxy("https://api.telegram.org") is None
    monkeypatch.delenv("NO_PROXY")
    monkeypatch.delenv("HTTPS_PROXY")
    monkeypatch.setenv("ALL_PROXY", "proxy.internal:3128")  # no scheme: an http:// proxy
    assert env_proxy("https://api.telegram.org") == "http://proxy.internal:3128"
    monkeypatch.setenv("ALL_PROXY", "socks5://proxy.internal:1080")
    with pytest.raises(ConfigError, match="not an http:// or https:// proxy"):
        env_proxy("https://api.telegram.org")
