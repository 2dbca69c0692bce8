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

from collections.abc import Iterator
from typing import Any

import psycopg
from alembic import command

from outbox import migrate, queries
from outbox import sql as named
from outbox.queries.relay import record_statement
from outbox.schema import current_schema
from outbox.states import State
from tests.support import outbox_columns, rows_fingerprint

_FILL = """
INSERT INTO outbox (kalit, payload, navbat, keyingi_urinish)
SELECT %(prefix)s || g, jsonb_build_object('chat_id', 1000 + g, 'text', %(text)s || g), %(navbat)s,
       now() - make_interval(secs => %(ago)s)
FROM generate_series(1, %(n)s) AS g
"""


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
            conn.cursor().execute("EXPLAIN (ANALYZE, FORMAT JSON) " + statement, params).fetchone()
        )
    finally:
        conn.execute("ROLLBACK")
    assert found is not None
    return list(_nodes(found[0][0]["Plan"]))


def _discarded(nodes: list[dict[str, Any]]) -> int:
    """Rows the plan read and threw away (filters and rechecks), over all its loops."""
    return sum(
        int(node.get(key, 0)) * int(node.get("Actual Loops", 1))
        for node in nodes
        for key in ("Rows Removed by Filter", "Rows Removed by Index Recheck")
    )


def _claim_params(navbat: str = "default", limit: int = 64) -> dict[str, Any]:
    return {
        "bot": "default", "unnamed": True, "queue": navbat, "holder": "test", "limit": limit,
        "reserve": 1 + limit // 10, "rate": 0.0, "horizon": 1.0, "lookahead": 0.0,
        "plan_rows": 5000, "chat_on": True, "idle_ms": "10000", "lanes": [True, False],
        "paid": False, "mark": "{\"allow_paid_broadcast\": true}",
    }  # fmt: skip


def _claim(conn: psycopg.Connection[Any], navbat: str = "default") -> list[dict[str, Any]]:
    """The plan of the claim's locking half (claim_rows), as it ran."""
    return _explain(conn, named.sql("claim_rows", "public"), _claim_params(navbat))


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
    assert int(nodes[0]["Actual Rows"]) == 64
    # Before outbox_0012: "is a suspect of this queue due?" read all 5,000 pending rows.
    assert _discarded(nodes) < 500


def test_a_generic_plan_beside_a_backlog_never_analysed_probes_each_priority_once(
    db_url: str,
) -> None:
    """Behind a pooler nothing is prepared; a direct connection prepares the claim after a
    few uses, and PostgreSQL may then keep a generic plan made before autovacuum analysed a
    broadcast's rows (the statistics say the indexes hold no row). Either way the probes for
    the queue's priorities and the walk must read no more than the batch: here the generic
    plan, beside 50,000 rows of 400 characters in three priorities."""
    with _connect(db_url) as conn:
        _fill(conn, 50_000, text="x" * 400)
        conn.execute("UPDATE outbox SET ustuvorlik = id % 3 - 1")
        conn.execute("SET plan_cache_mode = force_generic_plan")
        nodes = _claim(conn)
    read = [
        int(n.get("Actual Rows", 0)) * int(n.get("Actual Loops", 1))
        for n in nodes
        if n.get("Relation Name") == "outbox"
    ]
    # The claim (64) and the rows the starvation bound adds (1 + 64 // 10), no more.
    assert max(read) <= 64 + 7, sorted(read)[-3:]
    assert _discarded(nodes) < 500


