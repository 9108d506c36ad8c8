"""Attachments: images kept per person (referenced from the thread, never inlined in
it), the attachment descriptions of a stored Discord DM, and documents searched like
memories.

`media_files` holds an image's bytes once, for the turn it arrives in; the
checkpointed message only names its id. `discord_inbox.attachment_refs` keeps
what Discord said about each attachment (file name, CDN URL, size, whether it
is a voice message or forwarded), so a message answered after a restart still
has them.

`documents` holds an uploaded document (its original bytes, for download
only, and its extracted text); `document_chunks` its passages, embedded with
the memory embedder and searched with the memory search (services/memory:
the same plan, the same BM25 statistics kept by the same kind of triggers,
in `document_terms` / `document_stats`). The chunk vectors have no fixed
size (`vector`): chunks are scanned exactly per person, no shared index.

Revision ID: 0015
Revises: 0014
"""

from alembic import op

revision = "0015"
down_revision = "0014"
branch_labels = None
depends_on = None


TERMS_SQL = """
    INSERT INTO document_terms (user_id, lexeme, df)
    SELECT r.user_id, l.lexeme, {sign} * count(*)
    FROM ({rows}) AS r, unnest(tsvector_to_array(r.content_tsv)) AS l(lexeme)
    GROUP BY 1, 2
    ON CONFLICT (user_id, lexeme) DO UPDATE SET df = document_terms.df + EXCLUDED.df;
    INSERT INTO document_stats (user_id, n, total_len)
    SELECT r.user_id, {sign} * count(*), {sign} * sum(length(r.content_tsv))
    FROM ({rows}) AS r GROUP BY 1
    ON CONFLICT (user_id) DO UPDATE SET n = document_stats.n + EXCLUDED.n,
                                        total_len = document_stats.total_len + EXCLUDED.total_len;
"""
PRUNE_SQL = """
    DELETE FROM document_terms WHERE df <= 0
    AND user_id IN (SELECT DISTINCT user_id FROM ({rows}) AS r);
    DELETE FROM document_stats WHERE n <= 0;
"""
FUNCTIONS = {
    "inserted": TERMS_SQL.format(rows="SELECT user_id, content_tsv FROM chunk_new_rows", sign=1),
    "deleted": TERMS_SQL.format(rows="SELECT user_id, content_tsv FROM chunk_old_rows", sign=-1)
    + PRUNE_SQL.format(rows="SELECT user_id, content_tsv FROM chunk_old_rows"),
}
TRIGGERS = (
    "CREATE TRIGGER document_chunks_terms_ins AFTER INSERT ON document_chunks "
    "REFERENCING NEW TABLE AS chunk_new_rows FOR EACH STATEMENT "
    "EXECUTE FUNCTION document_terms_inserted()",
    "CREATE TRIGGER document_chunks_terms_del AFTER DELETE ON document_chunks "
    "REFERENCING OLD TABLE AS chunk_old_rows FOR EACH STATEMENT "
    "EXECUTE FUNCTION document_terms_deleted()",
)  # chunks are never updated: a document is replaced by deleting it


def upgrade() -> None:
    """Create media_files, documents and their chunks; add discord_inbox.attachment_refs."""
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
    _documents()


def _documents() -> None:
    op.execute(
        """
        CREATE TABLE documents (
            id          UUID PRIMARY KEY,
            user_id     BIGINT NOT NULL REFERENCES users(id) ON DELETE CASCADE,
            name        TEXT NOT NULL,
            mime        TEXT NOT NULL,
            size        INTEGER NOT NULL CHECK (size >= 0),
            pages       INTEGER,
            read_pages  INTEGER,
            outline     JSONB NOT NULL DEFAULT '[]'::jsonb,
            text        TEXT NOT NULL,
            original    BYTEA NOT NULL,
            tainted     BOOLEAN NOT NULL DEFAULT true,
            created_at  TIMESTAMPTZ NOT NULL DEFAULT now()
        )
        """
    )
    op.execute("CREATE INDEX documents_user ON documents (user_id, created_at DESC)")
    op.execute(
        """
        CREATE TABLE document_chunks (
            id           UUID PRIMARY KEY DEFAULT gen_random_uuid(),
            user_id      BIGINT NOT NULL REFERENCES users(id) ON DELETE CASCADE,
            document_id  UUID NOT NULL REFERENCES documents(id) ON DELETE CASCADE,
            seq          INTEGER NOT NULL,
            page         INTEGER,
            content      TEXT NOT NULL CHECK (content <> ''),
            embedding    vector NOT NULL,
            content_tsv  tsvector GENERATED ALWAYS AS
                         (to_tsvector('simple'::regconfig, content)) STORED,
            created_at   TIMESTAMPTZ NOT NULL DEFAULT now(),
            updated_at   TIMESTAMPTZ NOT NULL DEFAULT now()
        )
        """
    )
    op.execute("CREATE INDEX document_chunks_user ON document_chunks (user_id, document_id)")
    op.execute("CREATE INDEX document_chunks_tsv ON document_chunks USING gin (content_tsv)")
    op.execute(
        """
        CREATE TABLE document_terms (
            user_id  BIGINT NOT NULL,
            lexeme   TEXT COLLATE "C" NOT NULL,
            df       INTEGER NOT NULL,
            PRIMARY KEY (user_id, lexeme)
        )
        """
    )
    op.execute(
        "CREATE TABLE document_stats (user_id BIGINT PRIMARY KEY, n INTEGER NOT NULL, "
        "total_len BIGINT NOT NULL)"
    )
    for name, body in FUNCTIONS.items():
        op.execute(
            f"CREATE FUNCTION document_terms_{name}() RETURNS trigger LANGUAGE plpgsql AS $$\n"
            f"BEGIN\n{body}\n    RETURN NULL;\nEND $$"
        )
    for sql in TRIGGERS:
        op.execute(sql)


def downgrade() -> None:
    """Drop them again."""
    for table in ("document_chunks", "document_terms", "document_stats", "documents"):
        op.execute(f"DROP TABLE IF EXISTS {table}")
    for name in FUNCTIONS:
        op.execute(f"DROP FUNCTION IF EXISTS document_terms_{name}()")
    op.execute("ALTER TABLE discord_inbox DROP COLUMN attachment_refs")
    op.execute("DROP TABLE media_files")
