"""Many bots, one fleet: relays started with ``--tokens-dir`` serve every bot of the folder,
each row by its own bot, each bot within its own limits and flood pause. Relays are real
processes; Telegram is the fake Bot API, which keeps its limits per bot.

Here the e2e tier's tests (processes); the others are in ``tests/db/test_many_bots.py``.
"""

from __future__ import annotations

import collections
import json
import re
import signal
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import sqlalchemy as sa

from outbox import enqueue, enqueue_many
from outbox_testing.fake_telegram import FakeTelegram, Fault
from tests.support import (
    DEFAULT_LIMITS,
    Relays,
    relay_env,
    run_module,
    states,
    wait_until,
)
from tests.support.webapp import local_page

BOTS = {bot: f"{bot}:secret-of-bot-{bot}" for bot in (1001, 1002, 1003, 1004)}


@pytest.fixture
def strict_fake() -> Iterator[FakeTelegram]:
    """The fake Bot API taking any token, enforcing Telegram's limits per bot."""
    fake = FakeTelegram(enforce_limits=True).start_in_thread()
    yield fake
    fake.stop_thread()


@pytest.fixture
def any_fake() -> Iterator[FakeTelegram]:
    fake = FakeTelegram().start_in_thread()
    yield fake
    fake.stop_thread()


def _say(chat: int, label: str) -> dict[str, Any]:
    """A message to ``chat`` whose text names what sent it (``label``: the bot, a tag)."""
    return {"chat_id": chat, "text": f"eslatma {chat}/{label}"}


def _tokens(folder: Path, bots: dict[int, str]) -> Path:
    folder.mkdir(exist_ok=True)
    for bot, token in bots.items():
        (folder / f"bot-{bot}").write_text(token + "\n")
    return folder


def _by_bot(fake: FakeTelegram) -> dict[int, list[str]]:
    sent: dict[int, list[str]] = collections.defaultdict(list)
    for d in fake.delivered:
        sent[d.bot_id].append(d.text)
    return sent


def _enqueue_for(engine: sa.Engine, bot: int, count: int, *, chat0: int, tag: str = "") -> None:
    with engine.begin() as conn:
        enqueue_many(
            conn,
            [(f"{tag}b{bot}-{n}", _say(chat0 + n, f"{tag}{bot}")) for n in range(count)],
            bot=bot,
        )


def _bot_env(db_url: str, fake: FakeTelegram, folder: Path, **settings: str) -> dict[str, str]:
    env = relay_env(db_url, fake.api_url, OUTBOX_TOKENS_DIR=str(folder), **settings)
    # A relay with a folder of tokens does not read TELEGRAM_BOT_TOKEN: none is set.
    env.pop("TELEGRAM_BOT_TOKEN")
    return env


def test_two_relays_serve_every_bot_each_row_by_its_own_bot(
    engine: sa.Engine, db_url: str, strict_fake: FakeTelegram, tmp_path: Path
) -> None:
    folder = _tokens(tmp_path / "tokens", BOTS)
    for k, bot in enumerate(BOTS):
        _enqueue_for(engine, bot, 100, chat0=10_000 * (k + 1))
    # One bot's 429 (its sixth chat): it pauses alone; the other bots go on meanwhile.
    strict_fake.script(10_005, Fault.retry_after(4))
    env = _bot_env(db_url, strict_fake, folder, **DEFAULT_LIMITS)
    with Relays(env, tmp_path).running() as fleet:
        started = [fleet.start() for _ in range(2)]
        wait_until(
            lambda: states(engine).get("bajarildi") == 100 * len(BOTS),
            90,
            "every message sent",
            explain=fleet.describe,
        )
        for relay in started:
            assert relay.stop() == 0, fleet.describe()
    sent = _by_bot(strict_fake)
    assert set(sent) == set(BOTS)
    for bot in BOTS:
        # Each row once, and by the bot it names (its text carries the bot's id).
        assert len(sent[bot]) == 100 and len(set(sent[bot])) == 100
        assert all(t.endswith(f"/{bot}") for t in sent[bot])
    # Beyond the scripted 429, the limits the fake enforces per bot were kept.
    stats = strict_fake.stats()
    refused = [(r.bot_id, r.chat_id, r.at) for r in strict_fake.requests if r.status == 429]
    assert stats["rejected_429"] <= 1 + 0.01 * stats["requests"], (stats, refused)
    flooded = next(r.at for r in strict_fake.requests if r.status == 429)
    during = [d for d in strict_fake.delivered if flooded < d.at < flooded + 4]
    # Sends already on their way when the 429 came may land; after that the bot waits.
    assert not [d for d in during if d.bot_id == 1001 and d.at > flooded + 1], "the bot sent"
    assert {d.bot_id for d in during} >= set(BOTS) - {1001}, "the pause held back other bots"
    assert all("sent" in relay.stdout for relay in started), fleet.describe()
    # The token never reaches a log or the database.
    logs = "".join(r.stdout + r.stderr for r in started)
    assert not any(token.split(":")[1] in logs for token in BOTS.values())


