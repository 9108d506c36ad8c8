"""Document passages: typed like memories and searched through an HNSW index.

Passages are embedded with the memory store's embedder. Their `embedding`
column was an untyped `vector`, so no HNSW index could cover it and every
`document_search` scanned the person's passages exactly (31 ms at 10,000
passages on an idle two-core machine, 10 ms through the index; BENCHMARKS.md,
"Attachments"). From now on the memory store's binding types and indexes both
columns (services/memory/binding.py), and `panager memory reembed` converts
passages with the memories.

This revision does the same for an existing store: when an embedder is
recorded in `memory_meta` and every passage has its size, the column becomes
`vector(dim)` and `document_chunks_embedding_hnsw` is built (m = 16,
ef_construction = 1000, as for memories; a size over pgvector's 2,000 gets no
index). The build takes seconds for thousands of passages and a few minutes
for 100,000 on two cores (as memories' index does, migration 0012). Passages
of another size were embedded by another model and cannot be searched with
this one: then nothing changes here, and `document_search` answers that
`panager memory reembed` must be run (which types and indexes the column).

Revision ID: 0023
Revises: 0022
"""

from alembic import op

revision = "0023"
down_revision = "0022"
branch_labels = None
depends_on = None

TYPE_AND_INDEX = """
DO $$
DECLARE
    d integer := (SELECT dim FROM memory_meta);
BEGIN
    IF d IS NOT NULL AND NOT EXISTS (
        SELECT 1 FROM document_chunks WHERE vector_dims(embedding) <> d
    ) THEN
        EXECUTE format('ALTER TABLE document_chunks ALTER COLUMN embedding TYPE vector(%s)', d);
        IF d <= 2000 THEN
            CREATE INDEX document_chunks_embedding_hnsw ON document_chunks
                USING hnsw (embedding vector_cosine_ops) WITH (m = 16, ef_construction = 1000);
        END IF;
    END IF;
END $$
"""


def upgrade() -> None:
    """Type the passages' vector column and index it when the store's embedder is known."""
    op.execute("SET LOCAL maintenance_work_mem = '256MB'")
    op.execute(TYPE_AND_INDEX)


def downgrade() -> None:
    """Back to an untyped, unindexed column (the vectors stay)."""
    op.execute("DROP INDEX IF EXISTS document_chunks_embedding_hnsw")
    op.execute("ALTER TABLE document_chunks ALTER COLUMN embedding TYPE vector")
