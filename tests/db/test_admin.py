"""Operator commands against a real PostgreSQL, in-process through ``outbox.cli.main``."""

from __future__ import annotations

import asyncio
import json
import re
import threading

import psycopg
import pytest
import sqlalchemy as sa

from outbox import queries
from outbox.cli import main
from outbox.queries import status as status_queries
from tests.support import wait_until
from tests.support.admin import BLOCKED, add, add_failed, add_marker, markers, row, run, update


@pytest.fixture
def outbox_db(db_url: str, monkeypatch: pytest.MonkeyPatch) -> str:
    monkeypatch.setenv("OUTBOX_DATABASE_URL", db_url)
    return db_url


# --- list -----------------------------------------------------------------------------------


def test_list_is_an_aligned_table_newest_first_with_long_errors_cut(
    engine: sa.Engine, outbox_db: str, capsys: pytest.CaptureFixture[str]
) -> None:
    first = add(engine, "first")
    long_error = "Bad Request: can't parse entities: " + "x" * 200
    second = add_failed(engine, "second", error=long_error)

    code, out, err = run(capsys, "list")

    assert (code, err) == (0, "")
    header, *lines = out.splitlines()
    assert header.split() == [
        "id", "tur", "kalit", "holat", "urinish", "keyingi_urinish", "oxirgi_xato",
    ]  # fmt: skip
    assert [line.split()[0] for line in lines] == [str(second), str(first)]
    # Aligned: every column starts where its header does.
    for name in ("kalit", "holat", "keyingi_urinish", "oxirgi_xato"):
        start = header.index(name)
        assert all(line[start - 2 : start] == "  " for line in lines)
    assert long_error not in out
    assert "Bad Request: can't parse entities: xxx" in out and "…" in out


def test_list_filters_and_json_keeps_the_whole_error(
    engine: sa.Engine, outbox_db: str, capsys: pytest.CaptureFixture[str]
) -> None:
    long_error = "Forbidden: " + "y" * 300
    failed = add_failed(engine, "failed", error=long_error)
    add_failed(engine, "failed-other-kind", kind="hisobot")
    add(engine, "pending")

    code, out, _ = run(capsys, "list", "--holat", "xato", "--tur", "eslatma", "--json")
    assert code == 0
    [listed] = json.loads(out)
    assert listed["id"] == failed
    assert listed["oxirgi_xato"] == long_error
    assert listed["payload"] == {"chat_id": 42, "text": "eslatma failed"}
    assert listed["tarix"][0]["xato"] == long_error

    code, out, _ = run(capsys, "list", "--holat", "failed", "--limit", "1")  # English works too
    assert code == 0
    assert out.splitlines()[2:] == ["(the newest 1 shown; more match: --limit N)"]
    assert len(run(capsys, "list", "--limit", "3")[1].splitlines()) == 4  # exactly 3: no note

    code, out, _ = run(capsys, "list", "--holat", "bajarildi")
    assert (code, out) == (0, "no outbox messages match\n")


def test_list_names_the_queue_of_each_row_once_a_named_queue_is_among_them(
    engine: sa.Engine, outbox_db: str, capsys: pytest.CaptureFixture[str]
) -> None:
    plain = add(engine, "plain")
    shop = add_failed(engine, "shop", queue="shop_bot")

    code, out, _ = run(capsys, "list")
    assert code == 0
    header, *lines = out.splitlines()
    assert header.split()[:3] == ["id", "navbat", "tur"]
    assert [line.split()[:2] for line in lines] == [
        [str(shop), "shop_bot"],
        [str(plain), "default"],
    ]
    start = header.index("tur")
    assert all(line[start - 2 : start] == "  " for line in lines)  # still aligned

    # One bot's rows alone still say which bot: the column is about named queues, not variety.
    code, out, _ = run(capsys, "list", "--holat", "xato")
    assert out.splitlines()[1].split()[:2] == [str(shop), "shop_bot"]
    code, out, _ = run(capsys, "list", "--queue", "default")
    assert "navbat" not in out.splitlines()[0]  # the default queue alone: one bot, no column

    code, out, _ = run(capsys, "list", "--json")
    assert [(m["id"], m["navbat"]) for m in json.loads(out)] == [
        (shop, "shop_bot"),
        (plain, "default"),
    ]


