"""Part 11: order per chat under failures and a crash, against the fake Bot API enforcing
Telegram's limits.

200 chats x 5 messages, enqueued chat by chat; the fake answers a random fifth of the chats'
first request with a 500 and a twentieth with a 429 (``retry_after`` 2 s); two relays of the
bot with their defaults and a short lease, one killed with SIGKILL once a third has arrived.
Counted: chats whose messages arrived out of order (a message sent again right after itself, the
at-least-once duplicate of a kill, is no violation), messages delivered more than once, messages
never delivered, and the time the whole took.
"""

from __future__ import annotations

import itertools
import random
import time
from collections import defaultdict

from bench.harness import FakeBotApi, Figure, Options, RelayProcess, Server
from outbox.api import enqueue
from outbox.db import create_engine

CHAT_BASE = 9_000_000
STEPS = 5
# A lease short enough that the killed relay's claims come back soon; it covers a send (the
# Telegram timeout) and the grace.
RELAY_ARGS = ("--lease", "4s", "--telegram-timeout", "2s", "--grace", "1s", "--max-attempts", "8")


def run(server: Server, options: Options) -> list[Figure]:
    chats = options.scale(200, 40)
    total = chats * STEPS
    rng = random.Random(33)  # the same failures every run
    with server.database("order") as url, FakeBotApi(latency_ms=20, enforce_limits=True) as fake:
        engine = create_engine(url)
        for n in range(chats):
            draw = rng.random()
            if draw < 0.2:
                fake.script(CHAT_BASE + n, {"kind": "server_error", "status": 500})
            elif draw < 0.25:
                fake.script(CHAT_BASE + n, {"kind": "retry_after", "seconds": 2})
        with engine.begin() as conn:
            for n in range(chats):
                for step in range(1, STEPS + 1):
                    payload = {"chat_id": CHAT_BASE + n, "text": f"{n}/{step}"}
                    enqueue(conn, key=f"o{n}-{step}", payload=payload)
        began = time.time()
        doomed = RelayProcess(url, fake.url, RELAY_ARGS)
        survivor = RelayProcess(url, fake.url, RELAY_ARGS)
        try:
            fake.wait_delivered(total // 3, timeout=120.0)
            doomed.kill()
            deadline = time.time() + 180.0
            while _distinct(fake) < total and time.time() < deadline:
                time.sleep(0.2)
            took = time.time() - began
        finally:
            doomed.close()
            log = survivor.close()
            engine.dispose()
        delivered = fake.delivered()
    received: dict[int, list[int]] = defaultdict(list)
    for d in delivered:
        received[int(d["chat_id"])].append(int(str(d["text"]).rsplit("/", 1)[1]))
    wrong = [
        chat
        for chat, steps in received.items()
        if [step for step, _ in itertools.groupby(steps)] != list(range(1, STEPS + 1))
    ]
    missing = total - len({d["text"] for d in delivered})
    twice = len(delivered) - (total - missing)
    options.say(
        f"order: {len(delivered)} deliveries of {total} messages in {took:.1f} s, "
        f"{len(wrong)} chats out of order, {twice} sent twice, {missing} missing"
    )
    if "Traceback" in log:
        options.say(f"relay log:\n{log}")
    return [
        Figure(
            "11",
            f"{chats} chats x {STEPS} with 500s, 429s and a relay killed: chats out of order",
            len(wrong),
            "chats",
            target="0",
            met=not wrong and not missing,
            note=f"{missing} never delivered; {took:.0f} s for all, two relays, --lease 4s",
        ),
        Figure(
            "11",
            "same: messages delivered twice",
            twice,
            "msgs",
            note="at-least-once: the sends the killed relay had in flight (at most --concurrency)",
        ),
    ]


def _distinct(fake: FakeBotApi) -> int:
    return len({d["text"] for d in fake.delivered()})
