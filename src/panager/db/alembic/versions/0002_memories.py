"""Long-term memories (pgvector): `memories` and the `memory_meta` embedder record.

The embedding column is created as `vector(384)`, the size of the offline
embedder (the embedded default), with an HNSW cosine index. The embedder is
only known at run time, so the memory service records it in `memory_meta` on
the first save; if its size differs, the still-empty column is retyped and the
index rebuilt then. A later change of embedder is refused until
`panager memory reembed` rewrites every vector (see docs/memory.md).

Full text uses the 'simple' configuration (no stemming, no stop words), which
works for Korean as well as English.

Revision ID: 0002
Revises: 0001
"""

from alembic import op

revision = "0002"
down_revision = "0001"
branch_labels = None
depends_on = None

DEFAULT_DIM = 384


def upgrade() -> None:
    """Create memories (vector + tsvector + indexes) and memory_meta."""
    op.execute(
        f"""
        CREATE TABLE memories (
            id           UUID PRIMARY KEY DEFAULT gen_random_uuid(),
            user_id      BIGINT NOT NULL REFERENCES users (id) ON DELETE CASCADE,
            content      TEXT NOT NULL CHECK (content <> ''),
            category     TEXT NOT NULL DEFAULT 'general',
            source       TEXT NOT NULL DEFAULT 'tool'
                         CHECK (source IN ('tool', 'compaction', 'import')),
            embedding    vector({DEFAULT_DIM}) NOT NULL,
            content_tsv  tsvector GENERATED ALWAYS AS
                         (to_tsvector('simple'::regconfig, content)) STORED,
            created_at   TIMESTAMPTZ NOT NULL DEFAULT now(),
            updated_at   TIMESTAMPTZ NOT NULL DEFAULT now()
        )
        """
    )
    op.execute("CREATE INDEX memories_user_created_idx ON memories (user_id, created_at DESC)")
    op.execute(
        "CREATE INDEX memories_embedding_hnsw ON memories "
        "USING hnsw (embedding vector_cosine_ops) WITH (m = 16, ef_construction = 256)"
    )
    op.execute("CREATE INDEX memories_content_tsv_gin ON memories USING gin (content_tsv)")
    op.execute(
        """
        CREATE TABLE memory_meta (
            singleton   BOOLEAN PRIMARY KEY DEFAULT true CHECK (singleton),
            embedder    TEXT NOT NULL,
            dim         INTEGER NOT NULL CHECK (dim > 0),
            updated_at  TIMESTAMPTZ NOT NULL DEFAULT now()
        )
        """
    )


def downgrade() -> None:
    """Drop the memory tables."""
    op.execute("DROP TABLE IF EXISTS memory_meta")
    op.execute("DROP TABLE IF EXISTS memories")