# --- show ----------------------------------------------------------------------------------------


def test_show_prints_one_message_in_full_with_its_marker(
    engine: sa.Engine, outbox_db: str, capsys: pytest.CaptureFixture[str]
) -> None:
    row_id = add_failed(engine, "shown")
    add_marker(engine, "shown", message_id=555)

    code, out, _ = run(capsys, "show", str(row_id))

    assert code == 0
    assert f"id               {row_id}" in out
    assert "holat            xato" in out
    assert f"oxirgi_xato      {BLOCKED}" in out
    assert "Telegram message 555 in chat 42" in out
    assert '"text": "eslatma shown"' in out
    assert "tarix (1)" in out and BLOCKED in out.split("tarix (1)")[1]

    code, out, _ = run(capsys, "show", str(row_id), "--json")
    shown = json.loads(out)
    assert code == 0
    assert shown["yuborilgan"]["message_id"] == 555
    assert shown["kalit"] == "shown" and shown["urinish"] == 3
    assert set(shown) >= {"band_vaqti", "yaratilgan", "yangilangan", "keyingi_urinish"}


def test_show_names_the_queue(
    engine: sa.Engine, outbox_db: str, capsys: pytest.CaptureFixture[str]
) -> None:
    shop = add(engine, "shop", queue="shop_bot")
    plain = add(engine, "plain")

    assert "navbat           shop_bot\n" in run(capsys, "show", str(shop))[1]
    assert "navbat           default\n" in run(capsys, "show", str(plain))[1]
    assert json.loads(run(capsys, "show", str(shop), "--json")[1])["navbat"] == "shop_bot"


def test_show_unknown_and_malformed_ids(outbox_db: str, capsys: pytest.CaptureFixture[str]) -> None:
    assert run(capsys, "show", "404") == (2, "", "outbox: no outbox message with id 404\n")
    code, out, err = run(capsys, "show", "abc")
    assert (code, out) == (2, "")
    assert err == "outbox: 'abc' is not a message id: ids are whole numbers like 42\n"


# --- replay --------------------------------------------------------------------------------------


def test_replay_moves_a_failed_row_back_and_keeps_its_history(
    engine: sa.Engine, outbox_db: str, capsys: pytest.CaptureFixture[str]
) -> None:
    row_id = add_failed(engine, "again")

    code, out, err = run(capsys, "replay", str(row_id))

    assert (code, err) == (0, "")
    assert out == f"replayed message {row_id}: xato -> kutmoqda\n"
    state, attempts, last_error, history, due = row(engine, row_id)
    assert (state, attempts, last_error, due) == ("kutmoqda", 0, None, True)
    assert [entry.get("xato") for entry in history] == [BLOCKED, None]
    assert history[1]["hodisa"] == "replay"
    assert history[1]["oxirgi_xato"] == BLOCKED and history[1]["urinish"] == 3


def test_replay_refuses_a_row_that_is_not_failed_and_says_its_state(
    engine: sa.Engine, outbox_db: str, capsys: pytest.CaptureFixture[str]
) -> None:
    pending = add(engine, "pending")
    claimed = add(engine, "claimed")
    update(engine, claimed, "holat = 'bajarilmoqda', urinish = 1, band_vaqti = now()")

    code, out, err = run(capsys, "replay", str(pending))
    assert (code, out) == (7, "")
    assert err == (
        f"outbox: message {pending} not replayed: it is kutmoqda, not xato "
        "(it is already waiting to be sent)\n"
    )
    code, _, err = run(capsys, "replay", str(claimed), "--force")
    assert code == 7
    assert "it is bajarilmoqda, not xato (a relay is sending it right now)" in err
    assert row(engine, claimed)[:2] == ("bajarilmoqda", 1)


