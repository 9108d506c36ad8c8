"""Mail: the scopes a consent link asks for, and the drafts shown before a send.

`oauth_states.scopes` holds the scopes a link asks Google for (NULL: Calendar and
Tasks, as before); a mail link asks for Gmail too. `mail_shown` keeps, per
confirmation question (or proposal), the digest of the draft exactly as the person
was shown it; `email_send` sends only when the draft fetched at that moment has the
same digest, and takes the row once.

Revision ID: 0021
Revises: 0016
"""

from alembic import op

revision = "0021"
down_revision = "0016"
branch_labels = None
depends_on = None


def upgrade() -> None:
    """Add oauth_states.scopes and the mail_shown table."""
    op.execute("ALTER TABLE oauth_states ADD COLUMN IF NOT EXISTS scopes TEXT[]")
    op.execute(
        """
        CREATE TABLE mail_shown (
            id          BIGSERIAL PRIMARY KEY,
            user_id     BIGINT NOT NULL REFERENCES users (id) ON DELETE CASCADE,
            call_key    TEXT NOT NULL,
            draft_id    TEXT NOT NULL,
            digest      TEXT NOT NULL,
            created_at  TIMESTAMPTZ NOT NULL,
            used_at     TIMESTAMPTZ,
            UNIQUE (user_id, call_key)
        )
        """
    )
    op.execute("CREATE INDEX mail_shown_draft ON mail_shown (user_id, draft_id, id)")


def downgrade() -> None:
    """Drop mail_shown and oauth_states.scopes."""
    op.execute("DROP TABLE IF EXISTS mail_shown")
    op.execute("ALTER TABLE oauth_states DROP COLUMN IF EXISTS scopes")
