"""Every kind of Telegram message through the relay and the fake Bot API: media by URL and by
file_id, albums, copies, and the follow-ups (edits, deletes, pins) on a message already sent."""

from __future__ import annotations

import asyncio
import json
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest
import sqlalchemy as sa

from outbox import api
from outbox.errors import InvalidPayload
from outbox.ops.views import message as presentation
from outbox.retry import RetryPolicy
from outbox.states import State
from outbox.vocabulary import label
from outbox.web.base import templates
from outbox_testing.fake_telegram import FakeTelegram, Fault
from tests.support import make_relay

PHOTO_URL = "https://cdn.example.com/receipts/1234.jpg"
FILE_ID = "BQACAgIAAxkBAAIBZ2Y3abcdefghijklmnopqrstuv"


def _enqueue(engine: sa.Engine, key: str, payload: dict[str, Any]) -> int:
    with engine.begin() as conn:
        return api.enqueue(conn, key=key, payload=payload).id


def _insert(engine: sa.Engine, key: str, payload: Any) -> None:
    """A row written by plain SQL, as the lesson's INSERT writes one: no check on the way."""
    with engine.begin() as conn:
        conn.execute(
            sa.text(
                "INSERT INTO outbox (tur, kalit, payload) VALUES ('eslatma', :k, CAST(:p AS jsonb))"
            ),
            {"k": key, "p": json.dumps(payload)},
        )


def _drain(db_url: str, fake: FakeTelegram) -> None:
    async def run() -> None:
        async with make_relay(db_url, fake, retry=RetryPolicy(base_seconds=0)) as relay:
            await relay.run(drain=True)

    asyncio.run(run())


def _state(engine: sa.Engine, key: str) -> tuple[str, str | None, str | None]:
    with engine.connect() as conn:
        row = conn.execute(
            sa.text("SELECT holat, oxirgi_xato, xato_turi FROM outbox WHERE kalit = :k"),
            {"k": key},
        ).one()
    return row[0], row[1], row[2]


def _marker(engine: sa.Engine, key: str) -> tuple[int, int, list[int] | None]:
    with engine.connect() as conn:
        row = conn.execute(
            sa.text("SELECT chat_id, message_id, message_ids FROM yuborilgan WHERE kalit = :k"),
            {"k": key},
        ).one()
    return row[0], row[1], row[2]


def test_each_send_method_goes_through_the_relay(
    db_url: str, engine: sa.Engine, fake_telegram: FakeTelegram
) -> None:
    sends = {
        "photo": {"method": "sendPhoto", "chat_id": 31, "photo": PHOTO_URL, "caption": "Chek",
                  "caption_entities": [{"type": "bold", "offset": 0, "length": 4}],
                  "reply_markup": {"inline_keyboard": [[{"text": "Ko'rish", "url": PHOTO_URL}]]}},
        "invoice": {"method": "sendDocument", "chat_id": 31, "document": FILE_ID,
                    "caption": "<b>Hisob</b>", "parse_mode": "HTML", "protect_content": True},
        "video": {"method": "sendVideo", "chat_id": 31, "video": PHOTO_URL, "has_spoiler": True},
        "gif": {"method": "sendAnimation", "chat_id": 31, "animation": FILE_ID},
        "song": {"method": "sendAudio", "chat_id": 31, "audio": PHOTO_URL, "title": "Kuy"},
        "voice": {"method": "sendVoice", "chat_id": 31, "voice": FILE_ID},
        "sticker": {"method": "sendSticker", "chat_id": 31, "sticker": FILE_ID},
        "where": {"method": "sendLocation", "chat_id": 31, "latitude": 41.31, "longitude": 69.28},
        "venue": {"method": "sendVenue", "chat_id": 31, "latitude": 41.3, "longitude": 69.2,
                  "title": "Chorsu", "address": "Toshkent"},
        "contact": {"method": "sendContact", "chat_id": 31, "phone_number": "+998901234567",
                    "first_name": "Aziza"},
        "poll": {"method": "sendPoll", "chat_id": 31, "question": "Qachon?",
                 "options": ["Bugun", {"text": "Ertaga"}]},
        "dice": {"method": "sendDice", "chat_id": 31, "emoji": "🎯"},
        "text": {"method": "sendMessage", "chat_id": 31, "text": "Salom",
                 "link_preview_options": {"is_disabled": True},
                 "message_effect_id": "5104841245755180586"},
    }  # fmt: skip
    for key, payload in sends.items():
        _enqueue(engine, key, payload)
    _drain(db_url, fake_telegram)
    for key in sends:
        assert _state(engine, key)[0] == State.DONE, (key, _state(engine, key))
    methods = sorted(d.method for d in fake_telegram.delivered_to(31))
    assert methods == sorted(str(p["method"]) for p in sends.values())
    photo = next(d for d in fake_telegram.delivered_to(31) if d.method == "sendPhoto")
    assert photo.text == "Chek" and photo.media is not None
    assert photo.reply_markup == {"inline_keyboard": [[{"text": "Ko'rish", "url": PHOTO_URL}]]}
    document = next(d for d in fake_telegram.delivered_to(31) if d.method == "sendDocument")
    assert document.media == FILE_ID and document.text == "Hisob"
    # The marker names the message Telegram made.
    chat_id, message_id, _ = _marker(engine, "photo")
    assert (chat_id, message_id) == (31, photo.message_id)


