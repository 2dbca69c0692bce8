"""The fake Bot API server, driven through python-telegram-bot's real HTTP stack and raw HTTP."""

from __future__ import annotations

import asyncio
import contextlib
import datetime as dtm
import html
import itertools
import time
from collections.abc import Awaitable, Callable, Iterator
from typing import Any

import httpx
import pytest
import telegram
from telegram import error
from telegram.request import HTTPXRequest

from outbox_testing.fake_telegram import FakeTelegram, Fault, parse_html, serve_forever

TOKEN = "123456:TEST-token_for-fake"
CHAT = 4242


@pytest.fixture(autouse=True)
def _timedelta_retry_after(monkeypatch: pytest.MonkeyPatch) -> None:
    # PTB 22 warns inside RetryAfter.__init__ unless the timedelta behaviour is opted into.
    monkeypatch.setenv("PTB_TIMEDELTA", "1")


@pytest.fixture(scope="module")
def server() -> Iterator[FakeTelegram]:
    fake = FakeTelegram(TOKEN).start_in_thread()
    yield fake
    fake.stop_thread()


@pytest.fixture
def fake(server: FakeTelegram) -> FakeTelegram:
    server.reset()
    server.latency = 0.0
    server.enforce_limits = False
    return server


def retry_seconds(exc: error.RetryAfter) -> float:
    value = exc.retry_after
    return value.total_seconds() if isinstance(value, dtm.timedelta) else float(value)


def make_bot(fake: FakeTelegram, token: str = TOKEN, read_timeout: float = 5.0) -> telegram.Bot:
    request = HTTPXRequest(read_timeout=read_timeout, connection_pool_size=16)
    return telegram.Bot(token, base_url=fake.api_url + "/bot", request=request)


def with_bot(
    fake: FakeTelegram, body: Callable[[telegram.Bot], Awaitable[Any]], **kwargs: Any
) -> Any:
    async def run() -> Any:
        async with make_bot(fake, **kwargs) as bot:
            return await body(bot)

    return asyncio.run(run())


def send_error(fake: FakeTelegram, chat_id: int = CHAT, text: str = "hi", **kw: Any) -> Exception:
    async def body(bot: telegram.Bot) -> Exception:
        try:
            await bot.send_message(chat_id, text, **kw)
        except telegram.error.TelegramError as exc:
            return exc
        raise AssertionError("send_message succeeded")

    result: Exception = with_bot(fake, body)
    return result


def test_send_message_returns_message(fake: FakeTelegram) -> None:
    async def body(bot: telegram.Bot) -> list[telegram.Message]:
        assert bot.username == "fake_outbox_bot"
        return [
            await bot.send_message(CHAT, "first"),
            await bot.send_message(CHAT, "second"),
            await bot.send_message(-5, "to a group"),
            await bot.send_message(-1001234567890, "to a supergroup"),
        ]

    first, second, group, supergroup = with_bot(fake, body)
    assert (first.chat.id, first.chat.type, first.text) == (CHAT, "private", "first")
    assert first.from_user is not None and first.from_user.id == 123456
    assert (first.message_id, second.message_id, group.message_id) == (1, 2, 1)
    assert abs(first.date.timestamp() - time.time()) < 5
    assert (group.chat.type, supergroup.chat.type) == ("group", "supergroup")
    assert [d.text for d in fake.delivered_to(CHAT)] == ["first", "second"]
    assert fake.count() == 4
    methods = [r.method for r in fake.requests]
    assert methods == ["getMe"] + ["sendMessage"] * 4
    records = fake.requests
    assert all(a.at <= b.at for a, b in itertools.pairwise(records))
    assert all(r.status == 200 for r in records)
    assert "TEST-token" not in repr(records) + repr(fake.delivered)


@pytest.mark.parametrize(
    ("fault", "expected", "fragment"),
    [
        (Fault.forbidden(), error.Forbidden, "blocked by the user"),
        (Fault.forbidden("user is deactivated"), error.Forbidden, "deactivated"),
        (Fault.forbidden("bot was kicked from the group chat"), error.Forbidden, "kicked"),
        (Fault.bad_request("chat not found"), error.BadRequest, "chat not found"),
        (Fault.bad_request("message is too long"), error.BadRequest, "too long"),
        (Fault.server_error(500), error.NetworkError, "Internal Server Error"),
        (Fault.server_error(503), error.NetworkError, "Service Unavailable"),
        (Fault.bad_gateway_html(), error.NetworkError, "Bad Gateway (502)"),
        (Fault.drop(), error.NetworkError, "disconnected"),
        (Fault.unauthorized(), error.InvalidToken, "Unauthorized"),
    ],
)
def test_fault_maps_to_ptb_exception(
    fake: FakeTelegram, fault: Fault, expected: type[Exception], fragment: str
) -> None:
    fake.script(CHAT, fault)
    exc = send_error(fake)
    assert type(exc) is expected
    assert fragment.lower() in str(exc).lower()
    assert fake.count() == 0
    assert fake.requests[-1].status == (fault.status or 0)


