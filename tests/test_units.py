"""Unit tests of small pure pieces: durations, rate limits, redaction, payloads, config, and
the relay's claim sizing and flood control."""

from __future__ import annotations

import asyncio
import logging
import sys
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest

from outbox.classify import MalformedPayload
from outbox.config import RelayConfig, read_token, telegram_api_url
from outbox.db import normalize_url, redact_url, with_database
from outbox.durations import format_duration, parse_duration
from outbox.errors import ConfigError, InvalidInput
from outbox.ratelimit import RateLimiter, RateLimits
from outbox.redact import RedactingFormatter, redact, register_secret
from outbox.relay import RunSummary
from outbox.relay.claimer import Claimer, ClaimPlan
from outbox.relay.flood import FloodControl
from outbox.relay.store import Store
from outbox.telegram import send_message_args


@pytest.mark.parametrize(
    ("text", "seconds"),
    [
        ("90", 90),
        ("30s", 30),
        ("5m", 300),
        ("1h30m", 5400),
        ("7d", 604800),
        ("100ms", 0.1),
        ("2w", 1209600),
        (" 1h 5m ", 3900),
    ],
)
def test_parse_duration(text: str, seconds: float) -> None:
    assert parse_duration(text) == timedelta(seconds=seconds)


@pytest.mark.parametrize("text", ["", "abc", "5x", "m5", "1h-5m", "-3", "1.5.2h"])
def test_parse_duration_rejects(text: str) -> None:
    with pytest.raises(InvalidInput):
        parse_duration(text)


def test_format_duration() -> None:
    shown = [format_duration(s) for s in (0, 5, 125, 5400, 90000)]
    assert shown == ["0s", "5s", "2m5s", "1h30m", "1d1h"]
    assert all(
        parse_duration(text).total_seconds() == s
        for text, s in zip(shown, (0, 5, 125, 5400, 90000), strict=True)
    )


def test_private_chat_gets_one_message_per_second_and_others_are_not_held() -> None:
    limiter = RateLimiter(RateLimits(per_bot=0, per_chat=1.0, chat_margin=0.0))
    assert limiter.reserve(1, now=100.0) == 0.0
    assert limiter.reserve(1, now=100.0) == pytest.approx(1.0)
    assert limiter.reserve(2, now=100.0) == 0.0  # another chat is not held back
    assert limiter.plan(1, now=100.5) == pytest.approx(1.5)


def test_messages_handed_back_for_one_chat_come_back_spaced() -> None:
    limiter = RateLimiter(RateLimits(per_bot=0, per_chat=1.0, chat_margin=0.0))
    limiter.reserve(1, now=0.0)
    limiter.reserve(1, now=0.0)  # chat 1 is booked until t=2
    backs = [limiter.defer(1, now=0.0) for _ in range(3)]
    assert backs == pytest.approx([2.0, 3.0, 4.0])


def test_groups_get_twenty_per_minute() -> None:
    limiter = RateLimiter(RateLimits(per_bot=0, per_group_per_minute=20, chat_margin=0.0))
    waits = [limiter.reserve(-100123, now=0.0) for _ in range(3)]
    assert waits == pytest.approx([0.0, 3.0, 6.0])


def test_chat_spacing_keeps_a_margin_by_default() -> None:
    # Requests travel unevenly: spaced exactly 1 s (3 s) apart they may arrive closer than
    # Telegram's window allows, so the default spacing is a little longer.
    limiter = RateLimiter(RateLimits(per_bot=0))
    assert [limiter.reserve(7, now=0.0) for _ in range(2)] == pytest.approx([0.0, 1.05])
    assert [limiter.reserve(-7, now=0.0) for _ in range(21)][-1] == pytest.approx(61.0)


def test_chat_limits_switched_off_hold_no_message_back() -> None:
    # The bot's budget is the claim's (in the database): the limiter ignores per_bot.
    free = RateLimiter(RateLimits(per_bot=10, per_chat=0, per_group_per_minute=0))
    assert [free.reserve(chat, now=0.0) for chat in range(5)] == [0.0] * 5


def test_flood_control_pauses_every_chat() -> None:
    limiter, flood = RateLimiter(RateLimits(per_bot=0, per_chat=0)), FloodControl(schema="public")
    flood.flooded(3.0, now=10.0)
    assert limiter.reserve(42, now=10.0, after=flood.resume_at) == pytest.approx(3.0)
    assert limiter.reserve(43, now=12.0, after=flood.resume_at) == pytest.approx(1.0)


def test_negative_limits_are_refused() -> None:
    with pytest.raises(ValueError, match="negative"):
        RateLimits(per_bot=-1)


def test_redact_removes_registered_and_token_shaped_secrets() -> None:
    register_secret("777:odd-secret")
    text = "GET https://api.telegram.org/bot123456:AAHdqTcvCH1vGWJxfSeofSAs0K5PALDsaw/sendMessage"
    assert "AAHdq" not in redact(text)
    assert redact("token 777:odd-secret here") == "token [token] here"


