"""Part 4: latency from the enqueue's commit to the request arriving at the fake Bot API.

The relay runs as ``outbox relay`` in a process of its own, with its default settings and the
per-bot limit off (``--rate-limit 0``: 100 messages/s is over Telegram's 30/s). This process
enqueues through ``outbox.enqueue``, one transaction per message at a steady 100 messages/s, and
notes the wall-clock time each commit returned; the fake notes when each message arrived. Both
run on this machine, so their clocks are the same clock. Then the same with ``--poll-only``
(LISTEN off, as behind PgBouncer), and reminders scheduled for moments in the future: how late
after its moment each one arrives. Last, through the distribution's PgBouncer in transaction
pooling (the app's enqueues and the relay's claims and writes): ``--poll-only``, and LISTEN on a
direct connection of its own (``--listen-database-url``).
"""

from __future__ import annotations

import time
from datetime import UTC, datetime, timedelta

from bench.harness import FakeBotApi, Figure, Options, RelayProcess, Server, percentile
from outbox.api import enqueue
from outbox.db import create_engine

RATE = 100.0  # messages per second
CHAT_BASE = 5_000_000


class _Enqueuer:
    """Enqueues one message per transaction and remembers when each commit returned."""

    def __init__(self, url: str) -> None:
        self._engine = create_engine(url)
        self.committed: dict[str, float] = {}

    def send(self, text: str, chat_id: int, run_at: datetime | None = None) -> None:
        with self._engine.begin() as conn:
            enqueue(conn, key=text, payload={"chat_id": chat_id, "text": text}, run_at=run_at)
        self.committed[text] = time.time()

    def close(self) -> None:
        self._engine.dispose()


def _wait_until(moment: float) -> None:
    delay = moment - time.perf_counter()
    if delay > 0:
        time.sleep(delay)


def _arrivals(fake: FakeBotApi) -> dict[str, float]:
    return {d["text"]: float(d["wall"]) for d in fake.delivered()}


def steady(
    url: str,
    fake: FakeBotApi,
    label: str,
    seconds: float,
    args: list[str],
    *,
    relay_url: str | None = None,
) -> list[float]:
    """Latencies in ms of ``seconds`` of messages at a steady 100/s, enqueued on ``url``; the
    relay reaches the database through ``relay_url`` (PgBouncer, say), else ``url``."""
    fake.reset()
    enqueuer = _Enqueuer(url)
    with RelayProcess(relay_url or url, fake.url, args) as relay:
        # The relay is up once a first message went through.
        enqueuer.send(f"{label}-warmup", CHAT_BASE)
        if not fake.wait_delivered(1, timeout=30.0) or not relay.alive():
            raise RuntimeError("the relay did not start")
        count = round(seconds * RATE)
        began = time.perf_counter()
        for n in range(1, count + 1):
            _wait_until(began + n / RATE)
            enqueuer.send(f"{label}-{n}", CHAT_BASE + n)
        fake.wait_delivered(count + 1, timeout=30.0)
    enqueuer.close()
    arrived = _arrivals(fake)
    missing = [text for text in enqueuer.committed if text not in arrived]
    if missing:
        raise RuntimeError(f"{len(missing)} messages never arrived, e.g. {missing[:3]}")
    return [
        (arrived[text] - committed) * 1000.0
        for text, committed in enqueuer.committed.items()
        if not text.endswith("warmup")
    ]


def scheduled(url: str, fake: FakeBotApi, count: int, spread: float) -> list[float]:
    """How late (ms) after their moment reminders scheduled 1 to 1 + ``spread`` s ahead arrive."""
    fake.reset()
    enqueuer = _Enqueuer(url)
    due: dict[str, float] = {}
    with RelayProcess(url, fake.url, ["--rate-limit", "0"]) as relay:
        enqueuer.send("scheduled-warmup", CHAT_BASE)
        if not fake.wait_delivered(1, timeout=30.0) or not relay.alive():
            raise RuntimeError("the relay did not start")
        start = datetime.now(UTC) + timedelta(seconds=1)
        # Moments spread at uneven steps, each its own reminder and chat.
        for n in range(count):
            moment = start + timedelta(seconds=spread * n / count, milliseconds=37 * (n % 7))
            text = f"scheduled-{n}"
            enqueuer.send(text, CHAT_BASE + 100_000 + n, run_at=moment)
            due[text] = moment.timestamp()
        fake.wait_delivered(count + 1, timeout=30.0)
    enqueuer.close()
    arrived = _arrivals(fake)
    missing = [text for text in due if text not in arrived]
    if missing:
        raise RuntimeError(f"{len(missing)} scheduled messages never arrived")
    early = [text for text in due if arrived[text] < due[text]]
    if early:
        raise RuntimeError(f"{len(early)} scheduled messages arrived before their moment")
    return [(arrived[text] - due[text]) * 1000.0 for text in due]