def test_replay_refuses_a_key_already_sent_unless_forced(
    engine: sa.Engine, outbox_db: str, capsys: pytest.CaptureFixture[str]
) -> None:
    row_id = add_failed(engine, "sent-late")
    add_marker(engine, "sent-late", message_id=991)

    code, out, err = run(capsys, "replay", str(row_id))
    assert (code, out) == (7, "")
    assert err.startswith(f"outbox: message {row_id} not replayed: it was already sent at 20")
    assert "as Telegram message 991 in chat 42; --force sends it again" in err
    assert row(engine, row_id)[0] == "xato"
    assert markers(engine) == ["sent-late"]

    code, out, err = run(capsys, "replay", str(row_id), "--force")
    assert (code, err) == (0, "")
    assert "Telegram message 991" in out and "will be sent again" in out
    # The marker goes with the forced replay: a relay completes a marked key without sending.
    assert markers(engine) == []
    history = row(engine, row_id)[3]
    assert history[-1]["hodisa"] == "replay --force"
    assert history[-1]["yuborilgan"]["message_id"] == 991


def test_replay_of_an_unknown_id_is_one_line_and_exit_2(
    outbox_db: str, capsys: pytest.CaptureFixture[str]
) -> None:
    assert run(capsys, "replay", "12345") == (2, "", "outbox: no outbox message with id 12345\n")


def test_replay_of_several_ids_reports_each_and_the_exit_code_says_if_all_went(
    engine: sa.Engine, outbox_db: str, capsys: pytest.CaptureFixture[str]
) -> None:
    a, b = add_failed(engine, "a"), add_failed(engine, "b")
    done = add(engine, "done")
    update(engine, done, "holat = 'bajarildi'")

    code, out, err = run(capsys, "replay", str(a), str(b))
    assert (code, err) == (0, "")
    assert out.splitlines() == [
        f"replayed message {a}: xato -> kutmoqda",
        f"replayed message {b}: xato -> kutmoqda",
    ]

    c = add_failed(engine, "c")
    code, out, err = run(capsys, "replay", str(c), str(done), str(a))
    assert code == 7
    assert out.splitlines() == [f"replayed message {c}: xato -> kutmoqda"]
    assert [line.split(" not replayed")[0] for line in err.splitlines()] == [
        f"outbox: message {done}",
        f"outbox: message {a}",
    ]

    d = add_failed(engine, "d")
    code, out, err = run(capsys, "replay", str(d), "999", str(a))
    assert code == 2  # an unknown id is an input mistake, whatever else happened
    assert out.splitlines() == [f"replayed message {d}: xato -> kutmoqda"]
    assert "outbox: no outbox message with id 999" in err.splitlines()

    code, out, _ = run(capsys, "replay", str(a), "--json")
    assert code == 7
    answer = json.loads(out)
    assert (answer["replayed"], answer["unknown"]) == ([], [])
    assert answer["refused"][0]["holat"] == "kutmoqda"


def test_replay_all_failed_with_filters_prints_how_many(
    engine: sa.Engine, outbox_db: str, capsys: pytest.CaptureFixture[str]
) -> None:
    old = add_failed(engine, "old")
    update(engine, old, "yangilangan = now() - interval '2 hours'")
    recent = add_failed(engine, "recent")
    report = add_failed(engine, "report", kind="hisobot")
    sent = add_failed(engine, "sent")
    add_marker(engine, "sent")

    code, out, err = run(capsys, "replay", "--all-failed", "--tur", "eslatma", "--since", "1h")
    assert code == 7  # the row whose key was sent is refused and named
    assert out == "replayed 1 failed messages (tur eslatma, failed in the last 1h)\n"
    assert f"message {sent} not replayed: it was already sent" in err
    assert row(engine, recent)[0] == "kutmoqda"
    assert [row(engine, i)[0] for i in (old, report, sent)] == ["xato"] * 3

    code, out, err = run(capsys, "replay", "--all-failed", "--force")
    assert (code, out, err) == (0, "replayed 3 failed messages\n", "")
    assert run(capsys, "replay", "--all-failed")[:2] == (0, "replayed 0 failed messages\n")


def test_replay_all_failed_of_one_queue_says_which(
    engine: sa.Engine, outbox_db: str, capsys: pytest.CaptureFixture[str]
) -> None:
    shop = add_failed(engine, "shop", queue="shop_bot")
    plain = add_failed(engine, "plain")

    code, out, _ = run(capsys, "replay", "--all-failed", "--queue", "shop_bot")
    assert (code, out) == (0, "replayed 1 failed messages (navbat shop_bot)\n")
    assert (row(engine, shop)[0], row(engine, plain)[0]) == ("kutmoqda", "xato")


