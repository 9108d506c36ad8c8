"""Memory service on real Postgres + pgvector with the offline embedder: save, search, dedupe,
isolation between users, batch saves."""

from __future__ import annotations

import asyncio
import json
import uuid
from pathlib import Path

import pytest

from panager.services.memory.fusion import PLAIN_RRF, Fusion, fuse
from panager.services.memory.service import (
    MAX_CONTENT_CHARS,
    MemoryInputError,
    MemoryService,
)
from panager.services.memory.text import QueryTerm, query_terms

PAIRS = [
    json.loads(line)
    for line in (Path(__file__).parents[1] / "data" / "memory_pairs.jsonl").read_text().splitlines()
    if line.strip()
]


class CountingEmbedder:
    """Wraps an embedder and records every batch it is asked to embed."""

    def __init__(self, inner) -> None:
        self.inner, self.name, self.dim = inner, inner.name, inner.dim
        self.calls: list[list[str]] = []

    async def embed(self, texts: list[str]) -> list[list[float]]:
        self.calls.append(list(texts))
        return await self.inner.embed(texts)

    async def embed_queries(self, texts: list[str]) -> list[list[float]]:
        self.calls.append(list(texts))
        return await self.inner.embed_queries(texts)


@pytest.fixture
async def app(make_app):
    return await make_app(embedding_model="local")


@pytest.fixture
async def memory(app) -> MemoryService:
    return app.deps.memory


@pytest.fixture
async def alice(app):
    return await app.deps.users.ensure(111, "alice")


@pytest.fixture
async def bob(app):
    return await app.deps.users.ensure(222, "bob")


async def test_save_then_search_finds_it(memory, alice, clock):
    saved = await memory.save(alice.id, "  My dentist is Dr. Cho on Oak Street.  ", "Health Care")
    assert not saved.merged and saved.related == ()
    hit = saved.memory
    assert hit.content == "My dentist is Dr. Cho on Oak Street."
    assert hit.category == "health_care" and hit.source == "tool"
    assert hit.created_at == clock.now() and uuid.UUID(hit.id)
    results = await memory.search(alice.id, "dentist", 5)
    assert [r.id for r in results] == [hit.id] and results[0].score > 0


async def test_paraphrased_queries_find_their_memory(memory, alice):
    """Semantic retrieval: English and Korean questions worded unlike the stored memory."""
    pairs = [p for p in PAIRS if p["lang"] == "en"][:12] + [p for p in PAIRS if p["lang"] == "ko"][:12]
    saved = await memory.save_many(alice.id, [p["memory"] for p in pairs], source="import")
    ids = {p["id"]: r.memory.id for p, r in zip(pairs, saved, strict=True)}
    assert len(set(ids.values())) == len(pairs)  # distinct facts are not merged
    found = []
    for pair in pairs:
        hits = await memory.search(alice.id, pair["query"], 5)
        found.append(ids[pair["id"]] in [h.id for h in hits])
    recall = sum(found) / len(found)
    missed = [p["query"] for p, ok in zip(pairs, found, strict=True) if not ok]
    assert recall >= 0.9, missed


async def test_exact_keyword_query_finds_it_via_full_text(memory, alice):
    target = "Locker code at the gym is QZX-4417."
    await memory.save_many(
        alice.id,
        [target, "My gym is open until 10 pm.", "I go swimming on Tuesdays.",
         "The office door code changed last week.", "My bike lock is the blue one."],
    )
    text_hits = await memory.search(alice.id, "QZX-4417", 5, mode="text")
    assert [h.content for h in text_hits] == [target]  # only the keyword match, via tsvector
    hybrid = await memory.search(alice.id, "qzx-4417", 3)
    assert hybrid[0].content == target
    # Korean words with particles still match through the 'simple' config and prefix terms
    await memory.save(alice.id, "우리 강아지 이름은 콩이야.")
    ko = await memory.search(alice.id, "강아지 이름", 3, mode="text")
    assert ko and ko[0].content == "우리 강아지 이름은 콩이야."
    # tsquery syntax in the query is just text
    await memory.search(alice.id, "o'brien's & (x) | !y:* \\ <-> ''", 3, mode="text")


