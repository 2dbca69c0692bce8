"""Blocked chats (outbox_0017): a 403 that means the chat is gone for the bot is recorded in the
outcome's own statement, and the chat's other messages end without a request until the app
unblocks it. Claims and outcomes go through the relay's own statements, on a real database."""

from __future__ import annotations

import asyncio
from typing import Any

import psycopg
import pytest
import sqlalchemy as sa
from sqlalchemy.ext.asyncio import create_async_engine

from outbox import (
    FailureCode,
    OutboxError,
    State,
    enqueue,
    enqueue_many,
    replay,
    unblock_chat,
    unblock_chat_async,
)
from outbox.errors import InvalidInput, Refused
from outbox.queries import ClaimLimits, Outcome, claim_due, ensure_bot, record_outcomes
from tests.support import text
from tests.support.admin import run

SCHEMA = "public"
GONE = "Telegram refused (403): Forbidden: bot was blocked by the user"
pytestmark = pytest.mark.filterwarnings("error")


def claim(db_url: str) -> list[Any]:
    async def go() -> list[Any]:
        async with await psycopg.AsyncConnection.connect(db_url, autocommit=True) as conn:
            await ensure_bot(conn, "default", schema=SCHEMA)
            return await claim_due(conn, 100, schema=SCHEMA, limits=ClaimLimits())

    return asyncio.run(go())


def write(db_url: str, outcomes: list[Outcome]) -> int:
    async def go() -> int:
        async with await psycopg.AsyncConnection.connect(db_url, autocommit=True) as conn:
            return await record_outcomes(conn, outcomes, schema=SCHEMA)

    return asyncio.run(go())


def blocked_by(db_url: str, row: Any, *, attempts: int | None = None) -> int:
    """The relay's outcome of a 403 'blocked by the user' for the claimed ``row``."""
    outcome = Outcome(
        row.id,
        row.attempts if attempts is None else attempts,
        State.FAILED,
        error=GONE,
        error_code=FailureCode.BLOCKED,
        claimed_at=row.claimed_at,
        chat_gone=True,
    )
    return write(db_url, [outcome])


def rows(engine: sa.Engine) -> dict[str, tuple[str, str | None]]:
    with engine.connect() as conn:
        found = conn.execute(sa.text("SELECT kalit, holat, xato_turi FROM outbox"))
        return {r[0]: (r[1], r[2]) for r in found}


def pairs(engine: sa.Engine) -> list[tuple[str, str, int | None]]:
    with engine.connect() as conn:
        found = conn.execute(sa.text("SELECT bot, suhbat, manba FROM bloklangan ORDER BY 1, 2"))
        return [(r[0], r[1], r[2]) for r in found]


def reason(engine: sa.Engine, key: str) -> str:
    with engine.connect() as conn:
        found = conn.execute(sa.text("SELECT oxirgi_xato FROM outbox WHERE kalit = :k"), {"k": key})
        return str(found.scalar_one())


def test_blocked_then_unblocked(engine: sa.Engine, db_url: str) -> None:
    with engine.begin() as conn:
        enqueue(conn, key="a1", payload=text(7, 1))
        enqueue(conn, key="a2", payload=text(7, 2))
        enqueue(conn, key="other", payload=text(8, 1))
    claimed = {r.key: r for r in claim(db_url)}
    assert set(claimed) == {"a1", "other"}  # a2 waits for a1 (order per chat)
    assert blocked_by(db_url, claimed["a1"]) == 1
    # The 403's own code stays 'blocked' (the app's trigger reads it); the waiting a2 ends
    # without a request; the other chat goes on.
    assert rows(engine) == {
        "a1": ("xato", "blocked"),
        "a2": ("xato", "chat_blocked"),
        "other": ("bajarilmoqda", None),
    }
    assert pairs(engine) == [("", "7", claimed["a1"].id)]
    said = reason(engine, "a2")
    assert said.startswith("not sent: chat 7 is gone for this bot (Telegram said 'Forbidden: ")
    assert f"bot was blocked by the user' to row {claimed['a1'].id}, " in said
    assert said.endswith("no request was made. Unblock it to send again: outbox chats --unblock 7")

    with engine.begin() as conn:  # a new message, one at a time and in bulk: not sent
        enqueue(conn, key="a3", payload=text(7, 3))
        enqueue_many(conn, [("a4", text(7, 4)), ("b1", text(9, 1))])
    assert rows(engine)["a3"] == ("xato", "chat_blocked")
    assert rows(engine)["a4"] == ("xato", "chat_blocked")
    assert [r.key for r in claim(db_url)] == ["b1"]

    with engine.begin() as conn:
        assert unblock_chat(conn, 7) is True
    with engine.begin() as conn:
        assert unblock_chat(conn, "7") is False  # once is enough
        enqueue(conn, key="a5", payload=text(7, 5))
    assert [r.key for r in claim(db_url)] == ["a5"]
    assert pairs(engine) == []


