"""The fault matrix: every scripted Bot API fault ends in the state DESIGN §5 says.

Relays run as real processes (``outbox relay``) against the fake Bot API in this process, so
the fake's request timestamps show when each attempt really reached "Telegram".

Here the e2e tier's tests (processes); the others are in ``tests/db/test_delivery_faults.py``.
"""

from __future__ import annotations

import itertools
import time
from dataclasses import dataclass, field
from typing import Any

import pytest
import sqlalchemy as sa

from outbox import enqueue
from outbox_testing.fake_telegram import FakeTelegram, Fault
from tests.support import TEST_TOKEN, Relays, insert_raw, row, states, text, wait_until

BASE = 0.25  # backoff base for the matrix: attempts wait 0.25 s, then 0.5 s
# Scheduling slack: the fake records a request when it arrives and the database's clock decides
# when a row is due; both are this host's clocks, read a few microseconds apart.
EPS = 0.01


def sends_to(fake: FakeTelegram, chat: int) -> list[tuple[float, int]]:
    """(arrival time, HTTP status) of every sendMessage for ``chat``, in order."""
    return [(r.at, r.status) for r in fake.requests if r.chat_id == chat]


def gaps(times: list[float]) -> list[float]:
    return [b - a for a, b in itertools.pairwise(times)]


def all_terminal(engine: sa.Engine, n: int) -> bool:
    counts = states(engine)
    return counts["bajarildi"] + counts["xato"] == n


@dataclass
class Case:
    key: str
    payload: dict[str, Any]
    holat: str
    urinish: int
    error: str | None  # expected in oxirgi_xato (lower case)
    faults: list[tuple[Fault, int | None]] = field(default_factory=list)
    delivered: int = 0  # messages the fake accepted for the row's chat
    min_gaps: list[float] = field(default_factory=list)  # between consecutive requests
    reaches_telegram: bool = True  # False: refused before any request


CASES = [
    Case("ok", text(100), "bajarildi", 1, None, delivered=1),
    Case(
        "429-once",
        text(101),
        "bajarildi",
        2,
        "flood control (429): retry after 1 s",
        [(Fault.retry_after(1), 1)],
        delivered=1,
        min_gaps=[1.0],  # retry_after beats the 0.25 s backoff
    ),
    Case(
        "429-always",
        text(102),
        "xato",
        3,
        "gave up after 3 attempts",
        [(Fault.retry_after(1), None)],
        min_gaps=[1.0, 1.0],
    ),
    Case(
        "500-once",
        text(103),
        "bajarildi",
        2,
        "telegram server error: internal server error",
        [(Fault.server_error(500), 1)],
        delivered=1,
        min_gaps=[BASE],
    ),
    Case(
        "503-always",
        text(104),
        "xato",
        3,
        "service unavailable",
        [(Fault.server_error(503), None)],
        min_gaps=[BASE, 2 * BASE],
    ),
    Case(
        "502-html-once",
        text(105),
        "bajarildi",
        2,
        "bad gateway (502)",
        [(Fault.bad_gateway_html(), 1)],
        delivered=1,
        min_gaps=[BASE],
    ),
    Case(
        "dropped-before-delivery",
        text(106),
        "bajarildi",
        2,
        "may have been delivered",
        [(Fault.drop(), 1)],
        delivered=1,
        min_gaps=[BASE],
    ),
    # The documented duplicate: Telegram got the message but the answer never came.
    Case(
        "dropped-after-delivery",
        text(107),
        "bajarildi",
        2,
        "may have been delivered",
        [(Fault.drop(delivered=True), 1)],
        delivered=2,
        min_gaps=[BASE],
    ),
    Case("slow", text(108), "bajarildi", 1, None, [(Fault.slow(0.5), 1)], delivered=1),
    Case(
        "blocked",
        text(109),
        "xato",
        1,
        "(403): forbidden: bot was blocked by the user",
        [(Fault.forbidden(), None)],
    ),
    Case(
        "deactivated",
        text(110),
        "xato",
        1,
        "user is deactivated",
        [(Fault.forbidden("user is deactivated"), None)],
    ),
    Case(
        "kicked",
        text(-111),
        "xato",
        1,
        "bot was kicked from the group chat",
        [(Fault.forbidden("bot was kicked from the group chat"), None)],
    ),
    Case(
        "chat-not-found",
        text(112),
        "xato",
        1,
        "(400): chat not found",
        [(Fault.bad_request("chat not found"), None)],
    ),
    Case(
        "too-long",
        text(113),
        "xato",
        1,
        "message is too long",
        [(Fault.bad_request("message is too long"), None)],
    ),
    # No script: the fake checks the HTML itself, as Telegram does.
    Case(
        "bad-html",
        {"chat_id": 114, "text": "<b>qalin", "parse_mode": "HTML"},
        "xato",
        1,
        "can't parse entities",
    ),
    Case(
        "migrated",
        text(-115),
        "bajarildi",
        1,
        None,
        [(Fault.migrate(-100_115), 1)],
    ),
    Case(
        "no-chat-id",
        {"text": "kimga?"},
        "xato",
        1,
        "malformed payload: chat_id",
        reaches_telegram=False,
    ),
    Case(
        "empty-text",
        {"chat_id": 117, "text": "  "},
        "xato",
        1,
        "malformed payload: text",
        reaches_telegram=False,
    ),
    Case(
        "plain-too-long",
        {"chat_id": 118, "text": "x" * 4097},
        "xato",
        1,
        "telegram allows 4096",
        reaches_telegram=False,
    ),
]