def test_retry_after_and_migrate(fake: FakeTelegram) -> None:
    fake.script(CHAT, Fault.retry_after(7))
    fake.script(-77, Fault.migrate(-1009876543210))
    retry = send_error(fake)
    assert isinstance(retry, error.RetryAfter)
    assert retry_seconds(retry) == 7
    migrated = send_error(fake, chat_id=-77)
    assert isinstance(migrated, error.ChatMigrated)
    assert migrated.new_chat_id == -1009876543210
    assert fake.stats()["rejected_429"] == 1


def test_slow_answer_times_out_but_is_delivered(fake: FakeTelegram) -> None:
    fake.script(CHAT, Fault.slow(1.0))

    async def body(bot: telegram.Bot) -> Exception | None:
        try:
            await bot.send_message(CHAT, "late")
        except error.TimedOut as exc:
            return exc
        return None

    assert isinstance(with_bot(fake, body, read_timeout=0.2), error.TimedOut)
    assert [d.text for d in fake.delivered] == ["late"]

    fake.script(CHAT, Fault.slow(0.2))
    started = time.monotonic()
    with_bot(fake, lambda bot: bot.send_message(CHAT, "slow but fine"))
    assert time.monotonic() - started >= 0.2
    assert fake.count() == 2


def test_drop_can_count_as_delivered(fake: FakeTelegram) -> None:
    fake.script(CHAT, Fault.drop(delivered=True))
    assert isinstance(send_error(fake), error.NetworkError)
    assert [d.text for d in fake.delivered] == ["hi"]
    assert fake.requests[-1].status == 0


def test_wrong_or_malformed_token_is_invalid(fake: FakeTelegram) -> None:
    for token in ("999:wrong-token", "not-a-token"):
        with pytest.raises(error.InvalidToken):
            with_bot(fake, lambda bot: bot.send_message(CHAT, "x"), token=token)
    assert [r.status for r in fake.requests] == [401, 404]
    assert fake.count() == 0


def test_faults_are_consumed_in_order_and_forever_repeats(fake: FakeTelegram) -> None:
    fake.script(CHAT, Fault.forbidden())
    fake.script(CHAT, Fault.bad_request(), times=2)
    fake.script(None, Fault.server_error(502), times=None)

    async def body(bot: telegram.Bot) -> list[str]:
        outcomes = []
        for chat in (CHAT, CHAT, CHAT, CHAT, 555, 556, 555):
            try:
                await bot.send_message(chat, "x")
                outcomes.append("ok")
            except error.TelegramError as exc:
                outcomes.append(type(exc).__name__)
        return outcomes

    assert with_bot(fake, body) == [
        "Forbidden",
        "BadRequest",
        "BadRequest",
        "NetworkError",  # the per-chat queue is empty, the wildcard applies
        "NetworkError",
        "NetworkError",
        "NetworkError",
    ]
    fake.reset()
    assert with_bot(fake, lambda bot: bot.send_message(555, "after reset")).text == "after reset"


def test_validation_like_the_real_server(fake: FakeTelegram) -> None:
    cases: list[tuple[dict[str, Any], str]] = [
        ({"text": " "}, "text is empty"),
        ({"text": "x" * 4097}, "too long"),
        ({"chat_id": "@nobody"}, "chat not found"),
        ({"text": "<b>open", "parse_mode": "HTML"}, "can't parse entities"),
        ({"text": "a < b", "parse_mode": "HTML"}, "can't parse entities"),
        ({"text": "<blink>x</blink>", "parse_mode": "HTML"}, "unsupported start tag"),
        ({"text": "<b><i>x</b></i>", "parse_mode": "HTML"}, "unmatched end tag"),
    ]
    for overrides, fragment in cases:
        args: dict[str, Any] = {"chat_id": CHAT, "text": "x"} | overrides
        exc = send_error(fake, **args)
        assert isinstance(exc, error.BadRequest), overrides
        assert fragment in str(exc).lower(), (overrides, str(exc))
    assert fake.count() == 0

    escaped = html.escape("Tom & Jerry <3 \"quotes\" 'single' \U0001f600")
    msg = with_bot(fake, lambda bot: bot.send_message(CHAT, f"<b>{escaped}</b>", parse_mode="HTML"))
    assert msg.text == "Tom & Jerry <3 \"quotes\" 'single' \U0001f600"
    assert fake.delivered[-1].parse_mode == "HTML"
    assert fake.delivered[-1].text == f"<b>{escaped}</b>"
    longest = with_bot(fake, lambda bot: bot.send_message(CHAT, "\U0001f600" * 4096))
    assert len(longest.text) == 4096


