"""One bad row never stops the queue, and never takes good messages down with it.

Rows written by plain SQL beside good rows, through real relay processes and the fake Bot API:
the relay stays up, the bad row ends in a clear state, every good row goes out once. Most of
these rows are refused by the table since migration outbox_0002; the relay is tested without
those constraints too, since a table migrated earlier, or altered by hand, may hold them.

Here the e2e tier's tests (processes); the others are in ``tests/db/test_poison_rows.py``.
"""

from __future__ import annotations

import os
import signal
import subprocess
from collections import Counter
from dataclasses import dataclass

import pytest
import sqlalchemy as sa

from outbox_testing.fake_telegram import FakeTelegram
from tests.support import Relays, chats_of, enqueue_numbered, row, run_module, states, wait_until
from tests.support.bad_rows import DEEP, INSERT, drop_row_limits, execute

GOOD = 20
FIRST_CHAT = 1000

# A short lease, so that expired claims come back within the test; the relay refuses a lease
# that cannot cover a send (the Telegram timeout plus the shutdown grace). The timeout is 2 s,
# not less: a loaded machine can hold the in-process fake's answers back for a second, and a
# send that times out is sent again.
SHORT_LEASE = {"OUTBOX_LEASE": "3s", "OUTBOX_TELEGRAM_TIMEOUT": "2s", "OUTBOX_GRACE": "1s"}


def outbox_cli(db_url: str, *argv: str) -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("OUTBOX_")}
    env["OUTBOX_DATABASE_URL"] = db_url
    return run_module("outbox.cli", *argv, env=env)


@dataclass(frozen=True)
class BadRow:
    name: str
    sql: str  # written after the good rows; the bad row's kalit is 'bad'
    state: str  # where the bad row ends
    error: str | None  # a fragment of its oxirgi_xato
    sent: int  # how many times Telegram receives it


_GOOD_PAYLOAD = '{"chat_id": 7, "text": "yaxshi"}'

BAD_ROWS = [
    BadRow(
        "payload nested 1,000 levels deep",
        INSERT.format(payload='{"chat_id": 7, "text": "x", "deep": ' + DEEP + "}"),
        "xato",
        "payload is nested too deeply to decode",
        0,
    ),
    BadRow(
        "urinish at the integer's end",
        INSERT.format(payload=_GOOD_PAYLOAD)
        + "; UPDATE outbox SET urinish = 2147483647 WHERE kalit = 'bad'",
        "bajarildi",
        None,
        1,
    ),
    BadRow(
        "keyingi_urinish = infinity",
        INSERT.format(payload=_GOOD_PAYLOAD)
        + "; UPDATE outbox SET keyingi_urinish = 'infinity' WHERE kalit = 'bad'",
        "kutmoqda",  # never due: `outbox status` reports it (test below)
        None,
        0,
    ),
    BadRow(
        "keyingi_urinish = -infinity",
        INSERT.format(payload=_GOOD_PAYLOAD)
        + "; UPDATE outbox SET keyingi_urinish = '-infinity' WHERE kalit = 'bad'",
        "bajarildi",
        None,
        1,
    ),
    BadRow(
        "bajarilmoqda without band_vaqti",
        INSERT.format(payload=_GOOD_PAYLOAD)
        + "; UPDATE outbox SET holat = 'bajarilmoqda', urinish = 1 WHERE kalit = 'bad'",
        "bajarildi",  # reaped at once, then sent
        None,
        1,
    ),
    BadRow(
        "chat_id beyond bigint",
        INSERT.format(payload='{"chat_id": 9223372036854775899, "text": "katta"}'),
        "xato",
        "is not a Telegram chat id",
        0,
    ),
    BadRow(
        "parse_mode null with 5,000 characters",
        INSERT.format(payload='{"chat_id": 7, "parse_mode": null, "text": "' + "u" * 5000 + '"}'),
        "xato",
        "text is 5000 characters",
        0,
    ),
    BadRow(
        "chat_id 0",
        INSERT.format(payload='{"chat_id": 0, "text": "hech kim"}'),
        "xato",
        "chat_id 0 is not a Telegram chat id",
        0,
    ),
    BadRow(
        "payload a JSON string",
        INSERT.format(payload='"salom"'),
        "xato",
        "payload must be a JSON object",
        0,
    ),
]


