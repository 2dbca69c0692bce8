"""Pauses kept in the database: a paused queue, bot, kind or batch is claimed by no relay,
across restarts, and its rows go out once when it is resumed. Relays run in this process
against the fake Bot API; a drain ends when nothing unpaused is left, so "nothing sent while
paused" is what a finished drain shows, not a sleep.

Here the e2e tier's tests (processes); the others are in ``tests/db/test_pause.py``.
"""

from __future__ import annotations

import collections
from functools import partial

import pytest
import sqlalchemy as sa

from outbox import enqueue
from outbox.broadcast import enqueue_many
from outbox_testing.fake_telegram import FakeTelegram
from tests.support import (
    Relays,
    run_cli,
    text,
    wait_until,
)


def holat(engine: sa.Engine, where: str) -> collections.Counter[str]:
    with engine.begin() as conn:
        found = conn.exec_driver_sql(f"SELECT holat FROM outbox WHERE {where}").scalars()
        return collections.Counter(found)


def delivered_once(fake: FakeTelegram) -> collections.Counter[str]:
    texts = collections.Counter(d.text for d in fake.delivered)
    assert set(texts.values()) <= {1}, f"sent twice: {texts.most_common(3)}"
    return texts


def test_a_paused_batch_holds_across_a_killed_relay_and_goes_once_on_resume(
    engine: sa.Engine,
    db_url: str,
    fake_telegram: FakeTelegram,
    relays: Relays,
    capsys: pytest.CaptureFixture[str],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv("OUTBOX_DATABASE_URL", db_url)
    assert run_cli(capsys, "pause", "--batch", "campaign-7")[0] == 0
    with engine.begin() as conn:
        enqueue_many(conn, [(f"c{n}", text(800 + n)) for n in range(20)], batch="campaign-7")
    for attempt in range(2):  # a relay, then another after the first was killed
        relay = relays.start()
        with engine.begin() as conn:
            enqueue(conn, key=f"control{attempt}", payload=text(900 + attempt))
        wait_until(
            partial(
                lambda sent: holat(engine, "partiya IS NULL")["bajarildi"] == sent, attempt + 1
            ),
            30,
            "the control row",
            explain=relays.describe,
        )
        assert holat(engine, "partiya = 'campaign-7'") == {"kutmoqda": 20}
        if attempt == 0:
            relay.kill()
    assert run_cli(capsys, "resume", "--batch", "campaign-7")[0] == 0
    # Well within the relay's 30 s poll: the resume woke it.
    wait_until(
        lambda: holat(engine, "partiya = 'campaign-7'") == {"bajarildi": 20},
        20,
        "the resumed batch",
        explain=relays.describe,
    )
    assert relay.stop() == 0, relays.describe()
    assert len(delivered_once(fake_telegram)) == 22
