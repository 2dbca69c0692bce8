"""One bad row never stops the queue, and never takes good messages down with it.

Rows written by plain SQL beside good rows, through real relay processes and the fake Bot API:
the relay stays up, the bad row ends in a clear state, every good row goes out once. Most of
these rows are refused by the table since migration outbox_0002; the relay is tested without
those constraints too, since a table migrated earlier, or altered by hand, may hold them.

Here the db tier's tests (PostgreSQL, in the test's process); the others are in
``tests/e2e/test_poison_rows.py``.
"""

from __future__ import annotations

import asyncio
import json

import pytest
import sqlalchemy as sa

from outbox import api, migrate, queries
from outbox.db import async_connect, create_engine
from outbox.relay.maintenance import Reaper
from tests.support import enqueue_numbered, row, run_cli, states
from tests.support.bad_rows import DEEP, INSERT, drop_row_limits, execute

FIRST_CHAT = 1000


def test_the_table_refuses_rows_no_relay_could_deliver(engine: sa.Engine) -> None:
    refused = {
        "outbox_payload_depth": INSERT.format(payload='{"a": ' + DEEP + "}"),
        "outbox_payload_object": INSERT.format(payload="[1, 2]"),
        "outbox_payload_size": INSERT.format(payload='{"text": "' + "x" * 70_000 + '"}'),
        "outbox_urinish_range": "INSERT INTO outbox (payload, urinish) VALUES ('{}', 2147483647)",
        "outbox_keyingi_urinish_finite": (
            "INSERT INTO outbox (payload, keyingi_urinish) VALUES ('{}', 'infinity')"
        ),
        "outbox_band_vaqti_finite": (
            "INSERT INTO outbox (payload, band_vaqti) VALUES ('{}', '-infinity')"
        ),
        "outbox_claimed_has_band_vaqti": (
            "INSERT INTO outbox (payload, holat) VALUES ('{}', 'bajarilmoqda')"
        ),
    }
    for constraint, statement in refused.items():
        with pytest.raises(sa.exc.IntegrityError, match=constraint):
            execute(engine, statement)
    # The lesson's INSERT still works, and so does a payload nested 32 levels deep.
    execute(
        engine,
        "INSERT INTO outbox (tur, kalit, payload) "
        """VALUES ('eslatma', 'dars', '{"chat_id": 42, "text": "Salom"}')""",
    )
    nested = '{"a": ' * 31 + "1" + "}" * 31
    execute(engine, INSERT.format(payload=nested))
    assert states(engine)["kutmoqda"] == 2