def test_formatter_redacts_tracebacks_too() -> None:
    formatter = RedactingFormatter("%(message)s")
    try:
        raise RuntimeError("bad 123456:AAHdqTcvCH1vGWJxfSeofSAs0K5PALDsaw")
    except RuntimeError:
        record = logging.LogRecord("x", logging.ERROR, "f", 1, "boom", None, sys.exc_info())
    assert "AAHdq" not in formatter.format(record)


def test_payload_contract() -> None:
    assert send_message_args({"chat_id": "42", "text": "hi", "parse_mode": "HTML"}) == {
        "chat_id": 42,
        "text": "hi",
        "parse_mode": "HTML",
    }
    assert send_message_args({"chat_id": "@kanal", "text": "x"})["chat_id"] == "@kanal"
    for bad in (
        {"text": "no chat"},
        {"chat_id": 1},
        {"chat_id": 1, "text": "   "},
        {"chat_id": True, "text": "x"},
        {"chat_id": "abc", "text": "x"},
        {"chat_id": 1, "text": "x" * 4097},
        {"chat_id": 1, "text": "x", "photo": "y"},
    ):
        with pytest.raises(MalformedPayload):
            send_message_args(bad)


def test_token_comes_from_env_or_file(tmp_path: Path) -> None:
    assert read_token({"TELEGRAM_BOT_TOKEN": " 1:abc "}) == "1:abc"
    path = tmp_path / "token"
    path.write_text("2:def\n")
    assert read_token({"TELEGRAM_BOT_TOKEN_FILE": str(path)}) == "2:def"
    with pytest.raises(ConfigError, match="no bot token"):
        read_token({})
    with pytest.raises(ConfigError, match="cannot read"):
        read_token({"TELEGRAM_BOT_TOKEN_FILE": str(tmp_path / "missing")})
    with pytest.raises(ConfigError, match="does not look like"):
        read_token({"TELEGRAM_BOT_TOKEN": "nocolon"})


def test_api_url_is_checked() -> None:
    assert telegram_api_url({}) == "https://api.telegram.org"
    assert telegram_api_url({"OUTBOX_TELEGRAM_API_URL": "http://127.0.0.1:8081"})
    with pytest.raises(ConfigError):
        telegram_api_url({"OUTBOX_TELEGRAM_API_URL": "ftp://x"})


def test_database_urls() -> None:
    assert normalize_url("postgres://u@h/db") == "postgresql://u@h/db"
    assert redact_url("postgresql://u:pw@h/db") == "postgresql://u:***@h/db"
    assert with_database("postgresql://u@h:5/a?x=1", "b") == "postgresql://u@h:5/b?x=1"
    assert normalize_url("postgresql:///db?host=/run/pg") == "postgresql:///db?host=/run/pg"
    assert with_database("postgresql:///a?host=/x", "b") == "postgresql:///b?host=/x"
    for bad in ("mysql://h/db", "postgresql://h:notaport/db"):
        with pytest.raises(ConfigError):
            normalize_url(bad)


def claimer(**config: Any) -> Claimer:
    """A claimer for sizing questions only: it never reaches its database."""
    cfg = RelayConfig(database_url="postgresql:///unused", **config)
    connection = Store(cfg.database_url, "claim", asyncio.Event())
    return Claimer(connection, cfg, total=RunSummary(), stopping=asyncio.Event())


def test_claim_ahead_follows_the_rate_sends_finish_at() -> None:
    sizing = claimer(claim_ahead=64)
    # Nothing measured yet: claim for free send slots only.
    assert sizing.claim_ahead(0.0, written=0) == 0
    # 100 sends finished in 0.1 s: 1,000/s, so a row claimed ahead starts within ~25 ms.
    assert sizing.claim_ahead(0.1, written=100) == 25
    # A window is measured once it is complete; until then the last rate holds.
    assert sizing.claim_ahead(0.15, written=10_100) == 25
    # Fast sends (a no-op sender, a local Bot API): the configured cap.
    assert sizing.claim_ahead(0.2, written=10_100) == 64
    # Sends stopped finishing (a slow or paused Bot API): claim nothing ahead.
    assert sizing.claim_ahead(0.5, written=10_100) == 0


def test_claims_fill_the_free_send_slots_and_no_more_than_a_batch() -> None:
    sizing = claimer(concurrency=8, batch_size=5, rate_limits=RateLimits(per_bot=0))
    assert sizing.plan(0.0, in_flight=0, written=0) == ClaimPlan(5, 30.0)
    assert sizing.plan(0.0, in_flight=6, written=0).want == 2
    # Every slot busy: claim nothing, wait for a send to finish (or the poll).
    assert sizing.plan(0.0, in_flight=8, written=0) == ClaimPlan(0, 30.0)


