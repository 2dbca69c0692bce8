"""Quiet hours with real processes: an ``outbox relay`` against the fake Bot API holds a bulk
message in its chat's quiet hours while the chat's other message and other chats' bulk
messages go; ``outbox show`` says why it waits; a change of the hours lets it go within
seconds."""

from __future__ import annotations

import json
import time as clock
from datetime import UTC, datetime, timedelta
from pathlib import Path

import sqlalchemy as sa

import outbox
from outbox import enqueue
from outbox.quiet import zone
from outbox_testing.fake_telegram import FakeTelegram
from tests.support import Relays, relay_env, run_module, text, wait_until

QUIET_CHAT, OTHER_CHAT = 9100, 9101
ZONE = "America/New_York"


def test_a_held_message_waits_and_a_change_of_the_hours_sends_it(
    engine: sa.Engine, db_url: str, fake_telegram: FakeTelegram, tmp_path: Path
) -> None:
    now = datetime.now(UTC).astimezone(zone(ZONE))
    start = (now - timedelta(hours=1)).time().replace(second=0, microsecond=0)
    end = (now + timedelta(hours=2)).time().replace(second=0, microsecond=0)
    with engine.begin() as conn:
        outbox.set_quiet_hours(conn, QUIET_CHAT, start=start, end=end, tz=ZONE)
        digest = enqueue(conn, key="digest", payload=text(QUIET_CHAT, 1), quiet_hours=True)
        enqueue(conn, key="asked", payload=text(QUIET_CHAT, 2))
        enqueue(conn, key="digest-other", payload=text(OTHER_CHAT, 1), quiet_hours=True)
    env = relay_env(db_url, fake_telegram.api_url)
    with Relays(env, tmp_path).running() as fleet:
        fleet.start()
        wait_until(lambda: fake_telegram.count() == 2, 30, "the two free messages",
                   explain=fleet.describe)  # fmt: skip
        assert [d.text for d in fake_telegram.delivered_to(QUIET_CHAT)] == [
            text(QUIET_CHAT, 2)["text"]
        ]
        shown = run_module("outbox", "show", str(digest.id), "--json", env=env)
        assert shown.returncode == 0, shown.stderr
        [hold] = json.loads(shown.stdout)["waits_for"]
        assert hold["reason"] == "quiet" and hold["detail"] == ZONE, hold
        assert (
            hold["text"].startswith("quiet hours until ") and f"{end:%H:%M} {ZONE})" in hold["text"]
        )
        clock.sleep(2)  # the relay claims on: the held message stays held
        assert fake_telegram.count() == 2
        # The person moves the hours to later: the message goes within seconds.
        later = (now + timedelta(hours=3)).time().replace(second=0, microsecond=0)
        with engine.begin() as conn:
            outbox.set_quiet_hours(conn, QUIET_CHAT, start=end, end=later, tz=ZONE)
        changed = clock.monotonic()
        wait_until(lambda: fake_telegram.count() == 3, 10, "the held message after the change",
                   explain=fleet.describe)  # fmt: skip
        assert clock.monotonic() - changed < 5
    assert [d.text for d in fake_telegram.delivered_to(QUIET_CHAT)] == [
        text(QUIET_CHAT, 2)["text"],
        text(QUIET_CHAT, 1)["text"],
    ]