def test_replay_all_failed_of_one_priority_says_which(
    engine: sa.Engine, outbox_db: str, capsys: pytest.CaptureFixture[str]
) -> None:
    high = add_failed(engine, "high")
    plain = add_failed(engine, "plain")
    with engine.begin() as conn:
        conn.execute(sa.text("UPDATE outbox SET ustuvorlik = 5 WHERE id = :id"), {"id": high})

    code, out, _ = run(capsys, "replay", "--all-failed", "--priority", "5")
    assert (code, out) == (0, "replayed 1 failed messages (ustuvorlik 5)\n")
    assert (row(engine, high)[0], row(engine, plain)[0]) == ("kutmoqda", "xato")


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (["replay"], "give one or more message ids, or --all-failed"),
        (["replay", "1", "--all-failed"], "give message ids or --all-failed, not both"),
        (
            ["replay", "1", "--tur", "eslatma"],
            "--tur, --queue, --bot, --priority and --since only filter --all-failed",
        ),
        (["replay", "1", "--bot", "1001"], "--tur, --queue, --bot, --priority and --since only"),
        (["replay", "1", "--priority", "5"], "--tur, --queue, --bot, --priority and --since only"),
        (["replay", "--all-failed", "--priority", "11"], "--priority: "),
        (["replay", "--all-failed", "--bot", "1:x"], "--bot: give the bot's public id"),
        (["replay", "1", "x2"], "'x2' is not a message id: ids are whole numbers like 42"),
        (["replay", "0"], "'0' is not a message id: ids are whole numbers like 42"),
        (["replay", "--all-failed", "--since", "soon"], "--since: cannot read duration 'soon'"),
    ],
)
def test_replay_bad_input(
    argv: list[str], message: str, outbox_db: str, capsys: pytest.CaptureFixture[str]
) -> None:
    code, out, err = run(capsys, *argv)
    assert (code, out) == (2, "")
    assert err.startswith(f"outbox: {message}") and err.count("\n") == 1


def test_replay_notifies_listening_relays(
    engine: sa.Engine, outbox_db: str, capsys: pytest.CaptureFixture[str]
) -> None:
    row_id = add_failed(engine, "wake")
    with psycopg.connect(outbox_db, autocommit=True) as listener:
        listener.execute("LISTEN outbox")
        assert run(capsys, "replay", str(row_id))[0] == 0
        notes = list(listener.notifies(timeout=5, stop_after=1))
    assert [note.channel for note in notes] == ["outbox"]


def test_two_operators_replaying_one_row_at_once_replay_it_once(
    engine: sa.Engine, outbox_db: str, capsys: pytest.CaptureFixture[str]
) -> None:
    row_id = add_failed(engine, "contended")
    second: dict[str, int] = {}
    with engine.connect() as first:
        transaction = first.begin()
        assert queries.replay(first, [row_id], schema="public")[0].replayed
        thread = threading.Thread(target=lambda: second.update(code=main(["replay", str(row_id)])))
        thread.start()

        def second_waits_for_the_lock() -> bool:
            with engine.begin() as conn:
                return bool(
                    conn.exec_driver_sql(
                        "SELECT count(*) FROM pg_stat_activity "
                        "WHERE datname = current_database() AND wait_event_type = 'Lock'"
                    ).scalar_one()
                )

        wait_until(second_waits_for_the_lock, 10, "the second replay to wait for the lock")
        transaction.commit()
        thread.join(10)
    assert second == {"code": 7}
    assert "it is kutmoqda, not xato" in capsys.readouterr().err
    history = row(engine, row_id)[3]
    assert [entry.get("hodisa") for entry in history] == [None, "replay"]


# --- status --------------------------------------------------------------------------------------


