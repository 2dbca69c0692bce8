"""Redaction: the password where it stands (a URL's user part, ``password=``), never as a bare
substring; the token as typed and percent-encoded."""

from __future__ import annotations

import os

import pytest

from outbox.db import normalize_url
from outbox.redact import redact, redact_url, register_password, register_secret
from tests.support import run_module


def test_a_short_password_is_replaced_where_it_stands_and_nowhere_else() -> None:
    normalize_url("postgresql://postgres:postgres@/nosuch")  # registers the password
    text = 'cannot reach the database at postgresql://postgres:postgres@/nosuch: "postgres"'
    assert redact(text) == (
        'cannot reach the database at postgresql://postgres:***@/nosuch: "postgres"'
    )
    assert redact("the postgresql server; user postgres") == "the postgresql server; user postgres"


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("at postgresql://app:s3cret@db/app now", "at postgresql://app:***@db/app now"),
        # An unencoded "@" or "/" in the password: hidden whole, up to the URL's last "@".
        ("at postgresql://app:p@ss/w@db/app now", "at postgresql://app:***@db/app now"),
        ("postgresql://db/app?sslmode=require&password=pw&x=1", "postgresql://db/app?sslmode=require&password=***&x=1"),
        ("host=db password=s3cret dbname=app", "host=db password=*** dbname=app"),
        # Several servers (a primary and its standby), in the authority or in the query.
        ("at postgresql://app:s3cret@a:5432,b:5432/app?target_session_attrs=read-write now",
         "at postgresql://app:***@a:5432,b:5432/app?target_session_attrs=read-write now"),
        ("postgresql://app:s3cret@/app?host=a,b&port=5432,5432&target_session_attrs=read-write",
         "postgresql://app:***@/app?host=a,b&port=5432,5432&target_session_attrs=read-write"),
        ("postgresql:///app?host=a,b&password=s3cret&target_session_attrs=read-write",
         "postgresql:///app?host=a,b&password=***&target_session_attrs=read-write"),
        ("host=db password = 'two words' dbname=app", "host=db password = *** dbname=app"),
        ("PASSWORD=x", "PASSWORD=***"),
        # Not a password's place: left alone.
        ("http://127.0.0.1:8081/bot/sendMessage", "http://127.0.0.1:8081/bot/sendMessage"),
        ("password authentication failed for app", "password authentication failed for app"),
    ],
)  # fmt: skip
def test_passwords_in_urls_and_key_value_strings(text: str, expected: str) -> None:
    assert redact(text) == expected


def test_a_registered_password_with_a_space_is_found_in_its_url() -> None:
    register_password("two words")
    assert redact("at postgresql://app:two words@db/app") == "at postgresql://app:***@db/app"
    assert redact_url("postgresql://app:two words@db/app") == "postgresql://app:***@db/app"


def test_the_token_percent_encoded_is_redacted_too() -> None:
    token = "4242:Zx-registered_secret"
    register_secret(token)
    assert redact("GET /bot4242%3AZx-registered_secret/getMe") == "GET /bot[token]/getMe"
    # Token-shaped, never registered: the colon as typed or encoded.
    shaped = "/bot123456%3aAAHdqTcvCH1vGWJxfSeofSAs0K5PALDsaw/x"
    assert redact(shaped) == "/bot[token]/x"
    assert redact("?t=123456%3AAAHdqTcvCH1vGWJxfSeofSAs0K5PALDsaw") == "?t=[token]"


def test_the_command_names_the_database_with_its_user_and_only_the_password_hidden() -> None:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("OUTBOX_", "TELEGRAM_"))}
    url = "postgresql://postgres:postgres@127.0.0.1:1/postgres"
    done = run_module("outbox.cli", "status", "--database-url", url, env=env)
    assert done.returncode == 4, done.stderr
    assert done.stderr.startswith(
        "outbox: cannot reach the database at postgresql://postgres:***@127.0.0.1:1/postgres: "
    ), done.stderr
    assert "postgres:postgres" not in done.stderr
