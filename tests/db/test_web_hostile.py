"""The page fed what an attacker or a typo sends: a clear 4xx, never a 500, always the
security headers; sign-in throttled; the session cookie Secure behind a TLS proxy.

Most run the application in the test's process (tests/support/webapp.py); the proxy setting is also
tried through ``outbox web`` itself, where the flag and its environment twin are read.

Here the db tier's tests (PostgreSQL, in the test's process); the others are in
``tests/e2e/test_web_hostile.py``, ``tests/unit/test_web_hostile.py``.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Iterator

import pytest
import sqlalchemy as sa

from tests.support import row
from tests.support.webapp import LocalAnswer, LocalPage, local_page
from tests.support.webpage import add_message

PASSWORD = "correct horse battery"
HEADERS = ("Content-Security-Policy", "X-Content-Type-Options", "X-Frame-Options", "Cache-Control")


def protected(answer: LocalAnswer) -> bool:
    return all(name in answer.headers for name in HEADERS)


@pytest.fixture
def page(db_url: str) -> Iterator[LocalPage]:
    with local_page(db_url) as local:
        yield local


# --- no 500 for any address or form --------------------------------------------------------


@pytest.mark.parametrize(
    ("target", "status", "says"),
    [
        ("/?since=99999999999999d", 400, "is too long"),
        ("/?since=inf", 400, "is too long"),
        ("/?since=nan", 400, "cannot read duration"),
        ("/?since=1e400", 400, "is too long"),
        ("/?since=3651d", 400, "longer than ten years"),
        ("/?tur=%00", 400, "NUL character"),
        ("/?navbat=%00", 400, "NUL character"),
        ("/?tur=" + "x" * 600, 400, "longer than 500 characters"),
        ("/search?q=%00", 400, "NUL character"),
        ("/messages/%C2%B2", 404, "is not a message id"),
        ("/messages/%00", 404, "is not a message id"),
        ("/messages/99999999999999999999", 404, "is not a message id"),
        ("/messages/9223372036854775807", 404, "no outbox message with id 9223372036854775807"),
        ("/part/messages/99999999999999999999", 404, "is not a message id"),
        ("/no/such/page", 404, ""),
    ],
)
def test_an_address_the_page_cannot_use_gets_a_clear_error(
    page: LocalPage, target: str, status: int, says: str
) -> None:
    answer = page.get(target)
    assert answer.status == status, answer.body[:2000]
    assert says in answer.body
    assert protected(answer), answer.headers


def test_a_search_for_a_number_beyond_bigint_looks_for_a_key(
    page: LocalPage, engine: sa.Engine
) -> None:
    add_message(engine, "99999999999999999999-the-key")
    answer = page.get("/search?q=99999999999999999999")
    assert answer.status == 200 and "99999999999999999999-the-key" in answer.body


@pytest.mark.parametrize(
    ("target", "form", "status", "says"),
    [
        ("/messages/99999999999999999999/replay", {}, 404, "is not a message id"),
        ("/messages/99999999999999999999/cancel", {}, 404, "is not a message id"),
        ("/messages/%C2%B2/replay", {"force": "1"}, 404, "is not a message id"),
        ("/replay", {"confirmed": "1", "ids": "99999999999999999999"}, 400, "not a list of"),
        ("/replay", {"confirmed": "1", "ids": "1,²"}, 400, "not a list of message ids"),
        ("/replay", {"confirmed": "1", "ids": "0"}, 400, "not a list of message ids"),
        ("/replay", {"since": "99999999999999d"}, 400, "is too long"),
        ("/replay", {"tur": "a\x00b"}, 400, "NUL character"),
    ],
)
def test_a_form_the_page_cannot_use_gets_a_clear_error_and_changes_nothing(
    page: LocalPage, engine: sa.Engine, target: str, form: dict[str, str], status: int, says: str
) -> None:
    failed = add_message(engine, "failed", state="xato", error="boom")
    answer = page.post(target, {"csrf": page.csrf(), **form})
    assert answer.status == status, answer.body[:2000]
    assert says in answer.body and protected(answer)
    after = row(engine, "failed")
    assert after["id"] == failed and after["holat"] == "xato" and len(after["tarix"]) == 0


def test_headers_and_forms_no_browser_sends_are_refused_not_failed(page: LocalPage) -> None:
    token = page.csrf()
    answers = [
        page.get("/", headers={"Host": "["}),
        page.post("/replay", {"csrf": token}, headers={"Origin": "http://["}),
        page.post("/replay", {"csrf": "é" * 64}),
        page.request(
            "POST",
            "/replay",
            form=f"csrf={token}&tur=x".encode(),
            headers={"Content-Type": "application/x-www-form-urlencoded; charset=no-such"},
        ),
        page.request(
            "POST",
            "/replay",
            form=b"--b\r\nContent-Disposition: form-data; name=csrf\r\n\r\n%s\r\n--b\r\nbroken"
            % token.encode(),
            headers={"Content-Type": "multipart/form-data; boundary=b"},
        ),
        page.request("PUT", "/login", form={"csrf": token}),
        page.get("/messages/1/replay"),
        page.post("/replay", {"csrf": token, "tur": "x" * 300_000}),
    ]
    assert [a.status for a in answers] == [421, 403, 403, 400, 400, 303, 405, 413]
    assert "the form could not be read" in answers[3].body
    assert all(protected(a) for a in answers)


def test_tables_the_page_does_not_expect_are_a_503_that_says_migrate(
    page: LocalPage, engine: sa.Engine, caplog: pytest.LogCaptureFixture
) -> None:
    # Not this version's schema: the database's matter, not a fault of the page.
    with engine.begin() as conn:
        conn.exec_driver_sql("ALTER TABLE outbox RENAME COLUMN tur TO tur_old")
    with caplog.at_level(logging.WARNING, logger="outbox.web"):
        answer = page.get("/")
    assert answer.status == 503 and "outbox migrate" in answer.body
    assert "Traceback" not in answer.body and "tur_old" not in answer.body
    assert protected(answer)
    said = [r for r in caplog.records if "the database refused a query (42703)" in r.getMessage()]
    assert len(said) == 1 and said[0].exc_info is None


# --- sign-in throttling ----------------------------------------------------------------------


def test_a_wrong_password_is_answered_after_the_pause_and_the_right_one_at_once(
    db_url: str,
) -> None:
    with local_page(db_url, password=PASSWORD, wrong_password_pause=1.0) as local:
        token = local.csrf("/login")
        began = time.monotonic()
        wrong = local.post("/login", {"csrf": token, "password": "guess"})
        wrong_took = time.monotonic() - began
        began = time.monotonic()
        right = local.post("/login", {"csrf": token, "password": PASSWORD})
        right_took = time.monotonic() - began
    assert wrong.status == 401 and wrong_took >= 1.0
    assert right.status == 303 and right_took < 1.0


def test_parallel_guesses_lock_the_client_out_and_then_the_right_password_is_refused(
    db_url: str, caplog: pytest.LogCaptureFixture
) -> None:
    with local_page(db_url, password=PASSWORD) as local:
        token = local.csrf("/login")

        async def guesses() -> list[LocalAnswer]:
            wrong = [{"csrf": token, "password": f"guess {i}"} for i in range(100)]
            return await asyncio.gather(*(local.fetch("POST", "/login", form=f) for f in wrong))

        with caplog.at_level(logging.INFO, logger="outbox.web"):
            answers = local.runner.run(guesses())
            right = local.post("/login", {"csrf": token, "password": PASSWORD})
    statuses = sorted(a.status for a in answers)
    assert statuses == [401] * 5 + [429] * 95
    assert right.status == 429 and "Too many sign-in attempts: try again in" in right.body
    assert right.headers["Retry-After"].isdigit() and protected(right)
    assert not right.cookies
    locks = [r.getMessage() for r in caplog.records if "sign-in locked" in r.getMessage()]
    assert locks == [
        "web: sign-in locked for 60 s for client 127.0.0.1 after 5 wrong passwords within 60 s"
    ]
    assert all(PASSWORD not in r.getMessage() for r in caplog.records)


def test_a_wrong_bearer_counts_as_a_guess_and_a_locked_client_cannot_use_the_right_one(
    db_url: str,
) -> None:
    with local_page(db_url, password=PASSWORD) as local:
        for i in range(5):
            wrong = local.get("/part/overview", headers={"Authorization": f"Bearer nope{i}"})
            assert wrong.status == 401
        right = local.get("/part/overview", headers={"Authorization": f"Bearer {PASSWORD}"})
    assert right.status == 429 and protected(right)


def test_a_signed_in_session_is_not_locked_out_by_someone_elses_guesses(db_url: str) -> None:
    with local_page(db_url, password=PASSWORD, trusted_proxies="127.0.0.1") as local:
        local.sign_in(PASSWORD, client="operator")
        token = local.csrf("/login", client="attacker")
        away = {"X-Forwarded-For": "203.0.113.7"}
        for i in range(6):
            local.post(
                "/login", {"csrf": token, "password": f"x{i}"}, headers=away, client="attacker"
            )
        assert (
            local.post("/login", {"csrf": token, "password": PASSWORD}, headers=away).status == 429
        )
        assert local.get("/", client="operator").status == 200
        # Another address may still sign in.
        near = {"X-Forwarded-For": "198.51.100.1"}
        assert (
            local.post("/login", {"csrf": token, "password": PASSWORD}, headers=near).status == 303
        )


def test_many_addresses_together_are_capped_overall(
    db_url: str, caplog: pytest.LogCaptureFixture
) -> None:
    with local_page(db_url, password=PASSWORD, trusted_proxies="127.0.0.1") as local:
        token = local.csrf("/login")

        async def guesses() -> list[LocalAnswer]:
            return await asyncio.gather(
                *(
                    local.fetch(
                        "POST",
                        "/login",
                        form={"csrf": token, "password": "guess"},
                        headers={"X-Forwarded-For": f"10.1.{i // 250}.{i % 250}"},
                    )
                    for i in range(200)
                )
            )

        with caplog.at_level(logging.WARNING, logger="outbox.web"):
            answers = local.runner.run(guesses())
    assert {a.status for a in answers} == {401, 429}
    assert any("from all clients together" in r.getMessage() for r in caplog.records)
    assert not any("sign-in locked" in r.getMessage() for r in caplog.records)


# --- the session cookie behind a TLS proxy -----------------------------------------------------


def test_behind_a_trusted_tls_proxy_the_session_cookie_is_secure(db_url: str) -> None:
    https = {"X-Forwarded-Proto": "https", "X-Forwarded-For": "198.51.100.9"}
    with local_page(db_url, password=PASSWORD, trusted_proxies="127.0.0.0/8") as local:
        token = local.csrf("/login")
        behind = local.post("/login", {"csrf": token, "password": PASSWORD}, headers=https)
        plain = local.post("/login", {"csrf": token, "password": PASSWORD}, client="plain")
    assert behind.status == 303 and "; Secure" in behind.cookies[0]
    assert plain.status == 303 and "Secure" not in plain.cookies[0]


def test_forwarding_headers_from_an_untrusted_peer_are_ignored(db_url: str) -> None:
    https = {"X-Forwarded-Proto": "https", "X-Forwarded-For": "198.51.100.9"}
    with local_page(db_url, password=PASSWORD) as local:
        token = local.csrf("/login")
        for i in range(5):  # counted against the peer, not the address it claims
            headers = {**https, "X-Forwarded-For": f"198.51.100.{i}"}
            local.post("/login", {"csrf": token, "password": "x"}, headers=headers)
        answer = local.post("/login", {"csrf": token, "password": PASSWORD}, headers=https)
    assert answer.status == 429
