"""The claim and the completion read what they need, whatever the table's statistics say.

A broadcast fills the outbox faster than autovacuum analyses it, and other queues (other bots)
pile up rows due before this queue's: the claim must still read its own batch only, and the
completion probe each row by its primary key. The plans are read with EXPLAIN ANALYZE (rows
read and discarded), never timed. Also: revision outbox_0012 swaps the indexes without losing a
row, both ways.

Here the db tier's tests (PostgreSQL, in the test's process); the others are in
``tests/unit/test_claim_indexes.py``.
"""

from __future__ import annotations

import asyncio
from collections.abc import Iterator
from typing import Any, cast

import psycopg
from alembic import command
from psycopg import sql

from outbox import migrate, queries
from outbox.db import async_connect
from outbox.queries.claim import claim_statement
from outbox.queries.relay import record_statement
from outbox.schema import current_schema
from outbox.states import State

_FILL = """
INSERT INTO outbox (kalit, payload, navbat, keyingi_urinish)
SELECT %(prefix)s || g, jsonb_build_object('chat_id', 1000 + g, 'text', %(text)s || g), %(navbat)s,
       now() - make_interval(secs => %(ago)s)
FROM generate_series(1, %(n)s) AS g
"""
_LIMITS = queries.ClaimLimits(chat_gap=1.1, group_gap=3.1)  # the defaults, per-bot limit off


def _fill(
    conn: psycopg.Connection[Any],
    n: int,
    *,
    navbat: str = "default",
    ago: float = 0.0,
    prefix: str = "k",
    text: str = "x",
) -> None:
    conn.execute(_FILL, {"n": n, "navbat": navbat, "ago": ago, "prefix": prefix, "text": text})


def _nodes(plan: dict[str, Any]) -> Iterator[dict[str, Any]]:
    yield plan
    for child in plan.get("Plans", ()):
        yield from _nodes(child)


def _explain(conn: psycopg.Connection[Any], statement: str, params: Any) -> list[dict[str, Any]]:
    """The nodes of the statement's plan as it ran; its writes are rolled back."""
    conn.execute("BEGIN")
    try:
        found = (
            _cursor(conn, params)
            .execute("EXPLAIN (ANALYZE, FORMAT JSON) " + statement, params)
            .fetchone()
        )
    finally:
        conn.execute("ROLLBACK")
    assert found is not None
    return list(_nodes(found[0][0]["Plan"]))


def _cursor(conn: psycopg.Connection[Any], params: Any) -> psycopg.Cursor[Any]:
    """The claim has ``$n`` placeholders (a list of values): a raw cursor, as the relay's."""
    return psycopg.RawCursor(conn) if isinstance(params, list) else conn.cursor()


def _discarded(nodes: list[dict[str, Any]]) -> int:
    """Rows the plan read and threw away (filters and rechecks), over all its loops."""
    return sum(
        int(node.get(key, 0)) * int(node.get("Actual Loops", 1))
        for node in nodes
        for key in ("Rows Removed by Filter", "Rows Removed by Index Recheck")
    )


def _claim(conn: psycopg.Connection[Any], navbat: str = "default") -> list[dict[str, Any]]:
    statement, params = claim_statement(
        64, schema="public", queue=navbat, bot="default", limits=_LIMITS
    )
    return _explain(conn, statement, params)


def _connect(db_url: str) -> psycopg.Connection[Any]:
    conn = psycopg.connect(db_url, autocommit=True)
    # No statistics but those the test makes: autovacuum must not analyse behind its back.
    conn.execute("ALTER TABLE outbox SET (autovacuum_enabled = false)")
    conn.execute("INSERT INTO bot_holati (bot) VALUES ('default') ON CONFLICT DO NOTHING")
    return conn


def test_a_claim_beside_a_backlog_never_analysed_reads_only_its_batch(db_url: str) -> None:
    with _connect(db_url) as conn:
        _fill(conn, 5_000)
        nodes = _claim(conn)
    assert max(int(n.get("Actual Rows", 0)) for n in nodes if n["Node Type"] == "ModifyTable") == 64
    # Before outbox_0012: "is a suspect of this queue due?" read all 5,000 pending rows.
    assert _discarded(nodes) < 500


def test_the_relays_plan_beside_a_backlog_never_analysed_probes_each_priority_once(
    db_url: str,
) -> None:
    """The relay plans its claim once per connection (a generic plan), as likely as not before
    autovacuum has analysed a broadcast's rows: the outbox's statistics then say its indexes
    hold no row. The probes for the queue's priorities must still read one index entry each.
    Before, ``max(ustuvorlik)`` was planned as an aggregate over a bitmap scan of every
    pending row of the queue, on every claim (here beside 50,000 rows of 400 characters; a
    claim of 128 took 28-30 ms beside 150,000 rows, against 5 ms now)."""
    with _connect(db_url) as conn:
        _fill(conn, 50_000, text="x" * 400)
    explained = asyncio.run(_relay_plan(db_url))
    read = [
        int(n.get("Actual Rows", 0)) * int(n.get("Actual Loops", 1))
        for n in _nodes(explained)
        if n.get("Relation Name") == "outbox"
    ]
    assert max(read) <= 64, sorted(read)[-3:]


