"""Part 9: lanes under one bot's budget, against the fake Bot API enforcing Telegram's limits.

``outbox relay`` runs with its defaults (28/s, 1/s per chat). Three runs:

- a broadcast: 3,000 messages at priority 0 to as many chats, and meanwhile a person's reply
  every 2 s at the vazifalar bot's reply priority (what ``reminders bot`` enqueues for an
  update): each reply's time from its commit to the fake's acceptance (p50, p99), the
  broadcast's rate while it runs, and the share of requests answered 429;
- a peak: 1,500 reminders for one moment T, allowed 70 s early, and the same without windows:
  how late (p50, p95, last) and how early (the first) they arrive against T.
"""

from __future__ import annotations

import time
from datetime import UTC, datetime, timedelta

import sqlalchemy as sa

from bench.harness import FakeBotApi, Figure, Options, RelayProcess, Server, percentile
from outbox.api import enqueue
from outbox.db import create_engine
from reminders.service import REPLY_PRIORITY

CHAT_BASE = 8_000_000
PERSON = 7_999_999


def run(server: Server, options: Options) -> list[Figure]:
    return [
        *broadcast(server, options),
        *peak(server, options, early=True),
        *peak(server, options, early=False),
    ]


def _relay(url: str, fake: FakeBotApi, engine: sa.Engine) -> RelayProcess:
    relay = RelayProcess(url, fake.url)
    with engine.begin() as conn:
        enqueue(conn, key="warmup", payload={"chat_id": PERSON - 1, "text": "up?"})
    if not fake.wait_delivered(1, timeout=30.0):
        relay.close()
        raise RuntimeError("the relay did not start")
    time.sleep(1.1)  # the warm-up leaves the fake's windows
    fake.reset()
    return relay


def broadcast(server: Server, options: Options) -> list[Figure]:
    size = options.scale(3_000, 600)
    with server.database("lanes_broadcast") as url, FakeBotApi(enforce_limits=True) as fake:
        engine = create_engine(url)
        relay = _relay(url, fake, engine)
        try:
            began = time.time()
            with engine.begin() as conn:
                for n in range(size):
                    payload = {"chat_id": CHAT_BASE + n, "text": f"news #{n}"}
                    enqueue(conn, key=f"b{n}", payload=payload)
            sent_at: dict[str, float] = {}
            n = 0
            while fake.stats()["delivered"] < size + n and time.time() - began < size / 20:
                if time.time() - began >= 2.0 * (n + 1) and time.time() - began < size / 30:
                    n += 1
                    with engine.begin() as conn:
                        payload = {"chat_id": PERSON, "text": f"reply {n}"}
                        enqueue(conn, key=f"r{n}", payload=payload, priority=REPLY_PRIORITY)
                    sent_at[f"reply {n}"] = time.time()
                time.sleep(0.05)
            delivered = fake.delivered()
            stats = fake.stats()
        finally:
            log = relay.close()
            engine.dispose()
    replies = {d["text"]: d["wall"] for d in delivered if d["chat_id"] == PERSON}
    latency = [replies[t] - at for t, at in sent_at.items() if t in replies]
    bulk = sorted(d["wall"] for d in delivered if d["chat_id"] != PERSON)
    rate = (len(bulk) - 1) / (bulk[-1] - bulk[0]) if len(bulk) > 1 else 0.0
    share = stats["rejected_429"] / max(1, stats["requests"])
    options.say(
        f"lanes broadcast: {len(bulk)} of {size} sent at {rate:.1f}/s, replies {latency}, "
        f"{share:.2%} answered 429"
    )
    if "Traceback" in log:
        options.say(f"relay log:\n{log}")
    p50, p99 = percentile(latency, 50), percentile(latency, 99)
    lost = len(sent_at) - len(latency)
    return [
        Figure(
            "9",
            f"a reply during a broadcast of {size:,}, p50",
            p50,
            "s",
            target="< 1 s",
            met=p50 < 1.0 and not lost,
            note=f"{len(latency)} replies at priority {REPLY_PRIORITY}, one every 2 s"
            + (f"; {lost} never arrived" if lost else ""),
        ),
        Figure("9", "same, p99", p99, "s", target="<= 2 s", met=p99 <= 2.0 and not lost),
        Figure(
            "9", "the broadcast's rate meanwhile", rate, "msg/s", target=">= 26/s", met=rate >= 26
        ),
        Figure(
            "9",
            "requests answered 429 meanwhile",
            share * 100,
            "%",
            target="<= 1%",
            met=share <= 0.01,
            note=f"{stats['rejected_429']} of {stats['requests']:,}",
        ),
    ]


def peak(server: Server, options: Options, *, early: bool) -> list[Figure]:
    size = options.scale(1_500, 300)
    allowed = timedelta(seconds=70 if not options.quick else 15)
    lead = allowed + timedelta(seconds=5)
    with server.database("lanes_peak") as url, FakeBotApi(enforce_limits=True) as fake:
        engine = create_engine(url)
        relay = _relay(url, fake, engine)
        try:
            moment = datetime.now(UTC) + lead
            with engine.begin() as conn:
                for n in range(size):
                    payload = {"chat_id": CHAT_BASE + n, "text": f"09:00 #{n}"}
                    enqueue(
                        conn,
                        key=f"p{n}",
                        payload=payload,
                        run_at=moment,
                        early=allowed if early else None,
                    )
            deadline = time.time() + lead.total_seconds() + size / 20
            while fake.stats()["delivered"] < size and time.time() < deadline:
                time.sleep(0.2)
            delivered = fake.delivered()
        finally:
            relay.close()
            engine.dispose()
    t = moment.timestamp()
    offsets = sorted(d["wall"] - t for d in delivered)
    name = f"{size:,} due at T, allowed {allowed.seconds} s early" if early else "same, no windows"
    late = [max(0.0, o) for o in offsets]
    first = offsets[0] if offsets else float("nan")
    options.say(
        f"lanes peak ({'windows' if early else 'none'}): {len(offsets)} of {size}, first "
        f"{first:+.1f} s, p50 {percentile(late, 50):.1f}, last {offsets[-1]:+.1f} s against T"
    )
    return [
        Figure(
            "9",
            f"{name}: the last after T",
            offsets[-1] if offsets else float("nan"),
            "s",
            target="<= 1.5 s" if early else "",
            met=(offsets[-1] <= 1.5 and first >= -allowed.total_seconds()) if early else None,
            note=(
                f"p50 late {percentile(late, 50):.1f} s, p95 {percentile(late, 95):.1f} s; "
                f"the first {first:+.1f} s against T; {len(offsets)} of {size} arrived"
            ),
        )
    ]
