"""The checks of a row's payload, queue and bot run when those are written, not on every update.

Revision ID: outbox_0013
Revises: outbox_0012
Create Date: 2026-12-02

PostgreSQL checks every CHECK constraint of a table on every UPDATE, whatever columns it sets.
A message is updated twice (claimed, then done), and five of the outbox's checks were the
costly kind: the payload serialised to text for its size (``outbox_payload_size``), walked for
its depth (``outbox_payload_depth``), its type (``outbox_payload_object``), and two regular
expressions (``outbox_navbat_name``, ``outbox_bot_id``). Together about 3 us of the server's
time per update for a small payload (bench part 3: 45.7 against 53.3 us a message), more for a
long text, for columns that neither update touches.

They become one row trigger, ``outbox_row_checks``, that runs on INSERT (COPY included) and on
an UPDATE that sets ``payload``, ``navbat`` or ``bot``. It refuses the same rows with the same
SQLSTATE (23514, check_violation) and the same constraint names, so an error names what it
did before; psycopg and SQLAlchemy raise the same exceptions. The cheap checks stay
constraints. An INSERT costs about 1.3 us a row more (a PL/pgSQL call: 9.1-9.5 against
7.8-8.3 us a row for 200,000 small rows in one statement).

Locks: the revision holds the outbox table's ACCESS EXCLUSIVE lock only while it drops five
constraints and creates a trigger; no row is read or rewritten. Measured on an outbox of
1,000,000 rows (embedded PostgreSQL 16, a 2-core machine): 24-25 ms through Alembic, as on an
empty table. The downgrade adds the constraints back, which reads every row once under that
lock: 2.7-2.9 s.
"""

from __future__ import annotations

from alembic import op

from outbox.migrate import revision_comment, target_schema

revision = "outbox_0013"
down_revision = "outbox_0012"
branch_labels = None
depends_on = None

# The figures of outbox_0002 and outbox_0003/0011, written out: a revision must not change.
_PAYLOAD_BYTES = 65536
_PAYLOAD_DEPTH = 32
_QUEUE_NAME = "^[A-Za-z0-9_.-]{1,64}$"
_BOT_ID = "^[0-9]{1,20}$"

# name -> the condition a row breaks it with (NULL breaks none, as with a CHECK).
_CHECKS = {
    "outbox_payload_object": "jsonb_typeof(NEW.payload) <> 'object'",
    "outbox_payload_size": f"octet_length(NEW.payload::text) > {_PAYLOAD_BYTES}",
    "outbox_payload_depth": (
        f"jsonb_path_exists(NEW.payload, 'strict $.**{{{_PAYLOAD_DEPTH + 1}}}')"
    ),
    "outbox_navbat_name": f"NOT (NEW.navbat ~ '{_QUEUE_NAME}')",
    "outbox_bot_id": f"NOT (NEW.bot ~ '{_BOT_ID}')",
}
# The constraints as they were, for the downgrade.
_CONSTRAINTS = {
    "outbox_payload_object": "NOT (jsonb_typeof(payload) <> 'object')",
    "outbox_payload_size": f"NOT (octet_length(payload::text) > {_PAYLOAD_BYTES})",
    "outbox_payload_depth": (
        f"NOT jsonb_path_exists(payload, 'strict $.**{{{_PAYLOAD_DEPTH + 1}}}')"
    ),
    "outbox_navbat_name": f"navbat ~ '{_QUEUE_NAME}'",
    "outbox_bot_id": f"bot ~ '{_BOT_ID}'",
}


def _function(s: str) -> str:
    tests = "\n".join(
        f"""    IF {condition} THEN
        RAISE check_violation USING CONSTRAINT = '{name}', TABLE = TG_TABLE_NAME,
            SCHEMA = TG_TABLE_SCHEMA, MESSAGE = format(
                'new row for relation "%s" violates check constraint "{name}"', TG_TABLE_NAME);
    END IF;"""
        for name, condition in _CHECKS.items()
    )
    return f"""
CREATE FUNCTION {s}.outbox_row_checks() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
{tests}
    RETURN NEW;
END
$$"""


def upgrade() -> None:
    s = f'"{target_schema()}"'
    op.execute(_function(s))
    op.execute(
        f"CREATE TRIGGER outbox_row_checks BEFORE INSERT OR UPDATE OF payload, navbat, bot "
        f"ON {s}.outbox FOR EACH ROW EXECUTE FUNCTION {s}.outbox_row_checks()"
    )
    op.execute(
        f"ALTER TABLE {s}.outbox "
        + ", ".join(f"DROP CONSTRAINT IF EXISTS {name}" for name in _CONSTRAINTS)
    )
    op.execute(revision_comment(revision))


def downgrade() -> None:
    s = f'"{target_schema()}"'
    op.execute(
        f"ALTER TABLE {s}.outbox "
        + ", ".join(f"ADD CONSTRAINT {n} CHECK ({check})" for n, check in _CONSTRAINTS.items())
    )
    op.execute(f"DROP TRIGGER outbox_row_checks ON {s}.outbox")
    op.execute(f"DROP FUNCTION {s}.outbox_row_checks()")
    op.execute(revision_comment(down_revision))