def test_claims_stop_during_flood_control() -> None:
    cfg = RelayConfig(database_url="postgresql:///unused", rate_limits=RateLimits(per_bot=2))
    flood = FloodControl(schema="public")
    sizing = Claimer(
        Store(cfg.database_url, "claim", asyncio.Event()),
        cfg,
        flood=flood,
        total=RunSummary(),
        stopping=asyncio.Event(),
    )
    # The bot's rate limit is kept by the claim statement itself, in the database.
    assert sizing.plan(0.0, in_flight=0, written=0).want == cfg.batch_size
    flood.flooded(3.0, now=0.0)
    assert sizing.plan(0.0, in_flight=4, written=0) == ClaimPlan(0, 3.0)


def test_a_pause_read_from_the_queue_state_is_taken_only_when_it_makes_sense() -> None:
    def paused_for(seconds: float) -> float:
        flood = FloodControl(schema="public")
        flood.read(seconds, now=100.0)
        return flood.paused_for(100.0)

    assert paused_for(3.0) == 3.0
    for garbled in (-5.0, 0.0, float("nan"), 1e9):
        assert paused_for(garbled) == 0.0, garbled


def test_telegrams_retry_after_is_capped() -> None:
    import telegram as tg

    from outbox.classify import MAX_FLOOD_PAUSE, classify

    assert classify(tg.error.RetryAfter(7)).retry_after == 7.0
    assert classify(tg.error.RetryAfter(10**9)).retry_after == MAX_FLOOD_PAUSE
    flood = FloodControl(schema="public")
    flood.flooded(10**9, now=0.0)
    assert flood.paused_for(0.0) == MAX_FLOOD_PAUSE


def test_a_booking_given_back_leaves_no_phantom_chat_spacing() -> None:
    # A message booked its turn, then flood control began: it gives the booking back and books
    # again after the pause. The chat spacing it held must be free again.
    limiter = RateLimiter(RateLimits(per_chat=1.0, chat_margin=0.0))
    limiter.reserve(1, now=0.0)  # chat 1 last sent at 0: next at 1.0
    booking = limiter.book(1, now=0.0)
    assert booking.start == pytest.approx(1.0)
    limiter.cancel(booking)
    # After the pause chat 1 goes at 1.0 (its own spacing), not at 2.0 behind its old booking.
    assert limiter.book(1, now=0.7, after=0.7).start == pytest.approx(1.0)  # paused 0.2-0.7


def test_a_send_that_meets_flood_control_books_again_after_the_pause_only() -> None:
    """Its first booking goes back: the message goes when the pause ends, not a whole chat
    interval later behind the booking it could not use."""
    from outbox import queries
    from outbox.relay.completer import Completer
    from outbox.relay.send_pool import SendPool
    from outbox.retry import RetryPolicy
    from outbox.telegram import NullSender, SentMessage

    class Clocked(NullSender):
        def __init__(self) -> None:
            super().__init__()
            self.sent_at: list[float] = []

        async def send(self, args: Any) -> SentMessage:
            self.sent_at.append(asyncio.get_running_loop().time())
            return await super().send(args)

    async def scenario() -> float:
        now = asyncio.get_running_loop().time()
        limiter = RateLimiter(RateLimits(per_bot=0, per_chat=1.0, chat_margin=0.0))
        limiter.reserve(2, now)  # chat 2 was just sent to: its next turn is in 1 s
        flood = FloodControl(schema="public")
        stopping, total, sender = asyncio.Event(), RunSummary(), Clocked()

        async def still_claimed(_row: queries.ClaimedRow) -> bool:
            return True

        pool = SendPool(
            sender,
            concurrency=1,
            max_chat_hold=1.5,
            per_bot=0,
            retry=RetryPolicy(),
            limiter=limiter,
            flood=flood,
            completer=Completer(
                Store("postgresql:///unused", "record", stopping),
                schema="public",
                flush_interval=0.02,
                grace_seconds=0.0,
                stopping=stopping,
                total=total,
            ),
            still_claimed=still_claimed,
            stopping=stopping,
            total=total,
            on_unauthorized=lambda _err: None,
        )
        payload = {"chat_id": 2, "text": "x"}
        row = queries.ClaimedRow(1, "eslatma", "k", payload, 1, False, datetime.now(UTC))
        sending = asyncio.create_task(pool.process(row, now))
        await asyncio.sleep(0.5)
        flood.flooded(0.7, asyncio.get_running_loop().time())  # until now + 1.2 s
        await sending
        return sender.sent_at[0] - now

    assert 1.15 < asyncio.run(scenario()) < 1.7  # the pause's end, not 2 s (1 s behind it)


def test_a_send_late_for_its_slot_keeps_the_bot_within_one_message_a_second() -> None:
    from outbox.relay.send_pool import LATE_FOR_SLOT, late_for_slot

    # Sends come at most one slot late: any second of the fleet holds per_bot + 1 at most.
    for rate in (28, 29):
        assert (1 + late_for_slot(rate)) * rate <= rate + 1 + 1e-9
    assert late_for_slot(2) == LATE_FOR_SLOT  # slow bots keep the usual allowance
    assert late_for_slot(0) == LATE_FOR_SLOT  # no per-bot limit
