"""The vazifalar bot through the fake Bot API over real HTTP: bot and relay processes."""

from __future__ import annotations

from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest
import sqlalchemy as sa
from sqlalchemy.orm import Session

from outbox_testing.fake_telegram import Delivered, FakeTelegram, Fault
from reminders import service
from reminders.tests.support import BotProcess, Person, bot_processes
from tests.support import Relays, free_port, relay_env, wait_until

BOT_SETTINGS = {"REMINDERS_POLL_TIMEOUT": "1", "REMINDERS_SNOOZE": "2s,1h"}


@pytest.fixture
def bot_env(db_url: str, fake_telegram: FakeTelegram) -> dict[str, str]:
    return relay_env(db_url, fake_telegram.api_url, **BOT_SETTINGS)


@pytest.fixture
def bot(
    bot_env: dict[str, str], fake_telegram: FakeTelegram, relays: Relays, tmp_path: Path
) -> Iterator[BotProcess]:
    relays.start()
    with bot_processes(bot_env, tmp_path, fake_telegram) as (one,):
        yield one


@pytest.fixture
def aziza(fake_telegram: FakeTelegram) -> Person:
    return Person(fake_telegram, 501, "Aziza")


def test_start_signs_up(bot: BotProcess, aziza: Person, engine: sa.Engine) -> None:
    reply = aziza.say("/start")
    assert "Assalomu alaykum, Aziza" in reply and "Asia/Tashkent" in reply
    with engine.begin() as conn:
        users = conn.execute(
            sa.text("SELECT ism, chat_id, vaqt_zonasi, faol FROM foydalanuvchi")
        ).all()
    assert [tuple(u) for u in users] == [("Aziza", 501, "Asia/Tashkent", True)]
    assert "ro'yxatdan o'tgansiz" in aziza.say("/start")


def _signed_up(person: Person) -> None:
    assert "Assalomu alaykum" in person.say("/start")


def test_commands_before_start_ask_for_it(bot: BotProcess, aziza: Person) -> None:
    assert "Avval /start" in aziza.say("/add Non 30m")
    assert "/add" in aziza.say("/help")


def test_add_list_done_delete(bot: BotProcess, aziza: Person, engine: sa.Engine) -> None:
    _signed_up(aziza)
    added = aziza.say("/add Hisobotni topshirish ertaga 09:00")
    assert "Qo'shildi: #1 <b>Hisobotni topshirish</b>" in added
    assert "Eslataman: 08:00, 09:00" in added
    assert "Qo'shildi: #2 <b>Non</b>" in aziza.say("/add Non 2026-12-31 18:30")
    listed = aziza.say("/list")
    assert "#1" in listed and "Hisobotni topshirish" in listed and "#2" in listed
    assert "Bajarildi: #1" in aziza.say("/done 1")
    assert "allaqachon bajarilgan" in aziza.say("/done 1")
    assert "O'chirildi: #2" in aziza.say("/delete 2")
    listed = aziza.say("/list")
    assert "#1" not in listed and "#2" not in listed
    with engine.begin() as conn:
        keys = conn.execute(sa.text("SELECT kalit FROM outbox WHERE tur = 'eslatma'")).scalars()
        assert not [k for k in keys if k.startswith(("vazifa:1:", "vazifa:2:"))]


BAD_INPUT = [
    ("/add", "Nima va qachon?"),
    ("/add Hisobot", "oxirida vaqt yo'q"),
    ("/add Hisobot ertaga 25:00", "bunday soat yo'q"),
    ("/add Hisobot 2026-02-30 09:00", "bunday sana yo'q"),
    ("/add 30m", "vazifa nomi yo'q"),
    ("/add Hisobot 2020-01-01 09:00", "o'tib ketdi"),
    ("/add Hisobot 0m", "bu vaqt emas"),
    ("/done", "Raqamini yozing"),
    ("/done abc", "Raqamini yozing"),
    ("/done 999", "#999 raqamli vazifangiz yo'q"),
    ("/delete", "Raqamini yozing"),
    ("/delete 999", "#999 raqamli vazifangiz yo'q"),
    ("/tz Mars/Olympus", "vaqt zonasi yo'q"),
    ("/tz", "Qaysi zona?"),
    ("/nima", "Bunday buyruq yo'q: /nima"),
    ("salom", "Buyruqni tushunmadim"),
]


