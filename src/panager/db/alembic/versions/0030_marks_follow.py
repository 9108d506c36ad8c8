"""Marks follow the text: each memory history entry keeps its own outside-content mark.

- `memories.history` entries gain `tainted`: whether the replaced text had been written in
  a call that read outside content. Entries written before this revision carried no mark;
  they are stamped with the memory's mark at upgrade time (the one assumption: a memory
  tainted now counts its older texts as tainted too — the safe side).

Revision ID: 0030
Revises: 0028
"""

from alembic import op

revision = "0030"
down_revision = "0028"
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
    """Stamp every history entry with a mark."""
    op.execute(_STAMP)


def downgrade() -> None:
    """Drop the history entries' marks."""
    op.execute(_UNSTAMP)
