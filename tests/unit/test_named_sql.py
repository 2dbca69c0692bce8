"""The named queries: the loader's rewriting, the claim's size, and golden files of the
statements on the hot path, so that any change to them shows in review.

Regenerate the golden files after an intended change: ``OUTBOX_UPDATE_GOLDEN=1 pytest
tests/unit/test_named_sql.py``, then read the diff.
"""

from __future__ import annotations

import ast
import os
import re
from pathlib import Path

import pytest

from outbox import sql

GOLDEN = Path(__file__).parent.parent / "golden"
# The statements a change must not slip past a reviewer: the claim and the outcome write.
CLAIM = ("claim_rows", "claim_oldest", "claim_take")
HOT_PATH = (*CLAIM, "record_outcomes", "record_outcomes_moved")


@pytest.mark.parametrize("name", HOT_PATH)
def test_the_hot_paths_statements_match_their_golden_files(name: str) -> None:
    sent = sql.sql(name, "public") + "\n"
    golden = GOLDEN / f"{name}.sql"
    if os.environ.get("OUTBOX_UPDATE_GOLDEN"):
        golden.write_text(sent, encoding="utf-8")
    assert golden.read_text(encoding="utf-8") == sent, (
        f"{name} changed: if that is intended, OUTBOX_UPDATE_GOLDEN=1 rewrites {golden}"
    )


def test_no_claim_statement_is_over_8_kb_as_sent() -> None:
    sizes = {
        name: len(sql.sql(name, "a_long_schema_name_of_fifty_characters_0123456789"))
        for name in CLAIM
    }
    assert max(sizes.values()) <= 8192, sizes


def test_tables_are_qualified_and_placeholders_made_psycopgs() -> None:
    source = "SELECT o.id, 'outbox 5%' -- outbox\nFROM outbox o WHERE o.id = :id::bigint"
    assert sql._rewrite(source, "t", placeholder=lambda n: f"%({n})s", double_percent=True) == (
        "SELECT o.id, 'outbox 5%%'\nFROM \"t\".outbox o WHERE o.id = %(id)s::bigint"
    )
    assert sql._rewrite(source, "t") == (
        "SELECT o.id, 'outbox 5%'\nFROM \"t\".outbox o WHERE o.id = :id::bigint"
    )


def test_a_column_or_alias_named_like_a_table_is_left_alone() -> None:
    source = 'SELECT x.outbox, "pauza", pauza_tugashi FROM pauza p'
    assert sql._rewrite(source, "s", placeholder=lambda n: f"%({n})s", double_percent=True) == (
        'SELECT x.outbox, "pauza", pauza_tugashi FROM "s".pauza p'
    )


def test_every_query_has_a_unique_name_and_a_body() -> None:
    names = sql.query_names()
    assert len(names) == len(set(names))
    assert all(sql.source(name).strip() for name in names)
    with pytest.raises(KeyError, match="no query named"):
        sql.source("no_such_query")


# Alembic's own machinery runs DDL built from the schema's name (outbox.migrate); every other
# statement of the package is a named query.
_STATEMENT = re.compile(r"\s*(SELECT|INSERT|UPDATE|DELETE|WITH)\s")
_MIGRATION_MACHINERY = {"migrate.py"}


def test_no_module_writes_a_statement_of_its_own() -> None:
    package = Path(sql.__file__).parent.parent
    found = [
        f"{path.relative_to(package)}:{node.lineno}"
        for path in sorted(package.rglob("*.py"))
        if path.name not in _MIGRATION_MACHINERY
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8")))
        if isinstance(node, ast.Constant)
        and isinstance(node.value, str)
        and _STATEMENT.match(node.value)
    ]
    assert found == []
