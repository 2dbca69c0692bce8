"""The paid lane's pure parts: each lane's slots from its own rate (plan_claim), the refusal's
classification and its retry decision (no attempt spent), the relay's option, the fake's paid
window and its scriptable refusal."""

from __future__ import annotations

import dataclasses

import pytest
from telegram import error as tg

from outbox.classify import FailureKind, classify
from outbox.config import RelayConfig
from outbox.errors import ConfigError
from outbox.ops.views.bots import bot_json, bot_state
from outbox.queries import BotFigures, TokenState
from outbox.queries.claim import (
    Candidate,
    ClaimLane,
    ClaimLimits,
    claim_lanes,
    lane_limits,
    plan_claim,
)
from outbox.ratelimit import RateLimits
from outbox.relay.claimer import fleet_limits
from outbox.retry import RetryPolicy, RowFacts, decide
from outbox.states import State
from outbox_testing.fake_telegram.limits import _Limiter

LIMITS = ClaimLimits(per_bot=28.0, chat_gap=1.1, group_gap=3.1, horizon=1.0, paid=400.0)


def walk(n: int, first_chat: int = 100) -> list[Candidate]:
    return [Candidate(i, "walk", 0, 0.0, False, str(first_chat + i), 1) for i in range(n)]


def test_with_a_paid_rate_the_free_lane_claims_first_then_the_paid_one() -> None:
    assert claim_lanes(LIMITS) == (ClaimLane.FREE, ClaimLane.PAID)
    assert claim_lanes(LIMITS._replace(paid=0.0)) == (ClaimLane.ALL,)


def test_each_lane_spaces_its_slots_at_its_own_rate() -> None:
    base = 1000.0
    free = plan_claim(walk(5), room=5, base=base, limits=lane_limits(LIMITS, ClaimLane.FREE))
    paid = plan_claim(walk(5), room=5, base=base, limits=lane_limits(LIMITS, ClaimLane.PAID))
    assert [b.send_at - base for b in free.bookings] == pytest.approx([i / 28 for i in range(5)])
    assert [b.send_at - base for b in paid.bookings] == pytest.approx([i / 400 for i in range(5)])
    assert free.next_slot == pytest.approx(base + 5 / 28)
    assert paid.next_slot == pytest.approx(base + 5 / 400)
    # Chat spacing is the bot's, on both lanes: a private chat is next free 1.1 s after its slot.
    assert [b.chat_free - b.send_at for b in paid.bookings if b.chat_free] == pytest.approx(
        [1.1] * 5
    )


def test_the_paid_lanes_room_and_one_message_per_chat_hold_as_the_free_ones() -> None:
    same_chat = [Candidate(50 + i, "walk", 0, i - 3.0, False, "42", 1) for i in range(3)]
    plan = plan_claim(
        same_chat + walk(10), room=4, base=0.0, limits=lane_limits(LIMITS, ClaimLane.PAID)
    )
    # Due order: chat 42's first row, then the others (one of chat 42 only), up to the room.
    assert [b.id for b in plan.bookings] == [50, 0, 1, 2]
    assert plan.next_slot == pytest.approx(4 / 400)


def test_the_relay_option_reaches_the_claim_limits() -> None:
    limits = fleet_limits(RateLimits(per_bot=28.0, paid_per_bot=400.0), 0.3)
    assert (limits.per_bot, limits.paid) == (28.0, 400.0)
    assert fleet_limits(RateLimits(), 0.3).paid == 0.0  # no paid lane by default
    with pytest.raises(ConfigError, match="paid-rate-limit must be between 0 and 1000"):
        RelayConfig(database_url="postgresql:///x", rate_limits=RateLimits(paid_per_bot=1001.0))


@pytest.mark.parametrize(
    "err",
    [
        tg.BadRequest("BALANCE_TOO_LOW"),
        tg.BadRequest("Not enough Stars on the bot's balance for paid broadcast"),
        tg.Forbidden("Forbidden: paid broadcasts need 10000 monthly active users"),
    ],
)
def test_a_refusal_for_the_stars_balance_or_audience_is_the_paid_lanes(err: Exception) -> None:
    failure = classify(err)
    assert failure.kind is FailureKind.PAID_REFUSED
    assert "paid broadcast" in failure.reason
    # Back unsent, keeping its place and its attempts: the lane's stop holds it.
    decision = decide(RetryPolicy(), 0.0, RowFacts(attempts=1), failure)
    assert (decision.state, decision.attempts, decision.delay_seconds) == (State.PENDING, 0, None)


@pytest.mark.parametrize(
    "err", [tg.BadRequest("chat not found"), tg.Forbidden("bot was blocked by the user")]
)
def test_other_refusals_are_not_the_paid_lanes(err: Exception) -> None:
    assert classify(err).kind is FailureKind.PERMANENT


def test_the_fake_counts_a_paid_send_against_its_own_1000_a_second() -> None:
    limiter = _Limiter()
    assert all(limiter.admit(-i, 0.0) == 0 for i in range(1, 31))
    assert limiter.admit(-31, 0.0) > 0  # the free 30/s are spent
    assert all(limiter.admit(i, 0.0, paid=True) == 0 for i in range(1, 1001))  # paid: its own
    assert limiter.admit(1001, 0.0, paid=True) > 0
    assert limiter.admit(1002, 1.0, paid=True) == 0  # a second on


def test_a_bot_whose_paid_lane_stopped_says_so() -> None:
    figures = BotFigures("7", 3, 0, 0, 0.0, 1, TokenState.SERVED, False, False, "BALANCE_TOO_LOW")
    assert bot_state(figures) == "paid lane stopped"
    assert bot_json(figures)["paid_stopped"] == "BALANCE_TOO_LOW"
    assert bot_state(dataclasses.replace(figures, paid_stopped=None)) == "serving"