@pytest.mark.parametrize("bad", BAD_ROWS, ids=[b.name for b in BAD_ROWS])
def test_a_bad_row_beside_good_rows(
    bad: BadRow, engine: sa.Engine, db_url: str, fake_telegram: FakeTelegram, relays: Relays
) -> None:
    drop_row_limits(engine)
    enqueue_numbered(engine, GOOD, first_chat=FIRST_CHAT)
    execute(engine, bad.sql)
    relay = relays.start(**SHORT_LEASE, OUTBOX_BATCH_SIZE="64")

    def settled() -> bool:
        good = states(engine)["bajarildi"] - (1 if bad.state == "bajarildi" else 0)
        return good == GOOD and row(engine, "bad", plain=True)["holat"] == bad.state

    wait_until(
        settled, 30, f"the good rows delivered and the bad row {bad.state}", explain=relay.describe
    )
    per_chat = Counter(d.chat_id for d in fake_telegram.delivered)
    timed_out = chats_of(engine, relays.timed_out())  # sent again: may have gone twice
    not_once = {
        chat: sent
        for chat in range(FIRST_CHAT, FIRST_CHAT + GOOD)
        if (sent := per_chat[chat]) != 1 and not (sent == 2 and chat in timed_out)
    }
    assert not not_once, not_once
    bad_sends = [
        r for r in fake_telegram.requests if r.chat_id is not None and r.chat_id < FIRST_CHAT
    ]
    assert len(bad_sends) == bad.sent
    found = row(engine, "bad", plain=True)
    if bad.error is not None:
        assert bad.error in found["oxirgi_xato"]
    # Idle now, with the bad row still there: the relay lives on, and a drain ends cleanly.
    assert relay.alive(), relay.describe()
    assert relay.stop() == 0, relay.describe()
    assert "Traceback" not in relay.stderr, relay.describe()
    drain = relays.start("--drain")
    assert drain.wait(30) == 0, drain.describe()
    shown = outbox_cli(db_url, "show", str(found["id"]))
    assert shown.returncode == 0 and "Traceback" not in shown.stderr, shown.stderr


# --- a row that kills its relay -----------------------------------------------------------------

POISON_CHAT = 666
MAX_ATTEMPTS = 3


def test_a_row_that_kills_every_relay_dies_alone_and_its_batch_is_delivered(
    engine: sa.Engine, fake_telegram: FakeTelegram, relays: Relays
) -> None:
    """The poison row (a fault injected here: the Bot API kills the relay process that sends to
    its chat) is claimed in one batch with nine good rows. The relay dies with all ten in hand;
    its successors find the row that does it, charge it alone, and deliver the other nine."""
    good = 9
    with engine.begin() as conn:
        for i in range(good + 1):
            chat = POISON_CHAT if i == 4 else FIRST_CHAT + i
            conn.exec_driver_sql(
                "INSERT INTO outbox (kalit, payload) VALUES "
                f"""('r{i}', '{{"chat_id": {chat}, "text": "xabar {i}"}}')"""
            )

    def kill_the_sender(chat_id: int) -> None:
        if chat_id == POISON_CHAT:
            for relay in relays.started:
                if relay.alive():
                    os.kill(relay.pid, signal.SIGKILL)

    fake_telegram.on_send = kill_the_sender
    # Answers come late, so that the first relay dies before it records any of its batch.
    fake_telegram.latency = 0.3
    settings = {
        **SHORT_LEASE,
        "OUTBOX_MAX_ATTEMPTS": str(MAX_ATTEMPTS),
        "OUTBOX_CONCURRENCY": "10",
        "OUTBOX_BATCH_SIZE": "10",
    }

    def settled() -> bool:
        if not any(r.alive() for r in relays.started):
            relays.start(**settings)  # the supervisor: a relay that dies is started again
        counts = states(engine)
        return counts["bajarildi"] + counts["xato"] == good + 1

    wait_until(settled, 90, "every row to be done or failed", explain=relays.describe)
    poison = row(engine, "r4", plain=True)
    assert poison["holat"] == "xato", relays.describe()
    assert "all attempts are used up" in poison["oxirgi_xato"]
    for i in (*range(4), *range(5, good + 1)):
        found = row(engine, f"r{i}", plain=True)
        assert found["holat"] == "bajarildi", (i, found, relays.describe())
        # The batch's death was not counted against it: one claim, the one that sent it.
        assert found["urinish"] == 1, (i, found)
    delivered = Counter(d.chat_id for d in fake_telegram.delivered)
    for i in (*range(4), *range(5, good + 1)):
        # Once, or twice when the first relay's request reached Telegram before it died.
        assert 1 <= delivered[FIRST_CHAT + i] <= 2
    poison_sends = [r for r in fake_telegram.requests if r.chat_id == POISON_CHAT]
    # Once in the batch, then alone until its attempts were used up.
    assert len(poison_sends) == 1 + MAX_ATTEMPTS
    survivor = relays.started[-1]
    assert survivor.alive(), relays.describe()
    assert survivor.stop() == 0, survivor.describe()
