"""Memory history and term statistics for the ranked lexical leg.

- `memories.history`: the texts an update replaced, oldest first, as
  `[{"content": …, "category": …, "replaced_at": …}]`, so an update can be
  undone and `/memory` can show "was: …". Existing memories get `[]`.
- `memory_terms (user_id, lexeme, df)`: in how many of a user's memories each
  lexeme of `content_tsv` occurs; `memory_stats (user_id, n, total_len)`: how
  many memories a user has and their total length in lexemes. These are the
  document frequencies and average length that BM25 needs; statement-level
  triggers on `memories` keep them exact on insert, update (of the text only)
  and delete, including deletes cascaded from `users` (no foreign keys of
  their own: a user's rows go when their last memory does). `TRUNCATE
  memories` does not fire the triggers: truncate the two tables with it.

Existing memories are not changed; their statistics are computed once here.

Revision ID: 0008
Revises: 0007
"""

from alembic import op

revision = "0008"
down_revision = "0007"
branch_labels = None
depends_on = None

CHANGED = """
    SELECT {side}.user_id, {side}.content_tsv FROM memory_old_rows o JOIN memory_new_rows n
    USING (id) WHERE o.content_tsv IS DISTINCT FROM n.content_tsv
"""
APPLY = """
    INSERT INTO memory_terms (user_id, lexeme, df)
    SELECT r.user_id, l.lexeme, {sign} * count(*)
    FROM ({rows}) AS r, unnest(tsvector_to_array(r.content_tsv)) AS l(lexeme)
    GROUP BY 1, 2
    ON CONFLICT (user_id, lexeme) DO UPDATE SET df = memory_terms.df + EXCLUDED.df;
    INSERT INTO memory_stats (user_id, n, total_len)
    SELECT r.user_id, {sign} * count(*), {sign} * sum(length(r.content_tsv))
    FROM ({rows}) AS r GROUP BY 1
    ON CONFLICT (user_id) DO UPDATE SET n = memory_stats.n + EXCLUDED.n,
                                        total_len = memory_stats.total_len + EXCLUDED.total_len;
"""
PRUNE = """
    DELETE FROM memory_terms WHERE df <= 0
    AND user_id IN (SELECT DISTINCT user_id FROM ({rows}) AS r);
    DELETE FROM memory_stats WHERE n <= 0;
"""
FUNCTION = """
CREATE FUNCTION memory_terms_{name}() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
{body}
    RETURN NULL;
END $$
"""  # transition tables are visible only in the trigger function itself: the SQL is inline


def _function(name: str, *steps: tuple[str, int]) -> str:
    body = ""
    for rows, sign in steps:
        body += APPLY.format(rows=rows, sign=sign)
        if sign < 0:
            body += PRUNE.format(rows=rows)
    return FUNCTION.format(name=name, body=body)


FUNCTIONS = (
    _function("inserted", ("SELECT user_id, content_tsv FROM memory_new_rows", 1)),
    _function("deleted", ("SELECT user_id, content_tsv FROM memory_old_rows", -1)),
    _function("updated", (CHANGED.format(side="o"), -1), (CHANGED.format(side="n"), 1)),
)
BACKFILL = APPLY.format(rows="SELECT user_id, content_tsv FROM memories", sign=1)
TRIGGERS = (
    "CREATE TRIGGER memories_terms_ins AFTER INSERT ON memories "
    "REFERENCING NEW TABLE AS memory_new_rows FOR EACH STATEMENT "
    "EXECUTE FUNCTION memory_terms_inserted()",
    "CREATE TRIGGER memories_terms_del AFTER DELETE ON memories "
    "REFERENCING OLD TABLE AS memory_old_rows FOR EACH STATEMENT "
    "EXECUTE FUNCTION memory_terms_deleted()",
    "CREATE TRIGGER memories_terms_upd AFTER UPDATE ON memories "
    "REFERENCING OLD TABLE AS memory_old_rows NEW TABLE AS memory_new_rows "
    "FOR EACH STATEMENT EXECUTE FUNCTION memory_terms_updated()",
)


def upgrade() -> None:
    """Add memories.history, the BM25 statistics tables, their triggers and a backfill."""
    op.execute("ALTER TABLE memories ADD COLUMN history JSONB NOT NULL DEFAULT '[]'::jsonb")
    op.execute(
        """
        CREATE TABLE memory_terms (
            user_id  BIGINT NOT NULL,
            lexeme   TEXT COLLATE "C" NOT NULL,
            df       INTEGER NOT NULL,
            PRIMARY KEY (user_id, lexeme)
        )
        """
    )
    op.execute(
        """
        CREATE TABLE memory_stats (
            user_id    BIGINT PRIMARY KEY,
            n          INTEGER NOT NULL,
            total_len  BIGINT NOT NULL
        )
        """
    )
    for sql in (*FUNCTIONS, *TRIGGERS):
        op.execute(sql)
    op.execute(BACKFILL)


def downgrade() -> None:
    """Drop the statistics, their triggers and memories.history."""
    for name in ("memories_terms_ins", "memories_terms_del", "memories_terms_upd"):
        op.execute(f"DROP TRIGGER IF EXISTS {name} ON memories")
    for name in ("inserted", "deleted", "updated"):
        op.execute(f"DROP FUNCTION IF EXISTS memory_terms_{name}()")
    op.execute("DROP TABLE IF EXISTS memory_stats")
    op.execute("DROP TABLE IF EXISTS memory_terms")
    op.execute("ALTER TABLE memories DROP COLUMN IF EXISTS history")
