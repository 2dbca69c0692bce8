"""``outbox web`` in a process of its own, and a small HTTP client for it (tests only)."""

from __future__ import annotations

import contextlib
import json
import re
import shutil
import subprocess
import sys
import urllib.error
import urllib.parse
import urllib.request
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import sqlalchemy as sa

from tests.support import free_port, missing_tool, relay_env, wait_until

__all__ = ["Answer", "WebPage", "add_message", "chromium", "running_web"]


@dataclass
class Answer:
    status: int
    body: str
    headers: Mapping[str, str]


class _NoRedirect(urllib.request.HTTPRedirectHandler):
    def redirect_request(self, *args: Any, **kwargs: Any) -> None:
        return None


class WebPage:
    """The running page: its URL, its log, and plain HTTP requests with a cookie jar."""

    def __init__(self, proc: subprocess.Popen[bytes], url: str, log: Path) -> None:
        self.proc = proc
        self.url = url
        self.log_path = log
        self.cookies: dict[str, str] = {}

    @property
    def log(self) -> str:
        return self.log_path.read_text(errors="replace")

    def request(
        self,
        method: str,
        path: str,
        form: Mapping[str, str] | None = None,
        headers: Mapping[str, str] | None = None,
    ) -> Answer:
        data = urllib.parse.urlencode(form).encode() if form is not None else None
        req = urllib.request.Request(self.url + path, data=data, method=method)
        for name, value in (headers or {}).items():
            req.add_header(name, value)
        if self.cookies:
            req.add_header("Cookie", "; ".join(f"{k}={v}" for k, v in self.cookies.items()))
        opener = urllib.request.build_opener(_NoRedirect)
        try:
            with opener.open(req, timeout=10) as response:
                answer = Answer(response.status, response.read().decode(), dict(response.headers))
        except urllib.error.HTTPError as err:
            answer = Answer(err.code, err.read().decode(errors="replace"), dict(err.headers))
        for name, value in answer.headers.items():
            if name.lower() == "set-cookie":
                key, _, rest = value.partition("=")
                self.cookies[key] = rest.split(";", 1)[0]
        return answer

    def get(self, path: str, **kwargs: Any) -> Answer:
        return self.request("GET", path, **kwargs)

    def post(self, path: str, form: Mapping[str, str], **kwargs: Any) -> Answer:
        return self.request("POST", path, form=form, **kwargs)

    def csrf(self, path: str = "/") -> str:
        """The form token of the page at ``path``, as the page's own forms carry it."""
        body = self.get(path).body
        match = re.search(r'name="csrf" (?:value|content)="([0-9a-f]+)"', body)
        assert match, f"no form token on {path}:\n{body[:2000]}"
        return match.group(1)


def _answers(url: str) -> bool:
    try:
        with urllib.request.urlopen(url + "/static/style.css", timeout=2):
            return True
    except (urllib.error.URLError, OSError):
        return False


@contextlib.contextmanager
def running_web(db_url: str, tmp_path: Path, *args: str, **settings: str) -> Iterator[WebPage]:
    """``outbox web`` on a free port; stopped (and its log shown on failure) afterwards."""
    port = free_port()
    env = relay_env(db_url, "http://127.0.0.1:9", OUTBOX_WEB_REFRESH="1s", **settings)
    log = tmp_path / f"web-{port}.log"
    with log.open("wb") as out:
        proc = subprocess.Popen(
            [sys.executable, "-m", "outbox.cli", "web", "--port", str(port), *args],
            env=env,
            stdout=out,
            stderr=subprocess.STDOUT,
            cwd=tmp_path,
        )
    page = WebPage(proc, f"http://127.0.0.1:{port}", log)
    try:
        wait_until(
            lambda: _answers(page.url) or proc.poll() is not None,
            30,
            "the web page to answer",
            explain=lambda: page.log,
        )
        assert proc.poll() is None, f"outbox web exited:\n{page.log}"
        yield page
    finally:
        proc.terminate()
        try:
            proc.wait(10)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait(10)


def add_message(
    engine: sa.Engine,
    key: str,
    *,
    chat_id: int = 42,
    text: str = "Eslatma",
    state: str = "kutmoqda",
    error: str | None = None,
    history: list[dict[str, Any]] | None = None,
    kind: str = "eslatma",
) -> int:
    """One outbox row in any state, written as plain SQL; returns its id."""
    with engine.begin() as conn:
        return int(
            conn.execute(
                sa.text(
                    "INSERT INTO outbox (tur, kalit, payload, holat, urinish, oxirgi_xato, tarix) "
                    "VALUES (:tur, :kalit, CAST(:payload AS jsonb), :holat, :urinish, :xato, "
                    "CAST(:tarix AS jsonb)) RETURNING id"
                ),
                {
                    "tur": kind,
                    "kalit": key,
                    "payload": json.dumps({"chat_id": chat_id, "text": text}),
                    "holat": state,
                    "urinish": 3 if state == "xato" else (1 if state == "bajarildi" else 0),
                    "xato": error,
                    "tarix": json.dumps(history or []),
                },
            ).scalar_one()
        )


def chromium() -> tuple[str, str]:
    """The paths of Chromium and its driver (the browser tests skip, naming what is missing)."""
    browser = shutil.which("chromium") or shutil.which("chromium-browser")
    driver = shutil.which("chromedriver")
    if browser is None:
        missing_tool("chromium not installed (apt-get install chromium chromium-driver)")
    if driver is None:
        missing_tool("chromedriver not installed (apt-get install chromium-driver)")
    return browser, driver