def test_an_album_is_sent_whole_and_its_marker_keeps_every_id(
    db_url: str, engine: sa.Engine, fake_telegram: FakeTelegram
) -> None:
    media = [{"type": "photo", "media": PHOTO_URL, "caption": "Mahsulotlar"}] + [
        {"type": "photo", "media": FILE_ID} for _ in range(3)
    ]
    _enqueue(engine, "album", {"method": "sendMediaGroup", "chat_id": 32, "media": media})
    _drain(db_url, fake_telegram)
    assert _state(engine, "album")[0] == State.DONE
    delivered = fake_telegram.delivered_to(32)
    assert [d.method for d in delivered] == ["sendMediaGroup"] * 4
    chat_id, first, ids = _marker(engine, "album")
    assert chat_id == 32 and ids == [d.message_id for d in delivered] and first == ids[0]
    # An album of 4 counts 4 against the limits: one request, four messages.
    assert [r.method for r in fake_telegram.requests if r.chat_id == 32] == ["sendMediaGroup"]


def test_copy_and_forward_of_a_message_the_bot_sent(
    db_url: str, engine: sa.Engine, fake_telegram: FakeTelegram
) -> None:
    _enqueue(engine, "source", {"chat_id": -1001, "text": "E'lon"})
    _drain(db_url, fake_telegram)
    _, source_id, _ = _marker(engine, "source")
    _enqueue(engine, "copy", {"method": "copyMessage", "chat_id": 33, "from_chat_id": -1001,
                              "message_id": source_id})  # fmt: skip
    _enqueue(engine, "forward", {"method": "forwardMessage", "chat_id": 34,
                                 "from_chat_id": -1001, "message_id": source_id})  # fmt: skip
    _enqueue(engine, "lost", {"method": "copyMessage", "chat_id": 33, "from_chat_id": -1001,
                              "message_id": 999})  # fmt: skip
    _drain(db_url, fake_telegram)
    assert _state(engine, "copy")[0] == State.DONE
    assert _state(engine, "forward")[0] == State.DONE
    state, error, code = _state(engine, "lost")
    assert state == State.FAILED and "message to copy not found" in str(error).lower()
    assert code == "message_not_found"
    copied = fake_telegram.delivered_to(33)
    assert [d.method for d in copied] == ["copyMessage"]
    assert _marker(engine, "copy")[:2] == (33, copied[0].message_id)