async def test_only_true_duplicates_merge(memory, alice, clock):
    first = await memory.save(alice.id, "My sister Mina's birthday is March 3.", "people")
    clock.advance(days=2)
    again = await memory.save(alice.id, "my sister  Mina's birthday is March 3!")
    assert again.merged and again.memory.id == first.memory.id
    assert again.memory.content == "My sister Mina's birthday is March 3."
    assert again.memory.updated_at == clock.now() and await memory.count(alice.id) == 1
    # a paraphrase is not a duplicate: it is stored, and the result names the first
    other = await memory.save(alice.id, "My sister Mina's birthday is on March 3rd.")
    assert not other.merged and other.memory.id != first.memory.id
    assert first.memory.id in [r.id for r in other.related]
    await memory.save(alice.id, "I'm allergic to peanuts.")
    await memory.save(alice.id, "I'm allergic to shellfish.")
    assert await memory.count(alice.id) == 4


async def test_concurrent_duplicate_saves_keep_one(memory, alice):
    text = "I prefer window seats on flights."
    results = await asyncio.gather(*(memory.save(alice.id, text) for _ in range(4)))
    assert await memory.count(alice.id) == 1
    assert sum(not r.merged for r in results) == 1


async def test_users_never_see_each_others_memories(memory, alice, bob):
    secret = (await memory.save(alice.id, "Alice's bank PIN hint is the dog's birthday.")).memory
    await memory.save(bob.id, "Bob likes hiking.")
    # search (hybrid, vector-only and text-only) never crosses users
    for mode in ("hybrid", "vector", "text"):
        hits = await memory.search(bob.id, "bank PIN hint dog birthday", 20, mode=mode)
        assert secret.id not in [h.id for h in hits]
    assert [h.content for h in await memory.list(bob.id)] == ["Bob likes hiking."]
    # guessing (or knowing) the id does not help
    assert await memory.get(bob.id, secret.id) is None
    assert await memory.find(bob.id, secret.id[:8]) is None
    assert await memory.forget(bob.id, secret.id) is None
    assert await memory.clear(bob.id) == 1
    # a near-duplicate saved by Bob is his own memory, not an update of Alice's
    copy = await memory.save(bob.id, "Alice's bank PIN hint is the dog's birthday.")
    assert not copy.merged and copy.memory.id != secret.id and copy.related == ()
    assert (await memory.get(alice.id, secret.id)).content == secret.content
    assert await memory.count(alice.id) == 1


async def test_bad_input_is_refused_clearly(memory, alice):
    with pytest.raises(MemoryInputError, match="empty"):
        await memory.save(alice.id, "   ")
    with pytest.raises(MemoryInputError, match=f"at most {MAX_CONTENT_CHARS:,}"):
        await memory.save(alice.id, "x" * 100_000)
    with pytest.raises(MemoryInputError, match="not a memory id"):
        await memory.forget(alice.id, "42")
    with pytest.raises(MemoryInputError, match="empty"):
        await memory.search(alice.id, " ")
    assert await memory.forget(alice.id, str(uuid.uuid4())) is None
    assert await memory.count(alice.id) == 0


async def test_save_many_embeds_in_one_batch(memory, alice):
    counting = CountingEmbedder(memory.embedder)
    memory.embedder = counting
    results = await memory.save_many(
        alice.id,
        ["I work at Acme as a data engineer.", "", "  ", "I work at Acme as a data engineer!",
         "My partner is called Jun.", "word " * 2_000],
    )
    assert len(counting.calls) == 1 and len(counting.calls[0]) == 4  # blanks skipped, one call
    assert [r.merged for r in results] == [False, True, False, False]
    assert all(r.memory.source == "compaction" for r in results)
    assert len(results[-1].memory.content) <= MAX_CONTENT_CHARS
    assert await memory.count(alice.id) == 3


async def test_recall_costs_no_embedding_for_users_without_memories(memory, alice, bob):
    await memory.save(bob.id, "Bob likes hiking.")
    counting = CountingEmbedder(memory.embedder)
    memory.embedder = counting
    assert await memory.recall(alice.id, "what do I like?", 5) == []
    assert counting.calls == []
    assert [h.content for h in await memory.recall(bob.id, "outdoor hobbies", 5)] == [
        "Bob likes hiking."
    ]
    assert len(counting.calls) == 1


