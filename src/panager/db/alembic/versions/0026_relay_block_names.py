"""The names a person blocked in /relays, as they typed them.

`relay_blocks` holds blocks of people who exist (by id, so a rename does not
undo them). `/relays` listed those by their current usernames, so blocking a
name and listing told whether anyone used it. Now every name a person blocks
is kept here as typed, whether or not someone has it, with whom it blocked
(if anyone), and the listing shows these: the same for any name; unblocking
the name lifts the block even after its holder was renamed. Existing blocks
get their current usernames.

Revision ID: 0026
Revises: 0025
"""

from alembic import op

revision = "0026"
down_revision = "0025"
branch_labels = None
depends_on = None


def upgrade() -> None:
    """Create relay_block_names and fill it from the existing blocks."""
    op.execute(
        """
        CREATE TABLE relay_block_names (
            user_id BIGINT NOT NULL REFERENCES users(id) ON DELETE CASCADE,
            name TEXT NOT NULL,
            blocked_id BIGINT REFERENCES users(id) ON DELETE SET NULL,
            created_at TIMESTAMPTZ NOT NULL DEFAULT now()
        )
        """
    )
    op.execute(
        "CREATE UNIQUE INDEX relay_block_names_key ON relay_block_names (user_id, lower(name))"
    )
    op.execute(
        """
        INSERT INTO relay_block_names (user_id, name, blocked_id, created_at)
        SELECT b.user_id, u.username, b.blocked_id, b.created_at
          FROM relay_blocks b JOIN users u ON u.id = b.blocked_id
        ON CONFLICT DO NOTHING
        """
    )


def downgrade() -> None:
    """Drop the names (the blocks themselves stay in relay_blocks)."""
    op.execute("DROP TABLE IF EXISTS relay_block_names")