def test_parse_html_offsets_and_plain_text() -> None:
    assert parse_html('<a href="https://x.y/?a=1&amp;b=2">link</a> &#33;&#x21;') == (
        "link !!",
        None,
    )
    plain, problem = parse_html("\u00e9 <x>")
    assert plain == "" and problem is not None and "byte offset 3" in problem
    assert parse_html("fish & chips")[1] is not None
    assert parse_html("</b>")[1] is not None


def test_enforce_limits_per_private_chat(fake: FakeTelegram) -> None:
    fake.enforce_limits = True

    async def body(bot: telegram.Bot) -> tuple[float, list[str]]:
        await bot.send_message(1001, "one")
        try:
            await bot.send_message(1001, "two")
        except error.RetryAfter as exc:
            wait = retry_seconds(exc)
        else:
            raise AssertionError("second message within a second was accepted")
        await bot.send_message(1002, "other chat is fine")
        await asyncio.sleep(wait)
        await bot.send_message(1001, "after waiting")
        return wait, [d.text for d in fake.delivered]

    wait, texts = with_bot(fake, body)
    assert wait >= 1
    assert texts == ["one", "other chat is fine", "after waiting"]
    assert fake.stats()["rejected_429"] == 1


def test_enforce_limits_per_bot_and_group(fake: FakeTelegram) -> None:
    fake.enforce_limits = True

    async def one(bot: telegram.Bot, chat: int) -> Exception | None:
        try:
            await bot.send_message(chat, "x")
        except error.RetryAfter as exc:
            return exc
        return None

    Arrivals = list[tuple[float, bool]]  # when each fan-out request came, and if accepted

    async def body(bot: telegram.Bot) -> tuple[Arrivals, list[Exception | None]]:
        await asyncio.gather(*(one(bot, 2000 + i) for i in range(40)))
        arrivals = [(r.at, r.status == 200) for r in fake.requests if r.method == "sendMessage"]
        fake.reset()  # empty the bot-wide window before testing the group limit
        group = [await one(bot, -42) for _ in range(21)]
        return arrivals, group

    arrivals, group = with_bot(fake, body)
    # 30 messages in any 1 s window per bot. On a busy machine the 40 may take longer than a
    # second to arrive, and then more than 30 are rightly accepted.
    accepted = [at for at, ok in arrivals if ok]
    assert len(arrivals) == 40
    assert all(sum(t - 0.999 < u <= t for u in accepted) <= 30 for t in accepted)
    spread = max(at for at, _ in arrivals) - min(at for at, _ in arrivals)
    assert len(accepted) == 30 if spread < 0.999 else len(accepted) >= 30
    assert group[:20] == [None] * 20  # 20 messages per minute per group
    assert isinstance(group[20], error.RetryAfter) and retry_seconds(group[20]) > 1
    assert fake.stats()["rejected_429"] == 1


def test_paid_broadcasts_count_against_a_window_of_their_own() -> None:
    from outbox_testing.fake_telegram.limits import _Limiter

    limiter = _Limiter()
    now = 100.0
    # 1,000 paid messages to 1,000 chats within a second, the free 30 beside them untouched.
    assert [limiter.admit(5000 + i, now + i / 2000, paid=True) for i in range(1000)] == [0] * 1000
    assert limiter.admit(9999, now + 0.6, paid=True) == 1
    assert [limiter.admit(7000 + i, now + 0.6) for i in range(30)] == [0] * 30
    assert limiter.admit(8000, now + 0.6) == 1
    # A chat's own limit holds for paid messages too.
    assert limiter.admit(5000, now + 1.4, paid=True) == 0
    assert limiter.admit(5000, now + 1.5, paid=True) == 1


def test_paid_broadcasts_go_past_the_free_limit_through_the_bot_api(fake: FakeTelegram) -> None:
    fake.enforce_limits = True

    async def body(bot: telegram.Bot) -> list[bool]:
        async def one(chat: int) -> bool:
            try:
                await bot.send_message(chat, "x", allow_paid_broadcast=True)
            except error.RetryAfter:
                return False
            return True

        return list(await asyncio.gather(*(one(6000 + i) for i in range(60))))

    assert with_bot(fake, body) == [True] * 60  # twice the free 30, in well under a second


def test_latency_delays_without_blocking_the_loop(fake: FakeTelegram) -> None:
    fake.latency = 0.5  # one after another, ten would take 5 s

    async def body(bot: telegram.Bot) -> float:
        started = time.monotonic()
        await asyncio.gather(*(bot.send_message(3000 + i, "x") for i in range(10)))
        return time.monotonic() - started

    elapsed = with_bot(fake, body)
    # Half the serial time, so that a loaded machine (a gate took 1.5 s for ten at 0.2 s)
    # cannot pass for a loop that blocks.
    assert 0.5 <= elapsed < 2.5
    assert fake.count() == 10


