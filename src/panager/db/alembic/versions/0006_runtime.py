"""Agent runtime: token usage per user, per day, per model.

One row per (user, local day, model), incremented by an upsert after every
model call. `/usage` sums it by day, month and all time; the `token_budget`
effect reads today's total before each call. The day is the user's local
date, so a daily budget resets at the user's midnight.

Revision ID: 0006
Revises: 0005
"""

from alembic import op

revision = "0006"
down_revision = "0005"
branch_labels = None
depends_on = None


def upgrade() -> None:
    """Create token_usage."""
    op.execute(
        """
        CREATE TABLE token_usage (
            user_id            BIGINT NOT NULL REFERENCES users (id) ON DELETE CASCADE,
            day                DATE NOT NULL,
            model              TEXT NOT NULL,
            prompt_tokens      BIGINT NOT NULL DEFAULT 0,
            completion_tokens  BIGINT NOT NULL DEFAULT 0,
            total_tokens       BIGINT NOT NULL DEFAULT 0,
            calls              INTEGER NOT NULL DEFAULT 0,
            updated_at         TIMESTAMPTZ NOT NULL DEFAULT now(),
            PRIMARY KEY (user_id, day, model)
        )
        """
    )


def downgrade() -> None:
    """Drop token_usage."""
    op.execute("DROP TABLE IF EXISTS token_usage")