def unit_vectors(count: int, seed: int):
    """`count` random 384-d unit vectors (float32), reproducible by `seed`."""
    import numpy as np

    vectors = np.random.default_rng(seed).normal(size=(count, 384)).astype(np.float32)
    return vectors / np.linalg.norm(vectors, axis=1, keepdims=True)


async def copy_memories(conn, rows) -> None:
    """Bulk-load (user_id, content, vector) rows with binary COPY, bypassing the save path."""
    async with conn.cursor().copy(
        "COPY memories (user_id, content, embedding) FROM STDIN (FORMAT BINARY)"
    ) as copy:
        copy.set_types(["int8", "text", "vector"])
        for row in rows:
            await copy.write_row(row)


def test_query_terms():
    def terms(text):
        return [(t.text, t.prefix) for t in query_terms(text)]

    assert terms("What is my Wi-Fi password?") == [("wi", False), ("fi", False), ("password", True)]
    assert terms("내 여동생 생일은 언제야?") == [("여동생", True), ("생일", True)]
    assert terms("renewal of my allergies") == [("renew", True), ("allerg", True)]
    assert terms("QZX-4417") == [("qzx", True), ("4417", False), ("-4417", False)]
    assert query_terms("?! the") == [] and query_terms("Jun jun JUN") == [QueryTerm("jun", True)]


def _row(key, content="", similarity=0.8, **extra):
    return {"id": key, "content": content or key, "category": "general", "source": "tool",
            "created_at": None, "updated_at": None, "similarity": similarity, **extra}


SCORE = Fusion("score", crowd_weight=0.25, lexical_weight=1.5)  # the score family's behaviour


def test_fusion_weighs_both_legs():
    """A memory found by both legs rises above memories found by one."""
    a, b, c = _row("a", similarity=0.82), _row("b", similarity=0.80), _row("c", similarity=0.70)
    fused = fuse([a, b, c], [dict(b, rank=3.0, coverage=1.0)], 3, SCORE)
    assert [h.id for h in fused] == ["b", "a", "c"]


def test_fusion_ties_do_not_depend_on_random_ids():
    """Equal scores are ordered by text (and date), never by the random UUID alone; a lexical
    hit matching only a common word of the query barely counts."""
    for ids in (("0" * 8, "f" * 8), ("f" * 8, "0" * 8)):
        fused = fuse([_row(ids[0], "zebra"), _row(ids[1], "apple")], [], 2, SCORE)
        assert [h.content for h in fused] == ["apple", "zebra"]
    filler = [_row(f"f{i}", similarity=0.70 + 0.005 * i) for i in range(20)]
    dense = [_row("z", similarity=0.81), _row("y", similarity=0.80), _row("x", similarity=0.80),
             *filler]
    weak = dict(dense[2], rank=5.0, coverage=0.1)
    strong = dict(dense[1], rank=5.0, coverage=1.0)
    assert [h.id for h in fuse(dense, [weak, strong], 3, SCORE)] == ["y", "z", "x"]


def test_paraphrase_order_survives_a_one_word_lexical_hit():
    """A clear vector lead is not overturned by a lexical hit sharing one common word with the
    question (rank fusion overturned any lead: hybrid R@1 0.55 vs 0.70 for the vector leg on
    the en/ko pairs), while a hit matching the whole query still rises."""
    filler = [_row(f"f{i}", similarity=0.70 + 0.004 * i) for i in range(27)]
    vector = [_row("right", similarity=0.87), _row("near", similarity=0.84), *filler]
    one_word = dict(vector[1], rank=2.0, coverage=0.3)
    assert [h.id for h in fuse(vector, [one_word], 2, SCORE)] == ["right", "near"]
    whole = dict(vector[1], rank=2.0, coverage=1.0)
    assert [h.id for h in fuse(vector, [whole], 2, SCORE)] == ["near", "right"]