def test_each_follow_up_acts_on_the_sent_message_named_by_its_key(
    db_url: str, engine: sa.Engine, fake_telegram: FakeTelegram
) -> None:
    keyboard = {"inline_keyboard": [[{"text": "Bajarildi", "callback_data": "done:1"}]]}
    _enqueue(engine, "note", {"chat_id": 35, "text": "Eslatma", "reply_markup": keyboard})
    _enqueue(engine, "pic", {"method": "sendPhoto", "chat_id": 35, "photo": PHOTO_URL,
                             "caption": "Eski"})  # fmt: skip
    _drain(db_url, fake_telegram)
    note = _marker(engine, "note")[1]
    pic = _marker(engine, "pic")[1]
    follow_ups: dict[str, dict[str, Any]] = {
        "edit-text": {"method": "editMessageText", "message_key": "note", "text": "Yangi",
                      "reply_markup": keyboard},
        "edit-caption": {"method": "editMessageCaption", "message_key": "pic",
                         "caption": "Yangi izoh"},
        "edit-media": {"method": "editMessageMedia", "message_key": "pic",
                       "media": {"type": "photo", "media": FILE_ID, "caption": "Boshqa"}},
        "pin": {"method": "pinChatMessage", "message_key": "pic", "disable_notification": True},
        "unpin": {"method": "unpinChatMessage", "message_key": "pic"},
    }  # fmt: skip
    for key, payload in follow_ups.items():
        _enqueue(engine, key, payload)
        _drain(db_url, fake_telegram)  # one at a time: each acts on the previous one's result
        assert _state(engine, key)[0] == State.DONE, (key, _state(engine, key))
    _enqueue(engine, "no-buttons", {"method": "editMessageReplyMarkup", "message_key": "note"})
    # Sent before the delete is enqueued: a pending delete would supersede it (a pointless edit).
    _drain(db_url, fake_telegram)
    _enqueue(engine, "delete", {"method": "deleteMessage", "message_key": "note"})
    _drain(db_url, fake_telegram)
    assert fake_telegram.edits[-1].text == "Yangi"
    assert fake_telegram.edits[-1].reply_markup == keyboard
    assert fake_telegram.message(35, note) is None  # deleted
    now = fake_telegram.message(35, pic)
    assert now is not None and now["caption"] == "Boshqa" and not now.get("is_pinned")
    acted = [(a.method, a.message_ids) for a in fake_telegram.acted]
    assert acted == [
        ("editMessageCaption", (pic,)),
        ("editMessageMedia", (pic,)),
        ("pinChatMessage", (pic,)),
        ("unpinChatMessage", (pic,)),
        ("editMessageReplyMarkup", (note,)),
        ("deleteMessage", (note,)),
    ]
    # The same edit again, and a delete of a message already gone, count as done.
    _enqueue(engine, "edit-again", {"method": "editMessageText", "message_key": "note2",
                                    "text": "x"})  # fmt: skip
    _enqueue(engine, "note2", {"chat_id": 35, "text": "x"})
    _enqueue(engine, "delete-again", {"method": "deleteMessage", "message_key": "note"})
    _drain(db_url, fake_telegram)
    assert _state(engine, "edit-again")[0] == State.DONE
    assert _state(engine, "delete-again")[0] == State.DONE


def test_an_album_is_deleted_whole(
    db_url: str, engine: sa.Engine, fake_telegram: FakeTelegram
) -> None:
    media = [{"type": "document", "media": FILE_ID}, {"type": "document", "media": PHOTO_URL}]
    _enqueue(engine, "docs", {"method": "sendMediaGroup", "chat_id": 36, "media": media})
    _enqueue(engine, "docs-gone", {"method": "deleteMessage", "message_key": "docs"})
    _drain(db_url, fake_telegram)
    _, _, ids = _marker(engine, "docs")
    assert _state(engine, "docs-gone")[0] == State.DONE
    assert [(a.method, a.message_ids) for a in fake_telegram.acted] == [
        ("deleteMessages", tuple(ids or ()))
    ]


def test_a_follow_up_enqueued_before_its_original_waits_for_it(
    db_url: str, engine: sa.Engine, fake_telegram: FakeTelegram
) -> None:
    # The follow-up is older (a smaller id, due first) and still goes after its original.
    _enqueue(engine, "edit-first", {"method": "editMessageText", "message_key": "later",
                                    "text": "Yakuniy matn"})  # fmt: skip
    _enqueue(engine, "later", {"chat_id": 37, "text": "Birinchi matn"})
    _drain(db_url, fake_telegram)
    assert _state(engine, "edit-first")[0] == State.DONE
    _, message_id, _ = _marker(engine, "later")
    shown = fake_telegram.message(37, message_id)
    assert shown is not None and shown["text"] == "Yakuniy matn"
    order = [r.method for r in fake_telegram.requests if r.method != "getMe"]
    assert order == ["sendMessage", "editMessageText"]


def test_a_follow_up_of_a_failed_or_unknown_original_fails_and_sends_nothing(
    db_url: str, engine: sa.Engine, fake_telegram: FakeTelegram
) -> None:
    # A 403 that leaves the chat reachable: a blocked chat's edit would end chat_blocked first.
    fake_telegram.script(38, Fault.forbidden("bot can't initiate conversation with a user"))
    _enqueue(engine, "refused", {"chat_id": 38, "text": "Salom"})
    _enqueue(engine, "edit-refused", {"method": "editMessageText", "message_key": "refused",
                                      "text": "Yangi"})  # fmt: skip
    _enqueue(engine, "delete-nothing", {"method": "deleteMessage", "message_key": "no-such"})
    _drain(db_url, fake_telegram)
    state, error, code = _state(engine, "edit-refused")
    assert state == State.FAILED and code == "original_failed"
    assert "'refused' was never sent (xato:forbidden)" in str(error)
    state, error, code = _state(engine, "delete-nothing")
    assert state == State.FAILED and code == "original_failed" and "no-such" in str(error)
    assert [r.method for r in fake_telegram.requests if r.method != "getMe"] == ["sendMessage"]


