"""The rerank stage of memory search against a local fake of the `/rerank` API
(tests/fakes/rerank_server.py), and neighbours of a hit, on a real PostgreSQL."""

from __future__ import annotations

import hashlib
import logging
import re
from datetime import timedelta

import numpy as np
import pytest

from panager.config import Settings
from panager.db.pool import open_pool
from panager.services.memory.rerank import (
    RETRY_AFTER,
    EndpointReranker,
    RerankError,
    _read,
    rerank_order,
    reranker_from_settings,
)
from panager.services.memory.service import MemoryService
from tests.fakes.rerank_server import FakeRerank, score

WORDS = re.compile(r"\w+")


class WordEmbedder:
    """A fast deterministic embedder: hashed bag of words, L2-normalised."""

    name, dim = "test:words", 64

    async def embed(self, texts: list[str]) -> list[list[float]]:
        out = []
        for text in texts:
            v = np.zeros(self.dim, dtype=np.float32)
            for w in WORDS.findall(text.lower()):
                v[int(hashlib.sha1(w.encode()).hexdigest(), 16) % self.dim] += 1.0
            v[0] += 0.01
            out.append((v / np.linalg.norm(v)).tolist())
        return out


class Ticks:
    """An injectable monotonic clock."""

    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


@pytest.fixture
async def pool(db_url):
    pool = await open_pool(db_url, max_size=4)
    async with pool.connection() as conn:
        for uid in (1, 2):
            await conn.execute("INSERT INTO users (id, username) VALUES (%s, %s)", (uid, f"u{uid}"))
    yield pool
    await pool.close()


@pytest.fixture
async def fake():
    async with FakeRerank(key="rk-secret") as server:
        yield server


DOCS = ["the cat sat on the mat", "dogs and cats", "my sister Mina plays the violin",
        "Mina moved to Lisbon in May"]


async def test_request_and_answer_shapes_of_the_common_api(fake):
    reranker = EndpointReranker(fake.base + "/v1/", "rerank-small", "rk-secret")
    scores = await reranker.scores("when Mina moved", DOCS)
    assert scores == [score("when Mina moved", d) for d in DOCS] == [0.0, 0.0, 1.0, 2.0]
    (path, body, headers), = fake.requests
    assert path == "/v1/rerank"
    assert body == {"model": "rerank-small", "query": "when Mina moved", "documents": DOCS,
                    "top_n": 4}
    assert headers["Authorization"] == "Bearer rk-secret"
    assert headers["Content-Type"] == "application/json"


async def test_tei_shape_is_used_after_a_422_and_kept():
    async with FakeRerank(tei=True) as tei:
        reranker = EndpointReranker(tei.base)
        assert await reranker.scores("Mina violin", DOCS) == [0.0, 0.0, 2.0, 1.0]
        assert await reranker.scores("cat mat", DOCS[:2]) == [2.0, 0.0]
        bodies = [body for _, body, _ in tei.requests]
    assert [sorted(b) for b in bodies] == [
        ["documents", "query", "top_n"],  # the common shape first: TEI answers 422
        ["query", "raw_scores", "texts"],
        ["query", "raw_scores", "texts"],  # and the endpoint keeps TEI's shape
    ]
    assert bodies[1]["texts"] == DOCS and "Authorization" not in tei.requests[0][2]


@pytest.mark.parametrize("mode", ["error", "hang", "garbage", "unauthorized"])
async def test_a_failing_endpoint_scores_nothing_logs_once_and_rests(fake, mode, caplog):
    ticks = Ticks()
    key = "wrong" if mode == "unauthorized" else "rk-secret"
    fake.mode = "ok" if mode == "unauthorized" else mode
    reranker = EndpointReranker(fake.base + "/v1", "m", key, timeout=0.3, monotonic=ticks)
    with caplog.at_level(logging.WARNING, logger="panager.services.memory.rerank"):
        assert await reranker.scores("Mina", DOCS) is None
        assert await reranker.scores("Mina", DOCS) is None  # resting: not asked again
    assert len(fake.requests) == 1
    (record,) = caplog.records
    assert "rerank endpoint" in record.getMessage() and key not in record.getMessage()
    ticks.now += RETRY_AFTER + 1
    fake.mode = "ok"
    reranker._api_key = "rk-secret"
    assert await reranker.scores("Mina", DOCS) == [0.0, 0.0, 1.0, 1.0]
    assert len(fake.requests) == 2