def test_vector_hits_like_many_others_yield_to_distinct_ones():
    """A hub (a memory close to many fellow candidates) falls below a slightly less similar
    memory that stands apart."""
    hub = _row("hub", similarity=0.86, crowd=0.95)
    fact = _row("fact", similarity=0.82, crowd=0.70)
    filler = [_row(f"f{i}", similarity=0.75 + 0.001 * i, crowd=0.9) for i in range(10)]
    assert [h.id for h in fuse([hub, fact, *filler], [], 2, SCORE)] == ["fact", "hub"]
    assert [h.id for h in fuse([dict(hub, crowd=0.70), fact, *filler], [], 2, SCORE)] == ["hub", "fact"]


def test_reciprocal_rank_fusion_counts_ranks_of_both_legs():
    """RRF: a memory ranked well by both legs beats the top of one leg; only the top `depth`
    of each leg counts; the lexical leg's weight tips a tie between the legs' leaders."""
    vector = [_row("v1", similarity=0.9), _row("both", similarity=0.85),
              *[_row(f"f{i}", similarity=0.8 - 0.001 * i) for i in range(25)]]
    lexical = [dict(_row("t1"), rank=9.0, coverage=1.0), dict(vector[1], rank=8.0, coverage=1.0),
               dict(vector[26], rank=1.0, coverage=0.1)]
    order = [h.id for h in fuse(vector, lexical, 30, PLAIN_RRF)]
    assert order[0] == "both" and set(order[1:3]) == {"v1", "t1"}
    assert "f17" in order and "f18" not in order  # vector ranks 20 and 21
    assert "f24" in order and len(order) == PLAIN_RRF.depth + 2  # lexical rank 3, vector 27
    leaning = Fusion("rrf", lexical_weight=1.5, rrf_k=60.0, depth=20)
    assert [h.id for h in fuse(vector, lexical, 3, leaning)][:2] == ["both", "t1"]


async def test_shared_index_never_starves_a_small_user(memory, alice, bob, monkeypatch):
    """Through the HNSW plan, a user with 3 memories among 300 of another user's still gets
    all of theirs (the starved index scan is redone exactly)."""

    from panager.services.memory import retrieval as memory_module

    mine = await memory.save_many(alice.id, ["I collect vinyl records.", "My bike is a Brompton.",
                                             "I live near the river."])
    vectors = unit_vectors(300, seed=0)
    async with memory.pool.connection() as conn:
        await copy_memories(conn, ((bob.id, f"bob note {i}", v) for i, v in enumerate(vectors)))
    monkeypatch.setattr(memory_module, "EXACT_MAX", 2)  # alice now counts as a large user
    memory.retrieval._sizes.clear()
    hits = await memory.search(alice.id, "what music do I collect?", 5, mode="vector")
    assert memory.retrieval.exact_fallbacks == 1
    assert sorted(h.id for h in hits) == sorted(r.memory.id for r in mine)
    assert hits[0].content == "I collect vinyl records."


@pytest.mark.parametrize("statement", ["SEARCH_EXACT_CROWD", "SEARCH_ANN_CROWD"])
async def test_crowding_is_the_mean_similarity_to_the_nearest_fellow_candidates(
    memory, alice, statement
):
    """SEARCH_*_CROWD return, per hit, its mean cosine similarity to its CROWD_K nearest
    fellow candidates (computed here with numpy from the same vectors); the ANN one through
    the HNSW index."""
    import numpy as np

    from panager.services.memory import queries
    from panager.services.memory.binding import ensure_bound
    from panager.services.memory.queries import CROWD_K

    vectors = unit_vectors(12, seed=3)
    async with memory.pool.connection() as conn, conn.transaction():
        await ensure_bound(conn, memory.embedder.name, memory.embedder.dim)  # typed + indexed
        await copy_memories(conn, ((alice.id, f"note {i}", v) for i, v in enumerate(vectors)))
        for plan_kind in ("seqscan", "bitmapscan", "sort"):  # a table this small is sorted
            await conn.execute(f"SET LOCAL enable_{plan_kind} = off")
        params = {"user": alice.id, "v": vectors[0], "k": 8}
        sql = getattr(queries, statement)
        plan = " ".join(next(iter(r.values())) for r in await (
            await conn.execute("EXPLAIN " + sql, params)).fetchall())
        assert ("memories_embedding_hnsw" in plan) == (statement == "SEARCH_ANN_CROWD"), plan
        rows = await (await conn.execute(sql, params)).fetchall()
    index = {f"note {i}": i for i in range(12)}
    picked = [index[r["content"]] for r in rows]
    assert picked[0] == 0 and len(picked) == 8
    sims = vectors[picked] @ vectors[picked].T
    for r, i in zip(rows, range(8), strict=True):
        others = np.sort(np.delete(sims[i], i))[-CROWD_K:]
        assert r["crowd"] == pytest.approx(float(others.mean()), abs=1e-4)