def test_a_delete_past_the_48_hours_ends_xato_saying_why(
    db_url: str, engine: sa.Engine, fake_telegram: FakeTelegram
) -> None:
    _enqueue(engine, "old", {"chat_id": 39, "text": "Eski"})
    _drain(db_url, fake_telegram)
    fake_telegram.age_message(39, _marker(engine, "old")[1], 49 * 3600)
    _enqueue(engine, "old-gone", {"method": "deleteMessage", "message_key": "old"})
    _drain(db_url, fake_telegram)
    state, error, code = _state(engine, "old-gone")
    assert state == State.FAILED and code == "cannot_delete"
    assert "48 hours" in str(error)


BAD_ROWS: dict[str, tuple[dict[str, Any], str]] = {
    "local-path": ({"method": "sendPhoto", "chat_id": 40, "photo": "/etc/passwd"}, "photo"),
    "relative-path": ({"method": "sendDocument", "chat_id": 40, "document": "pyproject.toml"},
                      "document"),
    "file-url": ({"method": "sendPhoto", "chat_id": 40, "photo": "file:///etc/passwd"}, "photo"),
    "http-url": ({"method": "sendVideo", "chat_id": 40, "video": "http://x.example/v.mp4"},
                 "video"),
    "album-path": ({"method": "sendMediaGroup", "chat_id": 40, "media": [
        {"type": "photo", "media": FILE_ID}, {"type": "photo", "media": "./secret.jpg"}]},
        "media[1].media"),
    "attach": ({"method": "sendPhoto", "chat_id": 40, "photo": "attach://photo"}, "photo"),
    "log-out": ({"method": "logOut"}, "method"),
    "close": ({"method": "close"}, "method"),
    "webhook": ({"method": "setWebhook", "url": "https://evil.example"}, "method"),
    "updates": ({"method": "getUpdates"}, "method"),
    "album-1": ({"method": "sendMediaGroup", "chat_id": 40,
                 "media": [{"type": "photo", "media": FILE_ID}]}, "media"),
    "album-11": ({"method": "sendMediaGroup", "chat_id": 40,
                  "media": [{"type": "photo", "media": FILE_ID}] * 11}, "media"),
    "long-caption": ({"method": "sendPhoto", "chat_id": 40, "photo": FILE_ID,
                      "caption": "x" * 1025}, "caption"),
    "album-caption": ({"method": "sendMediaGroup", "chat_id": 40, "media": [
        {"type": "photo", "media": FILE_ID, "caption": "x" * 1025},
        {"type": "photo", "media": FILE_ID}]}, "media[0].caption"),
    "unknown-field": ({"method": "sendPhoto", "chat_id": 40, "photo": FILE_ID, "foto": 1},
                      "foto"),
    "key-and-ids": ({"method": "deleteMessage", "message_key": "a", "chat_id": 1}, "chat_id"),
}  # fmt: skip


@pytest.mark.parametrize("name", sorted(BAD_ROWS))
def test_enqueue_refuses_naming_the_field(engine: sa.Engine, name: str) -> None:
    payload, field = BAD_ROWS[name]
    with engine.begin() as conn, pytest.raises(InvalidPayload) as refused:
        api.enqueue(conn, key=name, payload=payload)
    assert field in str(refused.value), str(refused.value)


def test_the_same_rows_by_plain_sql_end_xato_and_telegram_never_sees_them(
    db_url: str, engine: sa.Engine, fake_telegram: FakeTelegram
) -> None:
    for name, (payload, _field) in BAD_ROWS.items():
        _insert(engine, name, payload)
    _drain(db_url, fake_telegram)
    for name, (_payload, field) in BAD_ROWS.items():
        state, error, code = _state(engine, name)
        assert state == State.FAILED and code == "bad_payload", (name, state, error)
        assert field in str(error), (name, error)
    assert [r.method for r in fake_telegram.requests if r.method != "getMe"] == []