async def test_unreachable_or_malformed_endpoint_scores_nothing(caplog):
    async with FakeRerank() as gone:
        base = gone.base
    for url in (base, "localhost:8080", "ftp://127.0.0.1/v1"):
        reranker = EndpointReranker(url, timeout=0.5)
        with caplog.at_level(logging.WARNING, logger="panager.services.memory.rerank"):
            assert await reranker.scores("Mina", DOCS) is None
        await reranker.aclose()
    assert len(caplog.records) == 3


def test_settings_build_the_endpoint_and_hide_the_key(monkeypatch):
    assert reranker_from_settings(Settings(_env_file=None)) is None
    monkeypatch.setenv("PANAGER_RERANK_BASE_URL", "http://127.0.0.1:9/v1")
    monkeypatch.setenv("PANAGER_RERANK_MODEL", "bge-reranker")
    monkeypatch.setenv("PANAGER_RERANK_API_KEY", "sk-rerank-123")
    settings = Settings(_env_file=None)
    reranker = reranker_from_settings(settings)
    assert reranker is not None
    assert (reranker.url, reranker.model) == ("http://127.0.0.1:9/v1/rerank", "bge-reranker")
    assert "sk-rerank-123" not in repr(settings) and "sk-rerank-123" not in reranker.name


MEMORIES = [
    "Mina is my sister and she plays the violin every evening",
    "Mina Mina Mina violin violin lessons",  # the fused favourite for "Mina violin"
    "the violin teacher said Mina should practise scales",
    "Lisbon trip planned for May with Mina",
    "I need to renew my passport before the trip",
]


async def _stored(pool, reranker=None) -> MemoryService:
    service = MemoryService(pool, WordEmbedder(), reranker=reranker)
    for text in MEMORIES:
        await service.save(1, text)
    return service


async def test_search_is_reranked_by_the_endpoint(pool, fake):
    plain = await _stored(pool)
    reranked = MemoryService(pool, WordEmbedder(),
                             reranker=EndpointReranker(fake.base + "/v1", "m", "rk-secret"))
    query = "when does my sister practise violin scales"
    before = await plain.search(1, query, 3)
    after = await reranked.search(1, query, 3)
    (_, body, _), = fake.requests
    assert body["query"] == query
    fused = await plain.search(1, query, 30)
    assert body["documents"] == [h.content for h in fused]  # the fused candidates, in order
    want = sorted(fused, key=lambda h: -score(query, h.content))[:3]
    assert [h.content for h in after] == [h.content for h in want]
    assert [h.score for h in after] == [score(query, h.content) for h in want]
    assert [h.content for h in after] != [h.content for h in before]


@pytest.mark.parametrize("mode", ["error", "hang"])
async def test_a_failing_endpoint_leaves_the_search_as_it_was(pool, fake, mode, caplog):
    plain = await _stored(pool)
    fake.mode = mode
    broken = MemoryService(pool, WordEmbedder(), reranker=EndpointReranker(
        fake.base + "/v1", "m", "rk-secret", timeout=0.3))
    with caplog.at_level(logging.WARNING):
        got = await broken.search(1, "Mina violin", 4)
        recalled = await broken.recall(1, "Mina violin", 2)
    want = await plain.search(1, "Mina violin", 4)
    assert [(h.id, h.score) for h in got] == [(h.id, h.score) for h in want]
    assert [h.id for h in recalled] == [h.id for h in await plain.recall(1, "Mina violin", 2)]
    assert len([r for r in caplog.records if "rerank" in r.getMessage()]) == 1