async def test_a_very_large_users_lexical_leg_reads_memories_with_both_rare_terms(
    memory, alice, monkeypatch
):
    """When even the query's rarest term is in more memories than the candidate cap, the
    memories holding both of its two rarest terms are scored, however old: the first
    version scored only the newest 300 holding the rarest and missed this one. The
    hybrid search (HNSW plan: both legs at once on two connections) finds it too."""

    from panager.services.memory import retrieval as memory_module
    from panager.services.memory.queries import CANDIDATE_ROWS

    target = await memory.save(alice.id, "Jun is allergic to peanuts.")
    vectors = unit_vectors(2 * CANDIDATE_ROWS + 40, seed=5)
    async with memory.pool.connection() as conn:
        await copy_memories(conn, (
            (alice.id, f"{'Jun' if i % 2 else 'allergic'} note number {i}", v)
            for i, v in enumerate(vectors)
        ))
    hits = await memory.search(alice.id, "What is Jun allergic to?", 5, mode="text")
    assert hits[0].id == target.memory.id
    monkeypatch.setattr(memory_module, "EXACT_MAX", 10)  # alice is searched through HNSW
    memory.retrieval._sizes.clear()
    hits = await memory.search(alice.id, "What is Jun allergic to?", 5)
    assert target.memory.id in [h.id for h in hits]


async def test_index_searches_sharing_a_connection_each_scan_with_their_own_ef_search(
    memory, alice, db_url, monkeypatch
):
    """An index search leaves its hnsw.ef_search on the connection's session (so the next
    one needs no transaction to set it); a search asking another value on the same
    connection sets its own, and the session setting follows each."""
    from panager.db.pool import open_pool
    from panager.services.memory import retrieval as memory_module
    from panager.services.memory.retrieval import Retrieval

    await memory.save_many(alice.id, ["I collect vinyl records.", "My bike is a Brompton.",
                                      "I live near the river."])
    monkeypatch.setattr(memory_module, "EXACT_MAX", 2)  # alice is searched through HNSW
    pool = await open_pool(db_url, max_size=1)  # one connection: every search shares it
    try:
        wide, narrow = Retrieval(pool, ef_search=300), Retrieval(pool, ef_search=60)
        vector = await memory.embed_query("what music do I collect?")
        for retrieval, expected in ((wide, "300"), (narrow, "60"), (narrow, "60"),
                                    (wide, "300")):
            hits = await retrieval.search(alice.id, "what music do I collect?", 3, "hybrid",
                                          vector)
            assert hits[0].content == "I collect vinyl records."
            async with pool.connection() as conn:
                setting = await (await conn.execute("SHOW hnsw.ef_search")).fetchone()
            assert next(iter(setting.values())) == expected
    finally:
        await pool.close()


BM25_ROWS = [
    "Cathy's cat sat on the cat mat.",
    "The car is in the carport; the cart is broken.",
    "cake cab can cap case cast cave cam cat",
    "The wi-fi code is on example.com/a'b, see the café board.",
    "A backslash path: lo\\cal and nothing else.",
    "Nothing relevant is written here at all.",
    "Another cat, a calm one.",
]


