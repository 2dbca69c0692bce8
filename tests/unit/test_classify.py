"""What each Telegram answer means, through python-telegram-bot's real request code.

``httpx.MockTransport`` stands in for the network, so python-telegram-bot encodes the request
and maps the answer exactly as in production; no sockets, no server. Then the retry policy,
a pure function, is checked against the table in DESIGN §5.
"""

from __future__ import annotations

import asyncio
import warnings
from collections.abc import Callable
from typing import Any

import httpx
import pytest
from telegram import Bot
from telegram import error as tg
from telegram.request import HTTPXRequest

from outbox.classify import Failure, FailureKind, MalformedPayload, classify
from outbox.retry import RetryPolicy, RowFacts, decide, expiry, hand_back
from outbox.states import FailureCode, State
from outbox.telegram import send_message_args
from tests.support import TEST_TOKEN

Handler = Callable[[httpx.Request], httpx.Response]
_, SECRET = TEST_TOKEN.split(":")


def answer(status: int, body: dict[str, Any], headers: dict[str, str] | None = None) -> Handler:
    def handler(request: httpx.Request) -> httpx.Response:
        return httpx.Response(status, json=body, headers=headers)

    return handler


def error(status: int, description: str, **parameters: int) -> Handler:
    body: dict[str, Any] = {"ok": False, "error_code": status, "description": description}
    if parameters:
        body["parameters"] = parameters
    return answer(status, body)


def raising(exc_type: type[httpx.HTTPError], text: str = "boom") -> Handler:
    def handler(request: httpx.Request) -> httpx.Response:
        # The URL holds the token, as real transport errors sometimes do.
        raise exc_type(f"{text} ({request.url})", request=request)  # type: ignore[call-arg]

    return handler


def send_through(handler: Handler) -> BaseException:
    """Send one message through python-telegram-bot; return what it raised."""

    async def run() -> BaseException:
        request = HTTPXRequest(httpx_kwargs={"transport": httpx.MockTransport(handler)})
        bot = Bot(TEST_TOKEN, request=request)
        try:
            await bot.send_message(chat_id=42, text="salom")
        except Exception as err:  # python-telegram-bot raises many kinds; we want the object
            return err
        finally:
            await request.shutdown()
        raise AssertionError("the send did not fail")

    return asyncio.run(run())


def classified(handler: Handler) -> Failure:
    failure = classify(send_through(handler))
    assert TEST_TOKEN not in failure.reason and SECRET not in failure.reason
    return failure


@pytest.fixture(autouse=True)
def _timedelta_retry_after(monkeypatch: pytest.MonkeyPatch) -> None:
    # As the relay does (outbox.telegram): without it PTB warns in RetryAfter.__init__.
    monkeypatch.setenv("PTB_TIMEDELTA", "1")


# --- answers with an HTTP status -------------------------------------------------------------


def test_429_is_transient_with_retry_after() -> None:
    body = {
        "ok": False,
        "error_code": 429,
        "description": "Too Many Requests: retry after 35",
        "parameters": {"retry_after": 35},
    }
    failure = classified(answer(429, body, {"Retry-After": "35"}))
    assert failure.kind is FailureKind.TRANSIENT
    assert failure.retry_after == 35.0
    assert failure.code is FailureCode.RATE_LIMITED
    assert not failure.maybe_delivered
    assert failure.reason == "Telegram flood control (429): retry after 35 s"


