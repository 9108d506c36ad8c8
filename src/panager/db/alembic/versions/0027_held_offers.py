"""Held actions are offered as data, on the answer that held them, and they expire.

`proposals` gains `expires_at` (a held action lapses after `proposal_expiry_hours`,
24 h by default) and `offered_on` (the answer or question it was offered on: an
Approve pressed anywhere else shows the description again and asks), and the
statuses `denied` and `expired`. `schedule_runs.offers` keeps the offers of a
scheduled answer with its stored text, so a retried delivery shows exactly them.

Every proposal still pending at this upgrade was offered the old way (an id in
the text, from which any text could make a button), so each expires now; each
person who had some is told once, by a one-time reminder due at once.

Revision ID: 0027
Revises: 0026
"""

import secrets
from datetime import UTC, datetime

import sqlalchemy as sa
from alembic import op

revision = "0027"
down_revision = "0026"
branch_labels = None
depends_on = None

ID_ALPHABET = "23456789abcdefghjkmnpqrstuvwxyz"  # services/schedules/types.py
NOTICE = (
    "{n} held action{s} from before the update expired; ask again if you still want "
    "{them}."
)


def notice(count: int) -> str:
    """The one-time message for a person whose held actions expired at the upgrade."""
    return NOTICE.format(n=count, s="" if count == 1 else "s",
                         them="it" if count == 1 else "them")


def upgrade() -> None:
    """Add the columns and statuses; expire what is pending and tell each person once."""
    op.execute("ALTER TABLE proposals ADD COLUMN expires_at TIMESTAMPTZ")
    op.execute("ALTER TABLE proposals ADD COLUMN offered_on TEXT")
    op.execute("ALTER TABLE proposals DROP CONSTRAINT IF EXISTS proposals_status_check")
    op.execute(
        "ALTER TABLE proposals ADD CONSTRAINT proposals_status_check CHECK (status IN "
        "('pending', 'approved', 'failed', 'denied', 'expired'))"
    )
    op.execute(
        "CREATE INDEX proposals_pending_idx ON proposals (user_id, created_at) "
        "WHERE status = 'pending'"
    )
    op.execute("ALTER TABLE schedule_runs ADD COLUMN offers JSONB")
    bind = op.get_bind()
    now = datetime.now(UTC)
    expired = bind.execute(
        sa.text(
            "WITH gone AS (UPDATE proposals SET status = 'expired', decided_at = :now, "
            "expires_at = :now WHERE status = 'pending' RETURNING user_id) "
            "SELECT g.user_id, u.timezone, count(*) AS n FROM gone g "
            "JOIN users u ON u.id = g.user_id GROUP BY g.user_id, u.timezone"
        ),
        {"now": now},
    ).fetchall()
    op.execute("UPDATE proposals SET expires_at = coalesce(decided_at, created_at) "
               "WHERE expires_at IS NULL")
    op.execute("ALTER TABLE proposals ALTER COLUMN expires_at SET NOT NULL")
    for user_id, zone, count in expired:
        ident = "".join(secrets.choice(ID_ALPHABET) for _ in range(8))
        bind.execute(
            sa.text(
                "INSERT INTO schedules (id, user_id, kind, message, timezone, anchor_local, "
                "next_run_at, created_at, updated_at) VALUES (:id, :user_id, 'reminder', "
                ":message, :zone, (:now AT TIME ZONE :zone), :now, :now, :now)"
            ),
            {"id": ident, "user_id": user_id, "message": notice(int(count)), "zone": zone,
             "now": now},
        )


def downgrade() -> None:
    """Drop the columns; denied and expired actions count as failed (not pending)."""
    op.execute("ALTER TABLE schedule_runs DROP COLUMN IF EXISTS offers")
    op.execute("DROP INDEX IF EXISTS proposals_pending_idx")
    op.execute("ALTER TABLE proposals DROP CONSTRAINT IF EXISTS proposals_status_check")
    op.execute("UPDATE proposals SET status = 'failed' WHERE status IN ('denied', 'expired')")
    op.execute(
        "ALTER TABLE proposals ADD CONSTRAINT proposals_status_check CHECK (status IN "
        "('pending', 'approved', 'failed'))"
    )
    op.execute("ALTER TABLE proposals DROP COLUMN IF EXISTS offered_on")
    op.execute("ALTER TABLE proposals DROP COLUMN IF EXISTS expires_at")