def test_status_counts_and_is_healthy(
    engine: sa.Engine, outbox_db: str, capsys: pytest.CaptureFixture[str]
) -> None:
    add(engine, "p")
    add_failed(engine, "f")
    done = add(engine, "d")
    update(engine, done, "holat = 'bajarildi'")
    add_marker(engine, "d")

    code, out, err = run(capsys, "status")
    # No relay runs here: the due row's queue has nobody to send it (the live relays:
    # tests/e2e/test_relay_registry.py).
    assert code == 0 and err.startswith("outbox: warning: due rows wait and no live relay")
    assert len(err.splitlines()) == 1
    lines = {line.split()[0]: line.split()[1] for line in out.splitlines()}
    assert lines == {
        "kutmoqda": "1", "bajarilmoqda": "0", "bajarildi": "1", "xato": "1",
        "lag": lines["lag"], "stuck": "0", "markers": "1",
    }  # fmt: skip

    code, out, _ = run(capsys, "status", "--json")
    status = json.loads(out)
    assert code == 0 and status["healthy"] is True and status["problems"] == []
    assert status["holat"]["xato"] == status["failed"] == 1 and status["markers"] == 1


def test_status_reads_large_tables_from_their_statistics(
    engine: sa.Engine,
    outbox_db: str,
    capsys: pytest.CaptureFixture[str],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    add(engine, "p")
    with engine.begin() as conn:
        conn.exec_driver_sql(
            "INSERT INTO outbox (kalit, payload, holat) "
            "SELECT 'd' || g, '{}'::jsonb, 'bajarildi' FROM generate_series(1, 1000) g"
        )
        conn.exec_driver_sql(
            "INSERT INTO yuborilgan (kalit, chat_id, message_id) "
            "SELECT 'd' || g, 1, g FROM generate_series(1, 1000) g"
        )
        conn.exec_driver_sql("ANALYZE outbox")
        conn.exec_driver_sql("ANALYZE yuborilgan")
    monkeypatch.setattr(status_queries, "EXACT_COUNT_BELOW", 500)

    code, out, _ = run(capsys, "status")
    lines = {line.split()[0]: line.split(maxsplit=2)[1:] for line in out.splitlines()}
    assert code == 0
    assert lines["kutmoqda"] == ["1"]  # the live states are always counted
    assert lines["bajarildi"] == ["~1000", "about: from table statistics"]
    assert lines["markers"][0] == "~1000"

    code, out, _ = run(capsys, "status", "--json")
    status = json.loads(out)
    assert (status["holat"]["bajarildi"], status["markers"]) == (1000, 1000)
    assert status["estimated"] == ["bajarildi", "markers"]

    monkeypatch.setattr(status_queries, "EXACT_COUNT_BELOW", 5000)
    code, out, _ = run(capsys, "status", "--json")
    assert json.loads(out)["estimated"] == []


def test_status_counts_each_queue_when_there_are_several(
    engine: sa.Engine, outbox_db: str, capsys: pytest.CaptureFixture[str]
) -> None:
    add(engine, "p1", queue="bot1")
    add_failed(engine, "f1", queue="bot1")
    done = add(engine, "d2", queue="bot2")
    update(engine, done, "holat = 'bajarildi'")
    late = add(engine, "p2", queue="bot2")
    update(engine, late, "keyingi_urinish = now() - interval '10 minutes'")

    code, out, err = run(capsys, "status", "--max-lag", "1h")
    assert code == 0 and err.startswith("outbox: warning: ") and len(err.splitlines()) == 1
    totals, per_queue = out.split("\n\n")
    assert totals.splitlines()[0].split() == ["kutmoqda", "2"]
    assert [line.split() for line in per_queue.splitlines()] == [
        ["navbat", "kutmoqda", "bajarilmoqda", "bajarildi", "xato", "lag", "stuck"],
        ["bot1", "1", "0", "0", "1", "0s", "0"],
        ["bot2", "1", "0", "1", "0", "10m", "0"],
    ]

    # The health check names the queue whose relay to look at; its exit code is as before.
    code, out, err = run(capsys, "status", "--max-lag", "5m", "--json")
    assert code == 8
    assert err.splitlines()[-1].startswith(
        "outbox: unhealthy: lag 10m in queue bot2 is over --max-lag 5m"
    )
    status = json.loads(out)
    assert status["holat"] == {"kutmoqda": 2, "bajarilmoqda": 0, "bajarildi": 1, "xato": 1}
    bot1 = status["queues"]["bot1"]
    assert bot1.pop("lag_seconds") < 60  # its row is due since it was added
    assert bot1 == {
        "holat": {"kutmoqda": 1, "bajarilmoqda": 0, "bajarildi": 0, "xato": 1},
        "stuck": 0,
        "stuck_claims": 0,
        "never_due": 0,
        "held": 0,
    }
    assert status["queues"]["bot2"]["holat"]["bajarildi"] == 1
    assert 600 <= status["queues"]["bot2"]["lag_seconds"] < 660

    # One queue asked for: its figures alone, and no table of one line.
    code, out, _ = run(capsys, "status", "--queue", "bot1", "--json")
    assert list(json.loads(out)["queues"]) == ["bot1"]
    code, out, _ = run(capsys, "status", "--queue", "bot1")
    assert "navbat" not in out and out.splitlines()[0].split() == ["kutmoqda", "1"]


def test_status_of_one_queue_has_no_table_and_its_json_the_one_queue(
    engine: sa.Engine, outbox_db: str, capsys: pytest.CaptureFixture[str]
) -> None:
    add(engine, "p")
    code, out, _ = run(capsys, "status")
    assert code == 0 and "navbat" not in out and "\n\n" not in out
    code, out, _ = run(capsys, "status", "--json")
    assert json.loads(out)["queues"]["default"]["holat"]["kutmoqda"] == 1


def test_status_per_queue_leaves_done_rows_uncounted_in_a_large_table(
    engine: sa.Engine,
    outbox_db: str,
    capsys: pytest.CaptureFixture[str],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    add(engine, "p", queue="bot1")
    add_failed(engine, "f", queue="bot2")
    with engine.begin() as conn:
        conn.exec_driver_sql(
            "INSERT INTO outbox (kalit, payload, holat, navbat) "
            "SELECT 'd' || g, '{}'::jsonb, 'bajarildi', 'bot' || (g %% 2 + 1) "
            "FROM generate_series(1, 1000) g"
        )
        conn.exec_driver_sql("ANALYZE outbox")
    monkeypatch.setattr(status_queries, "EXACT_COUNT_BELOW", 500)

    code, out, _ = run(capsys, "status", "--json")
    status = json.loads(out)
    assert code == 0 and status["holat"]["bajarildi"] == 1000 and "bajarildi" in status["estimated"]
    assert {name: q["holat"]["bajarildi"] for name, q in status["queues"].items()} == {
        "bot1": None,
        "bot2": None,
    }
    assert status["queues"]["bot2"]["holat"]["xato"] == 1  # the live states are always counted
    per_queue = run(capsys, "status")[1].split("\n\n")[1]
    assert per_queue.splitlines()[1].split() == ["bot1", "1", "0", "-", "0", "0s", "0"]

    # Asked for one queue, its done rows are counted exactly, as before.
    code, out, _ = run(capsys, "status", "--queue", "bot1", "--json")
    assert json.loads(out)["queues"]["bot1"]["holat"]["bajarildi"] == 500


def test_status_exit_8_on_lag_stuck_claims_and_too_many_failures(
    engine: sa.Engine, outbox_db: str, capsys: pytest.CaptureFixture[str]
) -> None:
    late = add(engine, "late")
    update(engine, late, "keyingi_urinish = now() - interval '10 minutes'")
    later = add(engine, "not-yet")  # pending but not due: no lag
    update(engine, later, "keyingi_urinish = now() + interval '1 hour'")

    code, out, err = run(capsys, "status", "--max-lag", "5m")
    assert code == 8
    # 10m, or a second or two more on a busy machine (the row was written before the command).
    assert re.match(r"outbox: unhealthy: lag 10m(\d+s)? is over --max-lag 5m", err.splitlines()[-1])
    assert "lag" in out  # the report is printed as well
    assert run(capsys, "status", "--max-lag", "1h")[0] == 0

    stuck = add(engine, "stuck")
    update(engine, stuck, "holat = 'bajarilmoqda', band_vaqti = now() - interval '6 minutes'")
    code, out, err = run(capsys, "status", "--max-lag", "1h", "--json")
    assert code == 8
    assert json.loads(out)["stuck"] == 1
    assert "1 claims are older than the 5m lease" in err
    assert run(capsys, "status", "--max-lag", "1h", "--lease", "10m")[0] == 0

    add_failed(engine, "f1")
    add_failed(engine, "f2")
    code, _, err = run(capsys, "status", "--max-lag", "1h", "--lease", "10m", "--max-failed", "1")
    assert code == 8 and "2 failed messages, more than --max-failed 1" in err


# --- reap ----------------------------------------------------------------------------------------


def test_reap_returns_expired_claims(
    engine: sa.Engine, outbox_db: str, capsys: pytest.CaptureFixture[str]
) -> None:
    retry = add(engine, "retry")
    update(
        engine, retry, "holat = 'bajarilmoqda', urinish = 1, band_vaqti = now() - '1h'::interval"
    )
    spent = add(engine, "spent")
    update(
        engine, spent, "holat = 'bajarilmoqda', urinish = 3, band_vaqti = now() - '1h'::interval"
    )
    fresh = add(engine, "fresh")
    update(engine, fresh, "holat = 'bajarilmoqda', urinish = 1, band_vaqti = now()")

    code, out, _ = run(capsys, "reap", "--json")
    assert (code, json.loads(out)) == (0, {"kutmoqda": 1, "xato": 1})
    assert [row(engine, i)[0] for i in (retry, spent, fresh)] == [
        "kutmoqda",
        "xato",
        "bajarilmoqda",
    ]
    assert run(capsys, "reap")[1] == "reaped: 0 back to kutmoqda, 0 to xato\n"


# --- prune ---------------------------------------------------------------------------------------


def test_prune_deletes_old_done_rows_in_batches_and_keeps_what_can_still_be_sent(
    engine: sa.Engine, outbox_db: str, capsys: pytest.CaptureFixture[str]
) -> None:
    old_done = [add(engine, f"old-{i}") for i in range(5)]
    for row_id in old_done:
        update(engine, row_id, "holat = 'bajarildi', yangilangan = now() - interval '8 days'")
    young_done = add(engine, "young")
    update(engine, young_done, "holat = 'bajarildi', yangilangan = now() - interval '1 day'")
    old_failed = add_failed(engine, "old-failed")
    update(engine, old_failed, "yangilangan = now() - interval '90 days'")
    old_pending = add(engine, "old-pending")
    update(engine, old_pending, "yangilangan = now() - interval '90 days'")
    for key in ("old-0", "old-failed", "old-pending", "gone-long-ago"):
        add_marker(engine, key, age="40 days")
    add_marker(engine, "gone-recently", age="10 days")

    code, out, err = run(capsys, "prune", "--older-than", "7d", "--batch-size", "2")

    assert (code, err) == (0, "")
    assert out.splitlines() == [
        "pruned 5 bajarildi rows older than 7d and 2 sent markers older than 30d",
        "kept 1 xato rows: never pruned; see `outbox list --holat xato`",
    ]
    with engine.begin() as conn:
        left = set(conn.exec_driver_sql("SELECT kalit FROM outbox").scalars())
    assert left == {"young", "old-failed", "old-pending"}
    # Markers of rows that can still be sent stay, whatever their age.
    assert markers(engine) == ["gone-recently", "old-failed", "old-pending"]

    code, out, _ = run(capsys, "prune", "--json", "--markers-older-than", "1w")
    assert code == 0
    assert json.loads(out) == {"bajarildi": 0, "yuborilgan": 1, "xato_kept": 1}


def test_prune_refuses_markers_kept_shorter_than_rows(
    outbox_db: str, capsys: pytest.CaptureFixture[str]
) -> None:
    code, out, err = run(capsys, "prune", "--older-than", "7d", "--markers-older-than", "1d")
    assert (code, out) == (2, "")
    assert err.startswith("outbox: --markers-older-than (1d) must not be shorter")


def test_prune_async_for_the_relay_runs_each_batch_in_its_own_transaction(
    engine: sa.Engine, outbox_db: str
) -> None:
    for i in range(3):
        row_id = add(engine, f"done-{i}")
        update(engine, row_id, "holat = 'bajarildi', yangilangan = now() - interval '8 days'")
        add_marker(engine, f"done-{i}", age="31 days")

    async def prune() -> queries.Pruned:
        async with await psycopg.AsyncConnection.connect(outbox_db, autocommit=True) as conn:
            return await queries.prune(
                conn,
                schema="public",
                done_older_than_seconds=7 * 86400,
                markers_older_than_seconds=30 * 86400,
                batch_size=2,
            )

    assert asyncio.run(prune()) == queries.Pruned(done_rows=3, markers=3)
    assert markers(engine) == []
