"""Blocked chats with a real relay process and the fake Bot API: a person who blocked the bot
costs one request, then none until the app unblocks the chat, then one again; a group the bot
was kicked from likewise. The fake answers 403 once only: any further request would be
delivered, and counted."""

from __future__ import annotations

import sqlalchemy as sa

from outbox import enqueue, unblock_chat
from outbox_testing.fake_telegram import FakeTelegram, Fault
from tests.support import Relays, text, wait_until

PERSON = 9101
GROUP = -1009102
BYSTANDER = 9103


def requests_to(fake: FakeTelegram, chat: int) -> int:
    return sum(1 for r in fake.requests if r.chat_id == chat)


def state(engine: sa.Engine, key: str) -> tuple[str, str | None]:
    with engine.connect() as conn:
        found = conn.execute(
            sa.text("SELECT holat, xato_turi FROM outbox WHERE kalit = :k"), {"k": key}
        ).one()
        return found[0], found[1]


def test_blocked_then_unblocked_and_a_kicked_group(
    engine: sa.Engine, fake_telegram: FakeTelegram, relays: Relays
) -> None:
    fake_telegram.script(PERSON, Fault.forbidden("bot was blocked by the user"))
    fake_telegram.script(GROUP, Fault.forbidden("bot was kicked from the group chat"))
    relay = relays.start()
    with engine.begin() as conn:
        for n in range(1, 4):
            enqueue(conn, key=f"p{n}", payload=text(PERSON, n))
            enqueue(conn, key=f"g{n}", payload=text(GROUP, n))
    wait_until(
        lambda: state(engine, "p3")[0] == "xato" and state(engine, "g3")[0] == "xato",
        30,
        "the chats' messages ended",
        explain=relay.describe,
    )
    # One request each: the first message's 403; the others ended without one.
    assert (requests_to(fake_telegram, PERSON), requests_to(fake_telegram, GROUP)) == (1, 1)
    assert [state(engine, f"p{n}") for n in range(1, 4)] == [
        ("xato", "blocked"),
        ("xato", "chat_blocked"),
        ("xato", "chat_blocked"),
    ]
    assert state(engine, "g1") == ("xato", "forbidden")
    assert state(engine, "g2") == ("xato", "chat_blocked")

    # Later messages: none reaches the Bot API, while another chat's does.
    with engine.begin() as conn:
        enqueue(conn, key="p4", payload=text(PERSON, 4))
        enqueue(conn, key="g4", payload=text(GROUP, 4))
        enqueue(conn, key="b1", payload=text(BYSTANDER, 1))
    wait_until(lambda: state(engine, "b1")[0] == "bajarildi", 30, "b1 sent", explain=relay.describe)
    assert state(engine, "p4") == ("xato", "chat_blocked")
    assert state(engine, "g4") == ("xato", "chat_blocked")
    assert (requests_to(fake_telegram, PERSON), requests_to(fake_telegram, GROUP)) == (1, 1)

    # The person sent /start: the app unblocks the chat in its transaction; one request again.
    with engine.begin() as conn:
        assert unblock_chat(conn, PERSON)
        enqueue(conn, key="p5", payload=text(PERSON, 5))
        enqueue(conn, key="g5", payload=text(GROUP, 5))
    wait_until(lambda: state(engine, "p5")[0] == "bajarildi", 30, "p5 sent", explain=relay.describe)
    assert requests_to(fake_telegram, PERSON) == 2
    assert [d.text for d in fake_telegram.delivered_to(PERSON)] == [text(PERSON, 5)["text"]]
    assert state(engine, "g5") == ("xato", "chat_blocked")  # the group is still gone
    assert requests_to(fake_telegram, GROUP) == 1
    assert relay.stop() == 0, relay.describe()
    said = [line for line in relay.describe().splitlines() if "failed for good" in line]
    assert len(said) == 2 and all("recorded as blocked" in line for line in said), said