async def _relay_plan(db_url: str) -> dict[str, Any]:
    """The plan of a claim of 64 as the relay's connection prepared it, as it ran (its writes
    rolled back)."""
    conn = await async_connect(db_url)  # prepared after the second use, as the relay's
    try:
        await queries.prefer_generic_plans(conn)
        for _ in range(4):  # the first walks every priority; the fourth is prepared
            await queries.claim_due(conn, 64, schema="public", limits=_LIMITS)
        cursor = await conn.execute(
            "SELECT name, parameter_types::text[] FROM pg_prepared_statements "
            "WHERE statement LIKE '%WITH RECURSIVE q%'"
        )
        found = cast("tuple[str, list[str]] | None", await cursor.fetchone())
        assert found is not None
        name, types = found
        _, params = claim_statement(
            64, schema="public", queue="default", bot="default", limits=_LIMITS, priorities=(0,)
        )
        values: list[sql.Composable] = [
            sql.SQL("{}::{}").format(sql.Literal(value), sql.SQL(kind))
            for value, kind in zip(params, types, strict=True)
        ]
        arguments = sql.SQL(", ").join(values)
        await conn.execute("BEGIN")
        try:
            cursor = await conn.execute(
                sql.SQL("EXPLAIN (ANALYZE, FORMAT JSON) EXECUTE {}({})").format(
                    sql.Identifier(name), arguments
                )
            )
            row = cast("tuple[Any, ...] | None", await cursor.fetchone())
        finally:
            await conn.execute("ROLLBACK")
    finally:
        await conn.close()
    assert row is not None
    plan: dict[str, Any] = row[0][0]["Plan"]
    return plan


def test_a_claim_does_not_walk_the_rows_other_queues_have_due_first(db_url: str) -> None:
    with _connect(db_url) as conn:
        _fill(conn, 500)
        conn.execute("ANALYZE outbox")  # the statistics say: every row is this queue's
        for k in range(3):
            _fill(conn, 2_000, navbat=f"bot_{k}", ago=3600.0, prefix=f"other{k}-")
        nodes = _claim(conn)
    scanned = {n.get("Index Name") for n in nodes if n.get("Relation Name") == "outbox"}
    assert "outbox_kutmoqda_idx" not in scanned
    assert _discarded(nodes) < 500


def test_outcomes_are_written_through_the_primary_key(db_url: str) -> None:
    with _connect(db_url) as conn:
        _fill(conn, 20_000)
        conn.execute("ANALYZE outbox")
        # Each completed claim leaves a dead entry in the index of claimed rows (no vacuum).
        for _ in range(30):
            statement, params = claim_statement(
                64, schema="public", queue="default", bot="default", limits=_LIMITS
            )
            rows = _cursor(conn, params).execute(statement, params).fetchall()
            done = [queries.Outcome(r[0], r[4], State.DONE, claimed_at=r[5]) for r in rows]
            conn.execute(*record_statement(done, schema="public"))
        rows = _cursor(conn, params).execute(statement, params).fetchall()
        outcomes = [
            queries.Outcome(
                r[0], r[4], State.DONE, claimed_at=r[5], key=r[2], chat_id=1, message_id=r[0]
            )
            for r in rows
        ]
        nodes = _explain(conn, *record_statement(outcomes, schema="public"))
    reads = [
        n for n in nodes if n.get("Relation Name") == "outbox" and n["Node Type"] != "ModifyTable"
    ]
    # One probe per outcome: not the index of claimed rows, whose dead entries it cannot see.
    assert [(n["Node Type"], n.get("Index Name")) for n in reads] == [("Index Scan", "outbox_pkey")]
    assert sum(int(n["Actual Rows"]) * int(n["Actual Loops"]) for n in reads) == 64


_INDEXES = "SELECT indexname FROM pg_indexes WHERE tablename = 'outbox' ORDER BY 1"


def test_revision_0012_swaps_the_indexes_and_keeps_every_row(db_url: str) -> None:
    config = migrate._config(db_url, migrate.SCRIPT_PACKAGE, current_schema())
    with psycopg.connect(db_url, autocommit=True) as conn:
        new_indexes = [r for (r,) in conn.execute(_INDEXES)]
    command.downgrade(config, "outbox_0011")  # the revision before it
    with psycopg.connect(db_url, autocommit=True) as conn:
        old_indexes = [r for (r,) in conn.execute(_INDEXES)]
        _fill(conn, 1_000)
        conn.execute(
            "UPDATE outbox SET holat = 'bajarilmoqda', band_vaqti = now(), egasi = 'h' "
            "WHERE id % 4 = 1"
        )
        conn.execute("UPDATE outbox SET holat = 'bajarildi' WHERE id % 4 = 2")
        conn.execute("UPDATE outbox SET yakka = true WHERE id % 4 = 3")
        before = conn.execute("SELECT md5(string_agg(o::text, ',' ORDER BY id)) FROM outbox o")
        fingerprint = before.fetchone()
    command.upgrade(config, "head")
    with psycopg.connect(db_url, autocommit=True) as conn:
        assert [r for (r,) in conn.execute(_INDEXES)] == new_indexes
        after = conn.execute("SELECT md5(string_agg(o::text, ',' ORDER BY id)) FROM outbox o")
        assert after.fetchone() == fingerprint
        claimed = conn.execute(
            "SELECT count(*) FROM outbox WHERE egasi = 'h' AND holat = 'bajarilmoqda'"
        ).fetchone()
    assert claimed == (250,)
    assert "outbox_kutmoqda_idx" in old_indexes
    assert {"outbox_kutmoqda_idx", "outbox_band_idx", "outbox_egasi_idx"}.isdisjoint(new_indexes)
    assert {"outbox_bajarilmoqda_idx", "outbox_yakka_kutmoqda_idx"} <= set(new_indexes)