def test_status_counts_rows_stuck_in_any_way_and_show_prints_any_row(
    engine: sa.Engine,
    db_url: str,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    # The commands run in this process (fifteen of them: a process each took seconds); an
    # exception escaping one fails the test as a traceback would.
    monkeypatch.setenv("OUTBOX_DATABASE_URL", db_url)
    drop_row_limits(engine)
    execute(engine, INSERT.format(payload='{"deep": ' + DEEP + "}"))
    execute(
        engine,
        "INSERT INTO outbox (kalit, payload, holat, keyingi_urinish, band_vaqti, yaratilgan, tarix)"
        " VALUES ('never', '{}', 'kutmoqda', 'infinity', NULL, '-infinity', '7'),"
        " ('unclaimed', '{}', 'bajarilmoqda', now(), NULL, now(), '[]'),"
        " ('expired', '{}', 'bajarilmoqda', now(), now() - interval '1 hour', now(), '[]')",
    )
    with engine.begin() as conn:
        status = api.queue_status(conn, lease_seconds=300)
    assert (status.stuck, status.stuck_claims, status.never_due) == (3, 2, 1)

    code, out, err = run_cli(capsys, "status", "--json")
    assert code == 8, err
    report = json.loads(out)
    assert (report["stuck"], report["stuck_claims"], report["never_due"]) == (3, 2, 1)
    assert "2 claims are older than the 5m lease or have no claim time" in err
    assert "1 pending rows are due at infinity" in err

    for key in ("bad", "never", "unclaimed"):
        row_id = str(row(engine, key, plain=True)["id"])
        for argv in (("show", row_id), ("show", row_id, "--json"), ("list",), ("list", "--json")):
            code, _, err = run_cli(capsys, *argv)
            assert code == 0, (argv, err)
            assert "Traceback" not in err
    bad_id = str(row(engine, "bad", plain=True)["id"])
    _, out, _ = run_cli(capsys, "show", bad_id)
    assert "unreadable: payload is nested too deeply to decode" in out
    _, out, _ = run_cli(capsys, "show", bad_id, "--json")
    assert json.loads(out)["payload"].startswith('{"deep": [[[')


def test_the_migration_fails_offending_rows_with_the_reason_and_loses_none(
    empty_db_url: str,
) -> None:
    url = empty_db_url
    migrate.upgrade(url, "outbox_0001")
    engine = create_engine(url)
    try:
        bad = {
            "deep": ("kutmoqda", "payload", '\'{"a": ' + DEEP + "}'", "nested more than 32"),
            "list": ("kutmoqda", "payload", "'[1, 2]'", "payload is a JSON array"),
            "huge": ("xato", "payload", '\'{"text": "' + "x" * 70_000 + "\"}'", "more than 65536"),
            "attempts": ("kutmoqda", "urinish", "2147483647", "urinish 2147483647 is outside"),
            "never": ("kutmoqda", "keyingi_urinish", "'infinity'", "keyingi_urinish is infinity"),
            "unclaimed": ("bajarilmoqda", "band_vaqti", "NULL", "without a claim time"),
            "done_deep": ("bajarildi", "payload", '\'{"a": ' + DEEP + "}'", "nested more than"),
        }
        with engine.begin() as conn:
            for i in range(3):
                conn.exec_driver_sql(
                    "INSERT INTO outbox (kalit, payload) VALUES "
                    f"""('good{i}', '{{"chat_id": {FIRST_CHAT + i}, "text": "yaxshi"}}')"""
                )
            for key, (state, column, value, _) in bad.items():
                conn.exec_driver_sql(
                    "INSERT INTO outbox (kalit, payload, holat, band_vaqti) VALUES "
                    f"""('{key}', '{{"chat_id": 1, "text": "x"}}', '{state}', now())"""
                )
                conn.exec_driver_sql(f"UPDATE outbox SET {column} = {value} WHERE kalit = '{key}'")
            before = {
                key: text
                for key, text in conn.exec_driver_sql("SELECT kalit, payload::text FROM outbox")
            }

        migrate.upgrade(url)

        with engine.begin() as conn:
            rows = {
                r.kalit: r
                for r in conn.exec_driver_sql(
                    "SELECT kalit, holat, payload::text AS payload, oxirgi_xato, "
                    "tarix::text AS tarix FROM outbox"
                )
            }
        assert set(rows) == set(before), "a row was lost"
        for i in range(3):
            good = rows[f"good{i}"]
            assert (good.holat, good.payload, good.oxirgi_xato) == (
                "kutmoqda",
                before[f"good{i}"],
                None,
            )
        for key, (state, column, _, reason) in bad.items():
            found = rows[key]
            assert found.holat == ("bajarildi" if state == "bajarildi" else "xato"), key
            assert found.oxirgi_xato.startswith("refused by migration outbox_0002: "), key
            assert reason in found.oxirgi_xato, (key, found.oxirgi_xato)
            history = json.loads(found.tarix)
            assert history[-1]["hodisa"] == "migration outbox_0002"
            assert history[-1]["holat"] == state
            if column == "payload":
                assert found.payload == "{}"
                assert history[-1]["payload"] == before[key], "the payload was not kept"
        with pytest.raises(sa.exc.IntegrityError, match="outbox_payload_depth"):
            execute(engine, INSERT.format(payload='{"a": ' + DEEP + "}"))
    finally:
        engine.dispose()


# --- the reaper's accounting and the claim of suspects, statement by statement ---------------


def test_an_expired_claim_counts_only_for_a_row_its_relay_held_alone(
    engine: sa.Engine, db_url: str
) -> None:
    claimed = "holat = 'bajarilmoqda', urinish = 2, band_vaqti = now() - interval '1 hour'"
    with engine.begin() as conn:
        for key, holder in (("a", "dead:1"), ("b", "dead:1"), ("c", "dead:1"), ("d", "dead:2")):
            conn.exec_driver_sql(
                f"INSERT INTO outbox (kalit, payload) VALUES ('{key}', '{{}}'); "
                f"UPDATE outbox SET {claimed}, egasi = '{holder}' WHERE kalit = '{key}'"
            )
        conn.exec_driver_sql(  # claimed by hand: nobody to share the blame with
            "INSERT INTO outbox (kalit, payload) VALUES ('e', '{}'); "
            f"UPDATE outbox SET {claimed.replace('= 2', '= 3')} WHERE kalit = 'e'"
        )

    async def reap() -> queries.Reaped:
        conn = await async_connect(db_url)
        try:
            return await queries.reap_stale(conn, schema="public", lease_seconds=60, max_attempts=3)
        finally:
            await conn.close()

    assert asyncio.run(reap()) == queries.Reaped(pending=4, failed=1)
    for key in "abc":
        found = row(engine, key, plain=True)
        assert (found["holat"], found["urinish"]) == ("kutmoqda", 1), key
        assert "while its relay held 3 rows" in found["oxirgi_xato"]
    assert (
        row(engine, "d", plain=True)["holat"],
        row(engine, "d", plain=True)["urinish"],
    ) == ("kutmoqda", 2)
    assert row(engine, "e", plain=True)["holat"] == "xato"
    with engine.begin() as conn:
        alone = conn.exec_driver_sql("SELECT count(*) FROM outbox WHERE yakka").scalar_one()
    assert alone == 5


def test_a_live_relay_never_reaps_the_rows_it_still_holds(engine: sa.Engine, db_url: str) -> None:
    # A relay late with its outcomes (a stalled machine) is alive: its reaper must not hand its
    # own rows to the next claim, which would send them a second time.
    enqueue_numbered(engine, 3, first_chat=FIRST_CHAT)

    async def claim_then_reap() -> tuple[list[int], queries.Reaped]:
        conn = await async_connect(db_url)
        try:
            claimed = [r.id for r in await queries.claim_due(conn, 3, schema="public")]
            await conn.execute("UPDATE outbox SET band_vaqti = now() - interval '1 hour'")
            still_held = set(claimed[:2])  # the third's outcome was written, say, then lost
            reaper = Reaper("public", 60, 3, held=lambda: still_held)
            return claimed, await reaper.run_once(conn)
        finally:
            await conn.close()

    claimed, reaped = asyncio.run(claim_then_reap())
    assert reaped == queries.Reaped(pending=1, failed=0)
    with engine.begin() as conn:
        found: dict[int, str] = dict(
            conn.exec_driver_sql("SELECT id, holat FROM outbox").fetchall()
        )
    assert [found[i] for i in claimed] == ["bajarilmoqda", "bajarilmoqda", "kutmoqda"]


def test_a_suspect_is_claimed_alone_and_holds_back_every_batch(
    engine: sa.Engine, db_url: str
) -> None:
    enqueue_numbered(engine, 5, first_chat=FIRST_CHAT)
    execute(engine, "UPDATE outbox SET yakka = true WHERE kalit IN ('n1', 'n3')")

    async def claims() -> list[list[str]]:
        conn = await async_connect(db_url)
        try:
            taken = []
            for _ in range(3):
                rows = await queries.claim_due(conn, 10, schema="public")
                taken.append([r.key for r in rows])
                if rows and rows[0].key in ("n1", "n3"):
                    # While the suspect is held, this process claims nothing else.
                    assert await queries.claim_due(conn, 10, schema="public") == []
                    done = [queries.Outcome.for_row(r, "bajarildi") for r in rows]
                    await queries.record_outcomes(conn, done, schema="public")
            return taken
        finally:
            await conn.close()

    assert asyncio.run(claims()) == [["n1"], ["n3"], ["n0", "n2", "n4"]]
