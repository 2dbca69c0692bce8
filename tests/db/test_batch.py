"""Batches (broadcasts): the bulk enqueue, a batch's progress against the rows themselves, a
cancel while the batch is being sent, and the operator commands (pause, resume, batch,
status) with their one-line refusals."""

from __future__ import annotations

import asyncio
import collections
import csv
import io
import json
from datetime import UTC, datetime

import pytest
import sqlalchemy as sa

from outbox import api, enqueue
from outbox.broadcast import (
    Scope,
    batch_progress,
    cancel_batch,
    enqueue_many,
    enqueue_many_async,
    pause,
    resume,
)
from outbox.errors import InvalidInput, InvalidPayload
from outbox.ratelimit import RateLimits
from outbox_testing.fake_telegram import FakeTelegram
from tests.support import eventually, make_relay, run_cli, text
from tests.support.webapp import local_page


@pytest.fixture(autouse=True)
def _database(db_url: str, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("OUTBOX_DATABASE_URL", db_url)


def counts(engine: sa.Engine, where: str) -> collections.Counter[str]:
    with engine.begin() as conn:
        found = conn.exec_driver_sql(f"SELECT holat FROM outbox WHERE {where}").scalars()
        return collections.Counter(found)


def test_enqueue_many_adds_new_keys_in_one_statement_and_keeps_existing_ones(
    engine: sa.Engine,
) -> None:
    with engine.begin() as conn:
        enqueue(conn, key="m1", payload={"chat_id": 1, "text": "old"})
        added = enqueue_many(
            conn,
            [("m0", text(1)), ("m1", text(2)), ("m2", text(3)), ("m2", text(4))],
            batch="b",
            queue="promo",
        )
        assert enqueue_many(conn, []) == 0
    assert added == 2
    with engine.begin() as conn:
        rows = conn.exec_driver_sql(
            "SELECT kalit, partiya, navbat, payload ->> 'text' FROM outbox ORDER BY kalit"
        ).all()
    assert [tuple(r) for r in rows] == [
        ("m0", "b", "promo", "eslatma 1"),
        ("m1", None, "default", "old"),  # enqueued before: left as it was
        ("m2", "b", "promo", "eslatma 3"),
    ]


def test_enqueue_many_refuses_the_whole_list_for_one_bad_message(engine: sa.Engine) -> None:
    with engine.begin() as conn:
        with pytest.raises(InvalidPayload, match="chat_id"):
            enqueue_many(conn, [("ok", text(1)), ("bad", {"text": "no chat"})])
        with pytest.raises(InvalidInput, match="batch"):
            enqueue_many(conn, [("ok", text(1))], batch="")
        with pytest.raises(InvalidInput, match="control"):
            enqueue(conn, key="k", payload=text(1), batch="a\nb")
    assert counts(engine, "true") == {}


def test_enqueue_many_async(db_url: str, engine: sa.Engine) -> None:
    from sqlalchemy.ext.asyncio import create_async_engine

    async def scenario() -> int:
        url = db_url.replace("postgresql://", "postgresql+psycopg://", 1)
        async_engine = create_async_engine(url)
        try:
            async with async_engine.begin() as conn:
                return await enqueue_many_async(conn, [("a", text(1))], batch="x")
        finally:
            await async_engine.dispose()

    assert asyncio.run(scenario()) == 1
    assert counts(engine, "partiya = 'x'") == {"kutmoqda": 1}


def test_batch_progress_matches_the_rows(engine: sa.Engine) -> None:
    with engine.begin() as conn:
        enqueue_many(conn, [(f"d{n}", text(10 + n)) for n in range(25)], batch="b")
        enqueue_many(conn, [(f"q{n}", text(100 + n)) for n in range(5)], batch="b", queue="q2")
        enqueue_many(conn, [(f"x{n}", text(200 + n)) for n in range(4)], batch="other")
        enqueue(conn, key="alone", payload=text(300))
        # By hand: 10 rows sent over the last 30 s, 3 an hour ago, 2 cancelled, 2 blocked,
        # 3 being sent; the 5 rows of queue q2 paused with their queue; 5 left waiting.
        steps = [
            "UPDATE outbox SET holat = 'bajarildi', yangilangan = now() - interval '30 s' "
            "+ make_interval(secs => 3 * mod(id, 10)) WHERE kalit IN ("
            + ",".join(f"'d{n}'" for n in range(10))
            + ")",
            "UPDATE outbox SET holat = 'bajarildi', yangilangan = now() - interval '1 hour' "
            "WHERE kalit IN ('d10', 'd11', 'd12')",
            "UPDATE outbox SET holat = 'xato', xato_turi = 'cancelled' "
            "WHERE kalit IN ('d13', 'd14')",
            "UPDATE outbox SET holat = 'xato', xato_turi = 'blocked' WHERE kalit IN ('d15', 'd16')",
            "UPDATE outbox SET holat = 'bajarilmoqda', band_vaqti = now(), urinish = 1 "
            "WHERE kalit IN ('d17', 'd18', 'd19')",
            "UPDATE outbox SET holat = 'bajarildi' WHERE partiya = 'other'",
        ]
        for step in steps:
            conn.exec_driver_sql(step)
        pause(conn, Scope.QUEUE, "q2")
    with engine.begin() as conn:
        truth = conn.exec_driver_sql(
            "SELECT holat, navbat, xato_turi, count(*) FROM outbox WHERE partiya = 'b' "
            "GROUP BY 1, 2, 3"
        ).all()
        first_recent = conn.exec_driver_sql(
            "SELECT extract(epoch FROM now() - min(yangilangan)) FROM outbox "
            "WHERE partiya = 'b' AND holat = 'bajarildi' AND yangilangan > now() - interval '1 m'"
        ).scalar_one()
        progress = batch_progress(conn, "b")
    by = collections.Counter[tuple[str, str, str | None]]()
    for state, queue, code, n in truth:
        by[(state, queue, code)] += n
    assert progress.total == sum(by.values()) == 30
    assert progress.sent == sum(n for (s, _, _), n in by.items() if s == "bajarildi") == 13
    assert progress.failed == 4 and progress.cancelled == 2
    assert progress.sending == 3
    assert progress.paused == by[("kutmoqda", "q2", None)] == 5
    assert progress.waiting == by[("kutmoqda", "default", None)] == 5
    # 10 sends since the first of them, some 30 s ago (plus the test's own time).
    assert progress.rate == pytest.approx(10 / float(first_recent), rel=0.15)
    assert progress.expected_end is None  # paused rows have no end
    assert [p.value for p in progress.paused_by] == ["q2"]
    assert not progress.finished
    with engine.begin() as conn:
        resume(conn, Scope.QUEUE, "q2")
        resumed = batch_progress(conn, "b")
    assert resumed.paused == 0 and resumed.waiting == 10
    assert resumed.expected_end is not None
    left = (resumed.expected_end - datetime.now(UTC)).total_seconds()
    assert left == pytest.approx(13 / resumed.rate, rel=0.15)


def test_cancel_of_a_batch_mid_send_keeps_what_went_and_replays_the_rest(
    engine: sa.Engine, db_url: str, fake_telegram: FakeTelegram
) -> None:
    with engine.begin() as conn:
        enqueue_many(conn, [(f"c{n}", text(1000 + n)) for n in range(80)], batch="campaign-7")
    limits = RateLimits(per_bot=20.0, per_chat=0, per_group_per_minute=0)

    def sent() -> int:
        return counts(engine, "partiya = 'campaign-7'")["bajarildi"]

    def settled() -> bool:
        left = counts(engine, "partiya = 'campaign-7'")
        return left["kutmoqda"] + left["bajarilmoqda"] == 0

    def cancel() -> int:
        with engine.begin() as conn:
            return cancel_batch(conn, "campaign-7")

    async def scenario() -> int:
        async with make_relay(db_url, fake_telegram, rate_limits=limits) as relay:
            runner = asyncio.create_task(relay.run())
            await eventually(lambda: sent() >= 5, 30, "the first sends")
            # Off the event loop, as an app's request handler runs: the relay's claim holds
            # row locks across its awaits, and a blocking write on the loop would wait for them.
            cancelled = await asyncio.to_thread(cancel)
            await eventually(settled, 30, "the batch to settle")
            relay.stop()
            await runner
            return cancelled

    cancelled = asyncio.run(scenario())
    final = counts(engine, "partiya = 'campaign-7'")
    assert cancelled > 0 and final["xato"] == cancelled
    assert final["bajarildi"] + cancelled == 80
    with engine.begin() as conn:
        failed = conn.exec_driver_sql(
            "SELECT DISTINCT oxirgi_xato, xato_turi FROM outbox WHERE holat = 'xato'"
        ).all()
        done = set(
            conn.exec_driver_sql(
                "SELECT payload ->> 'text' FROM outbox WHERE holat = 'bajarildi'"
            ).scalars()
        )
        progress = batch_progress(conn, "campaign-7")
    assert [tuple(f) for f in failed] == [("cancelled by operator", "cancelled")]
    delivered = collections.Counter(d.text for d in fake_telegram.delivered)
    assert set(delivered) == done and set(delivered.values()) == {1}  # no cancelled row went
    assert (progress.sent, progress.cancelled, progress.finished) == (
        80 - cancelled,
        cancelled,
        True,
    )
    # Cancelled rows are replayable, as the web page's cancel leaves them.
    with engine.begin() as conn:
        assert sum(r.replayed for r in api.replay(conn, None)) == cancelled

    async def drain() -> None:
        async with make_relay(db_url, fake_telegram) as relay:
            await relay.run(drain=True)

    asyncio.run(drain())
    assert counts(engine, "partiya = 'campaign-7'") == {"bajarildi": 80}
    again = collections.Counter(d.text for d in fake_telegram.delivered)
    assert len(again) == 80 and set(again.values()) == {1}


def test_the_commands(engine: sa.Engine, capsys: pytest.CaptureFixture[str]) -> None:
    with engine.begin() as conn:
        enqueue_many(conn, [(f"k{n}", text(10 + n)) for n in range(3)], batch="camp")
        # Due an hour ago: lag far over --max-lag, in a queue about to be paused.
        conn.exec_driver_sql("UPDATE outbox SET keyingi_urinish = now() - interval '1 hour'")
    code, out, _ = run_cli(capsys, "status", "--json")
    assert code == 8 and json.loads(out)["paused"] == []
    code, out, _ = run_cli(capsys, "pause", "--queue", "default")
    assert code == 0 and "paused queue default" in out
    code, out, _ = run_cli(capsys, "pause", "--queue", "default")
    assert code == 0 and "already" in out
    code, out, _ = run_cli(capsys, "status", "--json")
    document = json.loads(out)
    assert code == 0 and document["healthy"], document  # a paused queue's lag is no problem
    assert [(p["scope"], p["value"]) for p in document["paused"]] == [("queue", "default")]
    code, out, _ = run_cli(capsys, "status")
    assert code == 0 and "paused        queue default" in out
    code, out, _ = run_cli(capsys, "batch", "camp", "--json")
    progress = json.loads(out)
    assert code == 0
    assert (progress["total"], progress["waiting"], progress["paused"]) == (3, 0, 3)
    code, out, _ = run_cli(capsys, "batch", "camp")
    assert code == 0 and "none while paused (queue default)" in out
    code, out, _ = run_cli(capsys, "resume", "--queue", "default")
    assert code == 0 and "resumed queue default" in out
    code, out, _ = run_cli(capsys, "pauses")
    assert code == 0 and "nothing is paused" in out
    code, out, _ = run_cli(capsys, "batch", "camp", "--cancel")
    assert code == 0 and "cancelled 3 waiting messages" in out
    assert counts(engine, "true") == {"xato": 3}


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (["pause"], "name one of --queue, --bot, --tur or --batch"),
        (["pause", "--queue", "a", "--tur", "b"], "name one of --queue, --bot, --tur or --batch"),
        (["pause", "--queue", "no spaces"], "queue name 'no spaces' is not usable"),
        (["resume", "--batch", "x" * 201], "a batch needs a name of 1 to 200 characters"),
        (["batch", "nobody"], "no outbox rows in batch 'nobody'"),
    ],
)
def test_mistakes_get_one_line(
    capsys: pytest.CaptureFixture[str], argv: list[str], message: str
) -> None:
    code, out, err = run_cli(capsys, *argv)
    assert code == 2 and out == "", (out, err)
    assert err.count("\n") == 1 and message in err, err


