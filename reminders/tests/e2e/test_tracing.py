"""``/add`` to the reminder in Telegram is one trace: the bot's span for the update, and the
relay's spans for the reply and the reminder as its children (bot and relay processes, each
printing its spans with OpenTelemetry's console exporter)."""

from __future__ import annotations

from pathlib import Path

from outbox_testing.fake_telegram import FakeTelegram
from reminders.tests.support import Person, bot_processes
from tests.support import Relays, printed_spans, relay_env

# Console output, exported a tenth of a second after each span ends.
TRACING = {"OTEL_TRACES_EXPORTER": "console", "OTEL_BSP_SCHEDULE_DELAY": "100"}


def test_add_to_the_reminder_in_telegram_is_one_trace(
    db_url: str, fake_telegram: FakeTelegram, tmp_path: Path
) -> None:
    env = relay_env(db_url, fake_telegram.api_url, REMINDERS_POLL_TIMEOUT="1", **TRACING)
    aziza = Person(fake_telegram, 501)
    with Relays(env, tmp_path).running() as relays, bot_processes(env, tmp_path, fake_telegram):
        relay = relays.start()
        aziza.say("/start")
        assert "Qo'shildi" in aziza.say("/add Non 2s")
        aziza.wait_for_messages(3, timeout=30)  # the greeting, the reply, the reminder
        assert relay.stop() == 0
        bot_log = (tmp_path / "bot1.err").read_text()
    [add] = [s for s in printed_spans(bot_log) if s["name"] == "vazifalar /add"]
    sends = [
        s
        for s in printed_spans(relay.stdout)
        if s["context"]["trace_id"] == add["context"]["trace_id"]
    ]
    keys = sorted(str(s["attributes"]["outbox.key"]).split(":")[0] for s in sends)
    assert len(keys) == 2 and keys[0] != keys[1], keys  # the reply and the reminder
    assert all(s["parent_id"] == add["context"]["span_id"] for s in sends)
    assert all(s["attributes"]["outbox.outcome"] == "sent" for s in sends)