def test_the_chats_order_is_one_probe_of_its_index_per_candidate(db_url: str) -> None:
    """Each candidate asks "an earlier row of this chat still to be sent?" through
    outbox_order_idx, in a generic plan beside a backlog never analysed: 20,000 rows to 2,000
    chats, ten each, so that nine rows in ten are held."""
    with _connect(db_url) as conn:
        conn.execute(
            "INSERT INTO outbox (kalit, payload) SELECT 'k' || g, "
            "jsonb_build_object('chat_id', (g - 1) / 10 + 1, 'text', 'x') "
            "FROM generate_series(1, 20000) g"
        )
        conn.execute("SET plan_cache_mode = force_generic_plan")
        nodes = _claim(conn)
    assert int(nodes[0]["Actual Rows"]) == 64  # 64 chats' first messages
    probes = [n for n in nodes if n.get("Index Name") == "outbox_order_idx"]
    assert probes, "the order's probe does not use its index"
    # About ten rows walked per row taken (the held ones), each one probe, nothing read more.
    loops = sum(int(n["Actual Loops"]) for n in probes)
    assert loops <= 64 * 10 + 10, loops
    assert _discarded(nodes) <= 64 * 9 + 10  # the held rows walked past, no other


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
            rows = conn.execute(_CLAIM_64).fetchall()
            done = [queries.Outcome(r[0], r[1], State.DONE, claimed_at=r[2]) for r in rows]
            conn.execute(*_record(done))
        rows = conn.execute(_CLAIM_64).fetchall()
        outcomes = [
            queries.Outcome(
                r[0], r[1], State.DONE, claimed_at=r[2], key=r[3], chat_id=1, message_id=r[0]
            )
            for r in rows
        ]
        nodes = _explain(conn, *_record(outcomes))
    reads = [
        n for n in nodes if n.get("Relation Name") == "outbox" and n["Node Type"] != "ModifyTable"
    ]
    # One probe per outcome: not the index of claimed rows, whose dead entries it cannot see.
    # (The blocked-chat record probes by the primary key too, only for a chat gone: none here.)
    assert {(n["Node Type"], n.get("Index Name")) for n in reads} == {("Index Scan", "outbox_pkey")}
    assert sum(int(n["Actual Rows"]) * int(n["Actual Loops"]) for n in reads) == 64


# 64 rows claimed as the claim marks them (the plan of the outcome write is what is read).
_CLAIM_64 = """
UPDATE outbox SET holat = 'bajarilmoqda', urinish = urinish + 1, band_vaqti = now(), egasi = 'h'
WHERE id IN (SELECT id FROM outbox WHERE holat = 'kutmoqda' ORDER BY id LIMIT 64)
RETURNING id, urinish, band_vaqti, kalit
"""


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
        columns = outbox_columns(conn)  # later revisions add their own
        fingerprint = rows_fingerprint(conn, columns)
    command.upgrade(config, "head")
    with psycopg.connect(db_url, autocommit=True) as conn:
        assert [r for (r,) in conn.execute(_INDEXES)] == new_indexes
        assert rows_fingerprint(conn, columns) == fingerprint
        claimed = conn.execute(
            "SELECT count(*) FROM outbox WHERE egasi = 'h' AND holat = 'bajarilmoqda'"
        ).fetchone()
    assert claimed == (250,)
    assert "outbox_kutmoqda_idx" in old_indexes
    assert {"outbox_kutmoqda_idx", "outbox_band_idx", "outbox_egasi_idx"}.isdisjoint(new_indexes)
    assert {"outbox_bajarilmoqda_idx", "outbox_yakka_kutmoqda_idx"} <= set(new_indexes)
    # outbox_0014: two indexes of pending rows keyed by lane, for the rows naming a bot or not.
    assert {"outbox_claim_idx", "outbox_lane_kutmoqda_idx"} <= set(new_indexes)
    replaced = {"ustuvorlik", "bot_ustuvorlik", "bot_kutmoqda", "navbat_kutmoqda"}
    assert {f"outbox_{name}_idx" for name in replaced}.isdisjoint(new_indexes)


def _record(outcomes: list[queries.Outcome]) -> tuple[str, dict[str, Any]]:
    """The outcome write of ``outcomes`` as psycopg runs it."""
    name, params = record_statement(outcomes)
    return named.sql(name, "public"), params
