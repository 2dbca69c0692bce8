"""The page's application in the test's own process, over real HTTP on a free port (tests only).

Quicker than ``running_web`` (no process to start), so that many requests can be tried; the
page is the same application ``outbox web`` serves, against a real database.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import re
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field
from typing import Any

import aiohttp
import aiohttp.abc
from aiohttp.test_utils import TestServer
from yarl import URL

from outbox.web import WebConfig, build_app

__all__ = ["LocalAnswer", "LocalPage", "local_page"]


@dataclass
class LocalAnswer:
    status: int
    body: str
    headers: Mapping[str, str]
    cookies: list[str] = field(default_factory=list)  # the Set-Cookie lines


class LocalPage:
    """Requests to the page from the test's thread; each client has its own cookie jar."""

    def __init__(self, runner: asyncio.Runner, server: TestServer) -> None:
        self.runner = runner
        self.server = server
        self._sessions: dict[str, aiohttp.ClientSession] = {}

    def _session(self, client: str) -> aiohttp.ClientSession:
        """The client's session (made on first use, inside the running loop)."""
        if client not in self._sessions:
            # A client named anon... keeps no cookies: every request of its own, never signed in.
            jar: aiohttp.abc.AbstractCookieJar = (
                aiohttp.DummyCookieJar()
                if client.startswith("anon")
                else aiohttp.CookieJar(unsafe=True)
            )
            self._sessions[client] = aiohttp.ClientSession(cookie_jar=jar)
        return self._sessions[client]

    async def fetch(
        self,
        method: str,
        target: str,
        *,
        form: Mapping[str, str] | None = None,
        headers: Mapping[str, str] | None = None,
        client: str = "default",
    ) -> LocalAnswer:
        """One request; ``target`` is sent as written (already percent-encoded)."""
        url = self.server.make_url(URL(target, encoded=True))
        async with self._session(client).request(
            method, url, data=form, headers=headers, allow_redirects=False
        ) as response:
            body = await response.read()
            return LocalAnswer(
                response.status,
                body.decode(errors="replace"),
                dict(response.headers),
                response.headers.getall("Set-Cookie", []),
            )

    def request(self, method: str, target: str, **kwargs: Any) -> LocalAnswer:
        return self.runner.run(self.fetch(method, target, **kwargs))

    def get(self, target: str, **kwargs: Any) -> LocalAnswer:
        return self.request("GET", target, **kwargs)

    def post(self, target: str, form: Mapping[str, str], **kwargs: Any) -> LocalAnswer:
        return self.request("POST", target, form=form, **kwargs)

    def csrf(self, target: str = "/", client: str = "default") -> str:
        body = self.get(target, client=client).body
        match = re.search(r'name="csrf" (?:value|content)="([0-9a-f]+)"', body)
        assert match, f"no form token on {target}:\n{body[:2000]}"
        return match.group(1)

    def sign_in(
        self, password: str, client: str = "default", headers: Mapping[str, str] | None = None
    ) -> None:
        token = self.csrf("/login", client=client)
        answer = self.post(
            "/login", {"csrf": token, "password": password}, client=client, headers=headers
        )
        assert answer.status == 303, answer.body[:2000]

    def close(self) -> None:
        for session in self._sessions.values():
            self.runner.run(session.close())


@contextlib.contextmanager
def local_page(db_url: str, **settings: Any) -> Iterator[LocalPage]:
    """The page on 127.0.0.1 (schema public), with ``WebConfig`` ``settings``. A wrong password
    is answered after 0.15 s unless they say otherwise (the suite tries hundreds): one client
    signing in over and over then stays under everyone's 10 wrong passwords a second, as with
    the real pause."""
    settings.setdefault("wrong_password_pause", 0.15)
    app = build_app(WebConfig(database_url=db_url, schema="public", **settings))
    logging.getLogger("outbox.web").setLevel(logging.INFO)
    with asyncio.Runner() as runner:
        server = TestServer(app)
        runner.run(server.start_server())
        page = LocalPage(runner, server)
        try:
            yield page
        finally:
            page.close()
            runner.run(server.close())