def test_each_fault_ends_in_the_state_the_policy_table_says(
    engine: sa.Engine, fake_telegram: FakeTelegram, relays: Relays
) -> None:
    for case in CASES:
        for fault, times in case.faults:
            fake_telegram.script(case.payload.get("chat_id"), fault, times=times)
    with engine.begin() as conn:
        for case in CASES:
            insert_raw(conn, case.key, case.payload)
    relay = relays.start(OUTBOX_BACKOFF_BASE=f"{BASE}s")
    wait_until(
        lambda: all_terminal(engine, len(CASES)), 30, "every row to end", explain=relays.describe
    )
    assert relay.stop() == 0, relay.describe()

    for case in CASES:
        found = row(engine, case.key)
        where = f"{case.key}: {found}"
        assert (found["holat"], found["urinish"]) == (case.holat, case.urinish), where
        if case.error is None:
            assert found["oxirgi_xato"] is None, where
        else:
            assert case.error in found["oxirgi_xato"].lower(), where
            assert len(found["oxirgi_xato"]) < 200, where  # a sentence, not a page of HTML
        chat = case.payload.get("chat_id")
        if not isinstance(chat, int):
            continue
        arrivals = [at for at, _ in sends_to(fake_telegram, chat)]
        # One request per attempt (a migration resends within its attempt).
        assert len(arrivals) == (case.urinish if case.reaches_telegram else 0), where
        if case.key != "migrated":
            assert len(fake_telegram.delivered_to(chat)) == case.delivered, where
        for gap, least in zip(gaps(arrivals), case.min_gaps, strict=True):
            assert gap >= least - EPS, f"{where}: attempt {gap:.3f} s after the last one"
        if case.holat == "bajarildi":
            assert found["marker_message"] is not None, where

    # The group became a supergroup: the same message went to the new id, once, and the row
    # now names the new chat.
    migrated = row(engine, "migrated")
    assert [s for _, s in sends_to(fake_telegram, -115)] == [400]
    assert [d.text for d in fake_telegram.delivered_to(-100_115)] == ["eslatma -115"]
    assert migrated["payload"]["chat_id"] == migrated["marker_chat"] == -100_115


@pytest.mark.slow
def test_default_schedule_waits_two_then_four_seconds_then_gives_up(
    engine: sa.Engine, fake_telegram: FakeTelegram, relays: Relays
) -> None:
    chat = 200
    fake_telegram.script(chat, Fault.server_error(500), times=None)
    with engine.begin() as conn:
        enqueue(conn, key="schedule", payload=text(chat))
    relay = relays.start()  # the defaults: 3 attempts, base 2 s, 30 s poll fallback
    wait_until(
        lambda: row(engine, "schedule")["holat"] == "xato", 20, "xato", explain=relays.describe
    )
    assert relay.stop() == 0, relay.describe()

    sends = sends_to(fake_telegram, chat)
    assert [status for _, status in sends] == [500, 500, 500]
    first, second = gaps([at for at, _ in sends])
    assert first >= 2.0 - EPS
    assert second >= 4.0 - EPS
    # Woken by the timer to the row's keyingi_urinish, not by the 30 s poll.
    assert first < 2.0 + 5 and second < 4.0 + 5, (first, second)
    found = row(engine, "schedule")
    assert found["urinish"] == 3
    assert found["oxirgi_xato"].endswith("(gave up after 3 attempts)")
    assert [entry["urinish"] for entry in found["tarix"]] == [1, 2, 3]