def test_bad_input_gets_an_answer_with_an_example(
    bot: BotProcess, aziza: Person, engine: sa.Engine
) -> None:
    _signed_up(aziza)
    for text, expected in BAD_INPUT:
        reply = aziza.say(text)
        assert expected in reply, (text, reply)
        assert "Masalan" in reply or "/list" in reply or "/help" in reply, (text, reply)
    with engine.begin() as conn:
        assert conn.execute(sa.text("SELECT count(*) FROM vazifa")).scalar_one() == 0


def test_someone_elses_task_is_not_yours(
    bot: BotProcess, aziza: Person, fake_telegram: FakeTelegram
) -> None:
    _signed_up(aziza)
    assert "#1" in aziza.say("/add Hisobot ertaga 09:00")
    bobur = Person(fake_telegram, 502, "Bobur")
    _signed_up(bobur)
    assert "#1 raqamli vazifangiz yo'q" in bobur.say("/done 1")
    assert "#1 raqamli vazifangiz yo'q" in bobur.say("/delete 1")


def test_tz_changes_the_zone_and_the_waiting_reminders(
    bot: BotProcess, aziza: Person, engine: sa.Engine
) -> None:
    _signed_up(aziza)
    aziza.say("/add Hisobot 2030-06-01 09:00")  # Tashkent: 04:00 UTC
    reply = aziza.say("/tz Europe/Berlin")
    assert "Europe/Berlin" in reply and "2 ta" in reply
    with engine.begin() as conn:
        texts = conn.execute(sa.text("SELECT payload->>'text' FROM outbox WHERE tur='eslatma'"))
        assert all("01.06.2030, 06:00 (Europe/Berlin)" in t for t in texts.scalars())
    assert "Tushunmadim" not in aziza.say("/add Non ertaga 09:00")


def _reminders(person: Person) -> list[Delivered]:
    return [m for m in person.received() if m.reply_markup is not None]


def _wait_reminders(person: Person, count: int) -> list[Delivered]:
    return wait_until(
        lambda: (found := _reminders(person))[count - 1 :] and found,
        20,
        f"{count} reminders",
        explain=lambda: "\n".join(m.text for m in person.received()),
    )


def test_reminder_buttons_snooze_then_done_each_pressed_twice(
    bot: BotProcess, aziza: Person, fake_telegram: FakeTelegram, engine: sa.Engine
) -> None:
    _signed_up(aziza)
    assert "Qo'shildi: #1 <b>Non</b>" in aziza.say("/add Non 1s")
    [first] = _wait_reminders(aziza, 1)
    assert "Eslatma: <b>Non</b>" in first.text
    assert first.reply_markup is not None
    labels = [b["text"] for row in first.reply_markup["inline_keyboard"] for b in row]
    assert labels == ["✅ Bajarildi", "⏰ Keyinroq (2 soniya)", "⏰ Keyinroq (1 soat)"]

    assert aziza.press(first, "⏰ Keyinroq (2") == "2 soniyadan keyin yana eslataman"
    edited = fake_telegram.message(aziza.chat_id, first.message_id)
    assert edited is not None and "reply_markup" not in edited
    assert edited["text"].startswith("⏰ Keyinroq: Non")
    # The same message pressed again (a client still showing the keyboard): nothing changes.
    assert "allaqachon: 2 soniyaga qoldirildi" in aziza.press(first, "⏰ Keyinroq (1", edits=False)
    assert "allaqachon" in aziza.press(first, "✅ Bajarildi", edits=False)

    [_, again] = _wait_reminders(aziza, 2)
    assert "Eslatma: <b>Non</b>" in again.text
    assert aziza.press(again, "✅ Bajarildi") == "Bajarildi ✅"
    assert "allaqachon: bajarildi" in aziza.press(again, "✅ Bajarildi", edits=False)
    done = fake_telegram.message(aziza.chat_id, again.message_id)
    assert done is not None and done["text"] == "✅ Bajarildi: Non"
    with engine.begin() as conn:
        assert conn.execute(sa.text("SELECT bajarildi FROM vazifa")).scalar_one() is True
        assert conn.execute(sa.text("SELECT kechiktirish FROM vazifa")).scalar_one() == 1

    def unsent() -> int:
        with engine.begin() as conn:
            query = "SELECT count(*) FROM outbox WHERE holat <> 'bajarildi'"
            return int(conn.execute(sa.text(query)).scalar_one())

    # The edit reached Telegram before its relay wrote the outcome: wait for the write.
    wait_until(lambda: unsent() == 0, 20, "every outbox row written as sent")
    assert len(_reminders(aziza)) == 2


