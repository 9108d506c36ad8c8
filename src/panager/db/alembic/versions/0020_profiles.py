"""Profiles: a short standing text per person in four sections, with history and proposals.

`profile_sections` holds the current text of each section (`about`, `people`,
`preferences`, `instructions`); every replacement appends the previous text to
`history`. `profile_proposals` holds changes the nightly tidy-up suggests; they
apply only when the person approves them. `memories.superseded_by` marks a
memory a later one replaced (kept, never deleted; left out of search and recall).

Revision ID: 0020
Revises: 0019
"""

from alembic import op

revision = "0020"
down_revision = "0019"
branch_labels = None
depends_on = None

SECTIONS = "'about', 'people', 'preferences', 'instructions'"


def upgrade() -> None:
    """Create the profile tables and memories.superseded_by."""
    op.execute(
        f"""
        CREATE TABLE profile_sections (
            user_id     BIGINT NOT NULL REFERENCES users (id) ON DELETE CASCADE,
            section     TEXT NOT NULL CHECK (section IN ({SECTIONS})),
            text        TEXT NOT NULL,
            history     JSONB NOT NULL DEFAULT '[]'::jsonb,
            updated_at  TIMESTAMPTZ NOT NULL,
            PRIMARY KEY (user_id, section)
        )
        """
    )
    op.execute(
        f"""
        CREATE TABLE profile_proposals (
            id          TEXT PRIMARY KEY,
            user_id     BIGINT NOT NULL REFERENCES users (id) ON DELETE CASCADE,
            section     TEXT NOT NULL CHECK (section IN ({SECTIONS})),
            text        TEXT NOT NULL,
            reason      TEXT NOT NULL DEFAULT '',
            status      TEXT NOT NULL DEFAULT 'pending'
                        CHECK (status IN ('pending', 'approved', 'rejected', 'stale')),
            created_at  TIMESTAMPTZ NOT NULL,
            decided_at  TIMESTAMPTZ
        )
        """
    )
    op.execute(
        "CREATE INDEX profile_proposals_pending ON profile_proposals (user_id) "
        "WHERE status = 'pending'"
    )
    op.execute("ALTER TABLE memories ADD COLUMN IF NOT EXISTS superseded_by UUID")
    op.execute("ALTER TABLE memories ADD COLUMN IF NOT EXISTS superseded_at TIMESTAMPTZ")


def downgrade() -> None:
    """Drop the profile tables and the superseded marks."""
    op.execute("ALTER TABLE memories DROP COLUMN IF EXISTS superseded_at")
    op.execute("ALTER TABLE memories DROP COLUMN IF EXISTS superseded_by")
    op.execute("DROP TABLE IF EXISTS profile_proposals")
    op.execute("DROP TABLE IF EXISTS profile_sections")
