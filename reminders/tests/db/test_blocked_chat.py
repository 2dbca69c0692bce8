"""The vazifalar bot's side of blocked chats: what it hears from a chat unblocks it in the
outbox, in the same transaction as its answer; a membership change only when the bot is back."""

from __future__ import annotations

import pytest
import sqlalchemy as sa
from sqlalchemy.orm import Session

from reminders import chat

CHAT = 6101


def incoming(update_id: int, chat_id: int = CHAT) -> chat.Incoming:
    return chat.Incoming(
        bot_id=1, update_id=update_id, chat_id=chat_id, private=chat_id > 0, first_name="Dilnoza"
    )


def blocked(engine: sa.Engine) -> list[str]:
    with engine.begin() as conn:
        return list(conn.execute(sa.text("SELECT suhbat FROM bloklangan ORDER BY 1")).scalars())


def outbox_states(engine: sa.Engine) -> list[tuple[str, str | None]]:
    with engine.begin() as conn:
        rows = conn.execute(sa.text("SELECT holat, xato_turi FROM outbox ORDER BY id"))
        return [(r[0], r[1]) for r in rows]


@pytest.fixture
def gone(engine: sa.Engine) -> None:
    with engine.begin() as conn:
        conn.execute(
            sa.text("INSERT INTO bloklangan (suhbat) VALUES (:c), ('-77')"), {"c": str(CHAT)}
        )


@pytest.mark.usefixtures("gone")
def test_start_unblocks_and_its_answer_is_sent(engine: sa.Engine) -> None:
    with Session(engine) as session, session.begin():
        assert chat.handle_text(session, incoming(1), "/start")
    assert blocked(engine) == ["-77"]
    assert outbox_states(engine) == [("kutmoqda", None)]  # the welcome, not ended unsent


@pytest.mark.usefixtures("gone")
def test_a_rolled_back_update_unblocks_nothing(engine: sa.Engine) -> None:
    with Session(engine) as session:
        session.begin()
        chat.handle_text(session, incoming(2), "salom")
        session.rollback()
    assert blocked(engine) == ["-77", str(CHAT)]


@pytest.mark.usefixtures("gone")
@pytest.mark.parametrize(
    ("status", "unblocked"),
    [("member", True), ("administrator", True), ("kicked", False), ("left", False)],
)
def test_membership_unblocks_only_when_the_bot_is_back(
    engine: sa.Engine, status: str, unblocked: bool
) -> None:
    with Session(engine) as session, session.begin():
        assert chat.handle_membership(session, incoming(3, -77), status) is unblocked
    assert blocked(engine) == ([str(CHAT)] if unblocked else ["-77", str(CHAT)])
