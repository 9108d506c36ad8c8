"""Google accounts, OAuth state and pending messages.

`google_accounts` keeps one linked Google account per user. The OAuth tokens
live only in `token_ciphertext` (Fernet, keyed from PANAGER_SECRET_KEY); the
scopes, e-mail and status are plain so they can be shown and checked without
decrypting. `disconnected` means Google refused the refresh token (revoked or
expired) and the user must link again.

`oauth_states` holds one row per link handed out: the SHA-256 of the random
part of the `state` value (never the value itself), the user it is bound to,
the encrypted PKCE verifier, and when it expires / was used. Any process can
complete the callback because everything it needs is here.

`pending_messages` keeps the message a user sent while Google was not linked,
so it can be answered automatically once they link.

Revision ID: 0005
Revises: 0004
"""

from alembic import op

revision = "0005"
down_revision = "0004"
branch_labels = None
depends_on = None


def upgrade() -> None:
    """Create google_accounts, oauth_states and pending_messages."""
    op.execute(
        """
        CREATE TABLE google_accounts (
            user_id           BIGINT PRIMARY KEY REFERENCES users (id) ON DELETE CASCADE,
            email             TEXT,
            token_ciphertext  TEXT NOT NULL,
            scopes            TEXT[] NOT NULL DEFAULT '{}',
            status            TEXT NOT NULL DEFAULT 'connected'
                              CHECK (status IN ('connected', 'disconnected')),
            connected_at      TIMESTAMPTZ NOT NULL DEFAULT now(),
            refreshed_at      TIMESTAMPTZ,
            disconnected_at   TIMESTAMPTZ,
            updated_at        TIMESTAMPTZ NOT NULL DEFAULT now()
        )
        """
    )
    op.execute(
        """
        CREATE TABLE oauth_states (
            state_hash     TEXT PRIMARY KEY,
            user_id        BIGINT NOT NULL REFERENCES users (id) ON DELETE CASCADE,
            provider       TEXT NOT NULL DEFAULT 'google',
            code_verifier  TEXT NOT NULL,
            created_at     TIMESTAMPTZ NOT NULL DEFAULT now(),
            expires_at     TIMESTAMPTZ NOT NULL,
            used_at        TIMESTAMPTZ
        )
        """
    )
    op.execute("CREATE INDEX oauth_states_user_idx ON oauth_states (user_id, expires_at)")
    op.execute(
        """
        CREATE TABLE pending_messages (
            id           BIGSERIAL PRIMARY KEY,
            user_id      BIGINT NOT NULL REFERENCES users (id) ON DELETE CASCADE,
            provider     TEXT NOT NULL DEFAULT 'google',
            text         TEXT NOT NULL,
            created_at   TIMESTAMPTZ NOT NULL DEFAULT now(),
            replayed_at  TIMESTAMPTZ
        )
        """
    )
    op.execute(
        "CREATE INDEX pending_messages_open_idx ON pending_messages (user_id, created_at) "
        "WHERE replayed_at IS NULL"
    )


def downgrade() -> None:
    """Drop the Google tables."""
    op.execute("DROP TABLE IF EXISTS pending_messages")
    op.execute("DROP TABLE IF EXISTS oauth_states")
    op.execute("DROP TABLE IF EXISTS google_accounts")