def test_done_withdraws_a_snoozed_reminder_and_a_deleted_task_says_so(
    bot: BotProcess, aziza: Person, fake_telegram: FakeTelegram, engine: sa.Engine
) -> None:
    _signed_up(aziza)
    aziza.say("/add Non 1s")
    [first] = _wait_reminders(aziza, 1)
    aziza.press(first, "⏰ Keyinroq (1 soat)")
    with engine.begin() as conn:
        waiting = "SELECT count(*) FROM outbox WHERE kalit = 'vazifa:1:keyinroq:1'"
        assert conn.execute(sa.text(waiting)).scalar_one() == 1
    assert "O'chirildi: #1" in aziza.say("/delete 1")
    with engine.begin() as conn:
        assert conn.execute(sa.text(waiting)).scalar_one() == 0
    aziza.say("/add Kitob 1s")
    [_, second] = _wait_reminders(aziza, 2)
    assert "O'chirildi: #2" in aziza.say("/delete 2")
    assert aziza.press(second, "✅ Bajarildi") == "Bu vazifa o'chirilgan."
    edited = fake_telegram.message(aziza.chat_id, second.message_id)
    assert edited is not None and "o'chirilgan" in edited["text"]


@pytest.mark.parametrize("reason", ["bot was blocked by the user", "user is deactivated"])
def test_a_user_who_blocks_the_bot_is_inactive_until_start(
    bot: BotProcess, aziza: Person, fake_telegram: FakeTelegram, engine: sa.Engine, reason: str
) -> None:
    _signed_up(aziza)
    aziza.say("/add Hisobot 2030-06-01 09:00")
    aziza.say("/add Non 1s")
    fake_telegram.script(aziza.chat_id, Fault.forbidden(reason))

    def active() -> bool:
        with engine.begin() as conn:
            return bool(conn.execute(sa.text("SELECT faol FROM foydalanuvchi")).scalar_one())

    wait_until(lambda: not active(), 20, "the user to be marked inactive")
    with engine.begin() as conn:
        failed = conn.execute(
            sa.text("SELECT kalit, oxirgi_xato FROM outbox WHERE xato_turi = 'blocked'")
        )
        [(key, error)] = failed.all()
        # The other reminder waiting for her chat ended without a request (outbox_0017).
        ended = conn.execute(
            sa.text("SELECT kalit FROM outbox WHERE xato_turi = 'chat_blocked'")
        ).scalars()
        assert {k.split(":")[1] for k in ended} == {"1"}
    assert key.startswith("vazifa:2:") and reason in error
    assert "/start" in aziza.say("/add Kitob ertaga 09:00")
    reply = aziza.say("/start")
    assert "Qaytganingizdan xursandman" in reply and "2 ta eslatma" in reply
    assert active()
    assert "Qo'shildi" in aziza.say("/add Kitob ertaga 09:00")


@pytest.mark.parametrize(
    "fault",
    [
        Fault.bad_request("message is too long"),
        Fault.forbidden("bot can't initiate conversation with a user"),
    ],
    ids=["400", "403-not-blocked"],
)
def test_other_failures_leave_the_user_active(
    bot: BotProcess, aziza: Person, fake_telegram: FakeTelegram, engine: sa.Engine, fault: Fault
) -> None:
    _signed_up(aziza)
    fake_telegram.script(aziza.chat_id, fault)
    fake_telegram.post_message(aziza.chat_id, "/add Non ertaga 09:00")

    def failed() -> int:
        with engine.begin() as conn:
            return int(
                conn.execute(
                    sa.text("SELECT count(*) FROM outbox WHERE holat = 'xato'")
                ).scalar_one()
            )

    wait_until(failed, 20, "the reply to fail")
    with engine.begin() as conn:
        assert conn.execute(sa.text("SELECT faol FROM foydalanuvchi")).scalar_one() is True


