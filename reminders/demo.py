"""``reminders demo`` (``make demo``): the whole story on the embedded defaults, in a few seconds.

An embedded PostgreSQL in ./.outbox, the migrations, the fake Bot API on localhost, a few users
and tasks created through the vazifalar service, and the relay delivering their reminders: one
straight through, one after Telegram's flood control (429), one to a user who blocked the bot
(xato), and one whose task was completed in time (never sent). Then a short conversation with
the bot (``reminders.demo_bot``).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import secrets
import sys
import time
from datetime import UTC, datetime, timedelta
from typing import Any

import psycopg
import sqlalchemy as sa
from sqlalchemy.orm import Session

import outbox
from outbox.config import RelayConfig
from outbox.db import create_engine, with_database
from outbox.embedded import embedded_url
from outbox.redact import configure_logging
from outbox.relay import Relay
from outbox.telegram import TelegramSender
from outbox_testing.fake_telegram import FakeTelegram, Fault
from reminders import chat, service
from reminders.demo_bot import run_conversation
from reminders.migrate import migrate_all

__all__ = ["run_demo"]

DEMO_DATABASE = "outbox_demo"
TIMEOUT_SECONDS = 40.0


def _fresh_database() -> str:
    """Recreate the demo database so that every run starts from nothing."""
    server = embedded_url()
    with psycopg.connect(server, autocommit=True) as conn:
        conn.execute(f"DROP DATABASE IF EXISTS {DEMO_DATABASE} WITH (FORCE)")
        conn.execute(f"CREATE DATABASE {DEMO_DATABASE}")
    return with_database(server, DEMO_DATABASE)


def _create_tasks(url: str, fake: FakeTelegram) -> dict[str, int]:
    now = datetime.now(UTC)
    chats = {"Aziza": 1001, "Bobur": 1002, "Dilnoza": 1003}
    engine = create_engine(url)
    with Session(engine) as session, session.begin():
        users = {
            name: service.create_user(session, name=name, chat_id=chat, tz=tz).id
            for (name, chat), tz in zip(
                chats.items(), ("Asia/Tashkent", "Europe/Berlin", "Asia/Tashkent"), strict=True
            )
        }
        service.create_task(
            session,
            user_id=users["Aziza"],
            title="Hisobotni topshirish",
            due=now + timedelta(hours=1, seconds=2),
        )
        service.create_task(
            session,
            user_id=users["Bobur"],
            title="Shifokorga borish <ertalab> & tushlik",
            due=now + timedelta(days=1, seconds=3),
            remind_before=[timedelta(days=1)],
        )
        service.create_task(
            session,
            user_id=users["Dilnoza"],
            title="Kitob o'qish",
            due=now + timedelta(hours=1, seconds=1),
        )
        bread = service.create_task(
            session,
            user_id=users["Aziza"],
            title="Non olish",
            due=now + timedelta(hours=1, seconds=4),
        ).task.id
    # Aziza buys the bread before the reminder is due: it must never be sent.
    with Session(engine) as session, session.begin():
        service.complete_task(session, bread)
    engine.dispose()
    fake.script(chats["Bobur"], Fault.retry_after(1))
    fake.script(chats["Dilnoza"], Fault.forbidden("bot was blocked by the user"))
    return chats


def _settled(url: str) -> bool:
    with psycopg.connect(url) as conn:
        row = conn.execute(
            "SELECT count(*) FROM outbox WHERE holat IN ('kutmoqda', 'bajarilmoqda')"
        ).fetchone()
    return row is not None and row[0] == 0


async def _relay_until_settled(url: str, token: str, fake: FakeTelegram) -> None:
    config = RelayConfig(database_url=url)
    relay = Relay(config, TelegramSender(token, api_url=fake.api_url))
    async with relay:
        runner = asyncio.create_task(relay.run())
        deadline = time.monotonic() + TIMEOUT_SECONDS
        while time.monotonic() < deadline and not await asyncio.to_thread(_settled, url):
            await asyncio.sleep(0.25)
        relay.stop()
        await runner


def _print_deliveries(
    fake: FakeTelegram, started: float, chats: dict[str, int], skip: int = 0
) -> None:
    names = {chat: name for name, chat in chats.items()}
    for message in fake.delivered[skip:]:
        first_line = message.text.splitlines()[0]
        print(
            f"  +{message.wall - started:5.1f}s  to {names.get(message.chat_id, message.chat_id)}"
            f" ({message.chat_id}): {first_line}"
        )


def _print_outbox(url: str) -> list[int]:
    """The outbox table as an operator sees it; returns the ids of failed rows."""
    with psycopg.connect(url) as conn:
        rows: list[Any] = conn.execute(
            "SELECT id, kalit, holat, urinish, coalesce(oxirgi_xato, '') FROM outbox ORDER BY id"
        ).fetchall()
    print(f"  {'id':>3}  {'holat':<10} {'urinish':>7}  {'kalit':<34} oxirgi_xato")
    for row_id, key, state, attempts, error in rows:
        print(f"  {row_id:>3}  {state:<10} {attempts:>7}  {key:<34} {error}")
    return [int(r[0]) for r in rows if r[2] == "xato"]


def _command(url: str, *argv: str) -> None:
    """What an operator types, through the real command line (its complaints shown too)."""
    from outbox.cli import main  # noqa: PLC0415 - the demo drives the CLI like a person would

    print(f"\n$ outbox {' '.join(argv)}")
    with contextlib.redirect_stderr(sys.stdout):
        main(["--log-level", "ERROR", *argv, "--database-url", url])
    configure_logging(logging.ERROR)


def _broadcast(url: str, chats: dict[str, int]) -> list[int]:
    """A news message to every user, as one batch; the ids of its rows."""
    engine = create_engine(url)
    with Session(engine) as session, session.begin():
        news = "Yangilik: vazifalar endi guruhlarda ham ishlaydi"
        outbox.enqueue_many(
            session,
            [(f"yangilik-{c}", {"chat_id": c, "text": news}) for c in chats.values()],
            batch="yangilik",
        )
    with Session(engine) as session:
        ids = session.scalars(
            sa.text("SELECT id FROM outbox WHERE partiya = 'yangilik' ORDER BY id")
        ).all()
    engine.dispose()
    return [int(i) for i in ids]


def _dilnoza_starts(url: str, token: str, chat_id: int) -> None:
    """Dilnoza sends /start, handled as the bot handles it (reminders.chat)."""
    engine = create_engine(url)
    incoming = chat.Incoming(
        bot_id=int(token.split(":", 1)[0]),
        update_id=1,
        chat_id=chat_id,
        private=True,
        first_name="Dilnoza",
    )
    with Session(engine) as session, session.begin():
        chat.handle_text(session, incoming, "/start")
    engine.dispose()


def _blocked_story(url: str, token: str, fake: FakeTelegram, chats: dict[str, int]) -> None:
    """Dilnoza blocked the bot: the outbox asks her chat no more, until she unblocks it."""
    started = time.time()
    _command(url, "chats", "--blocked")
    print("\nA news message to all three users (one batch): her copy is not sent, no request:")
    news = _broadcast(url, chats)
    before = len(fake.delivered)
    asyncio.run(_relay_until_settled(url, token, fake))
    _print_deliveries(fake, started, chats, skip=before)
    _print_outbox(url)
    _command(url, "replay", str(news[-1]))
    print("\nDilnoza unblocks the bot and sends /start: the bot calls outbox.unblock_chat,")
    print("welcomes her back and enqueues her reminder again; the operator replays her news:")
    _dilnoza_starts(url, token, chats["Dilnoza"])
    _command(url, "replay", str(news[-1]))
    before = len(fake.delivered)
    asyncio.run(_relay_until_settled(url, token, fake))
    _print_deliveries(fake, started, chats, skip=before)


def run_demo() -> int:
    configure_logging(logging.ERROR)  # the report below tells the story
    token = f"{secrets.randbelow(10**9) + 10**9}:{secrets.token_urlsafe(24)}"
    print("Starting the embedded PostgreSQL in ./.outbox and applying the migrations ...")
    url = _fresh_database()
    migrate_all(url)
    fake = FakeTelegram(token=token).start_in_thread()
    try:
        print(f"Fake Telegram Bot API listening on {fake.api_url}")
        started = time.time()
        chats = _create_tasks(url, fake)
        print("Created 3 users and 4 tasks; reminders fall due within the next few seconds.")
        print("Running the relay until every reminder is delivered or has failed ...")
        asyncio.run(_relay_until_settled(url, token, fake))
        print("\nWhat Telegram received:")
        _print_deliveries(fake, started, chats)
        print("\nThe outbox afterwards:")
        failed = _print_outbox(url)
        print("(The completed task 'Non olish' has no reminder: completing it withdrew it.)")
        if failed:
            print("\nDilnoza blocked the bot; the outbox remembers her chat:")
            _blocked_story(url, token, fake, chats)
            print("\nThe outbox at the end:")
            _print_outbox(url)
        print("\nA conversation with the vazifalar bot (`reminders bot`); its replies go out")
        print("through the outbox, and its reminders carry buttons:")
        asyncio.run(run_conversation(url, token, fake))
    finally:
        fake.stop_thread()
    return 0
