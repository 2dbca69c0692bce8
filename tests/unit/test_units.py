"""Unit tests of small pure pieces: durations, rate limits, redaction, payloads, config, and
the relay's claim sizing and flood control."""

from __future__ import annotations

import asyncio
import logging
import sys
from datetime import UTC, datetime, timedelta
from pathlib import Path
from types import SimpleNamespace
from typing import Any, cast

import pytest
import sqlalchemy as sa
from psycopg.conninfo import conninfo_to_dict

from outbox import queries
from outbox.classify import MalformedPayload
from outbox.config import RelayConfig, read_token, telegram_api_url
from outbox.db import normalize_url, redact_url, sqlalchemy_url, with_database
from outbox.durations import format_duration, parse_duration
from outbox.errors import ConfigError, InvalidInput
from outbox.ops.views.relays import relays_table
from outbox.queries import RelayRecord
from outbox.ratelimit import RateLimits
from outbox.redact import RedactingFormatter, redact, register_secret
from outbox.relay import RunSummary
from outbox.relay.claimer import Claimer, ClaimPlan, LaneClaim
from outbox.relay.completer import Completer
from outbox.relay.flood import FloodControl
from outbox.relay.lanes import Lanes, LaneState
from outbox.relay.store import Store
from outbox.states import State
from outbox.telegram import NullSender, SentMessage, send_message_args
from tests.support import UNLIMITED, send_pool


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


def test_the_claims_chat_spacing_keeps_a_margin_and_a_sends_lateness() -> None:
    # Requests travel unevenly: spaced exactly 1 s (3 s) apart they may arrive closer than
    # Telegram's window allows, so the default spacing is a little longer; and a send may go
    # up to LATE_FOR_SLOT after its moment, so the claim spaces a chat's moments that much more.
    from outbox.relay.claimer import fleet_limits
    from outbox.relay.send_pool import LATE_FOR_SLOT

    limits = fleet_limits(RateLimits(), horizon=1.0)
    assert limits.chat_gap == pytest.approx(1.05 + LATE_FOR_SLOT)
    assert limits.group_gap == pytest.approx(3.05 + LATE_FOR_SLOT)
    off = fleet_limits(RateLimits(per_chat=0, per_group_per_minute=0), horizon=1.0)
    assert (off.chat_gap, off.group_gap) == (0.0, 0.0)


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
    for bad in ("mysql://h/db", "postgresql://h:notaport/db", "postgresql://a:1,b:x/db"):
        with pytest.raises(ConfigError):
            normalize_url(bad)


@pytest.mark.parametrize(
    ("url", "for_sqlalchemy"),
    [
        ("postgresql://u:pw@/db?host=a,b&port=5432,5433&target_session_attrs=read-write",
         "postgresql+psycopg://u:pw@/db?host=a,b&port=5432,5433&target_session_attrs=read-write"),
        ("postgresql://u:pw@a:5432,b:5433/db?target_session_attrs=read-write",
         "postgresql+psycopg://u:pw@/db?host=a,b&port=5432,5433&target_session_attrs=read-write"),
        ("postgresql://a,[::1]:6/db", "postgresql+psycopg:///db?host=a,::1&port=,6"),
    ],
)  # fmt: skip
def test_a_url_naming_several_servers_reaches_libpq_and_sqlalchemy_alike(
    url: str, for_sqlalchemy: str
) -> None:
    assert normalize_url(url) == url
    assert with_database(url, "other") == url.replace("/db", "/other")
    assert sqlalchemy_url(url) == for_sqlalchemy
    # What the engine hands psycopg is what libpq reads in the URL itself.
    engine_url = sa.engine.make_url(for_sqlalchemy)
    _, given = sa.create_engine(engine_url).dialect.create_connect_args(engine_url)
    libpq = conninfo_to_dict(url)
    for name in ("host", "target_session_attrs", "password"):
        assert given.get(name) == libpq.get(name), name
    assert str(given.get("port", "")).strip(",") == str(libpq.get("port", "")).strip(",")
    assert "pw" not in redact_url(url)