def test_old_set_ups_rows_without_a_bot_go_to_the_single_token_relay(
    engine: sa.Engine, db_url: str, any_fake: FakeTelegram, tmp_path: Path
) -> None:
    folder = _tokens(tmp_path / "tokens", {1001: BOTS[1001]})
    with engine.begin() as conn:
        for n in range(5):
            enqueue(conn, key=f"plain-{n}", payload=_say(500 + n, "plain"))
            enqueue(conn, key=f"queued-{n}", payload=_say(600 + n, "queued"), queue="other")
    _enqueue_for(engine, 1001, 5, chat0=700)
    # A row that names the single-token relay's own bot is that relay's too.
    _enqueue_for(engine, 123456, 1, chat0=800)
    with Relays(relay_env(db_url, any_fake.api_url), tmp_path).running() as fleet:
        # The folder's relay takes only the rows that name its bot.
        bots = fleet.start(OUTBOX_TOKENS_DIR=str(folder))
        wait_until(lambda: len(_by_bot(any_fake)[1001]) == 5, 30, "bot 1001's rows")
        single = fleet.start("--drain")
        queued = fleet.start("--drain", "--queue", "other")
        assert single.wait() == 0 and queued.wait() == 0, fleet.describe()
        assert bots.stop() == 0, fleet.describe()
    sent = _by_bot(any_fake)
    assert sorted(sent) == [1001, 123456]
    assert sorted(sent[123456]) == sorted(
        [_say(500 + n, "plain")["text"] for n in range(5)]
        + [_say(600 + n, "queued")["text"] for n in range(5)]
        + [_say(800, "123456")["text"]]
    )
    assert _counts(engine) == {"bajarildi": 16}


def test_token_files_added_replaced_and_removed_while_relays_run(
    engine: sa.Engine, db_url: str, any_fake: FakeTelegram, tmp_path: Path
) -> None:
    folder = _tokens(tmp_path / "tokens", {1001: BOTS[1001]})
    (folder / ".hidden").write_text("not a token")
    (folder / "broken").write_text("no token here")
    with Relays(_bot_env(db_url, any_fake, folder), tmp_path).running() as fleet:
        relays = [fleet.start() for _ in range(2)]
        _enqueue_for(engine, 1001, 3, chat0=100)
        _enqueue_for(engine, 1002, 3, chat0=200)
        wait_until(lambda: len(_by_bot(any_fake)[1001]) == 3, 30, "bot 1001's rows")
        # Added: bot 1002 is picked up without a restart.
        _tokens(folder, {1002: BOTS[1002]})
        wait_until(lambda: len(_by_bot(any_fake)[1002]) == 3, 30, "bot 1002's rows")
        # Replaced: the old token is revoked, the file holds the new one.
        any_fake.revoke_token(BOTS[1002])
        (folder / "bot-1002").write_text("1002:the-new-secret")
        _enqueue_for(engine, 1002, 3, chat0=300, tag="after-")
        wait_until(lambda: len(_by_bot(any_fake)[1002]) == 6, 30, "bot 1002's rows, new token")
        # Removed: bot 1001's rows wait.
        (folder / "bot-1001").unlink()
        wait_until(
            lambda: all("bot 1001" in r.stderr and "gone" in r.stderr for r in relays),
            30,
            "both relays drop bot 1001",
            explain=fleet.describe,
        )
        _enqueue_for(engine, 1001, 2, chat0=400, tag="late-")
        for relay in relays:
            assert relay.stop() == 0, fleet.describe()
    assert len(_by_bot(any_fake)[1001]) == 3
    assert _counts(engine) == {"bajarildi": 9, "kutmoqda": 2}
    logs = "".join(r.stderr for r in relays)
    assert "tokens file broken does not hold a Telegram bot token" in logs
    assert ".hidden" not in logs
    assert "secret-of-bot" not in logs and "the-new-secret" not in logs


