"""What ``enqueue`` accepts: a payload Telegram could send and PostgreSQL can store, or a clear
``InvalidPayload``; never a driver error, never a row half written. A property test feeds it
random payloads and keys against the real database.

Here the unit tier's tests (no database); the others are in ``tests/db/test_enqueue_input.py``.
"""

from __future__ import annotations

import pytest

from outbox.payload import MalformedPayload, send_message_args


@pytest.mark.parametrize(
    "chat_id", ["@a", "@", "@abcd", "@1channel", "@_kanal", "@kan-al", "@" + "k" * 33, "@kanal "]
)
def test_what_is_not_a_channel_name_is_refused(chat_id: str) -> None:
    with pytest.raises(MalformedPayload, match="is not an @channel name"):
        send_message_args({"chat_id": chat_id, "text": "x"})


@pytest.mark.parametrize("chat_id", ["@kanal", "@Kanal_2026", "@" + "k" * 32])
def test_channel_names_telegram_allows_pass(chat_id: str) -> None:
    assert send_message_args({"chat_id": chat_id, "text": "x"})["chat_id"] == chat_id


def test_a_follow_up_whose_message_key_is_a_lone_surrogate_is_refused_in_one_line() -> None:
    from outbox.payload_methods import method_request

    payload = {"method": "editMessageText", "message_key": "k\ud800", "text": "new"}
    with pytest.raises(MalformedPayload, match="message_key is not valid Unicode"):
        method_request(payload)
