"""``reminders demo`` (``make demo``): the whole story on the embedded defaults, in a few seconds.

An embedded PostgreSQL in ./.outbox, the migrations, the fake Bot API on localhost, a few users
and tasks created through the vazifalar service, and the relay delivering their reminders: one
straight through, one after Telegram's flood control (429), one to a user who blocked the bot
(xato), and one whose task was completed in time (never sent). Then a short conversation with
the bot (``reminders.demo_bot``).
"""

from __future__ import annotations

import asyncio
import logging
import secrets
import time
from datetime import UTC, datetime, timedelta
from typing import Any

import psycopg
from sqlalchemy.orm import Session

from outbox.config import RelayConfig
from outbox.db import create_engine, with_database
from outbox.embedded import embedded_url
from outbox.redact import configure_logging
from outbox.relay import Relay
from outbox.telegram import TelegramSender
from outbox_testing.fake_telegram import FakeTelegram, Fault
from reminders import service
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


def _replay(url: str, failed: list[int]) -> None:
    """What an operator types, through the real command line."""
    from outbox.cli import main  # noqa: PLC0415 - the demo drives the CLI like a person would

    ids = [str(i) for i in failed]
    print(f"\n$ outbox replay {' '.join(ids)}")
    main(["--log-level", "ERROR", "replay", *ids, "--database-url", url])
    configure_logging(logging.ERROR)


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
            print("\nDilnoza unblocks the bot, and an operator sends her reminder again:")
            _replay(url, failed)
            before = len(fake.delivered)
            asyncio.run(_relay_until_settled(url, token, fake))
            _print_deliveries(fake, started, chats, skip=before)
            print("\nThe outbox at the end:")
            _print_outbox(url)
        print("\nA conversation with the vazifalar bot (`reminders bot`); its replies go out")
        print("through the outbox, and its reminders carry buttons:")
        asyncio.run(run_conversation(url, token, fake))
    finally:
        fake.stop_thread()
    return 0
