"""The lanes as an operator sees them: ``outbox list`` (its columns, --priority, --json),
``outbox status`` (its lines and --json) and the page's overview; and that an outbox without
lanes shows none of it, as before.

Here the db tier's tests (PostgreSQL, in the test's process); the others are in
``tests/unit/test_lanes_views.py``.
"""

from __future__ import annotations

import asyncio
import json
import re
from collections.abc import Iterator
from datetime import datetime, timedelta
from urllib.parse import quote

import psycopg
import pytest
import sqlalchemy as sa

from outbox import enqueue, queries
from outbox.ops.views.status import lanes_lines
from outbox.queries import ClaimLimits, Outcome, claim_due, ensure_bot, record_outcomes
from outbox.states import FailureCode, State
from tests.support import run_cli, text
from tests.support.webapp import LocalPage, local_page

# The list's header and the status's line names of an outbox without lanes (as they were
# before lanes).
PLAIN_HEADER = ["id", "tur", "kalit", "holat", "urinish", "keyingi_urinish", "oxirgi_xato"]


LANE_LINES = ("priorities", "windowed", "expiring", "expired")


@pytest.fixture
def cli_db(db_url: str, monkeypatch: pytest.MonkeyPatch) -> str:
    monkeypatch.setenv("OUTBOX_DATABASE_URL", db_url)
    return db_url


@pytest.fixture
def page(db_url: str) -> Iterator[LocalPage]:
    with local_page(db_url) as local:
        yield local


def now(engine: sa.Engine) -> datetime:
    with engine.connect() as conn:
        moment: datetime = conn.execute(sa.text("SELECT now()")).scalar_one()
    return moment.replace(microsecond=0)


def add(engine: sa.Engine, key: str, chat: int, **lane: object) -> None:
    with engine.begin() as conn:
        enqueue(conn, key=key, payload=text(chat), **lane)  # type: ignore[arg-type]


def expire_by_the_claim(engine: sa.Engine, db_url: str, key: str) -> None:
    """Make ``key``'s expiry pass while it waits, then claim and write its outcome as a relay
    does: the claim hands it over expired, the relay fails it (xato, xato_turi expired) without
    sending, as after a relay was down past its eskirish. (Any other due row of the default
    queue would be claimed too: call it first.)"""
    with engine.begin() as conn:
        conn.execute(
            sa.text(
                "UPDATE outbox SET keyingi_urinish = now() - interval '2 minutes', "
                "eskirish = now() - interval '1 minute' WHERE kalit = :k"
            ),
            {"k": key},
        )

    async def run() -> None:
        async with await psycopg.AsyncConnection.connect(db_url, autocommit=True) as conn:
            await ensure_bot(conn, "default", schema="public")
            [claimed] = await claim_due(conn, 10, schema="public", limits=ClaimLimits())
            assert claimed.expires_in is not None and claimed.expires_in <= 0
            expired = Outcome.for_row(
                claimed, State.FAILED, error="expired", error_code=FailureCode.EXPIRED
            )
            assert await record_outcomes(conn, [expired], schema="public") == 1

    asyncio.run(run())
    with engine.connect() as conn:
        state, code = conn.execute(
            sa.text("SELECT holat, xato_turi FROM outbox WHERE kalit = :k"), {"k": key}
        ).one()
    assert (state, code) == (State.FAILED, "expired")


def lanes_outbox(engine: sa.Engine, db_url: str) -> datetime:
    """A reply at 10, a broadcast row at -5, a reminder with a window and an expiry, a row
    that expires within the hour, one that expired, and a plain row in queue bot2."""
    t = now(engine)
    add(engine, "stale", 5, expires_at=t + timedelta(hours=5))
    expire_by_the_claim(engine, db_url, "stale")
    add(engine, "reply", 1, priority=10)
    add(engine, "news", 2, priority=-5)
    add(
        engine,
        "remind",
        3,
        run_at=t + timedelta(minutes=10),
        early=timedelta(seconds=70),
        expires_at=t + timedelta(hours=1, minutes=10),
    )
    add(engine, "soon", 4, run_at=t, expires_at=t + timedelta(minutes=30))
    with engine.begin() as conn:
        enqueue(conn, key="other", payload=text(6), queue="bot2", priority=3)
    return t