def test_flood_control_pauses_every_send_of_the_bot(
    engine: sa.Engine, fake_telegram: FakeTelegram, relays: Relays
) -> None:
    flooded, others = 300, [301, 302, 303]
    fake_telegram.script(flooded, Fault.retry_after(2), times=1)
    with engine.begin() as conn:
        enqueue(conn, key="flooded", payload=text(flooded))
    relay = relays.start(OUTBOX_BACKOFF_BASE=f"{BASE}s")
    wait_until(lambda: sends_to(fake_telegram, flooded), 20, "the 429", explain=relays.describe)
    flooded_at = sends_to(fake_telegram, flooded)[0][0]
    # Messages to other chats, enqueued while the bot is paused, wait for the pause too.
    with engine.begin() as conn:
        for chat in others:
            enqueue(conn, key=f"other-{chat}", payload=text(chat))
    # Nor are they claimed meanwhile: a pause can outlast the lease, and a claim held through
    # it could be reaped and sent by another relay while this one still means to send it.
    # Looked at throughout most of the pause, once the 429 is written down.
    wait_until(lambda: states(engine)["kutmoqda"] == 4, 20, "the 429 written down")
    while time.monotonic() < flooded_at + 1.5:
        assert sends_to(fake_telegram, others[0]) == []
        assert states(engine) == {"kutmoqda": 4, "bajarilmoqda": 0, "bajarildi": 0, "xato": 0}
        time.sleep(0.05)
    wait_until(lambda: all_terminal(engine, 4), 20, "every row to end", explain=relays.describe)
    assert relay.stop() == 0, relay.describe()

    assert [s for _, s in sends_to(fake_telegram, flooded)] == [429, 200]
    for chat in [flooded, *others]:
        last_at, status = sends_to(fake_telegram, chat)[-1]
        assert status == 200
        assert last_at >= flooded_at + 2.0, f"chat {chat} was sent to during the pause"
    assert row(engine, "flooded")["urinish"] == 2
    # Waiting out the pause is not an attempt.
    assert [row(engine, f"other-{c}")["urinish"] for c in others] == [1, 1, 1]


def test_flood_control_pauses_every_relay_of_the_bot(
    engine: sa.Engine, fake_telegram: FakeTelegram, relays: Relays
) -> None:
    flooded, others = 310, list(range(311, 331))
    fake_telegram.script(flooded, Fault.retry_after(3), times=1)
    started = [relays.start(OUTBOX_BACKOFF_BASE=f"{BASE}s") for _ in range(2)]
    wait_until(
        lambda: all("listen connection to the database is up" in r.stderr for r in started),
        20,
        "both relays listening",
        explain=relays.describe,
    )
    with engine.begin() as conn:
        enqueue(conn, key="flooded", payload=text(flooded))
    wait_until(lambda: sends_to(fake_telegram, flooded), 20, "the 429", explain=relays.describe)
    flooded_at = sends_to(fake_telegram, flooded)[0][0]
    # The relay that got the 429 writes the pause to the queue's state with its next write.
    wait_until(lambda: row(engine, "flooded")["holat"] == "kutmoqda", 20, "the 429 written down")
    wait_until(
        lambda: any("flood control: the bot must wait" in r.stderr for r in started),
        20,
        "the other relay to hear of the pause",
        explain=relays.describe,
    )
    with engine.begin() as conn:
        for chat in others:
            enqueue(conn, key=f"other-{chat}", payload=text(chat))
    wait_until(lambda: all_terminal(engine, 1 + len(others)), 20, "every row to end")
    for relay in started:
        assert relay.stop() == 0, relays.describe()

    for chat in [flooded, *others]:
        last_at, status = sends_to(fake_telegram, chat)[-1]
        assert status == 200
        assert last_at >= flooded_at + 3.0, f"chat {chat} was sent to during the pause"
    told = [r for r in started if "flood control: the bot must wait" in r.stderr]
    assert len(told) == 1, relays.describe()