def test_telegram_refusing_a_file_is_permanent_and_a_fetch_failure_is_retried(
    db_url: str, engine: sa.Engine, fake_telegram: FakeTelegram
) -> None:
    fake_telegram.script(41, Fault.bad_request("wrong file identifier/HTTP URL specified"))
    fake_telegram.script(42, Fault.bad_request("failed to get HTTP URL content"))
    _enqueue(engine, "bad-file", {"method": "sendPhoto", "chat_id": 41, "photo": FILE_ID})
    _enqueue(engine, "slow-source", {"method": "sendPhoto", "chat_id": 42, "photo": PHOTO_URL})
    _drain(db_url, fake_telegram)
    state, _error, code = _state(engine, "bad-file")
    assert state == State.FAILED and code == "bad_media"
    assert _state(engine, "slow-source")[0] == State.DONE  # the second attempt went through
    assert len([r for r in fake_telegram.requests if r.chat_id == 42]) == 2


def test_list_show_and_json_name_the_method_and_a_follow_ups_original(
    engine: sa.Engine,
) -> None:
    _enqueue(engine, "pic", {"method": "sendPhoto", "chat_id": 43, "photo": PHOTO_URL,
                             "caption": "Chek"})  # fmt: skip
    _enqueue(engine, "pic-gone", {"method": "deleteMessage", "message_key": "pic"})
    _enqueue(engine, "plain", {"chat_id": 43, "text": "Salom"})
    with engine.connect() as conn:
        found = {m.key: m for m in api.list_messages(conn, limit=10)}
    pic, gone, plain = found["pic"], found["pic-gone"], found["plain"]
    assert (pic.method, pic.original) == ("sendPhoto", None)
    assert (gone.method, gone.original) == ("deleteMessage", "pic")
    assert (plain.method, plain.original) == ("sendMessage", None)
    shown = presentation.message_json(gone)
    assert shown["method"] == "deleteMessage" and shown["message_key"] == "pic"
    assert presentation.message_json(plain)["method"] == "sendMessage"
    lines = presentation.message_lines(gone)
    assert any(line.split() == ["message_key", "pic"] for line in lines)
    table = "\n".join(presentation.messages_table(list(found.values())))
    assert "deleteMessage -> pic" in table and "sendPhoto" in table
    # The web page: the message's page and the list show the same.
    env = templates()
    page = env.get_template("_message.html").render(m=gone, csrf="x", label=label)
    assert 'data-field="method">deleteMessage<' in page
    assert 'data-field="message_key"' in page and ">pic<" in page
    assert presentation.text_of(pic) == "Chek" and presentation.chat_of(gone) == "(the chat of pic)"


def test_replay_of_a_follow_up_checks_its_original_again(
    db_url: str, engine: sa.Engine, fake_telegram: FakeTelegram
) -> None:
    fake_telegram.script(44, Fault.server_error(), times=3)
    original = _enqueue(engine, "flaky", {"chat_id": 44, "text": "Salom"})
    edit = _enqueue(engine, "flaky-edit", {"method": "editMessageText", "message_key": "flaky",
                                           "text": "Yangi"})  # fmt: skip
    _drain(db_url, fake_telegram)
    assert _state(engine, "flaky")[0] == State.FAILED
    assert _state(engine, "flaky-edit")[2] == "original_failed"
    # Alone, the follow-up would fail again at once: refused, saying why.
    with engine.begin() as conn:
        (alone,) = api.replay(conn, [edit])
    assert not alone.replayed and alone.original == "flaky"
    refusal = presentation.replay_refusal(alone)
    assert "'flaky', which was never sent (xato)" in refusal
    # With its original, both go back, and the relay applies them in order.
    with engine.begin() as conn:
        results = api.replay(conn, [edit, original])
    assert all(r.replayed for r in results)
    _drain(db_url, fake_telegram)
    assert _state(engine, "flaky")[0] == State.DONE
    assert _state(engine, "flaky-edit")[0] == State.DONE
    assert fake_telegram.edits[-1].text == "Yangi"


def test_a_follow_up_of_a_message_due_later_is_due_with_it_and_a_drain_ends(
    db_url: str, engine: sa.Engine, fake_telegram: FakeTelegram
) -> None:
    later = datetime.now(UTC) + timedelta(hours=2)
    with engine.begin() as conn:
        api.enqueue(conn, key="tomorrow", payload={"chat_id": 45, "text": "x"}, run_at=later)
        api.enqueue(
            conn,
            key="tomorrow-edit",
            payload={"method": "editMessageText", "message_key": "tomorrow", "text": "y"},
        )
    with engine.connect() as conn:
        due: dict[str, datetime] = dict(
            conn.execute(sa.text("SELECT kalit, keyingi_urinish FROM outbox")).all()
        )
    assert due["tomorrow-edit"] == due["tomorrow"]
    _drain(db_url, fake_telegram)  # ends: nothing is due before the original
    assert [r.method for r in fake_telegram.requests if r.method != "getMe"] == []
