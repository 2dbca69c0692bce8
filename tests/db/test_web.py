"""The operator's page over plain HTTP: what it shows, what it refuses, what its actions leave.

The browser tests (test_web_browser.py) cover the same page as a person uses it.
"""

from __future__ import annotations

from pathlib import Path

from tests.support import relay_env, run_module


def test_no_password_no_listening_beyond_loopback(db_url: str, tmp_path: Path) -> None:
    env = relay_env(db_url, "http://127.0.0.1:9")
    done = run_module("outbox.cli", "web", "--host", "0.0.0.0", "--port", "0", env=env)
    assert done.returncode == 3
    assert done.stderr.strip().splitlines()[-1] == (
        "outbox: refusing to serve the page on 0.0.0.0 without a password: set "
        "OUTBOX_WEB_PASSWORD or OUTBOX_WEB_PASSWORD_FILE (or listen on 127.0.0.1)"
    )
    assert "Traceback" not in done.stderr