def unwritten() -> tuple[Completer, RunSummary]:
    """An outcome writer that is never run: what it is given stays in ``unwritten``."""
    stopping, total = asyncio.Event(), RunSummary()
    store = Store("postgresql:///unused", "record", stopping)
    completer = Completer(
        store, schema="public", flush_interval=1.0, grace_seconds=0, stopping=stopping, total=total
    )
    return completer, total


def claimer(flood: FloodControl | None = None, **config: Any) -> LaneClaim:
    """A lane's claim for sizing questions only: it never reaches its database."""
    cfg = RelayConfig(database_url="postgresql:///unused", **config)
    return LaneClaim(
        Store(cfg.database_url, "claim", asyncio.Event()),
        cfg,
        flood=flood or FloodControl(schema="public"),
        total=RunSummary(),
        stopping=asyncio.Event(),
        takes_unnamed_rows=True,
    )


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
    flood = FloodControl(schema="public")
    sizing = claimer(flood, rate_limits=RateLimits(per_bot=2))
    cfg = RelayConfig(database_url="postgresql:///unused")
    # The bot's rate limit is kept by the claim statement itself, in the database.
    assert sizing.plan(0.0, in_flight=0, written=0).want == min(cfg.batch_size, cfg.concurrency)
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


def test_a_send_late_for_its_slot_keeps_the_bot_within_one_message_a_second() -> None:
    from outbox.relay.send_pool import LATE_FOR_SLOT, late_for_slot

    # Sends come at most one slot late: any second of the fleet holds per_bot + 1 at most.
    for rate in (28, 29):
        assert (1 + late_for_slot(rate)) * rate <= rate + 1 + 1e-9
    assert late_for_slot(2) == LATE_FOR_SLOT  # slow bots keep the usual allowance
    assert late_for_slot(0) == LATE_FOR_SLOT  # no per-bot limit


class Clocked(NullSender):
    """Takes every message at once, and keeps when."""

    def __init__(self) -> None:
        super().__init__()
        self.sent_at: list[float] = []

    async def send(self, args: Any) -> SentMessage:
        self.sent_at.append(asyncio.get_running_loop().time())
        return await super().send(args)


def _claimed(chat: int, *, wait: float = 0.0) -> queries.ClaimedRow:
    payload = {"chat_id": chat, "text": "x"}
    return queries.ClaimedRow(1, "eslatma", "k", payload, 1, False, datetime.now(UTC), wait)


def _one_row(
    limits: RateLimits, *, waited: float, paused: float = 0.0, wait: float = 0.0
) -> tuple[Clocked, list[queries.Outcome], RunSummary, float]:
    """One row through a send pool: it was claimed ``waited`` seconds ago with its moment
    ``wait`` after that, the bot paused for ``paused``; what was sent, what was recorded, the
    counts, and the loop time it started."""

    async def scenario() -> tuple[Clocked, list[queries.Outcome], RunSummary, float]:
        completer, total = unwritten()
        flood, sender = FloodControl(schema="public"), Clocked()
        pool = send_pool(sender, completer, total, limits=limits, flood=flood)
        now = asyncio.get_running_loop().time()
        if paused:
            flood.flooded(paused, now)
        await pool.process(_claimed(2, wait=wait), now - waited)
        return sender, list(completer._pending), total, now

    return asyncio.run(scenario())


def test_a_row_late_for_the_moment_its_claim_reserved_goes_back_instead_of_crowding_its_chat() -> (
    None
):
    """Its chat's next moment was reserved from this row's moment: sent a second late, it would
    go a second closer to the chat's next message than Telegram allows. Before: sent anyway
    (with the per-bot limit off, and for a claim's first slot, nothing checked the moment)."""
    spaced = RateLimits(per_bot=0)  # the chat limits on, the per-bot limit off
    sender, recorded, total, _ = _one_row(spaced, waited=1.0)  # a second for a send slot
    assert sender.sent_at == []
    # Back unsent, its attempt given back, keeping its time (and its place in line).
    assert [(o.state, o.delay_seconds, o.new_attempts) for o in recorded] == [
        (State.PENDING, None, 0)
    ]
    assert total.deferred == 1
    # On time, it goes; and with no limits at all no moment was reserved: it goes late too.
    assert len(_one_row(spaced, waited=0.0)[0].sent_at) == 1
    assert len(_one_row(UNLIMITED, waited=1.0)[0].sent_at) == 1


