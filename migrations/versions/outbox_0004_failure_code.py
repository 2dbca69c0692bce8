"""A failure's code and time: what a program tests, and when the row failed.

Revision ID: outbox_0004
Revises: outbox_0003
Create Date: 2026-12-01

``xato_turi`` (kind of error) holds why the last attempt failed as a short word
(``outbox.states.FailureCode``: ``blocked``, ``chat_not_found``, ``rate_limited``,
``transient``, ``too_many_attempts``, ``claim_expired``, ``cancelled``...), beside
``oxirgi_xato``, which says the same to a person and may be worded differently in another
version. Each failure's ``tarix`` entry carries it too. A domain's trigger reads the code, not
the text. Rows that failed before this revision have none (NULL).

``xato_vaqti`` (time of the error) is when the row went to ``xato``; NULL for every other state.
"Failed within" (``replay --since``, ``failed_messages(failed_within_seconds=)``, the web page's
filter) reads it: ``yangilangan`` also moves when the app changes a failed row's payload. For
rows already failed it is taken from their last ``tarix`` entry (every way into xato writes
one), else from ``yangilangan``.

Locks: the revision holds the outbox table's ACCESS EXCLUSIVE lock (relays and the app wait)
from its first statement to its commit. Adding two nullable columns without a default changes
only the catalogue (about 1 ms); the check on the code reads every row once (every value is
NULL, nothing is rewritten); setting ``xato_vaqti`` touches the failed rows only. Measured on
an outbox of 1,000,000 rows of which 10,000 were xato (embedded PostgreSQL, a busy 2-core
machine): 1 ms, 95-115 ms and 200-220 ms, about 0.3 s in all; the check's share grows with the
table, the update's with the failed rows.
"""

from __future__ import annotations

from alembic import op

from outbox.migrate import revision_comment, target_schema

revision = "outbox_0004"
down_revision = "outbox_0003"
branch_labels = None
depends_on = None

# A timestamp as PostgreSQL writes one into JSON (now() in jsonb_build_object): only such text
# is cast, so that an entry written by hand cannot make the upgrade fail.
_ISO_TIME = r"^\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d(\.\d+)?([+-]\d\d(:\d\d)?|Z)$"


def upgrade() -> None:
    s = f'"{target_schema()}"'
    op.execute(
        f"ALTER TABLE {s}.outbox ADD COLUMN xato_turi text, ADD COLUMN xato_vaqti timestamptz"
    )
    # A word, not a list of words: a new code in a later version needs no migration. (Added
    # valid: a NOT VALID constraint would spare the scan, but Alembic's autogenerate in a host
    # app cannot reflect one.)
    op.execute(
        f"ALTER TABLE {s}.outbox ADD CONSTRAINT outbox_xato_turi_word "
        "CHECK (xato_turi ~ '^[a-z_]{1,40}$')"
    )
    op.execute(
        f"""
        UPDATE {s}.outbox
        SET xato_vaqti = CASE WHEN jsonb_typeof(tarix -> -1) = 'object'
                                   AND tarix -> -1 ->> 'vaqt' ~ '{_ISO_TIME}'
                              THEN (tarix -> -1 ->> 'vaqt')::timestamptz
                              ELSE yangilangan END
        WHERE holat = 'xato'
        """
    )
    op.execute(revision_comment(revision))


def downgrade() -> None:
    s = f'"{target_schema()}"'
    op.execute(f"ALTER TABLE {s}.outbox DROP COLUMN xato_vaqti, DROP COLUMN xato_turi")
    op.execute(revision_comment(down_revision))
