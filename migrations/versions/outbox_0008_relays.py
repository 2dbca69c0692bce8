"""The fleet's register: one row per running relay, kept fresh by its heartbeat.

Revision ID: outbox_0008
Revises: outbox_0007
Create Date: 2026-12-01

``relaylar`` (relays): each relay inserts its row when it starts, rewrites ``oxirgi_signal``
(last heartbeat) and its figures every ``signal_oraligi`` seconds, and deletes the row when it
stops cleanly. A relay killed with ``kill -9`` leaves its row behind: readers call it gone once
its heartbeat is several intervals old (``outbox relays``, the web page, ``outbox status``),
and maintenance deletes it later. Times come from the database clock, so hosts whose clocks
disagree still agree on who is alive.

Columns: ``id`` (a random id the relay picks at start), ``host``, ``pid``, ``versiya`` (the
package version), ``navbatlar`` (queues served), ``botlar`` (the public ids of its bots),
``boshlangan`` (started), ``oxirgi_signal`` (last heartbeat), ``signal_oraligi`` (seconds
between heartbeats), ``jarayonda`` (sends in flight), ``jami`` (its totals so far, by outcome).

Locks: a new table only; nothing else is touched or waited for.
"""

from __future__ import annotations

from alembic import op

from outbox.migrate import revision_comment, target_schema

revision = "outbox_0008"
down_revision = "outbox_0007"
branch_labels = None
depends_on = None


def upgrade() -> None:
    s = f'"{target_schema()}"'
    op.execute(
        f"""
        CREATE TABLE {s}.relaylar (
            id text PRIMARY KEY CHECK (id ~ '^[0-9a-f]{{8,64}}$'),
            host text NOT NULL,
            pid integer NOT NULL,
            versiya text NOT NULL,
            navbatlar text[] NOT NULL,
            botlar text[] NOT NULL,
            boshlangan timestamptz NOT NULL DEFAULT now(),
            oxirgi_signal timestamptz NOT NULL DEFAULT now(),
            signal_oraligi double precision NOT NULL CHECK (signal_oraligi > 0),
            jarayonda integer NOT NULL DEFAULT 0,
            jami jsonb NOT NULL DEFAULT '{{}}'
        )
        """
    )
    op.execute(revision_comment(revision))


def downgrade() -> None:
    s = f'"{target_schema()}"'
    op.execute(f"DROP TABLE {s}.relaylar")
    op.execute(revision_comment(down_revision))
