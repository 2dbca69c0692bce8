"""What the vazifalar bot does with a person's message or button press, in one transaction.

Each function runs in the caller's session and transaction: it claims the Telegram update (a
row in ``bot_yangilanish``; a second claim of the same update finds it and does nothing), makes
the change, and enqueues the reply in the outbox. Commit, and the change, the reply and the
claim are there together; roll back, and none is. The replies speak Uzbek.
"""

from __future__ import annotations

import html
from collections.abc import Callable
from dataclasses import dataclass
from datetime import datetime, time, timedelta
from zoneinfo import ZoneInfo

import sqlalchemy as sa
from sqlalchemy.dialects.postgresql import insert
from sqlalchemy.orm import Session

import outbox
from outbox.errors import InvalidInput
from reminders import service
from reminders.messages import (
    ECHO_LIMIT,
    TELEGRAM_TEXT_LIMIT,
    duration_words,
    fit_html,
    html_length,
    parse_button,
    shorten,
)
from reminders.models import DEFAULT_TIME_ZONE, HandledUpdate, PressedReminder, Task, User
from reminders.parsing import BIGINT_MAX
from reminders.when import EXAMPLES, parse_title_and_when

__all__ = [
    "APOLOGY",
    "BUTTON_APOLOGY",
    "HELP",
    "REPLY_KIND",
    "ButtonOutcome",
    "Incoming",
    "forget_old_updates",
    "handle_button",
    "handle_failure",
    "handle_migration",
    "handle_text",
    "reply_key",
]

REPLY_KIND = "javob"  # the outbox's tur of the bot's replies (reminders are 'eslatma')
HOUR = timedelta(hours=1)
_TITLE_LIMIT = 200
_LIST_LIMIT = 50
_ERROR_LIMIT = 300  # a reason, its echoes of the input already shortened
# When a handler fails unexpectedly (see bot.py): the person is told, never left waiting.
APOLOGY = (
    "Kechirasiz, buni hozir bajara olmadim. Birozdan keyin qayta urinib ko'ring. Yordam: /help"
)
BUTTON_APOLOGY = "Kechirasiz, hozir bajara olmadim. Birozdan keyin qayta bosing."

HELP = (
    "Men vazifalaringizni Telegramda eslatib turaman.\n\n"
    "/add &lt;nima&gt; &lt;qachon&gt; — vazifa qo'shish. Qachon:\n"
    "  30m, 2h, 1h30m, 1d — hozirdan keyin\n"
    "  09:00 yoki bugun 09:00 / today 09:00 — bugun\n"
    "  ertaga 09:00 / tomorrow 09:00 — ertaga\n"
    "  2026-12-01 09:00 — shu kuni\n"
    "  Masalan: /add Hisobot ertaga 09:00\n"
    "Eslatma muddatda keladi, vaqt bo'lsa bir soat oldin ham.\n"
    "/list — ochiq vazifalar\n"
    "/done N — N-vazifa bajarildi\n"
    "/delete N — N-vazifani o'chirish\n"
    "/tz Europe/Berlin — vaqt zonasi (hozir: {tz})\n"
    "/quiet 22:00 07:00 — tinch soatlar: e'lonlar bu vaqtda kelmaydi (/quiet off)\n"
    "/help — shu yordam"
)


@dataclass(frozen=True, slots=True)
class Incoming:
    """One Telegram update as the bot acts on it."""

    bot_id: int
    update_id: int
    chat_id: int
    private: bool
    first_name: str


@dataclass(frozen=True, slots=True)
class ButtonOutcome:
    """What the bot answers to a button press, outside the transaction (see bot.py)."""

    answer: str  # answerCallbackQuery's text: a short notice over the chat
    edit: str | None  # the reminder's new text (HTML, without buttons); None: leave it


def reply_key(incoming: Incoming) -> str:
    return f"bot:{incoming.bot_id}:{incoming.update_id}"


def _claim(session: Session, incoming: Incoming) -> bool:
    """True if this transaction is the first to act on the update (see the module docstring)."""
    claimed = session.execute(
        insert(HandledUpdate)
        .values(bot_id=incoming.bot_id, update_id=incoming.update_id)
        .on_conflict_do_nothing()
        .returning(HandledUpdate.update_id)
    ).first()
    return claimed is not None


def _reply(session: Session, incoming: Incoming, text: str) -> None:
    payload = {"chat_id": incoming.chat_id, "text": fit_html(text), "parse_mode": "HTML"}
    outbox.enqueue(
        session,
        key=reply_key(incoming),
        payload=payload,
        kind=REPLY_KIND,
        priority=service.REPLY_PRIORITY,
    )


def _local(moment: datetime, time_zone: str) -> str:
    return f"{moment.astimezone(ZoneInfo(time_zone)):%d.%m.%Y %H:%M}"


