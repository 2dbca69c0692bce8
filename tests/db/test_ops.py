"""The operator's layer: one operation, the same answer on every connection it runs on, and
every named query of the operator's files accepted by the server in a schema of its own."""

from __future__ import annotations

import asyncio
import re
from datetime import UTC, datetime, timedelta
from importlib import resources
from typing import Any

import psycopg
import pytest
import sqlalchemy as sa

from outbox import api, ops, queries, sql
from outbox.db import operator_connection, operator_connection_async
from outbox.errors import InvalidInput, SchemaMissing
from outbox.queries import Scope
from outbox.schema import notify_channel

OPERATOR_FILES = ("operator.sql", "status.sql", "pause.sql", "batch.sql")


def _names_in(file: str) -> list[str]:
    text = (resources.files("outbox.sql") / file).read_text(encoding="utf-8")
    return re.findall(r"^--\s*name:\s*(\w+)", text, re.MULTILINE)


def _seed(engine: sa.Engine) -> None:
    # Due in an hour: no figure moves with the clock between two readings.
    later = datetime.now(UTC) + timedelta(hours=1)
    with engine.begin() as conn:
        for n in range(3):
            payload = {"chat_id": n + 1, "text": "hi"}
            api.enqueue(conn, key=f"k{n}", payload=payload, queue="q1", run_at=later)
        api.enqueue(
            conn, key="b", payload={"chat_id": 9, "text": "x"}, batch="spring", run_at=later
        )
        conn.exec_driver_sql(
            "UPDATE outbox SET holat = 'xato', xato_vaqti = now() WHERE kalit = 'k0'"
        )


def test_an_operation_answers_alike_on_psycopg_async_and_sqlalchemy(
    db_url: str, engine: sa.Engine
) -> None:
    _seed(engine)
    asked: dict[str, Any] = {"schema": "public", "lease_seconds": 300.0, "max_lag": 300.0}
    with operator_connection(db_url, schema="public") as conn:
        by_psycopg = (ops.status(conn, **asked), ops.list_messages(conn, schema="public"))

    async def on_async() -> tuple[ops.StatusReport, list[queries.Message]]:
        async with operator_connection_async(db_url) as conn:
            return (
                await ops.status.run_async(conn, **asked),
                await ops.list_messages.run_async(conn, schema="public"),
            )

    with engine.begin() as host:
        by_sqlalchemy = (ops.status(host, **asked), ops.list_messages(host, schema="public"))
    assert by_psycopg == asyncio.run(on_async()) == by_sqlalchemy
    report, messages = by_psycopg
    assert report.status.counts == {"kutmoqda": 3, "bajarilmoqda": 0, "bajarildi": 0, "xato": 1}
    assert set(report.status.queues) == {"q1", "default"}
    assert report.unserved == {} and report.status.lag_seconds == 0  # nothing is due
    assert [m.key for m in messages] == ["b", "k2", "k1", "k0"]


def test_a_composed_operation_runs_in_the_callers_transaction(
    db_url: str, engine: sa.Engine
) -> None:
    _seed(engine)
    with pytest.raises(RuntimeError), operator_connection(db_url, schema="public") as conn:
        cancelled, progress = ops.batch(conn, "spring", schema="public", cancel=True)
        assert (cancelled, progress.failed, progress.cancelled) == (1, 1, 1)
        raise RuntimeError("the command fails after the cancel")
    with operator_connection(db_url, schema="public") as conn:
        cancelled, progress = ops.batch(conn, "spring", schema="public")
    assert (cancelled, progress.waiting, progress.failed) == (None, 1, 0)  # rolled back


def test_a_pause_names_a_valid_queue_before_the_database_is_asked(db_url: str) -> None:
    with operator_connection(db_url, schema="public") as conn:
        with pytest.raises(InvalidInput):
            ops.pause(conn, Scope.QUEUE, "no spaces allowed", schema="public")
        assert ops.pause(conn, Scope.KIND, "eslatma", schema="public")
        assert not ops.pause(conn, Scope.KIND, "eslatma", schema="public")
        assert [p.value for p in ops.list_pauses(conn, schema="public")] == ["eslatma"]


def test_the_operators_connection_checks_the_schema(empty_db_url: str) -> None:
    with pytest.raises(SchemaMissing), operator_connection(empty_db_url, schema="public"):
        pass


@pytest.mark.parametrize("file", OPERATOR_FILES)
def test_every_operator_query_is_accepted_in_a_schema_of_its_own(db_url: str, file: str) -> None:
    names = _names_in(file)
    assert names, f"no query in {file}?"
    with psycopg.connect(db_url) as conn:
        conn.execute('ALTER SCHEMA public RENAME TO "tenant one"')
        conn.execute("CREATE SCHEMA public")  # empty: an unqualified table would not be found
        for name in names:
            params = dict.fromkeys(re.findall(r"(?<!:):(\w+)", sql.source(name)))
            if "outbox" in params:
                params.update(outbox='"tenant one".outbox', markers='"tenant one".yuborilgan')
            if "channel" in params:
                params["channel"] = notify_channel("tenant one")
            conn.execute("EXPLAIN " + sql.sql(name, "tenant one"), params)
        conn.rollback()
