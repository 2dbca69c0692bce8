"""The trace context of the request that enqueued a row, so that its send joins that trace.

Revision ID: outbox_0015
Revises: outbox_0014
Create Date: 2026-12-02

``traceparent`` and ``tracestate`` on ``outbox`` hold the W3C Trace Context headers of the span
that was current when the app enqueued the row (``outbox.enqueue`` records them when
OpenTelemetry is installed and a span is active); the relay starts its span for each send of
the row as a child of that context. NULL, as every old row and the lesson's plain INSERT have
it, means no trace: the relay's span, if it traces, starts one of its own. They are kept apart
from ``payload``, which is Telegram's request and nothing else.

No check: a value written by hand that does not parse is ignored by the relay, as a
propagator ignores a malformed header.

Locks: the outbox table's ACCESS EXCLUSIVE lock for a moment. A nullable column without a
default changes only the catalogue: no row is read or rewritten, however large the table.
Measured on an outbox of 1,000,000 rows (247 MB, embedded PostgreSQL 16, a shared 2-core
machine): the ALTER TABLE took 0.4-4.4 ms, and the table's size did not change.

A relay of the previous release that is running keeps working against this schema (its
statements name neither column, and its rows are written with both NULL); one started after
this revision refuses with one line, as for any newer schema. Apps of the previous release
enqueue as before (without a trace). Migrate before upgrading the app: this release's enqueue
names the columns.
"""

from __future__ import annotations

from alembic import op

from outbox.migrate import revision_comment, target_schema

revision = "outbox_0015"
down_revision = "outbox_0014"
branch_labels = None
depends_on = None


def upgrade() -> None:
    s = f'"{target_schema()}"'
    op.execute(f"ALTER TABLE {s}.outbox ADD COLUMN traceparent text, ADD COLUMN tracestate text")
    op.execute(revision_comment(revision))


def downgrade() -> None:
    s = f'"{target_schema()}"'
    op.execute(f"ALTER TABLE {s}.outbox DROP COLUMN tracestate, DROP COLUMN traceparent")
    op.execute(revision_comment(down_revision))
