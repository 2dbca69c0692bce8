"""The page fed what an attacker or a typo sends: a clear 4xx, never a 500, always the
security headers; sign-in throttled; the session cookie Secure behind a TLS proxy.

Most run the application in the test's process (tests/support/webapp.py); the proxy setting is also
tried through ``outbox web`` itself, where the flag and its environment twin are read.

Here the unit tier's tests (no database); the others are in ``tests/db/test_web_hostile.py``,
``tests/e2e/test_web_hostile.py``.
"""

from __future__ import annotations

import pytest

from tests.support.webapp import LocalAnswer, local_page

HEADERS = ("Content-Security-Policy", "X-Content-Type-Options", "X-Frame-Options", "Cache-Control")


def protected(answer: LocalAnswer) -> bool:
    return all(name in answer.headers for name in HEADERS)


# --- no 500 for any address or form --------------------------------------------------------


def test_the_database_away_is_a_503_with_the_headers() -> None:
    with local_page("postgresql://nobody@127.0.0.1:9/nowhere") as away:
        answer = away.get("/")
    assert answer.status == 503 and "cannot reach the database" in answer.body
    assert protected(answer)


def test_a_fault_of_the_page_itself_is_logged_once_and_answered_with_the_headers(
    caplog: pytest.LogCaptureFixture,
) -> None:
    # The last resort of the page's one error path, given a handler with a defect.
    import asyncio
    import logging

    from aiohttp.test_utils import make_mocked_request

    from outbox.web import WebConfig, build_app
    from outbox.web.gate import answers

    app = build_app(
        WebConfig(database_url="postgresql://nobody@127.0.0.1:9/nowhere", schema="public")
    )
    request = make_mocked_request("GET", "/", headers={"Host": "127.0.0.1"}, app=app)

    async def defect(_: object) -> None:
        raise ZeroDivisionError("a bug")

    with caplog.at_level(logging.ERROR, logger="outbox.web"):
        answer = asyncio.run(answers(request, defect))  # type: ignore[arg-type]
    assert answer.status == 500
    assert all(name in answer.headers for name in HEADERS)
    faults = [r for r in caplog.records if "unexpected error answering GET /" in r.getMessage()]
    assert len(faults) == 1 and faults[0].exc_info is not None


# --- sign-in throttling ----------------------------------------------------------------------


def test_the_throttle_locks_for_longer_each_time_and_forgets_on_a_sign_in() -> None:
    from outbox.web.throttle import SignInThrottle

    now = [1000.0]
    throttle = SignInThrottle(clock=lambda: now[0])
    for _ in range(4):
        throttle.failed("a")
    assert throttle.wait_seconds("a") == 0
    throttle.failed("a")
    assert throttle.wait_seconds("a") == 60
    now[0] += 60
    assert throttle.wait_seconds("a") == 0
    throttle.failed("a")  # one more after a lockout: twice as long
    assert throttle.wait_seconds("a") == 120
    now[0] += 120
    throttle.failed("a")
    assert throttle.wait_seconds("a") == 240
    assert throttle.wait_seconds("b") == 0  # another client is not concerned
    now[0] += 240
    throttle.succeeded("a")
    throttle.failed("a")
    assert throttle.wait_seconds("a") == 0  # a sign-in starts the count again


def test_failures_spread_over_more_than_a_minute_do_not_lock() -> None:
    from outbox.web.throttle import SignInThrottle

    now = [0.0]
    throttle = SignInThrottle(clock=lambda: now[0])
    for _ in range(20):
        throttle.failed("a")
        now[0] += 15.0
    assert throttle.wait_seconds("a") == 0


def test_the_overall_cap_refills_at_its_rate() -> None:
    from outbox.web.throttle import SignInThrottle

    now = [0.0]
    throttle = SignInThrottle(clock=lambda: now[0], overall_per_second=10)
    for i in range(10):
        assert throttle.wait_seconds(f"c{i}") == 0
        throttle.failed(f"c{i}")
    assert throttle.wait_seconds("someone") == 1
    now[0] += 0.1
    assert throttle.wait_seconds("someone") == 0


@pytest.mark.parametrize(
    ("address", "key"),
    [
        ("192.0.2.1", "192.0.2.1"),
        ("2001:db8:1:2:3:4:5:6", "2001:db8:1:2::/64"),
        ("2001:db8:1:2:ffff::1", "2001:db8:1:2::/64"),
        ("::ffff:192.0.2.1", "192.0.2.1"),
        (None, "unknown"),
    ],
)
def test_a_client_is_an_address_or_an_ipv6_slash_64(address: str | None, key: str) -> None:
    from outbox.web.throttle import client_key

    assert client_key(address) == key


# --- the session cookie behind a TLS proxy -----------------------------------------------------


@pytest.mark.parametrize(
    ("peer", "forwarded_for", "client"),
    [
        ("127.0.0.1", "203.0.113.5", "203.0.113.5"),
        ("127.0.0.1", "1.1.1.1, 203.0.113.5", "203.0.113.5"),  # the first is the client's word
        ("127.0.0.1", "203.0.113.5, 10.0.0.2", "203.0.113.5"),  # a second proxy of ours
        ("127.0.0.1", "10.0.0.2", "127.0.0.1"),  # only proxies: the nearest one
        ("127.0.0.1", "nonsense", "127.0.0.1"),
        ("127.0.0.1", None, "127.0.0.1"),
        ("192.0.2.50", "203.0.113.5", "192.0.2.50"),  # not a trusted peer: its header ignored
    ],
)
def test_the_client_behind_trusted_proxies_is_the_last_untrusted_hop(
    peer: str, forwarded_for: str | None, client: str
) -> None:
    from outbox.web.auth import Proxies

    proxies = Proxies.parse("127.0.0.1, 10.0.0.0/8")
    assert proxies.client(peer, forwarded_for) == client
    assert proxies.https(peer, "https") is (peer == "127.0.0.1")
    assert not proxies.https(peer, "http")
