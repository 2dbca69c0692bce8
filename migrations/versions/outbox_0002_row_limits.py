"""Limits in the table itself, and the columns that keep one bad row from harming its batch.

Revision ID: outbox_0002
Revises: outbox_0001
Create Date: 2026-11-30

Plain SQL can write anything the table accepts, so the table now refuses what no relay could
ever deliver: a payload that is not a JSON object, over 64 KiB of JSON text or nested more than
32 levels deep; an attempt count outside 0..1000; a due time or claim time of +-infinity; a
claimed row without a claim time. Rows that break these rules already are first moved to
``xato`` (a done row stays done), each with the reason in ``oxirgi_xato`` and ``tarix``; an
offending payload is kept in ``tarix`` as text and replaced by ``{}``. Nothing is deleted.

Two columns: ``egasi``, the process that holds (or last held) a claim, and ``yakka``, set on
rows whose claim expired while their relay held other rows too: such a row is claimed alone
(``outbox.queries.claim_due``, ``reap_stale``).

The constraints are checked against every row while the table is locked: on a large table, run
this when the queue is quiet.
"""

from __future__ import annotations

from alembic import op

from outbox.migrate import revision_comment, target_schema

revision = "outbox_0002"
down_revision = "outbox_0001"
branch_labels = None
depends_on = None

# The same figures as outbox.payload.MAX_PAYLOAD_BYTES / MAX_PAYLOAD_DEPTH and
# outbox.retry.MAX_ATTEMPTS_LIMIT, written out: a revision must not change when they do.
_PAYLOAD_BYTES = 65536
_PAYLOAD_DEPTH = 32
_ATTEMPTS = 1000

_PAYLOAD_NOT_OBJECT = "jsonb_typeof(payload) <> 'object'"
_PAYLOAD_TOO_LARGE = f"octet_length(payload::text) > {_PAYLOAD_BYTES}"
# strict $.**{N} finds the values N levels down: none at 33 means at most 32 levels.
_PAYLOAD_TOO_DEEP = f"jsonb_path_exists(payload, 'strict $.**{{{_PAYLOAD_DEPTH + 1}}}')"

_CONSTRAINTS = {
    "outbox_payload_object": f"NOT ({_PAYLOAD_NOT_OBJECT})",
    "outbox_payload_size": f"NOT ({_PAYLOAD_TOO_LARGE})",
    "outbox_payload_depth": f"NOT ({_PAYLOAD_TOO_DEEP})",
    "outbox_urinish_range": f"urinish BETWEEN 0 AND {_ATTEMPTS}",
    "outbox_keyingi_urinish_finite": "isfinite(keyingi_urinish)",
    "outbox_band_vaqti_finite": "band_vaqti IS NULL OR isfinite(band_vaqti)",
    "outbox_claimed_has_band_vaqti": "holat <> 'bajarilmoqda' OR band_vaqti IS NOT NULL",
}


def upgrade() -> None:
    s = f'"{target_schema()}"'
    op.execute(f"ALTER TABLE {s}.outbox ADD COLUMN egasi text")
    op.execute(f"ALTER TABLE {s}.outbox ADD COLUMN yakka boolean NOT NULL DEFAULT false")
    _fail_offending_rows(s)
    for name, check in _CONSTRAINTS.items():
        op.execute(f"ALTER TABLE {s}.outbox ADD CONSTRAINT {name} CHECK ({check})")
    # Both stay tiny: suspects are few, and egasi is set only on claimed and reaped rows.
    op.execute(f"CREATE INDEX outbox_yakka_idx ON {s}.outbox (keyingi_urinish, id) WHERE yakka")
    op.execute(f"CREATE INDEX outbox_egasi_idx ON {s}.outbox (egasi) WHERE egasi IS NOT NULL")
    op.execute(revision_comment(revision))


def _fail_offending_rows(s: str) -> None:
    bad_payload = f"({_PAYLOAD_NOT_OBJECT} OR {_PAYLOAD_TOO_LARGE} OR {_PAYLOAD_TOO_DEEP})"
    op.execute(
        f"""
        WITH found AS (
            SELECT id, {bad_payload} AS bad_payload, concat_ws('; ',
                CASE WHEN {_PAYLOAD_NOT_OBJECT}
                     THEN 'payload is a JSON ' || jsonb_typeof(payload) || ', not an object' END,
                CASE WHEN {_PAYLOAD_TOO_LARGE}
                     THEN 'payload is ' || octet_length(payload::text)
                          || ' bytes of JSON, more than {_PAYLOAD_BYTES}' END,
                CASE WHEN {_PAYLOAD_TOO_DEEP}
                     THEN 'payload is nested more than {_PAYLOAD_DEPTH} levels deep' END,
                CASE WHEN urinish NOT BETWEEN 0 AND {_ATTEMPTS}
                     THEN 'urinish ' || urinish || ' is outside 0..{_ATTEMPTS}' END,
                CASE WHEN NOT isfinite(keyingi_urinish)
                     THEN 'keyingi_urinish is ' || keyingi_urinish::text END,
                CASE WHEN band_vaqti IS NOT NULL AND NOT isfinite(band_vaqti)
                     THEN 'band_vaqti is ' || band_vaqti::text END,
                CASE WHEN holat = 'bajarilmoqda' AND band_vaqti IS NULL
                     THEN 'claimed (bajarilmoqda) without a claim time (band_vaqti)' END
            ) AS reason
            FROM {s}.outbox
        )
        UPDATE {s}.outbox o
        SET holat = CASE WHEN o.holat = 'bajarildi' THEN 'bajarildi' ELSE 'xato' END,
            payload = CASE WHEN f.bad_payload THEN '{{}}'::jsonb ELSE o.payload END,
            urinish = least(greatest(o.urinish, 0), {_ATTEMPTS}),
            keyingi_urinish = CASE WHEN isfinite(o.keyingi_urinish) THEN o.keyingi_urinish
                                   ELSE now() END,
            band_vaqti = NULL,
            oxirgi_xato = 'refused by migration outbox_0002: ' || f.reason,
            tarix = o.tarix || jsonb_build_array(jsonb_strip_nulls(jsonb_build_object(
                'vaqt', now(),
                'urinish', o.urinish,
                'hodisa', 'migration outbox_0002',
                'xato', f.reason,
                'holat', o.holat,
                'keyingi_urinish', o.keyingi_urinish::text,
                'band_vaqti', o.band_vaqti::text,
                'payload', CASE WHEN f.bad_payload THEN to_jsonb(o.payload::text) END))),
            yangilangan = now()
        FROM found f
        WHERE o.id = f.id AND f.reason <> ''
        """
    )


def downgrade() -> None:
    s = f'"{target_schema()}"'
    op.execute(f"DROP INDEX {s}.outbox_egasi_idx")
    op.execute(f"DROP INDEX {s}.outbox_yakka_idx")
    for name in _CONSTRAINTS:
        op.execute(f"ALTER TABLE {s}.outbox DROP CONSTRAINT {name}")
    op.execute(f"ALTER TABLE {s}.outbox DROP COLUMN yakka")
    op.execute(f"ALTER TABLE {s}.outbox DROP COLUMN egasi")
    op.execute(revision_comment(down_revision))
