"""The operator's page in a real headless Chromium, as a person on call uses it.

Chromium and its driver come from the distribution (``apt-get install chromium
chromium-driver``; ``.ci/run`` installs them); selenium drives them. Without them these tests
skip and say why. ``OUTBOX_SCREENSHOTS=1`` also writes docs/web-desktop.png and
docs/web-phone.png (the pictures of docs/web.md).

Here the e2e tier's tests (processes); the others are in ``tests/unit/test_web_browser.py``.
"""

from __future__ import annotations

import http.server
import os
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import sqlalchemy as sa

from outbox_testing.fake_telegram import FakeTelegram
from tests.support import ROOT, Relays, free_port, row
from tests.support.webpage import add_message, chromium, running_web

DOCS = ROOT / "docs"
WAIT = 30.0  # seconds a condition may take to show on the page
SCRIPT_TITLE = "<script>window.pwned = true</script> Sut olish"


@pytest.fixture
def browser() -> Iterator[Any]:
    binary, driver_path = chromium()
    webdriver = pytest.importorskip("selenium.webdriver", reason="selenium not installed")
    options = webdriver.ChromeOptions()
    options.binary_location = binary
    options.unhandled_prompt_behavior = "ignore"  # the tests answer confirm() themselves
    for argument in (
        "--headless=new",
        "--no-sandbox",  # CI runs as root
        "--disable-gpu",
        "--disable-dev-shm-usage",
        "--window-size=1280,900",
    ):
        options.add_argument(argument)
    service = webdriver.ChromeService(executable_path=driver_path)
    driver = webdriver.Chrome(service=service, options=options)
    try:
        yield driver
    finally:
        driver.quit()


def _wait(driver: Any, condition: Any, what: str) -> Any:
    from selenium.common.exceptions import (
        NoSuchElementException,
        StaleElementReferenceException,
        TimeoutException,
    )
    from selenium.webdriver.support.ui import WebDriverWait

    # While a click loads the next page, an element read from the old one goes stale: look again.
    ignored = (NoSuchElementException, StaleElementReferenceException)
    try:
        return WebDriverWait(driver, WAIT, poll_frequency=0.1, ignored_exceptions=ignored).until(
            condition
        )
    except TimeoutException:
        raise AssertionError(
            f"timed out waiting for {what}; the page shows:\n{_text(driver)}"
        ) from None


def _text(driver: Any) -> str:
    from selenium.webdriver.common.by import By

    return str(driver.find_element(By.TAG_NAME, "body").text)


def _count(driver: Any, state: str) -> str:
    from selenium.webdriver.common.by import By

    return str(driver.find_element(By.CSS_SELECTOR, f'[data-count="{state}"]').text)


def _screenshot(driver: Any, name: str, width: int, *, mobile: bool = False) -> None:
    """A picture of the whole page at ``width`` CSS pixels, only when asked for."""
    if os.environ.get("OUTBOX_SCREENSHOTS") != "1":
        return
    metrics = {"width": width, "height": 900, "deviceScaleFactor": 1, "mobile": mobile}
    driver.execute_cdp_cmd("Emulation.setDeviceMetricsOverride", metrics)
    height = driver.execute_script("return document.documentElement.scrollHeight")
    metrics["height"] = min(int(height), 4000)
    driver.execute_cdp_cmd("Emulation.setDeviceMetricsOverride", metrics)
    DOCS.mkdir(exist_ok=True)
    driver.save_screenshot(str(DOCS / name))
    driver.execute_cdp_cmd("Emulation.clearDeviceMetricsOverride", {})