def test_rejected_token_stops_the_relay_and_releases_its_claims(
    engine: sa.Engine, fake_telegram: FakeTelegram, relays: Relays
) -> None:
    fake_telegram.script(None, Fault.unauthorized(), times=None)  # every sendMessage: 401
    with engine.begin() as conn:
        for chat in range(400, 410):
            enqueue(conn, key=f"t{chat}", payload=text(chat))
    relay = relays.start()
    assert relay.wait(20) == 6, relay.describe()

    # One clear line last, no traceback.
    last_line = relay.stderr.strip().splitlines()[-1]
    assert last_line.startswith("outbox: Telegram rejected the bot token"), relay.describe()
    assert "Traceback" not in relay.stderr
    assert sends_to(fake_telegram, 400) != [], "the relay did not try"
    with engine.begin() as conn:
        rows = conn.exec_driver_sql(
            "SELECT holat, urinish, keyingi_urinish <= now() FROM outbox"
        ).all()
    # Not the messages' fault: back in the queue, due now, no attempt spent.
    assert rows == [("kutmoqda", 0, True)] * 10


def test_a_second_rejected_send_does_not_cut_the_sends_in_flight_short(
    engine: sa.Engine, fake_telegram: FakeTelegram, relays: Relays
) -> None:
    """Each rejected send stops the relay; the second one used to count as an operator's
    second signal, cutting off the sends still in flight as maybe delivered (an attempt
    spent): what made the test above fail on a busy machine, where the 401s came apart."""
    fake_telegram.script(420, Fault.unauthorized())
    fake_telegram.script(421, Fault.unauthorized())
    fake_telegram.script(422, Fault.unauthorized().after(1.0))  # still in flight meanwhile
    with engine.begin() as conn:
        for chat in (420, 421, 422):
            enqueue(conn, key=f"t{chat}", payload=text(chat))
    relay = relays.start()
    assert relay.wait(30) == 6, relay.describe()
    assert [s for _, s in sends_to(fake_telegram, 422)] == [401], relay.describe()
    with engine.begin() as conn:
        rows = conn.exec_driver_sql("SELECT kalit, holat, urinish FROM outbox ORDER BY 1").all()
    assert rows == [(f"t{c}", "kutmoqda", 0) for c in (420, 421, 422)], relay.describe()
    assert "may have been delivered" not in relay.stderr, relay.describe()


def test_a_proxys_502_page_costs_one_log_line_per_failure(
    engine: sa.Engine, fake_telegram: FakeTelegram, relays: Relays
) -> None:
    """python-telegram-bot logs the page it cannot read as JSON, with a traceback, on every
    such answer (15 lines each, before): the relay's own line says it all."""
    fake_telegram.script(430, Fault.bad_gateway_html(), times=2)
    with engine.begin() as conn:
        enqueue(conn, key="behind-a-proxy", payload=text(430))
    relay = relays.start(OUTBOX_BACKOFF_BASE=f"{BASE}s")
    wait_until(
        lambda: row(engine, "behind-a-proxy")["holat"] == "bajarildi",
        30,
        "the message delivered after two 502s",
        explain=relay.describe,
    )
    assert relay.stop() == 0, relay.describe()
    log = relay.stderr
    failures = [line for line in log.splitlines() if "Bad Gateway (502)" in line]
    assert len(failures) == 2, log
    assert "Traceback" not in log and "<html>" not in log and "JSON data" not in log, log
    assert TEST_TOKEN.split(":")[1] not in log


def test_shutdown_finishes_sends_within_the_grace_and_hands_the_rest_back(
    engine: sa.Engine, fake_telegram: FakeTelegram, relays: Relays
) -> None:
    fake_telegram.script(500, Fault.slow(1.0))  # finishes inside the grace period
    fake_telegram.script(501, Fault.slow(30.0))  # does not: cut off when the grace runs out
    waiting_chats = range(502, 508)
    with engine.begin() as conn:
        for chat in (500, 501, *waiting_chats):
            enqueue(conn, key=f"g{chat}", payload=text(chat))
    # One message a second, reserved up to 30 s ahead: the second messages below are claimed
    # at once and wait for their send slots.
    relay = relays.start(OUTBOX_RATE_LIMIT="1", OUTBOX_SLOT_HORIZON="30s", OUTBOX_GRACE="2s")
    wait_until(
        lambda: (
            all(sends_to(fake_telegram, chat) for chat in (500, 501))
            and all(row(engine, f"g{chat}")["holat"] == "bajarildi" for chat in waiting_chats)
        ),
        20,
        "the slow sends and one message to each other chat",
        explain=relays.describe,
    )
    # A second message to each of those chats is claimed and waits for its send slot.
    with engine.begin() as conn:
        for chat in waiting_chats:
            enqueue(conn, key=f"g{chat}-again", payload=text(chat))
    wait_until(
        lambda: all(
            row(engine, f"g{chat}-again")["holat"] == "bajarilmoqda" for chat in waiting_chats
        ),
        20,
        "claims",
        explain=relays.describe,
    )
    assert relay.stop(timeout=10) == 0, relay.describe()

    finished = row(engine, "g500")
    assert (finished["holat"], finished["urinish"]) == ("bajarildi", 1)
    cut_off = row(engine, "g501")
    assert (cut_off["holat"], cut_off["urinish"]) == ("kutmoqda", 1)
    assert "may have been delivered" in cut_off["oxirgi_xato"]
    # Nothing is left for the reaper: the rows never sent are back in the queue untouched.
    assert states(engine)["bajarilmoqda"] == 0
    for chat in waiting_chats:
        left = row(engine, f"g{chat}-again")
        assert (left["holat"], left["urinish"]) == ("kutmoqda", 0), left
        assert len(sends_to(fake_telegram, chat)) == 1
    assert "6 released" in relay.stdout, relay.stdout