def test_a_plain_outbox_shows_none_of_the_lanes(
    engine: sa.Engine, cli_db: str, capsys: pytest.CaptureFixture[str], page: LocalPage
) -> None:
    add(engine, "plain", 1)
    with engine.begin() as conn:  # the lesson's INSERT, and a failed row of another kind
        conn.execute(
            sa.text("INSERT INTO outbox (tur, kalit, payload) VALUES ('eslatma', 'lesson', :p)"),
            {"p": json.dumps(text(2))},
        )
        conn.execute(sa.text("UPDATE outbox SET holat = 'xato' WHERE kalit = 'lesson'"))
    code, out, _ = run_cli(capsys, "list")
    assert code == 0
    assert out.splitlines()[0].split() == PLAIN_HEADER
    code, out, _ = run_cli(capsys, "status")
    assert code == 0
    names = [line.split()[0] for line in out.splitlines() if line]
    assert names == ["kutmoqda", "bajarilmoqda", "bajarildi", "xato", "lag", "stuck", "markers"]
    code, out, _ = run_cli(capsys, "status", "--json")
    # The keys are always there, for scripts; an outbox at priority 0 has one entry.
    assert json.loads(out)["lanes"] == {
        "due_per_priority": {"0": 1},
        "windowed": 0,
        "expiring_within_hour": 0,
        "expired": 0,
        "chat_blocked": 0,
    }
    overview = page.get("/part/overview")
    assert overview.status == 200 and "data-lane" not in overview.body


def test_one_priority_other_than_zero_is_worth_a_line_and_zero_alone_is_not(
    engine: sa.Engine,
) -> None:
    add(engine, "zero", 1)
    add(engine, "later", 2, priority=5, run_at=now(engine) + timedelta(hours=1))
    with engine.begin() as conn:
        lanes = queries.queue_status(conn, schema="public", lease_seconds=300).lanes
    # The priority-5 row is not due yet: only due rows are counted per priority.
    assert lanes.due_per_priority == {0: 1} and not lanes.prioritised
    assert lanes_lines(lanes) == []
    with engine.begin() as conn:
        conn.execute(sa.text("UPDATE outbox SET ustuvorlik = -3 WHERE kalit = 'zero'"))
        lanes = queries.queue_status(conn, schema="public", lease_seconds=300).lanes
    assert lanes.due_per_priority == {-3: 1}
    [(name, figure, note)] = lanes_lines(lanes)
    assert (name, figure) == ("priorities", "1") and note.endswith("ustuvorlik: -3: 1")


def test_list_shows_priority_and_window_columns_when_a_row_has_them(
    engine: sa.Engine, db_url: str, cli_db: str, capsys: pytest.CaptureFixture[str]
) -> None:
    lanes_outbox(engine, db_url)
    code, out, _ = run_cli(capsys, "list")
    assert code == 0
    header, *lines = out.splitlines()
    assert header.split() == [
        "id",
        "navbat",
        "tur",
        "kalit",
        "holat",
        "urinish",
        "ustuvorlik",
        "keyingi_urinish",
        "eng_erta..eskirish",
        "oxirgi_xato",
    ]
    cells = {line.split()[3]: line.split() for line in lines}
    priority_at, window_at = 6, 9  # keyingi_urinish takes two words (date and time)
    assert {key: cells[key][priority_at] for key in cells} == {
        "other": "3",
        "stale": "0",
        "soon": "0",
        "remind": "0",
        "news": "-5",
        "reply": "10",
    }
    assert cells["remind"][window_at] == "-1m10s..+1h"  # may go 70 s early, never an hour late
    assert cells["soon"][window_at] == "..+30m"
    assert cells["reply"][window_at] == "-"
    # The priority column is a number: right-aligned under its header.
    start = header.index("ustuvorlik")
    end = start + len("ustuvorlik")
    column = {line.split()[3]: line[start:end] for line in lines}
    assert column["reply"] == "        10" and column["news"] == "        -5"