def test_a_kicked_group_is_blocked_for_its_bot_only(engine: sa.Engine) -> None:
    with engine.begin() as conn:
        enqueue(conn, key="bot-1", payload=text(-100, 1), bot=111)
        enqueue(conn, key="bot-2", payload=text(-100, 2), bot=111, ordered=False)
        enqueue(conn, key="other-bot", payload=text(-100, 3), bot=222)
        enqueue(conn, key="no-bot", payload=text(-100, 4))
        # What the relay's statement writes, as plain SQL: its trigger does the rest.
        conn.execute(
            sa.text("INSERT INTO bloklangan (bot, suhbat, xato) VALUES ('111', '-100', 'kicked')")
        )
    assert rows(engine) == {
        "bot-1": ("xato", "chat_blocked"),
        "bot-2": ("xato", "chat_blocked"),
        "other-bot": ("kutmoqda", None),
        "no-bot": ("kutmoqda", None),
    }
    with engine.begin() as conn:
        assert unblock_chat(conn, -100) is False  # not for the rows naming no bot
        assert unblock_chat(conn, -100, bot="111") is True


def test_rows_naming_no_bot_in_every_queue_and_claimed_rows_stay(
    engine: sa.Engine, db_url: str
) -> None:
    with engine.begin() as conn:
        enqueue(conn, key="first", payload=text(5, 1))
    [first] = claim(db_url)
    with engine.begin() as conn:
        enqueue(conn, key="q-default", payload=text(5, 2))
        enqueue(conn, key="q-news", payload=text(5, 3), queue="news")
        enqueue(conn, key="q-zz", payload=text(5, 4), queue="zz")
        enqueue(conn, key="q-bot", payload=text(5, 5), bot=333)
        enqueue(conn, key="q-chat6", payload=text(6, 1), queue="news")
        conn.execute(sa.text("INSERT INTO bloklangan (suhbat) VALUES ('5')"))
    found = rows(engine)
    assert found.pop("first") == ("bajarilmoqda", None)  # claimed: may be on its way
    assert found == {
        "q-default": ("xato", "chat_blocked"),
        "q-news": ("xato", "chat_blocked"),
        "q-zz": ("xato", "chat_blocked"),
        "q-bot": ("kutmoqda", None),
        "q-chat6": ("kutmoqda", None),
    }
    # Its 403 comes: the pair is known already, and its outcome is written as usual.
    assert blocked_by(db_url, first) == 1
    assert rows(engine)["first"] == ("xato", "blocked")
    assert len(pairs(engine)) == 1


def test_a_stale_outcome_records_no_block(engine: sa.Engine, db_url: str) -> None:
    with engine.begin() as conn:
        enqueue(conn, key="k", payload=text(3, 1))
    [row] = claim(db_url)
    assert blocked_by(db_url, row, attempts=row.attempts + 1) == 0  # not this claim's
    assert pairs(engine) == []


def test_a_follow_up_goes_by_its_originals_chat(engine: sa.Engine) -> None:
    with engine.begin() as conn:
        enqueue(conn, key="orig", payload=text(4, 1))
        conn.execute(sa.text("INSERT INTO bloklangan (suhbat, xato) VALUES ('4', 'blocked')"))
        enqueue(
            conn,
            key="edit",
            payload={"method": "editMessageText", "message_key": "orig", "text": "new"},
        )
    assert rows(engine) == {"orig": ("xato", "chat_blocked"), "edit": ("xato", "chat_blocked")}


