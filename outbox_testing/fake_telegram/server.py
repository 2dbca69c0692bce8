"""The fake server: the Bot API routes, sendMessage, records and scripted faults, running.

The users' side is in people.py (a mixin of FakeTelegram), the control API in control.py.
"""

from __future__ import annotations

import asyncio
import contextlib
import copy
import hashlib
import hmac
import signal
import threading
import time
from collections import deque
from collections.abc import Callable
from typing import Any

from aiohttp import web

from .checks import TOKEN_RE, _bot_id, _check_send, _parse_chat_id, _read_markup
from .control import _Control
from .kinds import FOLLOW_UP_METHODS, SEND_METHODS, _KindsSide
from .limits import _Limiter
from .people import _chat, _flag, _People, _PeopleSide
from .records import Acted, Delivered, Fault, RequestRecord
from .wire import _error, _json_response, _read_params

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
        *SEND_METHODS,
        *FOLLOW_UP_METHODS,
    )
}
_BOT_USER = {"is_bot": True, "first_name": "Fake Bot", "username": "fake_outbox_bot"}
_BOT_ME = dict.fromkeys(
    ("can_read_all_group_messages", "supports_inline_queries", "can_connect_to_business"), False
) | {"can_join_groups": True, "has_main_web_app": False}


class _Entry:
    __slots__ = ("fault", "left")

    def __init__(self, fault: Fault, left: int | None) -> None:
        self.fault, self.left = fault, left


# What the fake answers a paid broadcast while refuse_paid() is on: the MTProto error name the
# Bot API passes through for a Stars balance that is too low (see outbox.classify).
PAID_REFUSAL = "BALANCE_TOO_LOW"


class FakeTelegram(_KindsSide, _PeopleSide):
    """The fake server. Records are read through thread-safe snapshot properties."""

    def __init__(
        self, token: str | None = None, *, latency: float = 0.0, enforce_limits: bool = False
    ) -> None:
        # Only a digest of the expected token is kept, so it cannot leak from this object.
        self._token_digest = None if token is None else hashlib.sha256(token.encode()).digest()
        self._revoked: set[bytes] = set()  # digests of tokens answered 401 (revoke_token)
        self.latency = latency
        self.enforce_limits = enforce_limits
        self._lock = threading.Condition()
        self._delivered: list[Delivered] = []
        self._acted: list[Acted] = []
        self._requests: list[RequestRecord] = []
        self._scripts: dict[int | None, deque[_Entry]] = {}
        self._message_ids: dict[int, int] = {}
        self._limiters: dict[int, _Limiter] = {}  # by bot id
        self.rejected_429 = 0
        # While set, every sendMessage with allow_paid_broadcast is answered 400 with these
        # words (the bot's Stars balance or audience, refuse_paid); None: paid sends go through.
        self.paid_refusal: str | None = None
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
            self._acted.clear()
            self._requests.clear()
            self._scripts.clear()
            self._message_ids.clear()
            self._limiters.clear()
            self.rejected_429 = 0
            self._people = _People()

    def refuse_paid(self, description: str | None = PAID_REFUSAL) -> None:
        """Answer every paid sendMessage (allow_paid_broadcast) 400 ``description`` from now
        on, as Telegram does for a bot whose Stars balance is too low; None: accept them again.
        A refused message takes no slot of any limit."""
        with self._lock:
            self.paid_refusal = description

    def script(self, chat_id: int | None, fault: Fault, times: int | None = 1) -> None:
        """Queue ``fault`` for ``chat_id`` (None: any chat) ``times`` times, or forever if None.

        Per-chat entries are used before wildcard ones; each queue is FIFO, and a forever entry
        holds its queue until reset().
        """
        if times is not None and times < 1:
            raise ValueError("times must be >= 1 or None")
        with self._lock:
            self._scripts.setdefault(chat_id, deque()).append(_Entry(fault, times))

    def _admit(self, bot_id: int, chat_id: int, paid: bool = False) -> int:
        """The bot's limiter admits the message (0) or names the retry_after; under the lock."""
        limiter = self._limiters.setdefault(bot_id, _Limiter())
        return limiter.admit(chat_id, time.monotonic(), paid=paid)

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

    def revoke_token(self, token: str) -> None:
        """Answer 401 to ``token`` from now on, as Telegram does to a revoked token (the fake
        otherwise takes any token when started without one)."""
        with self._lock:
            self._revoked.add(hashlib.sha256(token.encode()).digest())

    async def _bot_api(self, request: web.Request) -> web.StreamResponse:  # noqa: PLR0911
        at = time.monotonic()
        token = request.match_info["token"]
        raw_method = request.match_info["method"]
        method = _METHODS.get(raw_method.lower(), raw_method[:64])
        if not TOKEN_RE.fullmatch(token):
            return await self._answer(0, None, method, at, _error(404, "Not Found"))
        bot_id = _bot_id(token)
        digest = hashlib.sha256(token.encode()).digest()
        if digest in self._revoked or (
            self._token_digest is not None and not hmac.compare_digest(digest, self._token_digest)
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
        if method in SEND_METHODS or method in FOLLOW_UP_METHODS:
            chat_id = _parse_chat_id(params.get("chat_id"))
            answer = self._kind(method, params, token)
            return await self._answer(bot_id, chat_id, method, at, answer)
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
            paid = _flag(params.get("allow_paid_broadcast"))
            refusal = self.paid_refusal if paid else None
            wait = self._admit(bot_id, chat_id, paid) if self.enforce_limits and not refusal else 0
            fault = None if wait or refusal else self._take_fault(chat_id)
        if refusal or wait:
            response = (
                _error(400, f"Bad Request: {refusal}")
                if refusal
                else _error(429, f"Too Many Requests: retry after {wait}", {"retry_after": wait})
            )
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
        control = _Control(self)
        app.router.add_get("/_fake/{what}", control.get)
        app.router.add_post("/_fake/{what}", control.post)
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
