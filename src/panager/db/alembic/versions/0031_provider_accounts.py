"""Connected accounts of form-connect providers (CalDAV, IMAP, …), credentials sealed.

- `provider_accounts`: one row per account a person connected through a form on the web
  page's Connections page — the provider's name, the account's key (unique among the
  person's accounts of that provider; it starts the provider's own ids), a label to show,
  the typed credentials sealed with PANAGER_SECRET_KEY (`secret_ciphertext`, never shown
  back), and non-secret settings (server URL, chosen calendars, pinned certificate).
  Google's link stays in `google_accounts`: nothing a person linked before changes.

Revision ID: 0031
Revises: 0030
"""

from alembic import op

revision = "0031"
down_revision = "0030"
branch_labels = None
depends_on = None


def upgrade() -> None:
    """Add the table of form-connected accounts."""
    op.execute(
        """
        CREATE TABLE provider_accounts (
            id                 BIGSERIAL PRIMARY KEY,
            user_id            BIGINT NOT NULL REFERENCES users (id) ON DELETE CASCADE,
            provider           TEXT NOT NULL,
            key                TEXT NOT NULL,
            label              TEXT NOT NULL,
            secret_ciphertext  TEXT NOT NULL,
            settings           JSONB NOT NULL DEFAULT '{}',
            status             TEXT NOT NULL DEFAULT 'connected'
                               CHECK (status IN ('connected', 'disconnected')),
            created_at         TIMESTAMPTZ NOT NULL DEFAULT now(),
            updated_at         TIMESTAMPTZ NOT NULL DEFAULT now(),
            UNIQUE (user_id, provider, key)
        )
        """
    )


def downgrade() -> None:
    """Drop the table (its sealed credentials go with it)."""
    op.execute("DROP TABLE provider_accounts")