def test_enqueue_many_checks_its_chats_in_one_join(engine: sa.Engine) -> None:
    """The bulk statement looks its chat_ids up itself and the trigger skips their probe; a
    pair of another bot, and a follow-up naming no chat_id, are still told apart."""
    with engine.begin() as conn:
        enqueue(conn, key="orig", payload=text(8, 1), bot=111)
        conn.execute(
            sa.text("INSERT INTO bloklangan (bot, suhbat) VALUES ('111', '8'), ('222', '9')")
        )
        enqueue_many(
            conn,
            [
                ("to-8", text(8, 2)),
                ("to-9", text(9, 1)),
                ("to-10", text(10, 1)),
                ("edit", {"method": "editMessageText", "message_key": "orig", "text": "new"}),
            ],
            bot=111,
        )
        enqueue_many(conn, [("other-9", text(9, 2)), ("other-8", text(8, 3))], bot=222)
        chats = {r[0]: r[1] for r in conn.execute(sa.text("SELECT kalit, suhbat FROM outbox"))}
    assert rows(engine) == {
        "orig": ("xato", "chat_blocked"),
        "to-8": ("xato", "chat_blocked"),
        "to-9": ("kutmoqda", None),
        "to-10": ("kutmoqda", None),
        "edit": ("xato", "chat_blocked"),
        "other-9": ("xato", "chat_blocked"),
        "other-8": ("kutmoqda", None),
    }
    # The statement's "checked" mark is no chat: every row has its own.
    assert chats == {
        "orig": "8", "to-8": "8", "to-9": "9", "to-10": "10", "edit": "8", "other-9": "9",
        "other-8": "8",
    }  # fmt: skip
    assert reason(engine, "to-8").endswith("outbox chats --unblock 8 --bot 111")


def test_replay_of_a_blocked_chats_row_is_refused(
    engine: sa.Engine, db_url: str, capsys: pytest.CaptureFixture[str], monkeypatch: Any
) -> None:
    monkeypatch.setenv("OUTBOX_DATABASE_URL", db_url)
    with engine.begin() as conn:
        enqueue(conn, key="r1", payload=text(11, 1), bot=444)
        enqueue(conn, key="fine", payload=text(12, 1))
        conn.execute(sa.text("UPDATE outbox SET holat = 'xato'"))
        conn.execute(sa.text("INSERT INTO bloklangan (bot, suhbat) VALUES ('444', '11')"))
        ids: dict[str, int] = dict(conn.execute(sa.text("SELECT kalit, id FROM outbox")).all())
    with engine.begin() as conn, pytest.raises(Refused) as refused:
        replay(conn, [ids["fine"], ids["r1"]])
    assert str(refused.value) == (
        f"message {ids['r1']} not replayed: chat 11 blocked bot 444 or removed it (Telegram "
        "said so); unblock it first: outbox chats --unblock 11 --bot 444"
    )
    assert rows(engine)["fine"] == ("xato", None)  # nothing went back

    code, out, err = run(capsys, "replay", str(ids["r1"]))
    assert code == Refused.exit_code
    assert err.strip().endswith("unblock it first: outbox chats --unblock 11 --bot 444")
    assert len(err.strip().splitlines()) == 1
    code, out, _ = run(capsys, "replay", "--all-failed")  # the others go
    assert code == Refused.exit_code
    assert out.startswith("replayed 1 failed messages")
    assert rows(engine) == {"r1": ("xato", None), "fine": ("kutmoqda", None)}

    code, out, _ = run(capsys, "chats", "--unblock", "11", "--bot", "444")
    assert (code, out) == (0, "unblocked chat 11 for bot 444: its next messages are sent\n")
    code, out, _ = run(capsys, "replay", str(ids["r1"]))
    assert code == 0 and out.startswith(f"replayed message {ids['r1']}")


