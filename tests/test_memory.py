"""Memory service on real Postgres + pgvector with the offline embedder: save, search, dedupe,
isolation between users, batch saves."""

from __future__ import annotations

import asyncio
import json
import uuid
from pathlib import Path

import pytest

from panager.services.memory.service import (
    MAX_CONTENT_CHARS,
    MemoryInputError,
    MemoryService,
    rrf_fuse,
)
from panager.services.memory.text import QueryTerm, query_terms

PAIRS = [
    json.loads(line)
    for line in (Path(__file__).parent / "data" / "memory_pairs.jsonl").read_text().splitlines()
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


def test_query_terms():
    def terms(text):
        return [(t.text, t.prefix) for t in query_terms(text)]

    assert terms("What is my Wi-Fi password?") == [("wi", False), ("fi", False), ("password", True)]
    assert terms("내 여동생 생일은 언제야?") == [("여동생", True), ("생일", True)]
    assert terms("renewal of my allergies") == [("renew", True), ("allerg", True)]
    assert terms("QZX-4417") == [("qzx", True), ("4417", False), ("-4417", False)]
    assert query_terms("?! the") == [] and query_terms("Jun jun JUN") == [QueryTerm("jun", True)]


def test_rrf_fuses_rankings():
    a, b, c = ({"id": i, "content": i, "category": "general", "source": "tool",
                "created_at": None, "updated_at": None} for i in "abc")
    fused = rrf_fuse([[a, b], [c, b]], 3)
    assert [h.id for h in fused] == ["b", "a", "c"]


def test_fusion_ties_do_not_depend_on_random_ids():
    """Equal scores are ordered by text (and date), never by the random UUID alone."""
    def row(key, content):
        return {"id": key, "content": content, "category": "general", "source": "tool",
                "created_at": None, "updated_at": None}

    for ids in (("0" * 8, "f" * 8), ("f" * 8, "0" * 8)):
        fused = rrf_fuse([[row(ids[0], "zebra")], [row(ids[1], "apple")]], 2)
        assert [h.content for h in fused] == ["apple", "zebra"]
    weak = dict(row("x", "Caroline: Thanks!"), coverage=0.2)
    strong = dict(row("y", "Caroline: I take 20mg of lisinopril."), coverage=1.0)
    dense = [row("z", "Melanie: I run on Sundays.")]
    assert [h.id for h in rrf_fuse([dense, [weak, strong]], 3)] == ["z", "y", "x"]


async def test_shared_index_never_starves_a_small_user(memory, alice, bob, monkeypatch):
    """Through the HNSW plan, a user with 3 memories among 300 of another user's still gets
    all of theirs (the starved index scan is redone exactly)."""
    import numpy as np

    from panager.services.memory import service as memory_module

    mine = await memory.save_many(alice.id, ["I collect vinyl records.", "My bike is a Brompton.",
                                             "I live near the river."])
    rng = np.random.default_rng(0)
    vectors = rng.normal(size=(300, 384)).astype(np.float32)
    vectors /= np.linalg.norm(vectors, axis=1, keepdims=True)
    async with memory.pool.connection() as conn, conn.cursor().copy(
        "COPY memories (user_id, content, embedding) FROM STDIN (FORMAT BINARY)"
    ) as copy:
        copy.set_types(["int8", "text", "vector"])
        for i, vector in enumerate(vectors):
            await copy.write_row((bob.id, f"bob note {i}", vector))
    monkeypatch.setattr(memory_module, "EXACT_MAX", 2)  # alice now counts as a large user
    memory._sizes.clear()
    hits = await memory.search(alice.id, "what music do I collect?", 5, mode="vector")
    assert memory.exact_fallbacks == 1
    assert sorted(h.id for h in hits) == sorted(r.memory.id for r in mine)
    assert hits[0].content == "I collect vinyl records."