def test_only_the_window_column_when_no_row_has_a_priority(
    engine: sa.Engine, cli_db: str, capsys: pytest.CaptureFixture[str]
) -> None:
    add(engine, "soon", 1, expires_at=now(engine) + timedelta(minutes=30))
    code, out, _ = run_cli(capsys, "list")
    assert code == 0
    assert out.splitlines()[0].split() == [
        *PLAIN_HEADER[:-1],
        "eng_erta..eskirish",
        "oxirgi_xato",
    ]


def test_list_json_gives_the_lanes_of_each_row(
    engine: sa.Engine, db_url: str, cli_db: str, capsys: pytest.CaptureFixture[str]
) -> None:
    t = lanes_outbox(engine, db_url)
    code, out, _ = run_cli(capsys, "list", "--json")
    assert code == 0
    rows = {m["kalit"]: m for m in json.loads(out)}
    remind = rows["remind"]
    assert remind["ustuvorlik"] == 0
    assert datetime.fromisoformat(remind["keyingi_urinish"]) == t + timedelta(minutes=10)
    assert datetime.fromisoformat(remind["eng_erta"]) == t + timedelta(minutes=8, seconds=50)
    assert datetime.fromisoformat(remind["eskirish"]) == t + timedelta(hours=1, minutes=10)
    assert (rows["reply"]["ustuvorlik"], rows["reply"]["eng_erta"], rows["reply"]["eskirish"]) == (
        10,
        None,
        None,
    )
    assert rows["stale"]["xato_turi"] == "expired"


def test_list_priority_filters_and_refuses_a_priority_out_of_range(
    engine: sa.Engine, db_url: str, cli_db: str, capsys: pytest.CaptureFixture[str]
) -> None:
    lanes_outbox(engine, db_url)
    code, out, _ = run_cli(capsys, "list", "--priority", "-5", "--json")
    assert code == 0 and [m["kalit"] for m in json.loads(out)] == ["news"]
    code, out, _ = run_cli(capsys, "list", "--priority", "0", "--state", "kutmoqda")
    assert code == 0
    assert [line.split()[2] for line in out.splitlines()[1:]] == ["soon", "remind"]
    code, out, _ = run_cli(capsys, "list", "--priority", "7")
    assert (code, out) == (0, "no outbox messages match\n")
    for bad, said in (("11", "must be at most 10"), ("-11", "must be at least -10")):
        code, out, err = run_cli(capsys, "list", "--priority", bad)
        assert code == 2 and out == ""
        assert err.strip().splitlines() == [f"outbox: --priority: '{bad}' {said}"]
    code, _, err = run_cli(capsys, "list", "--priority", "high")
    assert code == 2 and "is not a whole number" in err and "Traceback" not in err


def lane_lines(out: str) -> dict[str, str]:
    """The status's lane lines by name: figure and note."""
    found = {}
    for line in out.splitlines():
        name, _, rest = line.partition(" ")
        if name in LANE_LINES:
            found[name] = " ".join(rest.split())
    return found