def test_the_batch_report_is_a_line_per_message_as_the_rows_and_telegram_have_it(
    engine: sa.Engine,
    db_url: str,
    fake_telegram: FakeTelegram,
    capsys: pytest.CaptureFixture[str],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    from outbox import ops
    from outbox_testing.fake_telegram import Fault

    monkeypatch.setattr(ops, "REPORT_PAGE", 3)  # the stream read in several pages

    with engine.begin() as conn:
        enqueue_many(conn, [(f"r{n}", text(500 + n)) for n in range(1, 6)], batch="weekly")
        # A follow-up (its chat is its original's), a key a spreadsheet would take for a
        # formula, and a row due tomorrow.
        follow_up = {"method": "editMessageText", "message_key": "r1", "text": "yangilandi"}
        enqueue_many(conn, [("r1-edit", follow_up), ("=1+1", text(506))], batch="weekly")
        enqueue(conn, key="later", payload=text(507), batch="weekly", run_at=tomorrow(conn))
        enqueue(conn, key="elsewhere", payload=text(508))
    fake_telegram.script(503, Fault.forbidden(), times=None)

    async def drain() -> None:
        async with make_relay(db_url, fake_telegram) as relay:
            await relay.run(drain=True)

    asyncio.run(drain())
    code, out, err = run_cli(capsys, "batch", "weekly", "--csv")
    assert code == 0, err
    header, *lines = list(csv.reader(io.StringIO(out)))
    assert header == [
        "key", "chat_id", "holat", "error_code", "attempts", "sent_at", "message_id", "error"
    ]  # fmt: skip
    report = {line[0]: line for line in lines}
    assert list(report) == ["r1", "r2", "r3", "r4", "r5", "r1-edit", "'=1+1", "later"]
    sent = {d.chat_id: d.message_id for d in fake_telegram.delivered}
    for n in (1, 2, 4, 5):
        _, chat, state, code_, attempts, sent_at, message_id, error = report[f"r{n}"]
        assert (chat, state, code_, attempts, message_id, error) == (
            str(500 + n), "bajarildi", "", "1", str(sent[500 + n]), ""
        )  # fmt: skip
        assert datetime.fromisoformat(sent_at).tzinfo is not None
    assert report["r3"][1:5] == ["503", "xato", "blocked", "1"]
    assert report["r3"][5:7] == ["", ""] and "blocked by the user" in report["r3"][7]
    assert report["r1-edit"][1:3] == ["501", "bajarildi"]
    assert report["'=1+1"][1:3] == ["506", "bajarildi"]
    assert report["later"][1:6] == ["507", "kutmoqda", "", "0", ""]
    # The web page's batch view offers the same file.
    with local_page(db_url) as page:
        assert "/batches/weekly/report.csv" in page.get("/batches/weekly").body
        answer = page.get("/batches/weekly/report.csv")
        assert page.get("/batches/nobody/report.csv").status == 404
    assert answer.status == 200 and answer.body == out
    assert answer.headers["Content-Type"] == "text/csv; charset=utf-8"
    assert answer.headers["Content-Disposition"] == 'attachment; filename="batch-weekly.csv"'
    assert "Content-Security-Policy" in answer.headers
    code, _, err = run_cli(capsys, "batch", "weekly", "--csv", "--json")
    assert code == 2 and "--csv writes the report alone" in err
    code, _, err = run_cli(capsys, "batch", "nobody", "--csv")
    assert code == 2 and "no outbox rows in batch 'nobody'" in err


def tomorrow(conn: sa.Connection) -> datetime:
    moment: datetime = conn.exec_driver_sql("SELECT now() + interval '1 day'").scalar_one()
    return moment