@pytest.mark.parametrize("terms", [
    [("cat", True), ("mat", False)],  # a prefix term looked up as its few lexemes
    [("ca", True)],  # more than EXPAND_MAX lexemes start with it: searched as a prefix
    [("exa", True), ("wi", False)],  # lexemes holding a quote and a dot
    [("lo", True), ("cav", True), ("zzz", True)],  # a backslash; a term in no memory
])
async def test_lexical_leg_scores_are_okapi_bm25_over_the_users_own_rows(
    memory, alice, bob, terms
):
    """SEARCH_TEXT_ONLY's ranks equal Okapi BM25 (k1 1.2, b 0.75) computed here from the
    rows' lexemes: N, df and avgdl from alice's rows only (bob's hold the same words), a
    prefix term counting every lexeme it starts, tf from positions; whether the prefix is
    looked up as the user's lexemes or scanned as a prefix."""
    import math

    from panager.services.memory.queries import BM25_B, BM25_K1, EXPAND_MAX, SEARCH_TEXT_ONLY

    async with memory.pool.connection() as conn:
        vectors = unit_vectors(len(BM25_ROWS) + 3, seed=11)
        await copy_memories(conn, [(alice.id, text, v) for text, v in zip(
            BM25_ROWS, vectors, strict=False)] + [
            (bob.id, "cat cat cat example.com/a'b wi-fi carport", vectors[-1])] * 3)
        lexemes = await (await conn.execute(
            "SELECT m.id, u.lexeme, coalesce(array_length(u.positions, 1), 1) AS tf "
            "FROM memories m, unnest(m.content_tsv) AS u WHERE m.user_id = %s", (alice.id,)
        )).fetchall()
        rows = await (await conn.execute(SEARCH_TEXT_ONLY, {
            "user": alice.id, "k": 30, "terms": [t for t, _ in terms],
            "pre": [p for _, p in terms]})).fetchall()
    docs: dict[str, dict[str, int]] = {}
    for r in lexemes:
        docs.setdefault(str(r["id"]), {})[r["lexeme"]] = r["tf"]
    n, avgdl = len(docs), sum(len(d) for d in docs.values()) / len(docs)
    assert len({lx for d in docs.values() for lx in d if lx.startswith("ca")}) > EXPAND_MAX

    def matches(term: str, prefix: bool, lexeme: str) -> bool:
        return lexeme.startswith(term) if prefix else lexeme == term

    expected: dict[str, float] = {}
    for term, prefix in terms:
        df = min(n, sum(1 for d in docs.values() for lx in d if matches(term, prefix, lx)))
        idf = math.log(1 + (n - df + 0.5) / (df + 0.5))
        for doc, counts in docs.items():
            tf = sum(c for lx, c in counts.items() if matches(term, prefix, lx))
            if tf:
                norm = BM25_K1 * (1 - BM25_B + BM25_B * len(counts) / avgdl)
                expected[doc] = expected.get(doc, 0.0) + idf * tf * (BM25_K1 + 1) / (tf + norm)
    assert expected  # every case matches something of alice's
    assert {str(r["id"]): r["rank"] for r in rows} == pytest.approx(expected, rel=1e-9)
    assert [r["rank"] for r in rows] == sorted((r["rank"] for r in rows), reverse=True)


async def test_recall_margin_keeps_a_large_store_quiet_on_unrelated_messages(memory, alice):
    """With hundreds of chat turns stored, the nearest memory clears e5's bar for most
    messages; the learned gate (gate.py, e5's default) and, without it, the margin over the
    candidates' median keep unrelated ones quiet while a question about a stored fact
    still injects it."""
    from bench.chitchat import conversations
    from bench.memory_recall import UNRELATED

    turns = [t.stored for t in conversations()[5].turns[:300]]
    for start in range(0, len(turns), 64):
        await memory.save_many(alice.id, turns[start : start + 64], source="import")
    mina = (await memory.save(alice.id, "My sister Mina's birthday is March 3.")).memory
    assert memory.recall_margin > 0 and memory.gate is not None

    question = "When is my sister Mina's birthday?"
    recalled = await memory.recall(alice.id, question)
    assert recalled and recalled[0].id == mina.id
    gated = sum([bool(await memory.recall(alice.id, text)) for text in UNRELATED])
    assert MemoryService(memory.pool, memory.embedder, recall_threshold=0.8).gate is None
    memory.gate = None  # what an operator's memory_recall_threshold chooses
    recalled = await memory.recall(alice.id, question)
    assert recalled and recalled[0].id == mina.id
    with_margin = sum([bool(await memory.recall(alice.id, text)) for text in UNRELATED])
    memory.recall_margin = 0.0
    bar_alone = sum([bool(await memory.recall(alice.id, text)) for text in UNRELATED])
    assert max(gated, with_margin) <= 10 < 15 <= bar_alone, (gated, with_margin, bar_alone)
