"""Attachments: images kept per person (referenced from the thread, never inlined in
it), and the attachment descriptions of a stored Discord DM.

`media_files` holds an image's bytes once, for the turn it arrives in; the
checkpointed message only names its id. `discord_inbox.attachment_refs` keeps
what Discord said about each attachment (file name, CDN URL, size, whether it
is a voice message or forwarded), so a message answered after a restart still
has them.

Revision ID: 0015
Revises: 0012
"""

from alembic import op

revision = "0015"
down_revision = "0012"
branch_labels = None
depends_on = None


def upgrade() -> None:
    """Create media_files; add discord_inbox.attachment_refs."""
    op.execute(
        """
        CREATE TABLE media_files (
            id          UUID PRIMARY KEY,
            user_id     BIGINT NOT NULL REFERENCES users(id) ON DELETE CASCADE,
            name        TEXT NOT NULL,
            mime        TEXT NOT NULL,
            size        INTEGER NOT NULL CHECK (size >= 0),
            data        BYTEA NOT NULL,
            created_at  TIMESTAMPTZ NOT NULL DEFAULT now()
        )
        """
    )
    op.execute("CREATE INDEX media_files_user ON media_files (user_id, created_at)")
    op.execute("ALTER TABLE discord_inbox ADD COLUMN attachment_refs JSONB")


def downgrade() -> None:
    """Drop them again."""
    op.execute("ALTER TABLE discord_inbox DROP COLUMN attachment_refs")
    op.execute("DROP TABLE media_files")
