"""The operator's page over plain HTTP: what it shows, what it refuses, what its actions leave.

The browser tests (test_web_browser.py) cover the same page as a person uses it.

Here the e2e tier's tests (processes); the others are in ``tests/unit/test_web.py``.
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterator
from pathlib import Path

import pytest
import sqlalchemy as sa

from tests.support import TEST_TOKEN, relay_env, row, run_module
from tests.support.webpage import WebPage, add_message, running_web


@pytest.fixture
def page(db_url: str, tmp_path: Path) -> Iterator[WebPage]:
    with running_web(db_url, tmp_path) as web:
        yield web


def test_the_page_shows_counts_and_failed_messages_escaped(
    page: WebPage, engine: sa.Engine
) -> None:
    add_message(engine, "p1")
    add_message(engine, "p2")
    failed = add_message(
        engine,
        "vazifa:7",
        chat_id=777,
        text="<script>alert('x')</script> Buy milk",
        state="xato",
        error=f"403 Forbidden: bot was blocked (token {TEST_TOKEN})",
        history=[{"vaqt": "2026-01-01T09:00:00+00:00", "urinish": 1, "xato": "429 Too Many"}],
    )
    body = page.get("/").body
    assert 'data-count="kutmoqda">2<' in body
    assert 'data-count="xato">1<' in body
    assert f'href="/messages/{failed}"' in body
    assert "&lt;script&gt;alert(&#39;x&#39;)&lt;/script&gt; Buy milk" in body
    assert "<script>alert" not in body
    assert "429 Too Many" in body  # the history
    assert TEST_TOKEN not in body and "[token]" in body


def test_a_post_without_the_form_token_or_from_another_origin_is_refused(
    page: WebPage, engine: sa.Engine
) -> None:
    failed = add_message(engine, "k", state="xato", error="boom")
    answer = page.post(f"/messages/{failed}/replay", {})
    assert answer.status == 403 and "not sent by this page" in answer.body
    token = page.csrf()
    answer = page.post(
        f"/messages/{failed}/replay", {"csrf": token}, headers={"Origin": "http://evil.example"}
    )
    assert answer.status == 403 and "another site" in answer.body
    assert row(engine, "k")["holat"] == "xato"
    # The page's own form, from its own origin, works.
    answer = page.post(f"/messages/{failed}/replay", {"csrf": token}, headers={"Origin": page.url})
    assert answer.status == 303
    replayed = row(engine, "k")
    assert replayed["holat"] == "kutmoqda"
    assert replayed["tarix"][-1]["hodisa"] == "replay"


def test_mistakes_in_the_address_get_a_page_that_says_what_is_wrong(page: WebPage) -> None:
    answer = page.get("/?since=soon")
    assert answer.status == 400 and "cannot read duration &#39;soon&#39;" in answer.body
    answer = page.get("/messages/99999")
    assert answer.status == 404 and "no outbox message with id 99999" in answer.body


def test_a_get_never_changes_anything(page: WebPage, engine: sa.Engine) -> None:
    failed = add_message(engine, "k", state="xato", error="boom")
    assert page.get(f"/messages/{failed}/replay").status == 405
    assert row(engine, "k")["holat"] == "xato"


def test_a_delivered_message_is_replayed_only_after_a_confirmation(
    page: WebPage, engine: sa.Engine
) -> None:
    failed = add_message(engine, "sent-once", state="xato", error="read timeout")
    with engine.begin() as conn:
        conn.execute(
            sa.text(
                "INSERT INTO yuborilgan (kalit, chat_id, message_id) VALUES ('sent-once', 42, 9)"
            )
        )
    token = page.csrf()
    refused = page.post(f"/messages/{failed}/replay", {"csrf": token})
    assert refused.status == 409
    assert "already sent at" in refused.body and "Telegram message 9" in refused.body
    asked = page.post(f"/messages/{failed}/replay", {"csrf": token, "force": "1"})
    assert asked.status == 200 and "Yes, send it again" in asked.body
    assert row(engine, "sent-once")["holat"] == "xato"
    done = page.post(f"/messages/{failed}/replay", {"csrf": token, "force": "1", "confirmed": "1"})
    assert done.status == 303
    after = row(engine, "sent-once")
    assert after["holat"] == "kutmoqda" and after["marker_message"] is None
    assert after["tarix"][-1]["hodisa"] == "replay --force"


def test_a_blocked_chats_message_is_not_replayed_until_unblocked(
    page: WebPage, engine: sa.Engine
) -> None:
    failed = add_message(engine, "gone", chat_id=4242, state="xato", error="blocked")
    with engine.begin() as conn:
        conn.execute(sa.text("INSERT INTO bloklangan (suhbat) VALUES ('4242')"))
    token = page.csrf()
    refused = page.post(f"/messages/{failed}/replay", {"csrf": token})
    assert refused.status == 409
    assert "unblock it first: outbox chats --unblock 4242" in refused.body
    assert "Yes, send it again" not in refused.body and 'name="force"' not in refused.body
    assert row(engine, "gone")["holat"] == "xato"
    with engine.begin() as conn:
        conn.execute(sa.text("DELETE FROM bloklangan"))
    assert page.post(f"/messages/{failed}/replay", {"csrf": token}).status == 303
    assert row(engine, "gone")["holat"] == "kutmoqda"


def test_a_selection_is_replayed_after_its_list_is_confirmed(
    page: WebPage, engine: sa.Engine
) -> None:
    ids = [
        add_message(engine, f"f{i}", state="xato", error="boom", kind="eslatma") for i in range(3)
    ]
    other = add_message(engine, "other-kind", state="xato", error="boom", kind="hisobot")
    token = page.csrf()
    listed = page.post("/replay", {"csrf": token, "tur": "eslatma", "since": "1h"})
    assert listed.status == 200 and "Replay 3 failed messages?" in listed.body
    assert row(engine, "f0")["holat"] == "xato"  # nothing happens before the confirmation
    # What is confirmed is the list shown, not whatever matches the filter by then.
    late = add_message(engine, "late", state="xato", error="boom")
    selection = ",".join(str(i) for i in sorted(ids, reverse=True))
    assert f'value="{selection}"' in listed.body
    done = page.post("/replay", {"csrf": token, "confirmed": "1", "ids": selection})
    assert done.status == 200 and "Replayed 3 messages" in done.body
    assert {row(engine, f"f{i}")["holat"] for i in range(3)} == {"kutmoqda"}
    assert row(engine, "late")["holat"] == "xato"
    assert row(engine, "other-kind")["holat"] == "xato"
    assert late and other


def in_queue(engine: sa.Engine, row_id: int, queue: str) -> int:
    with engine.begin() as conn:
        conn.execute(
            sa.text("UPDATE outbox SET navbat = :queue WHERE id = :id"),
            {"queue": queue, "id": row_id},
        )
    return row_id


def cards(body: str) -> dict[int, str]:
    """The failed cards shown, by id, with the queue each names ('' when none)."""
    found = re.findall(r'<article class="card" id="m(\d+)">(.*?)</article>', body, re.S)
    return {
        int(row_id): (re.findall(r'data-queue="([^"]*)"', card) or [""])[0]
        for row_id, card in found
    }


def test_with_several_queues_each_failure_names_its_queue_and_the_list_filters_by_it(
    page: WebPage, engine: sa.Engine
) -> None:
    shop = in_queue(engine, add_message(engine, "shop", state="xato", error="x"), "shop_bot")
    plain = add_message(engine, "plain", state="xato", error="x")
    in_queue(engine, add_message(engine, "waiting"), "shop_bot")

    body = page.get("/").body
    assert cards(body) == {shop: "shop_bot", plain: "default"}
    # The overview counts each queue, and each queue's name leads to its failures.
    assert re.search(
        r'<tr data-queue="shop_bot">\s*<td><a href="/\?queue=shop_bot"[^>]*>shop_bot</a></td>\s*'
        r'<td class="num" data-queue-count="kutmoqda">1</td>.*?'
        r'<td class="num" data-queue-count="xato">1</td>',
        body,
        re.S,
    ), body
    assert '<option value="shop_bot">shop_bot</option>' in body

    filtered = page.get("/?queue=shop_bot").body
    assert cards(filtered) == {shop: "shop_bot"}
    assert '<option value="shop_bot" selected>shop_bot</option>' in filtered
    assert '<input type="hidden" name="queue" value="shop_bot">' in filtered  # the bulk replay
    # The page's old spelling of the filter, in addresses saved before, still filters.
    assert cards(page.get("/?navbat=shop_bot").body) == {shop: "shop_bot"}
    assert "No failed messages match this filter" in page.get("/?queue=other_bot").body
    wrong = page.get("/?queue=no%20such")
    assert wrong.status == 400 and "queue name &#39;no such&#39; is not usable" in wrong.body

    assert page.get("/part/overview").body.count("<tr data-queue=") == 2
    shown = page.get(f"/messages/{shop}").body
    assert '<dd data-field="navbat">shop_bot</dd>' in shown


def test_a_selection_by_queue_replays_only_that_queues_failures(
    page: WebPage, engine: sa.Engine
) -> None:
    shop = [
        in_queue(engine, add_message(engine, f"s{i}", state="xato", error="x"), "shop_bot")
        for i in range(2)
    ]
    add_message(engine, "plain", state="xato", error="x")
    token = page.csrf()
    listed = page.post("/replay", {"csrf": token, "tur": "", "queue": "shop_bot", "since": ""})
    assert listed.status == 200 and "Replay 2 failed messages?" in listed.body
    assert "navbat shop_bot" in listed.body
    assert "<th>navbat</th>" in listed.body and "<td>shop_bot</td>" in listed.body
    selection = ",".join(str(i) for i in sorted(shop, reverse=True))
    assert f'value="{selection}"' in listed.body
    done = page.post("/replay", {"csrf": token, "confirmed": "1", "ids": selection})
    assert done.status == 200 and "Replayed 2 messages" in done.body
    assert [row(engine, f"s{i}")["holat"] for i in range(2)] == ["kutmoqda", "kutmoqda"]
    assert row(engine, "plain")["holat"] == "xato"


def test_with_the_default_queue_alone_the_page_says_nothing_of_queues(
    page: WebPage, engine: sa.Engine
) -> None:
    failed = add_message(engine, "plain", state="xato", error="x")
    add_message(engine, "waiting")
    body = page.get("/").body
    assert cards(body) == {failed: ""}
    assert "data-queue" not in body and 'name="queue"' not in body.split('class="bulk"')[0]
    assert "<th>navbat</th>" not in page.get("/search?q=plain").body


def test_cancel_keeps_the_row_in_xato_with_its_reason(page: WebPage, engine: sa.Engine) -> None:
    waiting = add_message(engine, "w")
    token = page.csrf()
    assert page.post(f"/messages/{waiting}/cancel", {"csrf": token}).status == 303
    cancelled = row(engine, "w")
    assert cancelled["holat"] == "xato"
    assert cancelled["oxirgi_xato"] == "cancelled by operator"
    assert cancelled["tarix"][-1]["hodisa"] == "cancelled by operator"
    again = page.post(f"/messages/{waiting}/cancel", {"csrf": token})
    assert again.status == 409 and "only a waiting message" in again.body
    assert "cancelled by operator" in page.get(f"/messages/{waiting}").body


def test_search_finds_keys_and_chats_in_every_state(page: WebPage, engine: sa.Engine) -> None:
    add_message(engine, "vazifa:12:eslatma", chat_id=5005, state="bajarildi")
    shop = add_message(engine, "vazifa:13:eslatma", chat_id=5005, state="xato", error="x")
    in_queue(engine, shop, "shop_bot")
    add_message(engine, "other", chat_id=6006)
    by_chat = page.get("/search?q=5005").body
    assert "vazifa:12:eslatma" in by_chat and "vazifa:13:eslatma" in by_chat
    assert "<th>navbat</th>" in by_chat
    assert "<td>shop_bot</td>" in by_chat and "<td>default</td>" in by_chat
    assert "other" not in by_chat.split("<main>")[1]
    by_prefix = page.get("/search?q=vazifa%3A12").body
    assert "vazifa:12:eslatma" in by_prefix and "vazifa:13:eslatma" not in by_prefix
    assert "No message has" in page.get("/search?q=nothing-like-this").body


def test_with_a_password_every_page_needs_a_sign_in(
    db_url: str, tmp_path: Path, engine: sa.Engine
) -> None:
    secret = tmp_path / "password"
    secret.write_text("correct horse battery\n")
    add_message(engine, "k")
    with running_web(db_url, tmp_path, OUTBOX_WEB_PASSWORD_FILE=str(secret)) as web:
        answer = web.get("/")
        assert answer.status == 303 and answer.headers["Location"] == "/login"
        assert web.get("/part/overview").status == 401
        token = web.csrf("/login")
        assert web.post("/login", {"csrf": token, "password": "wrong"}).status == 401
        assert (
            web.post("/login", {"csrf": token, "password": "correct horse battery"}).status == 303
        )
        assert web.get("/").status == 200
        bearer = web.get(
            "/part/overview", headers={"Authorization": "Bearer correct horse battery"}
        )
        assert bearer.status == 200
        # A script with the bearer header needs no form token (no browser sends it by itself).
        waiting = add_message(engine, "by-script")
        scripted = web.post(
            f"/messages/{waiting}/cancel",
            {},
            headers={"Authorization": "Bearer correct horse battery"},
        )
        assert scripted.status == 303 and row(engine, "by-script")["holat"] == "xato"
        assert "correct horse" not in web.log


def test_no_password_no_listening_beyond_loopback(db_url: str, tmp_path: Path) -> None:
    env = relay_env(db_url, "http://127.0.0.1:9")
    done = run_module("outbox.cli", "web", "--host", "0.0.0.0", "--port", "0", env=env)
    assert done.returncode == 3
    assert done.stderr.strip().splitlines()[-1] == (
        "outbox: refusing to serve the page on 0.0.0.0 without a password: set "
        "OUTBOX_WEB_PASSWORD or OUTBOX_WEB_PASSWORD_FILE (or listen on 127.0.0.1)"
    )
    assert "Traceback" not in done.stderr


def test_without_a_password_only_loopback_names_are_answered(page: WebPage) -> None:
    # A name that an attacker's DNS points at 127.0.0.1 (DNS rebinding) gets nothing.
    assert page.get("/", headers={"Host": "attacker.example"}).status == 421
    assert page.get("/", headers={"Host": "localhost"}).status == 200


def test_the_page_sends_its_protective_headers(page: WebPage) -> None:
    headers = page.get("/").headers
    assert "script-src 'self'" in headers["Content-Security-Policy"]
    assert "frame-ancestors 'none'" in headers["Content-Security-Policy"]
    assert headers["X-Frame-Options"] == "DENY"


def test_the_page_logs_its_actions_with_the_message_fields(
    db_url: str, tmp_path: Path, engine: sa.Engine
) -> None:
    failed = add_message(engine, "logged", chat_id=31337, state="xato", error="boom")
    with running_web(db_url, tmp_path, OUTBOX_LOG_FORMAT="json") as web:
        token = web.csrf()
        assert web.post(f"/messages/{failed}/replay", {"csrf": token}).status == 303
        lines = [json.loads(line) for line in web.log.splitlines() if line.strip()]
    replayed = [line for line in lines if line["message"] == f"web: replayed outbox {failed}"]
    assert replayed, lines
    assert replayed[0]["outbox_id"] == failed
    assert replayed[0]["key"] == "logged" and replayed[0]["chat_id"] == 31337
    assert replayed[0]["logger"] == "outbox.web" and replayed[0]["level"] == "INFO"