def test_outbox_chats_lists_and_unblocks(
    engine: sa.Engine, db_url: str, capsys: pytest.CaptureFixture[str], monkeypatch: Any
) -> None:
    monkeypatch.setenv("OUTBOX_DATABASE_URL", db_url)
    assert run(capsys, "chats", "--blocked")[:2] == (0, "no blocked chats\n")
    with engine.begin() as conn:
        conn.execute(
            sa.text(
                "INSERT INTO bloklangan (bot, suhbat, xato, manba) VALUES "
                "('', '21', 'Forbidden: bot was blocked by the user', 5), "
                "('555', '-1001', 'Forbidden: bot was kicked from the supergroup chat', NULL)"
            )
        )
    code, out, _ = run(capsys, "chats", "--blocked")
    assert code == 0
    lines = out.splitlines()
    assert lines[0].split()[:4] == ["bot", "chat", "since", "row"]
    assert any(line.split()[:2] == ["-", "21"] for line in lines)
    assert any(line.split()[:2] == ["555", "-1001"] for line in lines)
    code, out, _ = run(capsys, "chats", "--blocked", "--bot", "555", "--json")
    assert code == 0
    assert '"chat_id": "-1001"' in out and '"21"' not in out
    assert run(capsys, "chats", "--unblock", "21")[:2] == (
        0,
        "unblocked chat 21 for the rows naming no bot: its next messages are sent\n",
    )
    assert run(capsys, "chats", "--unblock", "21")[1] == (
        "chat 21 was not blocked for the rows naming no bot; nothing changed\n"
    )
    assert [p[1] for p in pairs(engine)] == ["-1001"]
    code, out, _ = run(capsys, "chats", "--unblock", "-1001", "--bot", "555")  # a group's id
    assert (code, out) == (0, "unblocked chat -1001 for bot 555: its next messages are sent\n")
    assert pairs(engine) == []


@pytest.mark.parametrize(
    ("argv", "says"),
    [
        (["chats"], "give --blocked (list them) or --unblock CHAT_ID, one of the two"),
        (["chats", "--blocked", "--unblock", "5"], "one of the two"),
        (["chats", "--unblock", "five"], "chat_id takes a Telegram chat id"),
        (["chats", "--unblock", "5", "--json"], "--json goes with --blocked"),
        (["chats", "--blocked", "--bot", "12:secret"], "not a token"),
    ],
)
def test_outbox_chats_refuses_in_one_line(
    db_url: str,
    capsys: pytest.CaptureFixture[str],
    monkeypatch: Any,
    argv: list[str],
    says: str,
) -> None:
    monkeypatch.setenv("OUTBOX_DATABASE_URL", db_url)
    code, out, err = run(capsys, *argv)
    assert code == 2
    assert out == ""
    assert len(err.strip().splitlines()) == 1 and says in err


@pytest.mark.parametrize(
    ("chat", "bot"),
    [
        (True, None),
        ("", None),
        ("abc", None),
        ("--5", None),
        ("-", None),
        ("@", None),
        ("@two words", None),
        (10**20, None),
        (None, None),
        (5, "12:token"),
    ],
)
def test_unblock_chat_refuses_bad_input(engine: sa.Engine, chat: Any, bot: Any) -> None:
    with engine.begin() as conn, pytest.raises(InvalidInput) as refused:
        unblock_chat(conn, chat, bot=bot)
    assert isinstance(refused.value, OutboxError)
    assert "\n" not in str(refused.value)


@pytest.mark.parametrize("driver", ["psycopg", "asyncpg"])
def test_unblock_chat_async_in_the_apps_transaction(
    engine: sa.Engine, db_url: str, driver: str
) -> None:
    with engine.begin() as conn:
        conn.execute(sa.text("INSERT INTO bloklangan (suhbat) VALUES ('@news')"))

    async def go() -> tuple[bool, bool]:
        eng = create_async_engine(f"postgresql+{driver}://" + db_url.split("://", 1)[1])
        try:
            async with eng.begin() as conn:
                first = await unblock_chat_async(conn, "@news")
                await conn.rollback()  # the app's transaction decides
            async with eng.begin() as conn:
                second = await unblock_chat_async(conn, "@news")
            return first, second
        finally:
            await eng.dispose()

    assert asyncio.run(go()) == (True, True)
    assert pairs(engine) == []