def test_an_operator_sees_the_queue_replays_a_failure_and_watches_it_delivered(
    browser: Any,
    db_url: str,
    engine: sa.Engine,
    tmp_path: Path,
    relays: Relays,
    fake_telegram: FakeTelegram,
) -> None:
    from selenium.common.exceptions import NoAlertPresentException
    from selenium.webdriver.common.by import By

    for i in range(3):
        add_message(engine, f"vazifa:{i}:eslatma", chat_id=1000 + i, text=f"Eslatma {i}")
    for i in range(4):
        add_message(engine, f"done:{i}", chat_id=2000 + i, state="bajarildi")
    with engine.begin() as conn:  # an hour of deliveries, for the chart
        conn.execute(
            sa.text(
                "UPDATE outbox SET yangilangan = now() - make_interval(mins => (id * 7 % 60)::int) "
                "WHERE holat = 'bajarildi'"
            )
        )
        conn.execute(
            sa.text(
                "INSERT INTO outbox (kalit, payload, holat, urinish, yangilangan) "
                "SELECT 'hour:' || i, jsonb_build_object('chat_id', i, 'text', 'ok'), "
                "'bajarildi', 1, now() - make_interval(mins => (i * 37) % 60) "
                "FROM generate_series(1, 96) AS i"
            )
        )
    other_bot = add_message(
        engine,
        "vazifa:8:eslatma",
        chat_id=3003,
        text="Hisobot yozish",
        state="xato",
        kind="hisobot",
        error="400 Bad Request: chat not found",
    )
    with engine.begin() as conn:  # a second bot's failure
        conn.execute(
            sa.text("UPDATE outbox SET navbat = 'shop_bot' WHERE id = :id"), {"id": other_bot}
        )
    failed = add_message(
        engine,
        "vazifa:9:eslatma",
        chat_id=4242,
        text=SCRIPT_TITLE,
        state="xato",
        error="403 Forbidden: bot was blocked by the user",
        history=[
            {"vaqt": "2026-11-30T08:59:58+00:00", "urinish": 1, "xato": "429: retry after 2"},
            {"vaqt": "2026-11-30T09:00:02+00:00", "urinish": 2, "xato": "403 Forbidden"},
        ],
    )
    with running_web(db_url, tmp_path) as page:
        browser.get(page.url)
        assert [_count(browser, s) for s in ("kutmoqda", "bajarildi", "xato")] == ["3", "100", "2"]
        # Two queues: the overview counts each, and each failure names its own.
        shop_failed = '[data-queue="shop_bot"] [data-queue-count="xato"]'
        assert browser.find_element(By.CSS_SELECTOR, shop_failed).text == "1"
        assert browser.find_element(By.CSS_SELECTOR, f"#m{other_bot} .queue").text == "shop_bot"
        assert browser.find_element(By.CSS_SELECTOR, f"#m{failed} .queue").text == "default"
        # The title is shown as text; the script in it never ran.
        card = browser.find_element(By.ID, f"m{failed}")
        assert SCRIPT_TITLE in card.text
        assert browser.execute_script("return window.pwned === undefined") is True
        with pytest.raises(NoAlertPresentException):
            _ = browser.switch_to.alert
        card.find_element(By.TAG_NAME, "summary").click()  # its history, in the pictures
        _screenshot(browser, "web-desktop.png", 1280)
        _screenshot(browser, "web-phone.png", 390, mobile=True)
        browser.set_window_size(390, 844)
        assert browser.execute_script(
            "return document.documentElement.scrollWidth <= window.innerWidth"
        ), "the page scrolls sideways on a phone"
        browser.set_window_size(1280, 900)

        # The figures update by themselves: the page is not reloaded.
        browser.execute_script("window.samePage = true")
        add_message(engine, "late", state="xato", error="boom")
        _wait(browser, lambda d: _count(d, "xato") == "3", "the failed count to become 3")
        assert browser.execute_script("return window.samePage") is True

        browser.find_element(By.CSS_SELECTOR, f'#m{failed} a[href="/messages/{failed}"]').click()
        _wait(browser, lambda d: "403 Forbidden: bot was blocked" in _text(d), "the message")
        assert "429: retry after 2" in _text(browser)  # its history
        browser.find_element(By.CSS_SELECTOR, "form[action$='/replay'] button").click()
        _wait(browser, lambda d: "Replayed" in _text(d), "the replay's notice")
        holat = (By.CSS_SELECTOR, '[data-field="holat"]')
        assert browser.find_element(*holat).text.startswith("kutmoqda")

        browser.execute_script("window.samePage = true")
        relay = relays.start()
        _wait(
            browser,
            lambda d: d.find_element(*holat).text.startswith("bajarildi"),
            f"message {failed} to turn bajarildi\n{relay.describe()}",
        )
        assert browser.execute_script("return window.samePage") is True
        marker = browser.find_element(By.CSS_SELECTOR, '[data-field="marker"]').text
        assert "Telegram message" in marker
        assert [d.text for d in fake_telegram.delivered_to(4242)] == [SCRIPT_TITLE]
        assert row(engine, "vazifa:9:eslatma")["tarix"][-1]["hodisa"] == "replay"


class _CrossSitePage(http.server.BaseHTTPRequestHandler):
    """Another site, whose page posts a replay to the operator's page as soon as it loads."""

    target = ""

    def do_GET(self) -> None:
        body = (
            f'<form id="f" method="post" action="{self.target}">'
            '<input name="csrf" value="guessed"></form>'
            '<script>document.getElementById("f").submit()</script>'
        ).encode()
        self.send_response(200)
        self.send_header("Content-Type", "text/html")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, *args: Any) -> None:
        pass


def test_a_cross_site_post_is_refused(
    browser: Any, db_url: str, engine: sa.Engine, tmp_path: Path
) -> None:
    failed = add_message(engine, "k", state="xato", error="boom")
    with running_web(db_url, tmp_path) as page:
        browser.get(page.url)  # the operator has the page open in the same browser
        _CrossSitePage.target = f"{page.url}/messages/{failed}/replay"
        server = http.server.ThreadingHTTPServer(("127.0.0.1", free_port()), _CrossSitePage)
        thread = threading.Thread(target=server.serve_forever, daemon=True)
        thread.start()
        try:
            browser.get(f"http://localhost:{server.server_port}/")
            _wait(browser, lambda d: d.current_url.startswith(page.url), "the cross-site POST")
            _wait(browser, lambda d: "Refused" in _text(d), "the refusal")
        finally:
            server.shutdown()
            server.server_close()
        assert "another site" in _text(browser)
        assert row(engine, "k")["holat"] == "xato"


def test_a_pending_message_is_cancelled_after_the_browser_asks(
    browser: Any, db_url: str, engine: sa.Engine, tmp_path: Path
) -> None:
    from selenium.webdriver.common.by import By

    waiting = add_message(engine, "w", text="Ertaga uchrashuv")
    with running_web(db_url, tmp_path) as page:
        browser.get(f"{page.url}/messages/{waiting}")
        browser.find_element(By.CSS_SELECTOR, "form[action$='/cancel'] button").click()
        alert = _wait(browser, lambda d: d.switch_to.alert, "the confirmation")
        assert "Cancel message" in alert.text
        alert.accept()
        _wait(browser, lambda d: "Cancelled" in _text(d), "the cancel's notice")
    assert row(engine, "w")["holat"] == "xato"
