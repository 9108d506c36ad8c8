"""Marks follow the text: each memory history entry keeps its own outside-content mark.

- `memories.history` entries gain `tainted`: whether the replaced text had been written in
  a call that read outside content. Entries written before this revision carried no mark;
  they are stamped with the memory's mark at upgrade time (the one assumption: a memory
  tainted now counts its older texts as tainted too — the safe side).
- `link_codes.claimant_confirmed`: the person who typed a link code agreed after being told
  whose account it joins; nothing joins before (claims waiting at upgrade must confirm).
- `webhooks.signing_secret` (optional HMAC key; the token stays the credential that reaches
  the hook), `webhooks.tokens_day` / `tokens_used` / `budget_told` (the per-hook daily token
  budget), and `webhook_seen`: signatures (signed hooks) or body digests (unsigned hooks)
  accepted in the last ten minutes, so a replayed call is refused.

Revision ID: 0030
Revises: 0029
"""

from alembic import op

revision = "0030"
down_revision = "0029"
branch_labels = None
depends_on = None

_STAMP = """
UPDATE memories SET history = (
    SELECT jsonb_agg(CASE WHEN e ? 'tainted' THEN e
                          ELSE e || jsonb_build_object('tainted', memories.tainted) END
                     ORDER BY i)
    FROM jsonb_array_elements(memories.history) WITH ORDINALITY AS x(e, i))
WHERE jsonb_array_length(history) > 0
"""
_UNSTAMP = """
UPDATE memories SET history = (
    SELECT jsonb_agg(e - 'tainted' ORDER BY i)
    FROM jsonb_array_elements(memories.history) WITH ORDINALITY AS x(e, i))
WHERE jsonb_array_length(history) > 0
"""


def upgrade() -> None:
    """Stamp every history entry with a mark; link claims wait for the claimant."""
    op.execute(_STAMP)
    op.execute(
        "ALTER TABLE link_codes ADD COLUMN claimant_confirmed BOOLEAN NOT NULL DEFAULT false"
    )
    op.execute(
        """
        ALTER TABLE webhooks ADD COLUMN signing_secret TEXT,
                             ADD COLUMN tokens_day DATE,
                             ADD COLUMN tokens_used BIGINT NOT NULL DEFAULT 0,
                             ADD COLUMN budget_told DATE
        """
    )
    op.execute(
        """
        CREATE TABLE webhook_seen (
            hook_id  TEXT NOT NULL REFERENCES webhooks (id) ON DELETE CASCADE,
            digest   BYTEA NOT NULL,
            seen_at  TIMESTAMPTZ NOT NULL,
            PRIMARY KEY (hook_id, digest)
        )
        """
    )


def downgrade() -> None:
    """Drop the history entries' marks and the claimant's confirmation."""
    op.execute("DROP TABLE IF EXISTS webhook_seen")
    op.execute(
        "ALTER TABLE webhooks DROP COLUMN IF EXISTS signing_secret, "
        "DROP COLUMN IF EXISTS tokens_day, DROP COLUMN IF EXISTS tokens_used, "
        "DROP COLUMN IF EXISTS budget_told"
    )
    op.execute("ALTER TABLE link_codes DROP COLUMN IF EXISTS claimant_confirmed")
    op.execute(_UNSTAMP)
