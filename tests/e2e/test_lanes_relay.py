"""Lanes through a real ``outbox relay`` process: a claimed row whose expiry comes while it
waits for its send slot is failed by the relay, never sent late."""

from __future__ import annotations

from datetime import datetime, timedelta
from pathlib import Path

import sqlalchemy as sa

from outbox import enqueue
from outbox.states import State
from outbox_testing.fake_telegram import FakeTelegram
from tests.support import Relays, relay_env, row, text, wait_until

FIRST_CHAT = 910_000


def _now(engine: sa.Engine) -> datetime:
    with engine.connect() as conn:
        now: datetime = conn.execute(sa.text("SELECT now()")).scalar_one()
    return now


def test_a_row_that_expires_while_it_waits_for_its_slot_is_failed_by_the_relay(
    engine: sa.Engine, db_url: str, fake_telegram: FakeTelegram, tmp_path: Path
) -> None:
    # One message every 2 s, reserved up to 20 s ahead: one claim takes the six rows, the
    # last with a slot some 10 s away; it expires after 5 s, while the relay holds it.
    env = relay_env(
        db_url,
        fake_telegram.api_url,
        OUTBOX_RATE_LIMIT="0.5",
        OUTBOX_SLOT_HORIZON="20s",
    )
    relays = Relays(env, tmp_path)
    with relays.running():
        relay = relays.start()
        with engine.begin() as conn:
            enqueue(conn, key="warm-up", payload=text(FIRST_CHAT - 1))
        wait_until(lambda: fake_telegram.delivered, 60, "the relay up", explain=relay.describe)
        now = _now(engine) + timedelta(seconds=2)  # past the warm-up's slot
        with engine.begin() as conn:
            for n in range(5):
                enqueue(conn, key=f"on-time-{n}", payload=text(FIRST_CHAT + n))
            enqueue(
                conn,
                key="late",
                payload=text(FIRST_CHAT + 99),
                expires_at=now + timedelta(seconds=5),
            )
        wait_until(
            lambda: row(engine, "late", plain=True)["holat"] == State.FAILED,
            60,
            "the late row failed",
            explain=relay.describe,
        )
        wait_until(
            lambda: len(fake_telegram.delivered) >= 6, 60, "the others sent", explain=relay.describe
        )
    with engine.connect() as conn:
        code, attempts = conn.execute(
            sa.text("SELECT xato_turi, urinish FROM outbox WHERE kalit = 'late'")
        ).one()
    assert code == "expired"
    # Claimed (one attempt) and then failed by the relay, not by a later claim.
    assert attempts == 1
    assert FIRST_CHAT + 99 not in {d.chat_id for d in fake_telegram.delivered}
