"""``outbox fake-telegram --help``: how to script faults and post a user's message, with a curl
line for each route; every one of those lines is sent to a running fake, as written."""

from __future__ import annotations

import json
import shlex
import urllib.error
import urllib.request
from typing import Any

import pytest

from outbox.commands.fake_telegram import CONTROL_HELP
from outbox_testing.fake_telegram import FakeTelegram
from tests.support import TEST_TOKEN, run_cli

HELP_PORT = "localhost:8081"


def _curl_lines() -> list[str]:
    return [line.strip() for line in CONTROL_HELP.splitlines() if line.strip().startswith("curl ")]


def _send(url: str, body: bytes | None, method: str) -> tuple[int, Any]:
    request = urllib.request.Request(url, data=body, method=method)
    try:
        with urllib.request.urlopen(request, timeout=30) as answer:
            return answer.status, json.loads(answer.read())
    except urllib.error.HTTPError as err:
        return err.code, json.loads(err.read())


def _curl(line: str, api_url: str) -> tuple[int, Any]:
    """What ``curl -s [-X M] URL [-d BODY]`` does, without needing curl on the machine."""
    words = shlex.split(line)[1:]
    method, body, url = "GET", None, ""
    while words:
        word = words.pop(0)
        if word == "-s":
            continue
        if word == "-X":
            method = words.pop(0)
        elif word == "-d":
            body, method = words.pop(0).encode(), "POST"
        else:
            assert word.startswith(HELP_PORT), word
            url = api_url + word.removeprefix(HELP_PORT)
    return _send(url, body, method)


def _send_message(fake: FakeTelegram, chat_id: int, **extra: Any) -> tuple[int, Any]:
    body = json.dumps({"chat_id": chat_id, "text": "Salom", **extra}).encode()
    url = f"{fake.api_url}/bot{TEST_TOKEN}/sendMessage"
    request = urllib.request.Request(
        url, data=body, method="POST", headers={"Content-Type": "application/json"}
    )
    try:
        with urllib.request.urlopen(request, timeout=30) as answer:
            return answer.status, json.loads(answer.read())
    except urllib.error.HTTPError as err:
        return err.code, json.loads(err.read())


def test_the_help_names_every_route_and_fault(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit):
        run_cli(capsys, "fake-telegram", "--help")
    text = capsys.readouterr().out
    for route in ("script", "message", "press", "config", "reset", "delivered", "requests"):
        assert f"/_fake/{route}" in text, route
    for kind in ("retry_after", "forbidden", "server_error", "slow", "drop", "bad_gateway_html"):
        assert kind in text, kind
    # Shown as written, so that the examples can be copied.
    start = """curl -s localhost:8081/_fake/message -d '{"chat_id": 42, "text": "/start"}'"""
    assert start in text


def test_every_curl_line_of_the_help_works(fake_telegram: FakeTelegram) -> None:
    keyboard = {"inline_keyboard": [[{"text": "✅ Bajarildi", "callback_data": "done:1"}]]}
    for _ in range(5):  # the press example names message 5 of chat 42
        status, _answer = _send_message(fake_telegram, 42, reply_markup=keyboard)
        assert status == 200
    lines = _curl_lines()
    assert len(lines) >= 9
    for line in lines[:4]:  # the scripted faults, not yet used
        status, answer = _curl(line, fake_telegram.api_url)
        assert (status, answer) == (200, {"ok": True}), line
    # The first script applies to any chat: a 429 with retry_after, as the help says.
    status, answer = _send_message(fake_telegram, 7)
    assert status == 429
    assert answer["parameters"] == {"retry_after": 5}
    # The second, to chat 42 only: a 403.
    status, answer = _send_message(fake_telegram, 42)
    assert status == 403
    for line in lines[4:]:
        status, answer = _curl(line, fake_telegram.api_url)
        assert status == 200, (line, answer)
        assert isinstance(answer, list) or answer["ok"] is True, (line, answer)
    assert fake_telegram.latency == 0.1
    assert fake_telegram.enforce_limits is True