def test_a_rejected_token_stops_its_bot_alone(
    engine: sa.Engine, db_url: str, any_fake: FakeTelegram, tmp_path: Path
) -> None:
    folder = _tokens(tmp_path / "tokens", {1001: BOTS[1001], 1002: BOTS[1002]})
    any_fake.revoke_token(BOTS[1002])
    _enqueue_for(engine, 1001, 4, chat0=100)
    _enqueue_for(engine, 1002, 4, chat0=200)
    with Relays(_bot_env(db_url, any_fake, folder), tmp_path).running() as fleet:
        relay = fleet.start()
        wait_until(lambda: len(_by_bot(any_fake)[1001]) == 4, 30, "bot 1001's rows")
        wait_until(lambda: "rejected the token" in relay.stderr, 30, "the rejection")
        # The register says so at the relay's next heartbeat; the status shows it per bot.
        status = wait_until(
            lambda: next((t for t in [_status(db_url)] if "token rejected" in t), None),
            30,
            "the status naming the rejected token",
        )
        with local_page(db_url) as page:
            body = page.get("/").body
        assert relay.alive()
        assert relay.stop() == 0, fleet.describe()
    # The web page shows each bot with its state, never a token.
    row_1002 = re.search(r'<tr data-bot="1002".*?</tr>', body, re.S)
    assert row_1002 is not None and "token rejected" in row_1002.group(0), body
    assert 'data-bot="1001"' in body and "secret-of-bot" not in body
    assert _counts(engine) == {"bajarildi": 4, "kutmoqda": 4}
    line = next(line for line in status.splitlines() if line.startswith("1002 "))
    assert line.split()[1] == "4" and line.endswith("token rejected"), status
    assert "rows wait for bots no live relay can send for: 1002" in status
    assert "bot-1002" in relay.stderr and BOTS[1002].split(":")[1] not in relay.stderr


def test_a_relay_killed_leaves_its_bots_to_the_other(
    engine: sa.Engine, db_url: str, any_fake: FakeTelegram, tmp_path: Path
) -> None:
    folder = _tokens(tmp_path / "tokens", BOTS)
    env = _bot_env(db_url, any_fake, folder, OUTBOX_LEASE="3s", OUTBOX_GRACE="0s")
    env["OUTBOX_TELEGRAM_TIMEOUT"] = "2s"
    any_fake.latency = 0.05
    for k, bot in enumerate(BOTS):
        _enqueue_for(engine, bot, 40, chat0=1000 * (k + 1))
    with Relays(env, tmp_path).running() as fleet:
        doomed, other = fleet.start(), fleet.start()
        wait_until(
            lambda: "sent" in doomed.stdout or len(any_fake.delivered) >= 20,
            30,
            "both relays sending",
            explain=fleet.describe,
        )
        doomed.signal(signal.SIGKILL)
        doomed.wait()
        # The other relay serves every bot of the folder: new rows of each go out.
        for k, bot in enumerate(BOTS):
            _enqueue_for(engine, bot, 5, chat0=50_000 + 1000 * k, tag="after-")
        wait_until(
            lambda: (
                all(sum("/after-" in t for t in texts) == 5 for texts in _by_bot(any_fake).values())
                and len(_by_bot(any_fake)) == len(BOTS)
            ),
            60,
            "the rows enqueued after the kill sent",
            explain=fleet.describe,
        )
        # The killed relay's claims come back once their lease is over (the reaper's run,
        # here at once rather than at its next minute), and the other relay sends them.
        wait_until(
            lambda: (
                run_module(
                    "outbox", "reap", "--lease", "3s", env={"OUTBOX_DATABASE_URL": db_url}
                ).returncode
                == 0
                and not _counts(engine).get("bajarilmoqda")
            ),
            30,
            "the killed relay's claims reaped",
        )
        wait_until(
            lambda: _counts(engine) == {"bajarildi": 45 * len(BOTS)},
            60,
            "every message sent by the other relay",
            explain=fleet.describe,
        )
        assert other.stop() == 0, fleet.describe()
    sent = _by_bot(any_fake)
    # Each message by its own bot; the killed relay's last sends may go twice (at-least-once).
    assert {bot: len(set(texts)) for bot, texts in sent.items()} == dict.fromkeys(BOTS, 45)


def _counts(engine: sa.Engine) -> dict[str, int]:
    return {str(state): n for state, n in states(engine).items() if n}


def _status(db_url: str) -> str:
    """``outbox status``: its table and its warnings."""
    done = run_module("outbox", "status", env={"OUTBOX_DATABASE_URL": db_url})
    return done.stdout + done.stderr


def test_a_bot_with_a_backlog_does_not_starve_another(
    engine: sa.Engine, db_url: str, any_fake: FakeTelegram, tmp_path: Path
) -> None:
    folder = _tokens(tmp_path / "tokens", {1001: BOTS[1001], 1002: BOTS[1002]})
    _enqueue_for(engine, 1001, 2000, chat0=100_000)
    with Relays(_bot_env(db_url, any_fake, folder), tmp_path).running() as fleet:
        relay = fleet.start()
        wait_until(lambda: len(_by_bot(any_fake)[1001]) >= 50, 60, "bot 1001 sending")
        _enqueue_for(engine, 1002, 5, chat0=200)
        wait_until(
            lambda: _counts(engine) == {"bajarildi": 2005}, 120, "all sent", explain=fleet.describe
        )
        assert relay.stop() == 0, fleet.describe()
    last = {bot: max(d.at for d in any_fake.delivered if d.bot_id == bot) for bot in (1001, 1002)}
    # Enqueued behind 2,000 rows of another bot, bot 1002's five went out in the meantime.
    assert last[1002] < last[1001], last


