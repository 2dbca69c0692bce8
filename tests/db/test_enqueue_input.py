"""What ``enqueue`` accepts: a payload Telegram could send and PostgreSQL can store, or a clear
``InvalidPayload``; never a driver error, never a row half written. A property test feeds it
random payloads and keys against the real database.

Here the db tier's tests (PostgreSQL, in the test's process); the others are in
``tests/unit/test_enqueue_input.py``.
"""

from __future__ import annotations

from typing import Any

import pytest
import sqlalchemy as sa
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from outbox import enqueue
from outbox.errors import InvalidInput, InvalidPayload, OutboxError
from outbox.payload import read_json, send_message_args


@pytest.mark.parametrize(
    ("key", "payload", "field"),
    [
        ("k", {"chat_id": 42, "text": "a\x00b"}, "text contains a NUL character"),
        ("k\x00", {"chat_id": 42, "text": "ab"}, "key contains a NUL character"),
        ("k", {"chat_id": 42, "text": "\ud800"}, "text is not valid Unicode"),
        ("\udfff", {"chat_id": 42, "text": "ab"}, "key is not valid Unicode"),
        ("k" * 1025, {"chat_id": 42, "text": "ab"}, "key takes 1025 bytes; at most 1024"),
        (
            "k",
            {
                "chat_id": 42,
                "text": "ab",
                "reply_markup": {"inline_keyboard": [[{"text": "ok", "callback_data": "\x00"}]]},
            },
            "callback_data contains a NUL character",
        ),
    ],
)
def test_what_postgresql_cannot_store_is_an_invalid_payload(
    engine: sa.Engine, key: str, payload: dict[str, Any], field: str
) -> None:
    with pytest.raises(InvalidPayload, match=field), engine.begin() as conn:
        enqueue(conn, key=key, payload=payload)
    with engine.begin() as conn:
        assert conn.exec_driver_sql("SELECT count(*) FROM outbox").scalar_one() == 0


# --- the property --------------------------------------------------------------------------------

_json_scalars = st.one_of(
    st.none(),
    st.booleans(),
    st.integers(min_value=-(2**70), max_value=2**70),
    st.floats(allow_nan=False, allow_infinity=False),
    st.text(max_size=20),
)


def _json_nested(inner: st.SearchStrategy[Any]) -> st.SearchStrategy[Any]:
    # A named function: Hypothesis reads a lambda's source to see that it recurses, and a
    # lambda over several lines is not always found (a deprecation warning, then an error).
    return st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=8), inner, max_size=4)


_json = st.recursive(_json_scalars, _json_nested, max_leaves=12)
_texts = st.one_of(
    st.text(max_size=50),
    st.text(alphabet=st.characters(codec="utf-8"), min_size=4090, max_size=4100),
    st.sampled_from(["hi", " ", "", "\x00", "a\x00", "<b>x</b>"]),
)
_chat_ids = st.one_of(
    st.integers(min_value=-(2**60), max_value=2**60),
    st.sampled_from(["@a", "@kanal", "@Kanal_1", "42", "-100123", "", "@"]),
    st.text(max_size=12),
)
_buttons = st.fixed_dictionaries(
    {"text": _texts},
    optional={"callback_data": st.text(max_size=70), "url": st.text(max_size=20)},
)
_shaped = st.fixed_dictionaries(
    {"chat_id": _chat_ids, "text": _texts},
    optional={
        "parse_mode": st.sampled_from([None, "HTML", "Markdown", "MarkdownV2", "html", ""]),
        "message_thread_id": st.one_of(st.none(), st.integers(-5, 2**40), st.booleans()),
        "disable_notification": st.one_of(st.booleans(), st.none(), st.integers(0, 1)),
        "reply_markup": st.one_of(
            st.fixed_dictionaries(
                {"inline_keyboard": st.lists(st.lists(_buttons, max_size=2), max_size=2)}
            ),
            _json,
        ),
        "photo": st.text(max_size=4),
    },
)
_payloads = st.one_of(_shaped, st.dictionaries(st.text(max_size=12), _json, max_size=5))
_keys = st.one_of(
    st.text(max_size=30),
    st.text(min_size=1020, max_size=1030),
    st.sampled_from(["", "k\x00", "eslatma:1"]),
)


@settings(
    max_examples=150,
    deadline=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
)
@given(key=_keys, payload=_payloads)
def test_enqueue_accepts_a_sendable_row_or_refuses_it_whole(
    engine: sa.Engine, key: str, payload: dict[str, Any]
) -> None:
    with engine.begin() as conn:
        before = conn.exec_driver_sql("SELECT count(*) FROM outbox").scalar_one()
    try:
        with engine.begin() as conn:
            made = enqueue(conn, key=key, payload=payload)
    except (InvalidPayload, InvalidInput, OutboxError):
        with engine.begin() as conn:
            after = conn.exec_driver_sql("SELECT count(*) FROM outbox").scalar_one()
        assert after == before  # refused whole: nothing written
        return
    with engine.begin() as conn:
        stored = conn.execute(
            sa.text("SELECT kalit, holat, payload::text FROM outbox WHERE id = :id"),
            {"id": made.id},
        ).one()
    assert stored.kalit == key
    if made.created:
        assert stored.holat == "kutmoqda"
        assert read_json(stored.payload) == payload
    # What the relay will read back is a sendMessage request.
    send_message_args(read_json(stored.payload))