def _b(text: str) -> str:
    return f"<b>{html.escape(text, quote=False)}</b>"


def _echo(text: str, limit: int = ECHO_LIMIT) -> str:
    """The person's input shown back: shortened (``messages.shorten``), then HTML-escaped."""
    return html.escape(shorten(text, limit), quote=False)


# --- commands ----------------------------------------------------------------------------------

Command = Callable[[Session, Incoming, User, list[str]], str]


def handle_text(session: Session, incoming: Incoming, text: str) -> bool:
    """Act on a message; False if another transaction already did (a duplicate update).

    In a group only commands get an answer: a bot that may read every message of a group must
    not answer each of them.
    """
    heard_from(session, incoming)
    if not incoming.private and not text.startswith("/"):
        return True
    if not _claim(session, incoming):
        return False
    _reply(session, incoming, _answer_text(session, incoming, text))
    return True


def heard_from(session: Session, incoming: Incoming) -> None:
    """The chat wrote to the bot (or pressed its button): it is no longer blocked, whatever an
    earlier 403 recorded, so the outbox may send to it again (the reply first of all)."""
    outbox.unblock_chat(session, incoming.chat_id)


# The bot's statuses in a chat that let it write there again: a person unblocked it, a group
# added it back.
_PRESENT = frozenset({"member", "administrator", "creator"})


def handle_membership(session: Session, incoming: Incoming, status: str) -> bool:
    """The bot's own membership of a chat changed (``my_chat_member``): unblocked or re-added,
    the outbox may send there again; whether it may. A block or a removal is left to the
    outbox, which learns it from Telegram's 403 at the next message."""
    if status not in _PRESENT:
        return False
    outbox.unblock_chat(session, incoming.chat_id)
    return True


def handle_failure(session: Session, incoming: Incoming, text: str) -> bool:
    """The apology for a message whose handling failed (its transaction rolled back): claimed
    and enqueued like any reply; False if another transaction already acted on the update."""
    if not incoming.private and not text.startswith("/"):
        return True
    if not _claim(session, incoming):
        return False
    heard_from(session, incoming)
    _reply(session, incoming, APOLOGY)
    return True


def _answer_text(session: Session, incoming: Incoming, text: str) -> str:  # noqa: PLR0911 - one answer per case
    words = text.split()
    command = words[0].split("@", 1)[0].lower() if words and words[0].startswith("/") else ""
    if not incoming.private:
        return "Men faqat shaxsiy chatda ishlayman: menga to'g'ridan-to'g'ri yozing."
    if command == "/start":
        return _start(session, incoming)
    user = service.find_user_by_chat(session, incoming.chat_id)
    if command == "/help":
        return HELP.format(tz=user.time_zone if user else DEFAULT_TIME_ZONE)
    handler = _COMMANDS.get(command)
    if handler is None:
        shown = _echo(words[0] if words else text)
        what = f"Bunday buyruq yo'q: {shown}." if command else "Buyruqni tushunmadim."
        return f"{what} Buyruqlar: /help\nMasalan: /add Hisobot ertaga 09:00"
    if user is None:
        return "Avval /start yuboring: shunda sizni taniyman."
    if not user.active:
        return "Eslatmalar to'xtatilgan edi. Qayta yoqish uchun /start yuboring."
    try:
        return handler(session, incoming, user, words[1:])
    except InvalidInput as err:
        return f"Tushunmadim: {_echo(str(err), _ERROR_LIMIT)}."


def _start(session: Session, incoming: Incoming) -> str:
    # A name is shown in every greeting; Telegram's are at most 64 characters.
    name = shorten(incoming.first_name, 64).strip()
    signed = service.sign_up(session, chat_id=incoming.chat_id, name=name)
    name = html.escape(signed.user.name, quote=False)
    if signed.state == "new":
        return (
            f"Assalomu alaykum, {name}! Vaqt zonangiz: {signed.user.time_zone}.\n\n"
            + HELP.format(tz=signed.user.time_zone)
        )
    if signed.state == "back":
        return (
            f"Qaytganingizdan xursandman, {name}! Eslatmalar yana yoqildi "
            f"({signed.reminders} ta eslatma qayta rejalashtirildi)."
        )
    return f"{name}, siz ro'yxatdan o'tgansiz. Buyruqlar: /help"