def test_retry_after_as_int_is_accepted_without_a_warning(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.delenv("PTB_TIMEDELTA")
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # PTB warns while constructing it
        err = tg.RetryAfter(7)
    # filterwarnings = error: a warning escaping classify would fail this test.
    assert classify(err).retry_after == 7.0


def test_group_upgraded_to_supergroup_is_a_migration() -> None:
    failure = classified(
        error(
            400,
            "Bad Request: group chat was upgraded to a supergroup chat",
            migrate_to_chat_id=-1001234567890,
        )
    )
    assert failure.kind is FailureKind.MIGRATED
    assert failure.new_chat_id == -1001234567890
    assert failure.code is FailureCode.CHAT_MIGRATED


@pytest.mark.parametrize("status", [401, 404])
def test_rejected_token_stops_the_relay_not_the_row(status: int) -> None:
    failure = classified(error(status, "Unauthorized" if status == 401 else "Not Found"))
    assert failure.kind is FailureKind.UNAUTHORIZED


@pytest.mark.parametrize(
    ("status", "description", "expected", "code"),
    [
        (403, "Forbidden: bot was blocked by the user", "bot was blocked by the user", "blocked"),
        (403, "Forbidden: user is deactivated", "user is deactivated", "blocked"),
        (
            403,
            "Forbidden: bot was kicked from the group chat",
            "kicked from the group chat",
            "forbidden",
        ),
        (
            403,
            "Forbidden: bot can't initiate conversation with a user",
            "can't initiate",
            "forbidden",
        ),
        (400, "Bad Request: chat not found", "chat not found", "chat_not_found"),
        (400, "Bad Request: message is too long", "message is too long", "bad_request"),
        (
            400,
            "Bad Request: can't parse entities: Unsupported start tag",
            "can't parse entities",
            "bad_request",
        ),
        (400, "Bad Request: message text is empty", "message text is empty", "bad_request"),
    ],
)
def test_refusals_are_permanent_and_say_why(
    status: int, description: str, expected: str, code: str
) -> None:
    failure = classified(error(status, description))
    assert failure.kind is FailureKind.PERMANENT
    assert failure.code == code
    assert f"({status})" in failure.reason
    # python-telegram-bot strips "Bad Request: " and re-capitalises: match case-insensitively.
    assert expected in failure.reason.lower()


@pytest.mark.parametrize(
    ("status", "phrase"), [(500, "Internal Server Error"), (503, "Service Unavailable")]
)
def test_server_errors_are_transient_and_not_delivered(status: int, phrase: str) -> None:
    failure = classified(error(status, phrase))
    assert failure.kind is FailureKind.TRANSIENT
    assert not failure.maybe_delivered
    assert failure.retry_after == 0
    assert failure.reason == f"Telegram server error: {phrase}"


def test_html_error_page_from_a_proxy_is_transient_and_not_quoted() -> None:
    page = "<html><head><title>502 Bad Gateway</title></head><body>nginx</body></html>"

    def handler(request: httpx.Request) -> httpx.Response:
        return httpx.Response(502, text=page, headers={"Content-Type": "text/html"})

    failure = classified(handler)
    assert failure.kind is FailureKind.TRANSIENT
    assert "Bad Gateway (502)" in failure.reason
    assert "<html" not in failure.reason


def test_ok_false_with_status_200_is_transient() -> None:
    # python-telegram-bot surfaces this as a bare KeyError.
    failure = classified(answer(200, {"ok": False, "description": "odd"}))
    assert failure.kind is FailureKind.TRANSIENT
    assert "unexpected answer" in failure.reason


# --- no answer -------------------------------------------------------------------------------


@pytest.mark.parametrize("exc_type", [httpx.ConnectError, httpx.ConnectTimeout, httpx.PoolTimeout])
def test_request_that_never_left_means_telegram_cannot_be_reached(
    exc_type: type[httpx.HTTPError],
) -> None:
    failure = classified(raising(exc_type))
    assert failure.kind is FailureKind.UNREACHABLE
    assert not failure.maybe_delivered
    assert not failure.answered
    assert "could not connect to Telegram" in failure.reason


@pytest.mark.parametrize(
    ("exc_type", "words"),
    [
        (httpx.ReadTimeout, "did not answer in time"),
        (httpx.WriteTimeout, "did not answer in time"),
        (httpx.RemoteProtocolError, "connection to Telegram broke (RemoteProtocolError)"),
        (httpx.ReadError, "connection to Telegram broke (ReadError)"),
    ],
)
def test_request_without_an_answer_may_have_been_delivered(
    exc_type: type[httpx.HTTPError], words: str
) -> None:
    failure = classified(raising(exc_type))
    assert failure.kind is FailureKind.TRANSIENT
    assert failure.maybe_delivered
    assert not failure.answered  # a probe that meets this has not heard from Telegram
    assert words in failure.reason


def test_an_error_answer_means_telegram_can_be_reached() -> None:
    assert classified(error(500, "Internal Server Error")).answered
    assert classified(error(429, "Too Many Requests: retry after 3", retry_after=3)).answered
    assert classified(error(400, "Bad Request: chat not found")).answered


def test_the_order_of_checks_respects_the_exception_hierarchy() -> None:
    # BadRequest and TimedOut are NetworkErrors; RetryAfter is not.
    assert issubclass(tg.BadRequest, tg.NetworkError)
    assert issubclass(tg.TimedOut, tg.NetworkError)
    assert classify(tg.BadRequest("Chat not found")).kind is FailureKind.PERMANENT
    assert classify(tg.TimedOut()).maybe_delivered
    assert classify(tg.NetworkError("x")).kind is FailureKind.TRANSIENT


def test_token_never_reaches_the_reason() -> None:
    for err in (
        tg.NetworkError(f"httpx.ConnectError: https://api.telegram.org/bot{TEST_TOKEN}/x"),
        tg.Forbidden(f"Forbidden: {TEST_TOKEN}"),
        RuntimeError(f"bot{TEST_TOKEN} exploded"),
    ):
        reason = classify(err).reason
        assert SECRET not in reason, reason


# --- payloads that cannot become a request ----------------------------------------------------


@pytest.mark.parametrize(
    "payload",
    [
        {"text": "kimga?"},
        {"chat_id": None, "text": "x"},
        {"chat_id": True, "text": "x"},
        {"chat_id": "not-a-number", "text": "x"},
        {"chat_id": 1},
        {"chat_id": 1, "text": " "},
        {"chat_id": 1, "text": "x" * 4097},
        {"chat_id": 1, "text": "x", "reply_markup": "{}"},
    ],
)
def test_unusable_payload_is_permanent(payload: dict[str, Any]) -> None:
    with pytest.raises(MalformedPayload) as caught:
        send_message_args(payload)
    failure = classify(caught.value)
    assert failure.kind is FailureKind.PERMANENT
    assert failure.reason.startswith("malformed payload: ")
    assert failure.code is FailureCode.BAD_PAYLOAD


def test_any_other_error_is_transient() -> None:
    assert classify(RuntimeError("surprise")).kind is FailureKind.TRANSIENT
    assert classify(RuntimeError("surprise")).code is FailureCode.TRANSIENT
    assert classify(ValueError()).reason == "unexpected error while sending: ValueError"


# --- the retry policy ------------------------------------------------------------------------

TRANSIENT = Failure(FailureKind.TRANSIENT, "Telegram server error: Internal Server Error")
PERMANENT = Failure(
    FailureKind.PERMANENT,
    "Telegram refused (403): bot was blocked by the user",
    code=FailureCode.BLOCKED,
)


def flood(seconds: float) -> Failure:
    return Failure(FailureKind.TRANSIENT, "flood", retry_after=seconds)


def test_lesson_schedule_two_then_four_seconds_then_xato() -> None:
    policy = RetryPolicy()
    first, second, third = (decide(policy, 0.0, RowFacts(n), TRANSIENT) for n in (1, 2, 3))
    assert (first.state, first.delay_seconds) == (State.PENDING, 2.0)
    assert (second.state, second.delay_seconds) == (State.PENDING, 4.0)
    assert third.state is State.FAILED
    assert third.error == f"{TRANSIENT.reason} (gave up after 3 attempts)"
    assert first.error == f"{TRANSIENT.reason}; attempt 1 failed"
    assert (first.code, third.code) == (FailureCode.TRANSIENT, FailureCode.TOO_MANY_ATTEMPTS)


def test_permanent_failure_is_xato_at_the_first_attempt() -> None:
    decision = decide(RetryPolicy(), 0.0, RowFacts(1), PERMANENT)
    assert (decision.state, decision.delay_seconds, decision.error, decision.code) == (
        State.FAILED,
        None,
        PERMANENT.reason,
        FailureCode.BLOCKED,
    )


@pytest.mark.parametrize(
    ("attempts", "retry_after", "delay"),
    [(1, 35, 35.0), (1, 1, 2.0), (2, 3, 4.0), (2, 5, 5.0)],
)
def test_retry_after_is_a_floor_on_the_backoff(
    attempts: int, retry_after: float, delay: float
) -> None:
    decision = decide(RetryPolicy(), 0.0, RowFacts(attempts), flood(retry_after))
    assert (decision.state, decision.delay_seconds) == (State.PENDING, delay)


UNREACHABLE = Failure(FailureKind.UNREACHABLE, "could not connect to Telegram: ConnectError")


@pytest.mark.parametrize("attempts", [1, 2, 3])
def test_a_try_that_could_not_connect_costs_no_attempt_and_keeps_its_place(attempts: int) -> None:
    # Even on the last attempt: an outage longer than the schedule moves nothing to xato.
    decision = decide(RetryPolicy(), 10.0, RowFacts(attempts), UNREACHABLE)
    assert decision == hand_back(10.0, RowFacts(attempts))
    assert (decision.state, decision.attempts) == (State.PENDING, attempts - 1)
    assert (decision.delay_seconds, decision.error) == (None, None)  # its time, no failure


def test_a_row_that_could_not_connect_after_its_expiry_fails_as_expired() -> None:
    decision = decide(RetryPolicy(), 10.0, RowFacts(1, expires_at=5.0), UNREACHABLE)
    assert (decision.state, decision.code) == (State.FAILED, FailureCode.EXPIRED)


def test_429_on_the_last_attempt_is_xato() -> None:
    assert decide(RetryPolicy(), 0.0, RowFacts(3), flood(1)).state is State.FAILED


def test_policy_is_configurable() -> None:
    policy = RetryPolicy(max_attempts=5, base_seconds=0.5, max_delay_seconds=3.0)
    delays = [decide(policy, 0.0, RowFacts(n), TRANSIENT).delay_seconds for n in range(1, 5)]
    assert delays == [0.5, 1.0, 2.0, 3.0]  # capped at max_delay_seconds
    assert decide(policy, 0.0, RowFacts(5), TRANSIENT).state is State.FAILED
    assert decide(RetryPolicy(max_attempts=1), 0.0, RowFacts(1), TRANSIENT).state is State.FAILED


def test_jitter_only_lengthens_and_stays_bounded() -> None:
    policy = RetryPolicy(jitter=0.5)
    delays = {decide(policy, 0.0, RowFacts(2), TRANSIENT).delay_seconds for _ in range(200)}
    assert all(d is not None and 4.0 <= d <= 6.0 for d in delays)
    assert len(delays) > 1


def test_without_jitter_the_policy_is_a_pure_function() -> None:
    policy = RetryPolicy()
    row = RowFacts(2)
    assert {decide(policy, 0.0, row, flood(3)) for _ in range(20)} == {
        decide(policy, 0.0, row, flood(3))
    }


def test_a_retry_that_would_come_after_the_expiry_fails_the_row_now() -> None:
    row = RowFacts(1, expires_at=10.0)
    assert decide(RetryPolicy(), 7.0, row, TRANSIENT).state is State.PENDING  # due at 9
    late = decide(RetryPolicy(), 8.5, row, TRANSIENT)  # would be due at 10.5
    assert (late.state, late.code, late.attempts) == (State.FAILED, FailureCode.EXPIRED, 1)


def test_an_expired_row_fails_unsent_and_a_row_without_expiry_never_expires() -> None:
    assert expiry(9.9, RowFacts(1, expires_at=10.0)) is None
    expired = expiry(10.0, RowFacts(2, expires_at=10.0))
    assert expired is not None
    assert (expired.state, expired.code, expired.attempts) == (State.FAILED, FailureCode.EXPIRED, 2)
    assert expiry(1e12, RowFacts(1)) is None


def test_a_row_handed_back_unsent_gets_its_attempt_back_and_keeps_its_place() -> None:
    back = hand_back(0.0, RowFacts(2))
    assert (back.state, back.attempts, back.delay_seconds, back.error) == (
        State.PENDING,
        1,
        None,  # no delay: it keeps its time, and so its place in line
        None,
    )
    assert hand_back(0.0, RowFacts(1), 0.0).delay_seconds is None
    assert hand_back(0.0, RowFacts(1), 3.0).delay_seconds == 3.0
    # Due again only after its expiry: it fails now instead.
    gone = hand_back(0.0, RowFacts(1, expires_at=2.0), 3.0)
    assert (gone.state, gone.code) == (State.FAILED, FailureCode.EXPIRED)


@pytest.mark.parametrize("kwargs", [{"max_attempts": 0}, {"base_seconds": -1.0}, {"jitter": -0.1}])
def test_nonsense_policies_are_refused(kwargs: dict[str, Any]) -> None:
    with pytest.raises(ValueError, match=r"must|cannot"):
        RetryPolicy(**kwargs)


@pytest.mark.parametrize(
    ("description", "code", "gone"),
    [
        ("Forbidden: bot was blocked by the user", "blocked", True),
        ("Forbidden: user is deactivated", "blocked", True),
        ("Forbidden: bot was kicked from the group chat", "forbidden", True),
        ("Forbidden: bot was kicked from the supergroup chat", "forbidden", True),
        ("Forbidden: bot was kicked from the channel chat", "forbidden", True),
        ("Forbidden: bot is not a member of the channel chat", "forbidden", True),
        ("Forbidden: bot is not a member of the supergroup chat", "forbidden", True),
        # Not gone: the person never started the bot, or it may not write there for now.
        ("Forbidden: bot can't initiate conversation with a user", "forbidden", False),
        ("Forbidden: bot can't send messages to bots", "forbidden", False),
        ("Forbidden: not enough rights to send text messages to the chat", "forbidden", False),
    ],
)
def test_a_403_says_whether_the_chat_is_gone_for_the_bot(
    description: str, code: str, gone: bool
) -> None:
    failure = classified(error(403, description))
    assert failure.kind is FailureKind.PERMANENT
    assert failure.code == code  # the codes keep their meaning
    assert failure.chat_gone is gone
    decision = decide(RetryPolicy(), 0.0, RowFacts(1), failure)
    assert decision.state is State.FAILED
    assert decision.chat_gone is gone


def test_only_a_403_marks_a_chat_gone() -> None:
    for status, description in [(400, "Bad Request: chat not found"), (500, "Internal")]:
        assert not classified(error(status, description)).chat_gone
