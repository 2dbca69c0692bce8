"""The operator's page over plain HTTP: what it shows, what it refuses, what its actions leave.

The browser tests (test_web_browser.py) cover the same page as a person uses it.

Here the unit tier's tests (no database); the others are in ``tests/e2e/test_web.py``.
"""

from __future__ import annotations

import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.support.webpage import WebPage, running_web


@pytest.fixture
def page(db_url: str, tmp_path: Path) -> Iterator[WebPage]:
    with running_web(db_url, tmp_path) as web:
        yield web


def test_the_core_does_not_import_the_page() -> None:
    code = (
        "import sys, outbox, outbox.cli, outbox.relay, outbox.api, outbox.commands.operator;"
        "print(sorted(m for m in ('jinja2', 'outbox.web') if m in sys.modules))"
    )
    done = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, check=True, timeout=60
    )
    assert done.stdout.strip() == "[]"


def test_without_the_extra_the_command_says_what_to_install(tmp_path: Path) -> None:
    # The web library hidden, as in an installation without the 'web' extra.
    code = (
        "import sys; sys.modules['jinja2'] = None\n"
        "from outbox.cli import main\n"
        "sys.exit(main(['web', '--database-url', 'postgresql://u@127.0.0.1:1/db']))\n"
    )
    env = {k: v for k, v in os.environ.items() if not k.startswith("OUTBOX_")}
    done = subprocess.run(
        [sys.executable, "-c", code],
        capture_output=True,
        text=True,
        timeout=60,
        env=env,
        check=False,
        cwd=tmp_path,
    )
    assert done.returncode == 3, done.stderr
    assert done.stderr.strip() == (
        "outbox: the web page needs the 'web' extra (jinja2 is missing): "
        "pip install 'outbox-telegram[web]'"
    )


@pytest.mark.parametrize(
    ("host", "loopback"),
    [("127.0.0.1", True), ("127.0.0.2", True), ("::1", True), ("[::1]", True),
     ("localhost", True), ("0.0.0.0", False), ("::", False), ("192.168.1.5", False),
     ("example.com", False)],
)  # fmt: skip
def test_loopback_addresses(host: str, loopback: bool) -> None:
    from outbox.web.auth import is_loopback

    assert is_loopback(host) is loopback


def test_origin_check_compares_host_and_port() -> None:
    from outbox.web.auth import Guard

    assert Guard.origin_matches(None, "127.0.0.1:8080")  # not a browser: the token decides
    assert Guard.origin_matches("http://127.0.0.1:8080", "127.0.0.1:8080")
    assert Guard.origin_matches("https://ops.example:443", "ops.example:443")  # behind TLS
    assert not Guard.origin_matches("http://127.0.0.1:8081", "127.0.0.1:8080")
    assert not Guard.origin_matches("http://localhost:8080", "127.0.0.1:8080")
    assert not Guard.origin_matches("null", "127.0.0.1:8080")


def test_the_password_comes_from_the_environment_or_a_file(tmp_path: Path) -> None:
    from outbox.errors import ConfigError
    from outbox.web.auth import read_password

    assert read_password(None, {}) is None
    assert read_password(None, {"OUTBOX_WEB_PASSWORD": " s3cret \n"}) == "s3cret"
    secret = tmp_path / "pw"
    secret.write_text("from-file\n")
    assert read_password(str(secret), {}) == "from-file"
    secret.write_text("\n")
    with pytest.raises(ConfigError, match="is empty"):
        read_password(str(secret), {})
    with pytest.raises(ConfigError, match="cannot read the password file"):
        read_password(str(tmp_path / "missing"), {})


def test_the_chart_stacks_failed_on_delivered_and_scales_to_the_busiest_minute() -> None:
    from outbox.ops.views.status import CHART_HEIGHT, chart_bars
    from outbox.queries import Activity

    bars = chart_bars(Activity(delivered=[0, 4, 2], failed=[0, 0, 2]))
    assert [b.delivered_height for b in bars] == [0, CHART_HEIGHT, CHART_HEIGHT / 2]
    assert bars[2].failed_y + bars[2].failed_height == bars[2].delivered_y
    assert bars[2].label == "this minute: 2 delivered, 2 failed"
    assert bars[0].label == "2 min ago: 0 delivered, 0 failed"
