"""The relay's named queries (outbox/sql/relay.sql, timing.sql, maintenance.sql,
heartbeat.sql): each loads for a schema, spells no parameter the psycopg way by hand, and
appends tarix entries with the table's keys only."""

from __future__ import annotations

import re

from outbox import sql, vocabulary

RELAY_QUERIES = {
    "ensure_bot",
    "record_outcomes",
    "record_outcomes_moved",
    "still_claimed",
    "announce_pause",
    "backlog",
    "lanes_timing",
    "try_maintenance_lock",
    "reap_stale",
    "forget_idle_chats",
    "prune_done",
    "prune_markers",
    "count_prunable",
    "relay_heartbeat",
    "forget_relay",
    "forget_gone_relays",
}


def test_every_relay_query_is_named_and_qualified_per_schema() -> None:
    assert set(sql.query_names()) >= RELAY_QUERIES
    for name in RELAY_QUERIES:
        source = sql.source(name)
        assert "%(" not in source and "{" not in source, name  # one placeholder style: :name
        prepared = sql.sql(name, "tenant")
        assert '"tenant".' in prepared or name == "try_maintenance_lock", name
        assert not re.search(r"(?<![\w.\"])(outbox|bot_holati|relaylar) ", prepared), name


def test_the_notify_channel_is_a_parameter_not_a_name_in_the_file() -> None:
    assert "pg_notify(:channel," in sql.source("announce_pause")


def test_tarix_entries_use_the_tables_keys() -> None:
    keys = {n.column for n in vocabulary.HISTORY}
    written: set[str] = set()
    for name in RELAY_QUERIES:
        source = sql.source(name)
        if "tarix ||" in source:
            written |= set(re.findall(r"'([a-z_]+)',", source[source.index("tarix ||") :]))
    assert {"vaqt", "urinish", "xato", "xato_turi"} <= written
    assert written <= keys, written - keys


def test_no_attempt_limit_is_written_in_the_reaper() -> None:
    """The reaper applies the retry policy's limit, given as a parameter."""
    reaper = sql.source("reap_stale")
    assert ":max_attempts" in reaper
    assert not re.search(r"urinish\s*>=?\s*\d", reaper)