def test_status_batch_and_show_tell_blocked_apart(
    engine: sa.Engine, db_url: str, capsys: pytest.CaptureFixture[str], monkeypatch: Any
) -> None:
    monkeypatch.setenv("OUTBOX_DATABASE_URL", db_url)
    with engine.begin() as conn:
        conn.execute(sa.text("INSERT INTO bloklangan (suhbat, xato) VALUES ('31', 'blocked')"))
        enqueue_many(conn, [(f"c-{n}", text(30 + n, 1)) for n in range(3)], batch="camp")
        blocked_id = conn.execute(sa.text("SELECT id FROM outbox WHERE kalit = 'c-1'")).scalar()
    code, out, _ = run(capsys, "batch", "camp")
    assert code == 0
    assert "xato, of which 0 cancelled by operator and 1 not sent to a blocked chat" in out
    code, out, _ = run(capsys, "batch", "camp", "--json")
    assert '"chat_blocked": 1' in out
    code, out, _ = run(capsys, "status")
    [line] = [line for line in out.splitlines() if line.startswith("chat blocked")]
    assert line.split()[2] == "1" and "outbox chats --blocked" in line
    code, out, _ = run(capsys, "show", str(blocked_id))
    assert code == 0
    assert "chat_blocked" in out
    assert "not sent: chat 31 is gone for this bot" in out and "no request was made" in out


def test_a_group_moved_then_kicked_is_blocked_under_its_new_id(
    engine: sa.Engine, db_url: str
) -> None:
    with engine.begin() as conn:
        enqueue(conn, key="g", payload=text(-55, 1))
    [row] = claim(db_url)
    # The resend to the supergroup met "bot was kicked": both go in one write.
    outcome = Outcome(
        row.id,
        row.attempts,
        State.FAILED,
        error="Telegram refused (403): Forbidden: bot was kicked from the supergroup chat",
        error_code=FailureCode.FORBIDDEN,
        claimed_at=row.claimed_at,
        new_chat_id=-1000000000055,
        chat_gone=True,
    )
    assert write(db_url, [outcome]) == 1
    with engine.connect() as conn:
        said = conn.execute(sa.text("SELECT xato FROM bloklangan")).scalar_one()
    assert said == "Forbidden: bot was kicked from the supergroup chat"  # Telegram's words
    assert pairs(engine) == [("", "-1000000000055", row.id)]
    with engine.begin() as conn:
        enqueue(conn, key="g2", payload=text(-1000000000055, 2))
        enqueue(conn, key="old-id", payload=text(-55, 2))
    assert rows(engine)["g2"] == ("xato", "chat_blocked")
    assert rows(engine)["old-id"] == ("kutmoqda", None)


def test_the_downgrade_gives_back_the_fill_without_the_check(
    engine: sa.Engine, db_url: str
) -> None:
    from alembic import command

    from outbox import migrate
    from outbox.schema import current_schema

    config = migrate._config(db_url, migrate.SCRIPT_PACKAGE, current_schema())
    command.downgrade(config, "outbox_0016")
    with engine.begin() as conn:  # outbox_0016's fill, which reads no bloklangan
        conn.execute(
            sa.text(
                "INSERT INTO outbox (kalit, payload) VALUES "
                """('before', '{"chat_id": 12, "text": "a"}'), """
                """('before-2', '{"chat_id": 12, "text": "b"}')"""
            )
        )
        conn.execute(
            sa.text(
                "INSERT INTO outbox (kalit, payload, suhbat) VALUES "
                """('given', '{"chat_id": 12, "text": "c"}', '')"""
            )
        )
    command.upgrade(config, "head")
    with engine.begin() as conn:
        conn.execute(sa.text("INSERT INTO bloklangan (suhbat) VALUES ('12')"))
        enqueue(conn, key="after", payload=text(12, 3))
        chats = {r[0]: r[1] for r in conn.execute(sa.text("SELECT kalit, suhbat FROM outbox"))}
    assert chats == {"before": "12", "before-2": "12", "given": "12", "after": "12"}
    assert set(rows(engine).values()) == {("xato", "chat_blocked")}