def test_drain_and_once_with_a_folder_of_tokens(
    engine: sa.Engine, db_url: str, any_fake: FakeTelegram, tmp_path: Path
) -> None:
    folder = _tokens(tmp_path / "tokens", {1001: BOTS[1001], 1002: BOTS[1002]})
    _enqueue_for(engine, 1001, 3, chat0=100)
    _enqueue_for(engine, 1002, 3, chat0=200)
    with Relays(_bot_env(db_url, any_fake, folder), tmp_path).running() as fleet:
        once = fleet.start("--once")
        assert once.wait() == 0, fleet.describe()
        assert "relay stopped: 6 sent" in once.stdout, fleet.describe()
        _enqueue_for(engine, 1002, 4, chat0=300, tag="later-")
        drain = fleet.start("--drain")
        assert drain.wait() == 0, fleet.describe()

    assert _counts(engine) == {"bajarildi": 10}, drain.stderr
    assert {bot: len(texts) for bot, texts in _by_bot(any_fake).items()} == {1001: 3, 1002: 7}


def test_list_and_replay_by_bot(engine: sa.Engine, db_url: str) -> None:
    _enqueue_for(engine, 1001, 2, chat0=100)
    _enqueue_for(engine, 1002, 2, chat0=200)
    with engine.begin() as conn:
        conn.execute(sa.text("UPDATE outbox SET holat = 'xato', oxirgi_xato = 'x'"))
    env = {"OUTBOX_DATABASE_URL": db_url}
    listed = run_module("outbox", "list", "--bot", "1002", "--json", env=env)
    assert listed.returncode == 0, listed.stderr
    assert sorted(m["kalit"] for m in json.loads(listed.stdout)) == ["b1002-0", "b1002-1"]
    assert {m["bot"] for m in json.loads(listed.stdout)} == {"1002"}
    replayed = run_module("outbox", "replay", "--all-failed", "--bot", "1001", env=env)
    assert replayed.stdout == "replayed 2 failed messages (bot 1001)\n", replayed.stderr
    assert _counts(engine) == {"kutmoqda": 2, "xato": 2}
    refused = run_module("outbox", "list", "--bot", "1001:secret", env=env)
    assert refused.returncode == 2 and "secret" not in refused.stderr


def test_telegram_out_of_reach_is_said_once_for_every_bot_and_probed_once(
    engine: sa.Engine, db_url: str, tmp_path: Path
) -> None:
    # The bots of a relay share one Bot API: a cut is one pause, one line, one probe.
    first = FakeTelegram().start_in_thread()
    port = first.port
    folder = _tokens(tmp_path / "tokens", BOTS)
    with Relays(_bot_env(db_url, first, folder), tmp_path).running() as relays:
        relay = relays.start()
        wait_until(
            lambda: relay.stderr.count(": serving") == len(BOTS),
            30,
            "every bot serving",
            explain=relays.describe,
        )
        first.stop_thread()  # connection refused from now on
        for bot in BOTS:
            _enqueue_for(engine, bot, 3, chat0=bot * 10)
        wait_until(
            lambda: "cannot reach Telegram for bots" in relay.stderr,
            30,
            "the relay's pause",
            explain=relays.describe,
        )
        time.sleep(3)  # some probes, and every bot's lane held back
        with engine.connect() as conn:
            spent = conn.exec_driver_sql("SELECT max(urinish) FROM outbox").scalar_one()
        assert spent == 0  # no try that could not connect spent an attempt
        second = FakeTelegram().start_in_thread(port=port)
        try:
            wait_until(
                lambda: states(engine).get("bajarildi") == 3 * len(BOTS),
                30,
                "every row delivered",
                explain=relays.describe,
            )
            assert relay.stop() == 0, relay.describe()
        finally:
            second.stop_thread()
    log = relay.stderr
    assert log.count("cannot reach Telegram for") == 1, log
    assert "cannot reach Telegram for bots 1001, 1002, 1003 and 1 more: " in log, log
    assert log.count("Telegram answers again for bots") == 1, log
    probes = [r for r in second.requests if r.method == "getMe"]
    assert len(probes) <= 2, probes  # one probe for the relay, not one per bot