async def test_neighbours_stay_within_the_person_and_the_conversation(pool, clock):
    service = MemoryService(pool, WordEmbedder(), clock=clock)
    start = clock.now()

    async def at(minutes: float, user: int, text: str, source: str = "tool") -> str:
        clock.set(start + timedelta(minutes=minutes))
        if source == "tool":
            return (await service.save(user, text)).memory.id
        return (await service.save_many(user, [text], source=source))[0].memory.id

    a_before = await at(0, 1, "we talked about the garden")
    await at(1, 2, "bob: the violin recital is on Friday")  # another person, in between
    hit = await at(2, 1, "the violin recital is on Friday")
    await at(3, 1, "summary of violin notes", source="compaction")  # another conversation
    a_after = await at(4, 1, "and after it we eat at Luigi's")
    await at(4.5, 2, "bob: after it we go home")
    await at(60 * 24, 1, "next day: violin strings are broken")  # a later session
    await at(60 * 24 + 1, 1, "bought new strings")

    got = await service.search(1, "violin recital Friday", 3, neighbours=True)
    assert [h.content for h in got] == [
        "the violin recital is on Friday", "we talked about the garden",
        "and after it we eat at Luigi's"]
    assert [h.neighbour_of for h in got] == [None, hit, hit]
    assert {got[1].id, got[2].id} == {a_before, a_after}
    assert got[1].score == got[0].score

    bob = await service.search(2, "violin recital Friday", 5, neighbours=True)
    assert sorted(h.content for h in bob) == ["bob: after it we go home",
                                              "bob: the violin recital is on Friday"]
    # the next day's memory is a hit of its own; its neighbour is the same day's, never
    # the recital's evening
    strings = await service.search(1, "broken violin strings", 2, neighbours=True)
    assert [h.content for h in strings] == ["next day: violin strings are broken",
                                            "bought new strings"]
    # counted within the limit, and a search without them is unchanged
    assert len(await service.search(1, "violin", 1, neighbours=True)) == 1
    assert all(h.neighbour_of is None for h in await service.search(1, "violin", 5))


@pytest.mark.parametrize("answer", [
    {"results": [{"index": 0, "relevance_score": 1.0}, {"index": 0, "relevance_score": 0.5}]},
    {"results": [{"index": 0, "relevance_score": 1.0}]},  # the second document not scored
    {"results": [{"index": 0, "relevance_score": 1.0}, {"index": 1, "relevance_score": "x"}]},
    {"results": [{"index": 0, "relevance_score": 1.0}, {"index": True, "relevance_score": 2}]},
    {"results": [{"index": 0, "relevance_score": 1.0}, {"index": 1, "relevance_score": 1e999}]},
    {"data": []},
])
def test_answers_that_do_not_score_every_document_once_are_refused(answer):
    with pytest.raises(RerankError):
        _read(answer, 2)


def test_both_answer_shapes_are_read_in_document_order():
    common = {"results": [{"index": 1, "relevance_score": 0.9}, {"index": 0, "relevance_score": 0.1}]}
    assert _read(common, 2) == [0.1, 0.9]
    assert _read([{"index": 1, "score": 3}, {"index": 0, "score": -2.5}], 2) == [-2.5, 3.0]
    assert rerank_order([0.1, 0.9, 0.9]) == [1, 2, 0]  # ties keep the fused order


async def test_the_configured_endpoint_reranks_the_service(pool, make_settings, fake):
    settings = make_settings(embedding_model="local", rerank_base_url=fake.base + "/v1",
                             rerank_model="m", rerank_api_key="rk-secret")
    service = await MemoryService.create(pool, settings)
    reranker = service.retrieval.reranker
    assert reranker is not None and reranker.url == fake.base + "/v1/rerank"
    await service.save(1, "Mina plays the violin")
    await service.save(1, "the garden needs water")
    got = await service.search(1, "who plays violin", 2)
    assert [h.content for h in got] == ["Mina plays the violin", "the garden needs water"]
    assert [h.score for h in got] == [2.0, 0.0]  # the fake's scores: it was asked
    await reranker.aclose()
    plain = await MemoryService.create(pool, make_settings(embedding_model="local"))
    assert plain.retrieval.reranker is None


def test_every_fourth_place_goes_to_the_lexical_legs_best_not_listed_yet():
    from panager.services.memory.fusion import DEFAULT_FUSION, WEAVE, fuse, weave

    assert WEAVE == DEFAULT_FUSION.lexical_every == 4
    fused = ["a", "b", "c", "d", "e", "f", "g", "h"]
    assert weave(fused, ["h", "c", "g"], 4) == ["a", "b", "c", "h", "d", "e", "f", "g"]
    assert weave(fused, [], 4) == fused and weave([], ["x", "y"], 4) == ["x", "y"]
    # a memory only the lexical leg finds, that the score fusion ranks last, is 4th
    vector = [{"id": f"v{i}", "content": f"v{i}", "category": "general", "source": "tool",
               "created_at": None, "updated_at": None, "similarity": 0.9 - 0.01 * i, "crowd": 0.5}
              for i in range(10)]
    rare = {**vector[0], "id": "rare", "content": "rare", "similarity": 0.1, "rank": 1.0,
            "coverage": 1.0}
    order = [h.id for h in fuse(vector, [rare], 11, DEFAULT_FUSION)]
    assert order[3] == "rare" and order[:3] == ["v0", "v1", "v2"]