def test_a_group_that_becomes_a_supergroup_is_followed(
    relays: Relays, fake_telegram: FakeTelegram, engine: sa.Engine
) -> None:
    old, new = -4001, -1004001
    with Session(engine) as session, session.begin():
        user_id = service.create_user(session, name="Jamoa", chat_id=old).id
        service.create_task(
            session,
            user_id=user_id,
            title="Yig'ilish",
            due=datetime.now(UTC) + timedelta(minutes=30),
        )
    fake_telegram.script(old, Fault.migrate(new))
    relays.start()
    wait_until(lambda: fake_telegram.delivered_to(new), 20, "the reminder in the supergroup")

    def chat_id() -> int:
        with Session(engine) as session:
            return service.get_user(session, user_id).chat_id

    # The relay writes the outcome (and with it the rewritten chat id) just after the send.
    wait_until(lambda: chat_id() == new, 20, "the user to follow the group")
    with Session(engine) as session, session.begin():
        created = service.create_task(
            session, user_id=user_id, title="Keyingi", due=datetime.now(UTC) + timedelta(minutes=30)
        )
        assert created.reminders
    wait_until(lambda: len(fake_telegram.delivered_to(new)) == 2, 20, "the next reminder")
    assert fake_telegram.delivered_to(old) == []


def test_the_bot_follows_a_group_migration_message(
    bot: BotProcess, fake_telegram: FakeTelegram, engine: sa.Engine
) -> None:
    with Session(engine) as session, session.begin():
        user_id = service.create_user(session, name="Jamoa", chat_id=-4002).id
    fake_telegram.post_migration(-4002, -1004002)

    def chat_id() -> int:
        with Session(engine) as session:
            return service.get_user(session, user_id).chat_id

    wait_until(lambda: chat_id() == -1004002, 20, "the user to follow the group")


def _skipped(bots: list[BotProcess]) -> int:
    return sum(b.log.count("handled by another bot process") for b in bots)


def test_two_bots_never_act_on_one_update_twice(
    bot_env: dict[str, str],
    fake_telegram: FakeTelegram,
    relays: Relays,
    tmp_path: Path,
    engine: sa.Engine,
) -> None:
    relays.start()
    people = [Person(fake_telegram, 601 + i, f"Odam{i}") for i in range(3)]
    with bot_processes(bot_env, tmp_path / "first", fake_telegram, count=2):
        for person in people:
            fake_telegram.post_message(person.chat_id, "/start", first_name=person.name)
        for person in people:
            person.wait_for_messages(1)
        for n in range(5):
            for person in people:
                fake_telegram.post_message(person.chat_id, f"/add Vazifa{n} ertaga 09:00")
        for person in people:
            person.wait_for_messages(6)
    # Every update offered again, as to bots that start after one died before confirming
    # them: two fresh pollers take the same updates at once, and neither acts on any.
    for update in fake_telegram.posted_updates():
        fake_telegram.redeliver(update["update_id"])
    with bot_processes(bot_env, tmp_path / "second", fake_telegram, count=2) as bots:
        wait_until(
            lambda: _skipped(bots) >= 18 and fake_telegram.pending_updates() == 0,
            30,
            "the bots to skip every offered-again update",
            explain=lambda: (
                f"{fake_telegram.pending_updates()} updates unconfirmed, {_skipped(bots)} skipped\n"
                + "\n".join(b.log for b in bots)
            ),
        )
        logs = [b.log for b in bots]
    with engine.begin() as conn:
        assert conn.execute(sa.text("SELECT count(*) FROM foydalanuvchi")).scalar_one() == 3
        assert conn.execute(sa.text("SELECT count(*) FROM vazifa")).scalar_one() == 15
        replies = "SELECT count(*) FROM outbox WHERE tur = 'javob'"
        assert conn.execute(sa.text(replies)).scalar_one() == 18
        assert conn.execute(sa.text("SELECT count(*) FROM bot_yangilanish")).scalar_one() == 18
    for person in people:
        assert len(person.received()) == 6
    assert all("Traceback" not in log for log in logs), logs


def test_a_button_press_offered_again_is_answered_once(
    bot_env: dict[str, str],
    fake_telegram: FakeTelegram,
    relays: Relays,
    tmp_path: Path,
    aziza: Person,
) -> None:
    relays.start()
    with bot_processes(bot_env, tmp_path / "first", fake_telegram):
        _signed_up(aziza)
        aziza.say("/add Non 1s")
        [reminder] = _wait_reminders(aziza, 1)
        aziza.press(reminder, "✅ Bajarildi")
    [press] = [u["update_id"] for u in fake_telegram.posted_updates() if "callback_query" in u]
    fake_telegram.redeliver(press)
    with bot_processes(bot_env, tmp_path / "second", fake_telegram) as bots:
        wait_until(lambda: _skipped(bots) == 1, 20, "the skip", explain=lambda: bots[0].log)
    assert len(fake_telegram.callback_answers) == 1
    assert len(fake_telegram.edits) == 1