def _add(session: Session, incoming: Incoming, user: User, words: list[str]) -> str:
    if not words:
        return f"Nima va qachon? Masalan: {EXAMPLES}"
    now = service.database_now(session)
    try:
        title, due = parse_title_and_when(words, user.time_zone, now)
    except InvalidInput as err:
        return f"Tushunmadim: {_echo(str(err), _ERROR_LIMIT)}.\nMasalan: {EXAMPLES}"
    if len(title) > _TITLE_LIMIT:
        return f"Vazifa nomi juda uzun ({len(title)} belgi, ko'pi bilan {_TITLE_LIMIT})."
    # At the due time, and an hour before when that is still ahead.
    offsets = [HOUR, timedelta(0)] if due - HOUR > now else [timedelta(0)]
    created = service.create_task(
        session, user_id=user.id, title=title, due=due, remind_before=offsets
    )
    moments = sorted(r.run_at for r in created.reminders)
    when = ", ".join(f"{m.astimezone(ZoneInfo(user.time_zone)):%H:%M}" for m in moments)
    return (
        f"✅ Qo'shildi: #{created.task.id} {_b(title)}\n"
        f"Muddat: {_local(due, user.time_zone)} ({user.time_zone})\n"
        f"Eslataman: {when}"
    )


def _list(session: Session, incoming: Incoming, user: User, words: list[str]) -> str:
    tasks = service.list_tasks(session, user.id, include_done=False)
    if not tasks:
        return "Ochiq vazifalar yo'q. Qo'shish: /add Non 30m"
    lines = [f"#{t.id}  {_local(t.due, user.time_zone)}  {_b(t.title)}" for t in tasks]
    room = TELEGRAM_TEXT_LIMIT - 200  # the heading, the "va yana" line and the footer
    shown: list[str] = []
    for line in lines[:_LIST_LIMIT]:
        room -= html_length(line) + 1
        if room < 0:
            break
        shown.append(line)
    more = len(lines) - len(shown)
    shown += [f"… va yana {more} ta"] if more > 0 else []
    return "Ochiq vazifalar:\n" + "\n".join(shown) + "\n\nBajarildi: /done N, o'chirish: /delete N"


def _own_task(session: Session, user: User, words: list[str], command: str) -> Task | str:
    """The task named by ``/done N`` or ``/delete N``, or the answer that explains the mistake."""
    number = words[0].removeprefix("#") if len(words) == 1 else ""
    if not (number.isascii() and number.isdigit()):  # isdigit() alone takes '²' and '٣'
        return f"Qaysi vazifa? Raqamini yozing, masalan: {command} 12 (raqamlar: /list)"
    # More than 19 digits cannot name a row (ids are bigint) and need no conversion.
    task_id = int(number) if len(number) <= 19 else 0
    task = session.get(Task, task_id) if 1 <= task_id <= BIGINT_MAX else None
    if task is None or task.user_id != user.id:
        shown = str(task_id) if task_id else _echo(number)
        return f"#{shown} raqamli vazifangiz yo'q. Ro'yxat: /list"
    return task


def _done(session: Session, incoming: Incoming, user: User, words: list[str]) -> str:
    task = _own_task(session, user, words, "/done")
    if isinstance(task, str):
        return task
    if task.done:
        return f"#{task.id} {_b(task.title)} allaqachon bajarilgan."
    service.complete_task(session, task.id)
    return f"✅ Bajarildi: #{task.id} {_b(task.title)}"


def _delete(session: Session, incoming: Incoming, user: User, words: list[str]) -> str:
    task = _own_task(session, user, words, "/delete")
    if isinstance(task, str):
        return task
    title = task.title
    service.delete_task(session, task.id)
    return f"🗑 O'chirildi: #{task.id} {_b(title)}"


def _tz(session: Session, incoming: Incoming, user: User, words: list[str]) -> str:
    if len(words) != 1:
        return f"Qaysi zona? Masalan: /tz Europe/Berlin (hozir: {user.time_zone})"
    try:
        _, rewritten = service.set_time_zone(session, user.id, words[0])
    except InvalidInput:
        shown = _echo(words[0])
        return f"{shown} degan vaqt zonasi yo'q. Masalan: /tz Asia/Tashkent yoki /tz Europe/Berlin"
    return f"Vaqt zonasi: {user.time_zone}. Kutilayotgan eslatmalar yangilandi: {rewritten} ta."


_QUIET_EXAMPLE = "Masalan: /quiet 22:00 07:00 yoki /quiet off"


def _clock(word: str) -> time | None:
    """'22:00' or '7:30' as a wall-clock time; None for anything else."""
    hours, colon, minutes = word.partition(":")
    if not (colon and hours.isascii() and hours.isdigit() and minutes.isascii()):
        return None
    if not (minutes.isdigit() and len(minutes) == 2 and len(hours) <= 2):
        return None
    if int(hours) > 23 or int(minutes) > 59:
        return None
    return time(int(hours), int(minutes))


