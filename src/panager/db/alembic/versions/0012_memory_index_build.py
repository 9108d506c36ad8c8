"""Memory vector index: rebuilt with ef_construction = 1000 (pgvector's maximum).

Memories are embedded as passages and searched with queries embedded for their
role; such queries lie outside the distribution the HNSW graph was built from,
and a graph built with ef_construction = 256 found only 0.81-0.87 of the exact
nearest five at 100,000 memories (ef_search 200). Built with
ef_construction = 1000 the same search finds 0.97 at about the same search
cost; inserting a row costs more (BENCHMARKS.md, "Memory").

Only the index changes: `memories_embedding_hnsw` is dropped and built again
with the new options when it exists (a store of vectors too wide for HNSW has
none). Memories are untouched. The build takes seconds for thousands of
memories and about two and a half minutes for 100,000 on two cores.

Revision ID: 0012
Revises: 0011
"""

from alembic import op

revision = "0012"
down_revision = "0011"
branch_labels = None
depends_on = None

REBUILD = """
DO $$
BEGIN
    IF to_regclass('memories_embedding_hnsw') IS NOT NULL THEN
        DROP INDEX memories_embedding_hnsw;
        CREATE INDEX memories_embedding_hnsw ON memories
            USING hnsw (embedding vector_cosine_ops) WITH (m = {m}, ef_construction = {ef});
    END IF;
END $$
"""


def upgrade() -> None:
    """Rebuild the vector index with m = 16, ef_construction = 1000."""
    op.execute("SET LOCAL maintenance_work_mem = '256MB'")
    op.execute(REBUILD.format(m=16, ef=1000))


def downgrade() -> None:
    """Rebuild it with the previous options (m = 16, ef_construction = 256)."""
    op.execute("SET LOCAL maintenance_work_mem = '256MB'")
    op.execute(REBUILD.format(m=16, ef=256))