def test_a_row_waits_for_the_moment_its_claim_reserved() -> None:
    sender, recorded, _, started = _one_row(RateLimits(), waited=0.0, wait=0.2)
    assert sender.sent_at[0] >= started + 0.2  # never early
    assert [o.state for o in recorded] == [State.DONE]


def test_a_send_that_meets_flood_control_goes_back_until_the_pause_ends() -> None:
    """Before: it waited in memory for a pause of up to 1.5 s and went at its end, outside the
    spacing the claim had kept for its chat (counted from its moment, before the pause)."""
    sender, recorded, total, _ = _one_row(RateLimits(), waited=0.0, paused=1.0)
    assert sender.sent_at == []
    [back] = recorded
    assert (back.state, back.new_attempts) == (State.PENDING, 0)
    assert back.delay_seconds is not None and 0.5 < back.delay_seconds <= 1.0  # pause's end
    assert total.deferred == 1


def test_the_relays_table_names_a_few_bots_and_counts_many() -> None:
    def relay(pid: int, bots: tuple[str, ...], rejected: tuple[str, ...] = ()) -> RelayRecord:
        now = datetime.now(UTC)
        return RelayRecord(
            "ab12cd34",
            "host",
            pid,
            "1.0",
            ("default",),
            bots,
            rejected,
            now,
            now,
            5.0,
            0,
            {},
            alive=True,
            silent_seconds=1.0,
        )

    lines = relays_table(
        [
            relay(1, ("1001", "1002")),
            relay(2, tuple(str(1000 + n) for n in range(12)), ("1003",)),
            relay(3, ()),
        ]
    )
    assert lines[0].split()[:5] == ["host", "pid", "queues", "bots", "state"]
    assert " 1001,1002 " in lines[1]
    assert " 12 bots (1 rejected) " in lines[2]
    assert " - " in lines[3]


class _Lanes:
    """The lanes of a relay as a round of its claimer sees them."""

    def __init__(self, *lanes: SimpleNamespace) -> None:
        self.all = lanes
        self.in_flight = 0

    def serving(self) -> list[SimpleNamespace]:
        return [lane for lane in self.all if lane.state is LaneState.SERVING]


def _lane(bot: str, state: LaneState) -> SimpleNamespace:
    claim = SimpleNamespace(
        settle=lambda timing, deferred_until: None, held=False, takes_unnamed_rows=False
    )
    pool = SimpleNamespace(in_flight=0, deferred_until=0.0)
    return SimpleNamespace(
        bot=bot,
        state=state,
        claim=claim,
        pool=pool,
        serving=True,  # a lane the round visits serves until told otherwise
    )


def test_a_bot_that_starts_serving_during_a_round_is_looked_at_before_a_drain_ends() -> None:
    """A drain ended with a bot's rows pending (one CI run in ten on a busy machine): its getMe
    was answered while the round asked the database about the bots already serving, so the
    round never looked at it, and no bot was starting any more."""
    idle_bot, late_bot = _lane("1001", LaneState.SERVING), _lane("1002", LaneState.STARTING)
    lanes = _Lanes(idle_bot, late_bot)
    completer, _ = unwritten()
    claimer = Claimer(
        cast(Lanes, lanes),
        cast(Store, None),
        RelayConfig(database_url="postgresql:///unused"),
        completer=completer,
        stopping=asyncio.Event(),
        wakeup=asyncio.Event(),
    )
    asked: list[list[str]] = []

    async def timings(serving: list[Any]) -> dict[str, queries.QueueTiming] | None:
        asked.append([lane.bot for lane in serving])
        late_bot.state = LaneState.SERVING  # its getMe answered meanwhile
        return {}  # the idle bot has nothing pending

    claimer._timings = timings  # type: ignore[method-assign,assignment]
    again, _, _ = asyncio.run(claimer.round())
    assert asked == [["1001"]]
    assert again  # the next round, at once, looks at both