def _quiet(session: Session, incoming: Incoming, user: User, words: list[str]) -> str:
    if not words:
        hours = outbox.get_quiet_hours(session, user.chat_id)
        if hours is None:
            return f"Tinch soatlar yo'q. {_QUIET_EXAMPLE}"
        shown = f"{hours.start:%H:%M}-{hours.end:%H:%M} ({user.time_zone})"
        return f"Tinch soatlar: {shown}. O'chirish: /quiet off"
    if len(words) == 1 and words[0].lower() in ("off", "o'chir", "yo'q"):
        service.clear_quiet_hours(session, user.id)
        return "Tinch soatlar o'chirildi: e'lonlar istalgan vaqtda keladi."
    start, end = (_clock(w) for w in words) if len(words) == 2 else (None, None)
    if start is None or end is None:
        return f"Tushunmadim. {_QUIET_EXAMPLE}"
    if start == end:
        service.clear_quiet_hours(session, user.id)
        return "Boshi va oxiri bir xil: tinch soatlar o'chirildi."
    service.set_quiet_hours(session, user.id, start, end)
    return (
        f"🌙 Tinch soatlar: {start:%H:%M}-{end:%H:%M} ({user.time_zone}).\n"
        "E'lonlar bu vaqtda kelmaydi, keyin keladi; eslatmalaringiz o'z vaqtida keladi."
    )


_COMMANDS: dict[str, Command] = {
    "/add": _add,
    "/list": _list,
    "/done": _done,
    "/delete": _delete,
    "/tz": _tz,
    "/quiet": _quiet,
}


# --- buttons -----------------------------------------------------------------------------------


def handle_button(
    session: Session, incoming: Incoming, message_id: int, data: str
) -> ButtonOutcome | None:
    """Act on a press of a reminder's button; None if another transaction already did.

    The first press on a reminder message does its work and is remembered with the message; a
    second press on the same message is told what the first did and changes nothing.
    """
    if not _claim(session, incoming):
        return None
    heard_from(session, incoming)
    parsed = parse_button(data)
    if parsed is None:
        return ButtonOutcome("Bu tugma eskirgan.", None)
    action, task_id, delay = parsed
    earlier = session.get(PressedReminder, (incoming.chat_id, message_id), with_for_update=True)
    if earlier is not None:
        return ButtonOutcome(f"Bu eslatma bo'yicha allaqachon: {earlier.action}.", None)
    task = session.get(Task, task_id, with_for_update=True)
    if task is None or task.user.chat_id != incoming.chat_id:
        outcome = ButtonOutcome("Bu vazifa o'chirilgan.", "🗑 Bu vazifa o'chirilgan.")
        done_as = "vazifa o'chirilgan"
    elif action == "done":
        outcome, done_as = _press_done(session, task)
    else:
        outcome, done_as = _press_snooze(session, task, delay)
    session.add(PressedReminder(chat_id=incoming.chat_id, message_id=message_id, action=done_as))
    session.flush()
    return outcome


def _already_done(task: Task) -> tuple[ButtonOutcome, str]:
    edit = f"✅ Bajarilgan: {_b(task.title)}"
    return ButtonOutcome("Bu vazifa allaqachon bajarilgan.", edit), "bajarilgan"


def _press_done(session: Session, task: Task) -> tuple[ButtonOutcome, str]:
    if task.done:
        return _already_done(task)
    service.complete_task(session, task.id)
    return ButtonOutcome("Bajarildi ✅", f"✅ Bajarildi: {_b(task.title)}"), "bajarildi"


def _press_snooze(session: Session, task: Task, delay: timedelta) -> tuple[ButtonOutcome, str]:
    snoozed = service.snooze_task(session, task.id, delay)
    if snoozed.reminder is None:  # the task is done
        return _already_done(task)
    later = duration_words(delay)
    at = _local(snoozed.reminder.run_at, task.user.time_zone)
    edit = f"⏰ Keyinroq: {_b(task.title)}\n{later}dan keyin ({at}) yana eslataman."
    return ButtonOutcome(f"{later}dan keyin yana eslataman", edit), f"{later}ga qoldirildi"


# --- groups --------------------------------------------------------------------------------------


def handle_migration(session: Session, incoming: Incoming, new_chat_id: int) -> bool:
    """A group the bot is in became a supergroup: its users' reminders follow it at once."""
    if not _claim(session, incoming):
        return False
    session.execute(
        sa.update(User).where(User.chat_id == incoming.chat_id).values(chat_id=new_chat_id)
    )
    return True


def forget_old_updates(session: Session, older_than: timedelta = timedelta(days=2)) -> int:
    """Drop claims of updates Telegram no longer redelivers (it keeps them for 24 hours)."""
    cutoff = sa.func.now() - older_than
    result = session.execute(sa.delete(HandledUpdate).where(HandledUpdate.received_at < cutoff))
    return int(getattr(result, "rowcount", 0) or 0)