def test_status_gives_the_lanes_figures_of_all_queues_or_of_one(
    engine: sa.Engine, db_url: str, cli_db: str, capsys: pytest.CaptureFixture[str]
) -> None:
    lanes_outbox(engine, db_url)
    add(engine, "far", 7, expires_at=now(engine) + timedelta(hours=3))  # not within the hour
    code, out, _ = run_cli(capsys, "status")
    assert code == 0
    assert lane_lines(out) == {
        # remind is not due yet; stale failed.
        "priorities": "5 due pending rows per ustuvorlik: 10: 1, 3: 1, 0: 2, -5: 1",
        "windowed": "1 pending rows with a delivery window (eng_erta: may go early)",
        "expiring": "1 pending rows whose eskirish is within 1h",
        "expired": "1 xato rows that expired unsent (xato_turi expired)",
    }
    code, out, _ = run_cli(capsys, "status", "--json")
    assert code == 0
    assert json.loads(out)["lanes"] == {
        "due_per_priority": {"10": 1, "3": 1, "0": 2, "-5": 1},  # highest first
        "windowed": 1,
        "expiring_within_hour": 1,
        "expired": 1,
        "chat_blocked": 0,
    }
    code, out, _ = run_cli(capsys, "status", "--queue", "bot2", "--json")
    assert code == 0
    assert json.loads(out)["lanes"] == {
        "due_per_priority": {"3": 1},
        "windowed": 0,
        "expiring_within_hour": 0,
        "expired": 0,
        "chat_blocked": 0,
    }
    code, out, _ = run_cli(capsys, "status", "--queue", "bot2")
    assert code == 0 and lane_lines(out) == {
        "priorities": "1 due pending rows per ustuvorlik: 3: 1"
    }


def test_the_pages_overview_shows_the_lanes(
    engine: sa.Engine, db_url: str, page: LocalPage
) -> None:
    lanes_outbox(engine, db_url)
    for target in ("/", "/part/overview"):
        answer = page.get(target)
        assert answer.status == 200
        for name in LANE_LINES:
            assert f'data-lane="{name}"' in answer.body
        assert "due pending rows per ustuvorlik: 10: 1, 3: 1, 0: 1, -5: 1" in answer.body
        assert "xato rows that expired unsent" in answer.body


def fail(engine: sa.Engine, key: str, chat: int, priority: int = 0) -> None:
    add(engine, key, chat, priority=priority)
    with engine.begin() as conn:
        conn.execute(
            sa.text("UPDATE outbox SET holat = 'xato', oxirgi_xato = 'boom' WHERE kalit = :k"),
            {"k": key},
        )


def failed_keys(body: str) -> list[str]:
    return re.findall(r'<dd class="mono wrap">([^<]+)</dd>', body)


def test_the_failed_list_filters_by_priority_once_failed_rows_have_one(
    engine: sa.Engine, page: LocalPage
) -> None:
    fail(engine, "plain", 1)
    front = page.get("/")
    assert front.status == 200 and '<select name="priority">' not in front.body
    assert 'data-field="ustuvorlik"' not in front.body  # the card names no priority 0
    fail(engine, "reply", 2, priority=10)
    front = page.get("/")
    assert '<select name="priority">' in front.body
    assert 'data-field="ustuvorlik">10<' in front.body
    assert failed_keys(front.body) == ["reply", "plain"]
    assert failed_keys(page.get("/?priority=10").body) == ["reply"]
    assert failed_keys(page.get("/?priority=0").body) == ["plain"]
    assert "No failed messages match this filter" in page.get("/?priority=-3").body
    # A bulk replay takes the filter: the confirmation lists that priority's rows only.
    chosen = page.post("/replay", {"csrf": page.csrf(), "priority": "10"})
    assert chosen.status == 200 and "ustuvorlik 10" in chosen.body
    assert re.search(r'name="ids" value="([0-9,]+)"', chosen.body) is not None
    assert "plain" not in chosen.body and "reply" in chosen.body
    for bad in ("11", "-11", "high", "1e1", "٣"):
        answer = page.get(f"/?priority={quote(bad)}")
        assert answer.status == 400 and "is not a whole number from -10 to 10" in answer.body


def test_a_bulk_replay_takes_only_the_failed_rows_of_one_priority(engine: sa.Engine) -> None:
    for key, priority in (("high", 5), ("low", 0)):
        add(engine, key, 1, priority=priority)
    with engine.begin() as conn:
        conn.execute(sa.text("UPDATE outbox SET holat = 'xato', oxirgi_xato = 'x'"))
        results = queries.replay(conn, None, schema="public", priority=5)
    assert [r.replayed for r in results] == [True]
    with engine.connect() as conn:
        states: dict[str, str] = dict(
            conn.execute(sa.text("SELECT kalit, holat FROM outbox")).all()
        )
    assert states == {"high": State.PENDING, "low": State.FAILED}