def test_telegram_unreachable_pauses_the_bot_without_spending_attempts_then_delivers(
    engine: sa.Engine, relays: Relays
) -> None:
    first = FakeTelegram(token=TEST_TOKEN).start_in_thread()
    port = first.port
    relay = relays.start(OUTBOX_TELEGRAM_API_URL=first.api_url, OUTBOX_BACKOFF_BASE="1s")
    wait_until(
        lambda: [r for r in first.requests if r.method == "getMe"],
        20,
        "getMe",
        explain=relays.describe,
    )
    first.stop_thread()  # connection refused from now on
    with engine.begin() as conn:
        enqueue(conn, key="down", payload=text(600))
    wait_until(
        lambda: "cannot reach Telegram for bot" in relay.stderr,
        20,
        "the bot's pause",
        explain=relays.describe,
    )
    # The try could not connect: the row is back in the queue, no attempt spent, no failure.
    wait_until(lambda: row(engine, "down")["holat"] == "kutmoqda", 20, "the row handed back")
    assert (row(engine, "down")["urinish"], row(engine, "down")["oxirgi_xato"]) == (0, None)
    second = FakeTelegram(token=TEST_TOKEN).start_in_thread(port=port)
    try:
        wait_until(
            lambda: row(engine, "down")["holat"] == "bajarildi",
            20,
            "delivery",
            explain=relays.describe,
        )
        assert relay.stop() == 0, relay.describe()
    finally:
        second.stop_thread()
    assert row(engine, "down")["urinish"] == 1
    assert [d.chat_id for d in second.delivered] == [600]
    assert relay.stderr.count("cannot reach Telegram for bot") == 1, relay.stderr
    assert "Telegram answers again for bot" in relay.stderr, relay.stderr


def test_default_rate_limits_stay_under_telegrams(
    engine: sa.Engine, fake_telegram: FakeTelegram, relays: Relays
) -> None:
    """Paced on purpose: a fake enforcing Telegram's 30 messages/s answers no 429."""
    fake_telegram.enforce_limits = True
    n = 75
    with engine.begin() as conn:
        for chat in range(900, 900 + n):
            enqueue(conn, key=f"r{chat}", payload=text(chat))
    # The documented defaults: 29 messages/s per bot, 1/s per chat, 20/min per group.
    relay = relays.start(
        OUTBOX_RATE_LIMIT="", OUTBOX_CHAT_RATE_LIMIT="", OUTBOX_GROUP_RATE_LIMIT=""
    )
    wait_until(lambda: all_terminal(engine, n), 30, "the drain", explain=relays.describe)
    assert relay.stop() == 0, relay.describe()
    assert fake_telegram.rejected_429 == 0
    assert states(engine)["bajarildi"] == n
    arrivals = sorted(r.at for r in fake_telegram.requests if r.method == "sendMessage")
    assert arrivals[-1] - arrivals[0] >= (n - 30) / 30, "faster than Telegram allows"


def test_poll_only_relay_finds_new_rows_without_listen(
    engine: sa.Engine, fake_telegram: FakeTelegram, relays: Relays
) -> None:
    relay = relays.start("--poll-only", "--poll-interval", "0.3s")
    wait_until(lambda: "claim connection" in relay.stderr, 20, "the relay", explain=relays.describe)
    with engine.begin() as conn:
        enqueue(conn, key="polled", payload=text(950))
    wait_until(
        lambda: row(engine, "polled")["holat"] == "bajarildi",
        10,
        "delivery",
        explain=relays.describe,
    )
    assert relay.stop() == 0, relay.describe()
    assert "listen connection" not in relay.stderr  # behind PgBouncer LISTEN does not work