def run(server: Server, options: Options) -> list[Figure]:
    seconds = 3.0 if options.quick else 20.0
    figures: list[Figure] = []
    with FakeBotApi() as fake:
        with server.database("latency_notify") as url:
            notify = steady(url, fake, "notify", seconds, ["--rate-limit", "0"])
        with server.database("latency_poll") as url:
            poll = steady(url, fake, "poll", seconds / 2, ["--rate-limit", "0", "--poll-only"])
        with server.database("latency_scheduled") as url:
            late = scheduled(url, fake, *((10, 1.0) if options.quick else (50, 5.0)))
        bounced = _behind_pgbouncer(server, fake, seconds / 2, options)
    p50, p99 = percentile(notify, 50), percentile(notify, 99)
    options.say(f"latency with NOTIFY: p50 {p50:.1f} ms, p99 {p99:.1f} ms, max {max(notify):.1f}")
    options.say(f"latency, poll only: p50 {percentile(poll, 50):.0f} ms, max {max(poll):.0f} ms")
    options.say(f"scheduled: p50 {percentile(late, 50):.1f} ms late, max {max(late):.1f} ms")
    figures += [
        Figure(
            "4",
            "latency with LISTEN/NOTIFY, p50",
            p50,
            "ms",
            target="<= 10 ms",
            met=p50 <= 10,
            note=f"{len(notify):,} messages at {RATE:.0f}/s",
        ),
        Figure("4", "latency with LISTEN/NOTIFY, p99", p99, "ms", target="<= 50 ms", met=p99 <= 50),
        Figure(
            "4",
            "latency with --poll-only, p50",
            percentile(poll, 50),
            "ms",
            note=f"p99 {percentile(poll, 99):.0f} ms; polls every second",
        ),
        Figure(
            "4",
            "scheduled reminder, lateness after its moment, max",
            max(late),
            "ms",
            target="<= 100 ms",
            met=max(late) <= 100,
            note=f"{len(late)} reminders; p50 {percentile(late, 50):.1f} ms",
        ),
    ]
    return figures + bounced


def _behind_pgbouncer(
    server: Server, fake: FakeBotApi, seconds: float, options: Options
) -> list[Figure]:
    """The app and the relay through the distribution's PgBouncer (transaction pooling):
    ``--poll-only``, then LISTEN on a direct URL of its own (``--listen-database-url``)."""
    # The test suite's PgBouncer helpers: one way to run it, for the tests and the bench.
    from tests.support.pgbouncer import PgBouncer, pgbouncer_binary

    binary = pgbouncer_binary()
    if binary is None:
        options.say("latency behind PgBouncer: skipped, pgbouncer not installed")
        return []
    bouncer = PgBouncer(binary, server.url)
    try:
        # The app enqueues on the server itself (its commit is the moment measured from); the
        # relay's claims and writes go through PgBouncer.
        with server.database("latency_bouncer_poll") as url:
            args = ["--rate-limit", "0", "--poll-only"]
            poll = steady(url, fake, "bpoll", seconds, args, relay_url=bouncer.url(url))
        with server.database("latency_bouncer_listen") as url:
            args = ["--rate-limit", "0", "--listen-database-url", url]
            listen = steady(url, fake, "blisten", seconds * 2, args, relay_url=bouncer.url(url))
    finally:
        bouncer.close()
    p50, p99 = percentile(listen, 50), percentile(listen, 99)
    options.say(
        f"behind PgBouncer: poll-only p50 {percentile(poll, 50):.0f} ms; "
        f"direct LISTEN p50 {p50:.1f} ms, p99 {p99:.1f} ms"
    )
    return [
        Figure(
            "4",
            "behind PgBouncer, --poll-only, p50",
            percentile(poll, 50),
            "ms",
            note=f"p99 {percentile(poll, 99):.0f} ms; relay's claims, writes via PgBouncer",
        ),
        Figure(
            "4",
            "behind PgBouncer, LISTEN on --listen-database-url, p50",
            p50,
            "ms",
            target="<= 10 ms",
            met=p50 <= 10,
            note=f"p99 {p99:.1f} ms; {len(listen):,} messages at {RATE:.0f}/s",
        ),
    ]
