"""The page fed what an attacker or a typo sends: a clear 4xx, never a 500, always the
security headers; sign-in throttled; the session cookie Secure behind a TLS proxy.

Most run the application in the test's process (tests/support/webapp.py); the proxy setting is also
tried through ``outbox web`` itself, where the flag and its environment twin are read.

Here the e2e tier's tests (processes); the others are in ``tests/db/test_web_hostile.py``,
``tests/unit/test_web_hostile.py``.
"""

from __future__ import annotations

import socket
from pathlib import Path

from tests.support import wait_until
from tests.support.webpage import running_web

PASSWORD = "correct horse battery"


# --- the session cookie behind a TLS proxy -----------------------------------------------------


def test_outbox_web_reads_the_trusted_proxy_from_its_environment(
    db_url: str, tmp_path: Path
) -> None:
    with running_web(
        db_url, tmp_path, OUTBOX_WEB_PASSWORD=PASSWORD, OUTBOX_WEB_TRUSTED_PROXY="127.0.0.1"
    ) as web:
        token = web.csrf("/login")
        answer = web.post(
            "/login",
            {"csrf": token, "password": PASSWORD},
            headers={"X-Forwarded-Proto": "https"},
        )
    assert answer.status == 303
    assert "Secure" in answer.headers["Set-Cookie"]


def test_a_request_aiohttp_cannot_parse_is_one_log_line_not_a_traceback(
    db_url: str, tmp_path: Path
) -> None:
    with running_web(db_url, tmp_path) as web:
        host, port = web.url.removeprefix("http://").split(":")
        for raw in (
            b"GET /?x=" + b"a" * 9000 + b" HTTP/1.1\r\n\r\n",
            b"GET / HTTP/1.1\r\nBad\r\n\r\n",
        ):
            with socket.create_connection((host, int(port)), timeout=10) as conn:
                conn.sendall(raw)
                assert conn.recv(100).startswith(b"HTTP/1.")  # answered 400 by aiohttp itself
        assert web.get("/").status == 200
        wait_until(lambda: web.log.count("malformed request") == 2, 30, "two log lines")
        log = web.log
    assert "Traceback" not in log
    assert "web: a malformed request from 127.0.0.1 refused (400): Got more than 8190" in log


def test_a_trusted_proxy_that_is_no_address_is_refused_in_one_line(db_url: str) -> None:
    from tests.support import relay_env, run_module

    env = relay_env(db_url, "http://127.0.0.1:9", OUTBOX_WEB_TRUSTED_PROXY="10.0.0.0/8,proxy")
    done = run_module("outbox.cli", "web", "--port", "0", env=env)
    assert done.returncode == 3
    assert done.stderr.strip().splitlines()[-1] == (
        "outbox: --trusted-proxy: 'proxy' is not an IP address or network "
        "(e.g. 127.0.0.1 or 10.0.0.0/8)"
    )