def test_raw_protocol_envelopes(fake: FakeTelegram) -> None:
    base = f"{fake.api_url}/bot{TOKEN}"
    fake.script(CHAT, Fault.retry_after(35))
    with httpx.Client() as client:
        limited = client.post(f"{base}/sendMessage", data={"chat_id": CHAT, "text": "x"})
        assert limited.status_code == 429
        assert limited.headers["Retry-After"] == "35"
        assert limited.headers["Content-Type"].startswith("application/json")
        assert limited.json() == {
            "ok": False,
            "error_code": 429,
            "description": "Too Many Requests: retry after 35",
            "parameters": {"retry_after": 35},
        }
        missing = client.post(f"{base}/unknownMethod")
        assert (missing.status_code, missing.json()) == (
            404,
            {"ok": False, "error_code": 404, "description": "Not Found"},
        )
        no_chat = client.post(f"{base}/sendMessage", data={"text": "x"}).json()
        assert no_chat["description"] == "Bad Request: chat_id is empty"
        as_json = client.post(f"{base}/SENDMESSAGE", json={"chat_id": CHAT, "text": "json"})
        assert as_json.json()["result"]["text"] == "json"
        multipart = client.post(
            f"{base}/sendmessage", files={"chat_id": (None, str(CHAT)), "text": (None, "multi")}
        )
        assert multipart.json()["result"]["text"] == "multi"
        by_get = client.get(f"{base}/sendMessage", params={"chat_id": CHAT, "text": "get"})
        assert by_get.json()["result"]["message_id"] == 3
        me = client.get(f"{base}/getMe").json()
        assert me["ok"] is True and me["result"]["is_bot"] is True
        assert me["result"]["can_join_groups"] is True
    assert [d.text for d in fake.delivered] == ["json", "multi", "get"]


def test_control_api_over_http(fake: FakeTelegram) -> None:
    with httpx.Client(base_url=fake.api_url + "/_fake") as control:
        config = control.post("/config", json={"latency": 0.01, "enforce_limits": False})
        assert config.json() == {"ok": True, "latency": 0.01, "enforce_limits": False}
        scripted = control.post(
            "/script",
            json={"chat_id": CHAT, "fault": {"kind": "retry_after", "seconds": 3}, "times": 1},
        )
        assert scripted.json() == {"ok": True}
        control.post("/script", json={"chat_id": None, "fault": {"kind": "forbidden"}})
        bad = control.post("/script", json={"chat_id": 1, "fault": {"kind": "nope"}})
        assert bad.status_code == 400

        retry = send_error(fake)
        assert isinstance(retry, error.RetryAfter) and retry_seconds(retry) == 3
        assert isinstance(send_error(fake, chat_id=77), error.Forbidden)
        with_bot(fake, lambda bot: bot.send_message(CHAT, "through"))

        # Each with_bot() also sends a getMe: three of those plus three sendMessage.
        assert control.get("/stats").json() == {"delivered": 1, "requests": 6, "rejected_429": 1}
        rows = control.get("/delivered").json()
        assert [(r["chat_id"], r["text"], r["message_id"]) for r in rows] == [(CHAT, "through", 1)]
        assert set(rows[0]) == {
            "chat_id",
            "text",
            "message_id",
            "at",
            "wall",
            "parse_mode",
            "bot_id",
            "method",  # what the message was sent with (sendMessage here), and an album's items
            "media",
        }
        assert rows[0]["method"] == "sendMessage"
        assert control.get("/delivered", params={"chat_id": 77}).json() == []
        assert control.post("/reset").json() == {"ok": True}
        assert control.get("/stats").json() == {"delivered": 0, "requests": 0, "rejected_429": 0}


def test_async_start_stop_inside_a_loop() -> None:
    async def scenario() -> int:
        fake = FakeTelegram(None)  # no token configured: any well-formed token is accepted
        await fake.start()
        try:
            async with make_bot(fake, token="42:any-token") as bot:
                return (await bot.send_message(1, "hello")).message_id
        finally:
            await fake.stop()

    assert asyncio.run(scenario()) == 1


def test_serve_forever_prints_the_address(capsys: pytest.CaptureFixture[str]) -> None:
    async def scenario() -> str:
        task = asyncio.create_task(serve_forever(port=0, token=TOKEN))
        await asyncio.sleep(0.2)
        task.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await task
        return capsys.readouterr().out

    line = asyncio.run(scenario()).strip()
    assert line.startswith("fake Telegram Bot API listening on http://127.0.0.1:")
    assert int(line.rsplit(":", 1)[1]) > 0