def test_webhook_mode_receives_updates_with_its_secret(
    bot_env: dict[str, str],
    fake_telegram: FakeTelegram,
    relays: Relays,
    tmp_path: Path,
    aziza: Person,
) -> None:
    relays.start()
    port = free_port()
    env = {
        **bot_env,
        "REMINDERS_WEBHOOK_URL": f"http://127.0.0.1:{port}/vazifalar",
        "REMINDERS_WEBHOOK_LISTEN": "127.0.0.1",
        "REMINDERS_WEBHOOK_PORT": str(port),
        "REMINDERS_WEBHOOK_SECRET": "webhook-secret-1",
    }
    hooked = BotProcess(env, tmp_path, "webhook-bot")
    try:
        wait_until(
            lambda: any(r.method == "setWebhook" for r in fake_telegram.requests),
            30,
            "setWebhook",
            explain=lambda: hooked.log,
        )
        assert "Assalomu alaykum" in aziza.say("/start")
        assert "Qo'shildi" in aziza.say("/add Non 30m")
    finally:
        assert hooked.stop() == 0, hooked.log
    assert "webhook-secret-1" not in hooked.log


def test_in_a_group_only_commands_are_answered(
    bot: BotProcess, fake_telegram: FakeTelegram
) -> None:
    group = Person(fake_telegram, -4003, "Jamoa")
    fake_telegram.post_message(group.chat_id, "salom hammaga", user_id=777)
    assert "faqat shaxsiy chatda" in group.say("/start")
    assert len(group.received()) == 1


def _blocked(engine: sa.Engine) -> list[str]:
    with engine.begin() as conn:
        return list(conn.execute(sa.text("SELECT suhbat FROM bloklangan ORDER BY 1")).scalars())


def test_any_message_unblocks_the_chat_so_the_reply_arrives(
    bot: BotProcess, aziza: Person, fake_telegram: FakeTelegram, engine: sa.Engine
) -> None:
    _signed_up(aziza)
    aziza.say("/add Non 1s")
    fake_telegram.script(aziza.chat_id, Fault.forbidden("bot was blocked by the user"))
    wait_until(lambda: _blocked(engine) == ["501"], 20, "the chat to be recorded as blocked")
    # She unblocked the bot and writes: the bot unblocks the chat, so its answer is sent.
    assert "Eslatmalar to'xtatilgan" in aziza.say("/list")
    assert _blocked(engine) == []


@pytest.mark.parametrize(
    ("chat_id", "old", "new"),
    [(502, "kicked", "member"), (-4005, "left", "member"), (-1004006, "left", "administrator")],
    ids=["unblocked", "group-re-added", "supergroup-admin"],
)
def test_my_chat_member_back_unblocks_the_chat(
    bot: BotProcess,
    fake_telegram: FakeTelegram,
    engine: sa.Engine,
    chat_id: int,
    old: str,
    new: str,
) -> None:
    with engine.begin() as conn:
        conn.execute(
            sa.text("INSERT INTO bloklangan (suhbat) VALUES (:c), ('999')"), {"c": str(chat_id)}
        )
    fake_telegram.post_my_chat_member(chat_id, old=old, new=new)
    wait_until(lambda: _blocked(engine) == ["999"], 20, "the chat to be unblocked")


def test_my_chat_member_blocked_changes_nothing(
    bot: BotProcess, aziza: Person, fake_telegram: FakeTelegram, engine: sa.Engine
) -> None:
    with engine.begin() as conn:
        conn.execute(sa.text("INSERT INTO bloklangan (suhbat) VALUES ('777')"))
    fake_telegram.post_my_chat_member(777, old="member", new="kicked")
    fake_telegram.post_my_chat_member(aziza.chat_id, old="kicked", new="member")
    wait_until(lambda: _blocked(engine) == ["777"], 20, "the later update handled")
    assert "Assalomu alaykum" in aziza.say("/start")  # the bot goes on
    assert _blocked(engine) == ["777"]
