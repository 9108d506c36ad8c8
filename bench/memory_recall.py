"""Memory recall on long multi-session conversations: fusion and injection chosen by
cross-validation, what saving keeps, how often a save lists related memories.

    .venv/bin/python bench/memory_recall.py                   # both data sets, 12 conversations
    .venv/bin/python bench/memory_recall.py --data chitchat   # one data set
    .venv/bin/python bench/memory_recall.py --legs /tmp/legs.pickle   # keep what was searched
    .venv/bin/python bench/memory_recall.py --from-legs /tmp/legs.pickle  # re-analyse, no DB
    .venv/bin/python bench/memory_recall.py --record          # and append to memory_recall.json

Data: "chitchat", six long multi-session conversations typed by people (the
Chit-Chat Challenge data set from PyPI's `chitchat-dataset`, MIT) with questions
written for this repository (bench/chitchat.py says how); "generated",
bench/memory_dialogues.py (6 generated conversations with questions); "both"
(the default). Every turn is stored through `MemoryService.save` as
"Speaker: text", with the clock at its session's date, one user per
conversation, on a real PostgreSQL + pgvector (a throwaway database).
Embeddings are cached on disk (bench/embed_cache.py): the first run embeds
every turn, later runs none.

1. Saving: turns merged into an earlier memory (exact repeats) and *distinct*
   turns missing afterwards (must be 0); how often a save's result lists related
   memories, and its tokens, per related-memory bar; the generated dialogues'
   facts corrected (one value changed) and whether the corrected memory is
   listed (bench/recall_cv.py chooses the bar).
2. Retrieval: for every question both legs of the product's search (the same
   SQL, `Retrieval.candidates`), then, in Python, every fusion of
   recall_cv.GRID; leave one conversation out: the fusion is chosen on the
   other conversations and scored on the one left out (recall@5/10/20: share
   of a question's answering turns in the top k), against each leg alone,
   plain RRF (k 60, top 20 of each leg) and plain BM25 (`rank_bm25`).
   bench/recall_stages.py then prints every method per data set, held-out fold and
   question kind: hybrid (woven), the score fusion alone, each leg, plain RRF, hybrid +
   rerank (the product's EndpointReranker against tests/fakes/rerank_server.py, which
   scores by a known rule) and hybrid + neighbours (saved right before and after a hit).
3. Injection: on the held-out folds (each scored with its fold's fusion),
   precision and recall of the injected hits of the top 5 and the share of 30
   unrelated messages injecting nothing, per gate (bar, margin over the
   candidates' median similarity); the gate is chosen by recall_cv.RULE.
   With and without the injected hits' neighbours (recall_stages.injection_neighbours).
4. Latency: `memory_search` for a user with 1,000 memories (200 questions,
   vectors embedded beforehand: the database + fusion part), with the rerank stage
   against the local fake endpoint, and the query embedding.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import pickle
import re
import sys
import time
from datetime import timedelta
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from bench.common import bench_database, machine_line, percentile
from bench.embed_cache import CachedEmbedder
from bench.memory_dialogues import Conversation, corrections, dataset
from bench.recall_cv import report
from bench.recall_gate import gate_table
from bench.recall_stages import injection_neighbours, stage_tables
from bench.results import add_record_option, record_if_asked
from panager.clock import FakeClock
from panager.config import Settings
from panager.db.pool import open_pool
from panager.services.memory.binding import build_embedder
from panager.services.memory.rerank import EndpointReranker
from panager.services.memory.service import MAX_RELATED, MemoryService
from panager.services.memory.text import clean_content, normalise

MODES = ("hybrid", "vector", "text")
LATENCY_USER, LATENCY_SIZE = 100, 1_000
NEAREST = MAX_RELATED + 2  # what a save looks at (MemoryService._store)
UNRELATED = [
    "What's the weather going to be like tomorrow?", "Set a reminder to call the bank at 5pm.",
    "Translate 'good morning' into Spanish.", "What's 15% of 80?",
    "Draft an email to my landlord about the broken heating.", "How many ounces are in a pound?",
    "Tell me a joke about computers.", "What time is it in London right now?",
    "Add milk and eggs to my shopping list.", "Summarise the news about the elections.",
    "How do I convert a PDF to Word?", "What's the capital of Australia?",
    "Explain how compound interest works.", "Schedule a meeting with the team on Friday.",
    "What's a good synonym for 'important'?", "Recommend a podcast about history.",
    "How long should I boil an egg?", "Is it going to rain this weekend?",
    "What's the exchange rate from dollars to euros?", "Write a haiku about autumn.",
    "How do I reset my router?", "What's the population of Canada?",
    "Remind me to water the plants tomorrow morning.", "Who won the last World Cup?",
    "How do you say thank you in Japanese?", "What's the square root of 144?",
    "Give me a recipe for pancakes.", "What does HTTP stand for?",
    "Book a table for two at 7pm.", "How far is the moon from the earth?",
]
WORD = re.compile(r"\w+")
LATEST = re.compile(r"\b(latest|most recent(ly)?|recently)\b", re.I)
KEEP = ("id", "content", "updated_at", "similarity", "crowd", "rank", "coverage")


def log(message: str) -> None:
    """Progress on stderr (the tables go to stdout)."""
    print(message, file=sys.stderr, flush=True)


def kind_of(question) -> str:
    """The question's kind; temporal ones split into "when did…" and "the latest on…"."""
    if question.kind != "temporal":
        return question.kind
    return "temporal: latest" if LATEST.search(question.text) else "temporal: when"


def _slim(rows: list[dict]) -> list[dict]:
    """What fusion needs of a row (fusion.fuse + queries.hit), as plain values."""
    return [{**{k: row.get(k) for k in KEEP}, "id": str(row["id"]), "category": "",
             "source": "", "created_at": row["updated_at"]} for row in rows]


async def store(service: MemoryService, clock: FakeClock, user: int, conv: Conversation) -> dict:
    """Save every turn through MemoryService.save; turn id → memory id, counts, and each
    stored save's related memories (the service's bar is 0 here: all of the nearest)."""
    ids: dict[str, str] = {}
    merged, saves, sequence = 0, [], []
    when = conv.dates[0]
    for turn in conv.turns:  # one second apart within a session, never going back
        when = max(conv.dates[turn.session], when + timedelta(seconds=1))
        clock.set(when)
        result = await service.save(user, turn.stored, "conversation")
        ids[turn.id] = result.memory.id
        merged += result.merged
        if not result.merged:
            sequence.append((result.memory.id, turn.session))
            saves.append({"memory": _tokens(_brief(result.memory)),
                          "related": [(h.similarity, _tokens(_related(h))) for h in result.related]})
    stored = {normalise(h.content) for h in await service.list(user, 100_000)}
    distinct = {normalise(t.stored) for t in conv.turns}
    return {"ids": ids, "merged": merged, "lost": len(distinct - stored), "sequence": sequence,
            "turns": len(conv.turns), "saves": saves}


def _brief(h) -> dict:  # the memory as memory_save's result shows it (agent/tools/memory.py)
    return {"ok": True, "status": "saved", "memory": {
        "id": h.id, "content": h.content, "category": h.category, "saved": f"{h.created_at:%Y-%m-%d}"}}


def _related(h) -> dict:
    return {"id": h.id, "content": h.content, "date": f"{h.updated_at:%Y-%m-%d}"}


def _tokens(value: dict) -> int:
    """Approximate tokens of a tool result (langchain_core's counter: ~4 characters each)."""
    return -(-len(json.dumps(value, ensure_ascii=False)) // 4)


def bm25_rankings(conv: Conversation, ids: dict[str, str], k: int) -> list[list[str]]:
    """Plain BM25 (rank_bm25) over the conversation's distinct stored texts, per question."""
    from rank_bm25 import BM25Okapi

    docs: dict[str, str] = {}
    for turn in conv.turns:
        docs.setdefault(ids[turn.id], turn.stored)
    keys = list(docs)
    index = BM25Okapi([WORD.findall(docs[key].lower()) for key in keys])
    out = []
    for q in conv.questions:
        scores = index.get_scores(WORD.findall(q.text.lower()))
        order = sorted(range(len(keys)), key=lambda i: (-scores[i], i))[:k]
        out.append([keys[i] for i in order])
    return out


async def legs(service: MemoryService, user: int, text: str) -> dict:
    """Both legs of the product's hybrid search for `text`."""
    vec = await service.embed_query(text)
    vector, lexical = await service.retrieval.candidates(user, text, vec)
    return {"vector": _slim(vector), "text": _slim(lexical)}


async def corrected(service: MemoryService, user: int, conv: Conversation, ids: dict) -> list:
    """For each correction of a fact: the similarities of what a save of it would look at,
    and which of them is the corrected fact (nothing is saved)."""
    out = []
    texts = [text for _, _, text in corrections(conv)]
    vectors = await service.embedder.embed([clean_content(t) for t in texts])
    async with service.pool.connection() as conn, conn.transaction():
        for (turn_id, kind, _), vec in zip(corrections(conv), vectors, strict=True):
            nearest = await service.retrieval.nearest(conn, user, vec, NEAREST)
            out.append({"kind": kind, "nearest": [
                (float(r["similarity"]), str(r["id"]) == ids[turn_id]) for r in nearest]})
    return out


async def collect(service: MemoryService, clock: FakeClock, user: int, data: str,
                  conv: Conversation) -> dict:
    """Everything the analysis needs of one conversation."""
    async with service.pool.connection() as conn:
        await conn.execute("INSERT INTO users (id, username) VALUES (%s, %s)", (user, f"u{user}"))
    saved = await store(service, clock, user, conv)
    ids = saved.pop("ids")
    questions = []
    for q, bm25 in zip(conv.questions, bm25_rankings(conv, ids, 20), strict=True):
        questions.append({"kind": kind_of(q), "query": q.text,
                          "want": sorted({ids[t] for t in q.evidence}),
                          "bm25": bm25, **await legs(service, user, q.text)})
    unrelated = [await legs(service, user, text) for text in UNRELATED]
    fixes = await corrected(service, user, conv, ids) if data == "generated" else []
    return {"data": data, "name": _name(data, user, conv), "questions": questions,
            "unrelated": unrelated, "corrections": fixes, **saved}


def _name(data: str, user: int, conv: Conversation) -> str:
    label = {"chitchat": "chats", "generated": "generated"}[data]
    return f"{label}: {' & '.join(conv.speakers)}"


async def latency(service: MemoryService, pool, questions: list[str]) -> dict:
    """p50/p95 of search at LATENCY_SIZE memories (vectors embedded beforehand) and of the
    query embedding (a fresh text, never cached)."""
    async with pool.connection() as conn:
        await conn.execute("INSERT INTO users (id, username) VALUES (%s, 'latency')", (LATENCY_USER,))
        await conn.execute(
            "INSERT INTO memories (user_id, content, category, source, embedding, created_at, updated_at) "
            "SELECT %s, content, category, source, embedding, created_at, updated_at FROM memories "
            "WHERE user_id <> %s ORDER BY created_at, id LIMIT %s",
            (LATENCY_USER, LATENCY_USER, LATENCY_SIZE),
        )
        await conn.execute("VACUUM ANALYZE memories")
    inner = service.embedder.inner
    embed_times, vectors = [], []
    for text in questions:
        started = time.perf_counter()
        vectors.append(np.asarray((await inner.embed_queries([text + " "]))[0], dtype=np.float32))
        embed_times.append((time.perf_counter() - started) * 1000)
    out = {"embed": embed_times}
    for mode in MODES:
        times = []
        for _ in range(2):  # the first pass warms caches and plans
            times = []
            for text, vec in zip(questions, vectors, strict=True):
                started = time.perf_counter()
                await service.search(LATENCY_USER, text, 10, mode=mode, vector=vec)
                times.append((time.perf_counter() - started) * 1000)
        out[mode] = times
    out["hybrid + rerank"] = await _reranked_latency(service, questions, vectors)
    return out


async def _reranked_latency(service: MemoryService, questions: list[str], vectors: list) -> list:
    """Hybrid search with the rerank stage against the local fake endpoint (its round trip
    for RERANK_DEPTH candidates is what a real endpoint's model time adds to)."""
    from tests.fakes.rerank_server import FakeRerank

    async with FakeRerank() as fake:
        reranker = EndpointReranker(fake.base + "/v1", "fake-rule")
        service.retrieval.reranker = reranker
        try:
            times: list[float] = []
            for _ in range(2):
                times = []
                for text, vec in zip(questions, vectors, strict=True):
                    started = time.perf_counter()
                    await service.search(LATENCY_USER, text, 10, vector=vec)
                    times.append((time.perf_counter() - started) * 1000)
        finally:
            service.retrieval.reranker = None
            await reranker.aclose()
    return times


def conversations(data: str, count: int) -> list[tuple[str, Conversation]]:
    """(data set, conversation) for the chosen data."""
    out: list[tuple[str, Conversation]] = []
    if data in ("chitchat", "both"):
        from bench.chitchat import conversations as chats

        out += [("chitchat", c) for c in chats()[:count]]
    if data in ("generated", "both"):
        out += [("generated", c) for c in dataset(count)]
    return out


async def run(model: str, convs: list[tuple[str, Conversation]], questions: int,
              keep: Path | None = None) -> dict:
    """Store and search everything on a fresh database; the legs, counts and timings."""
    embedder = CachedEmbedder(build_embedder(model, Settings(_env_file=None)))
    started = time.perf_counter()
    await embedder.prepare([clean_content(t.stored) for _, c in convs for t in c.turns], "passage")
    await embedder.prepare([q.text for _, c in convs for q in c.questions] + UNRELATED, "query")
    embedder.save()
    embed_seconds = time.perf_counter() - started
    clock = FakeClock()
    async with bench_database() as url:
        pool = await open_pool(url, max_size=4)
        try:
            service = MemoryService(pool, embedder, clock=clock, dedupe_threshold=0.0)
            records = []
            for user, (data, conv) in enumerate(convs, start=1):
                log(f"  {embedder.name}: conversation {user} ({len(conv.turns)} turns)")
                records.append(await collect(service, clock, user, data, conv))
            if keep is not None:  # before timing: the long part is kept even if timing fails
                _write(keep, {"embedder": embedder.name, "records": records})
            timing = await latency(service, pool, [q.text for _, c in convs for q in c.questions][:questions])
        finally:
            await pool.close()
    return {"embedder": embedder.name, "records": records, "timing": timing,
            "embedded": embedder.fresh, "embed_seconds": embed_seconds}


async def latency_only(model: str, questions: int) -> dict:
    """Only the latency part: one chat conversation's turns stored in batches, then timed."""
    (_, conv), *_ = conversations("chitchat", 1)
    embedder = CachedEmbedder(build_embedder(model, Settings(_env_file=None)))
    texts = [clean_content(t.stored) for t in conv.turns[: LATENCY_SIZE + 200]]
    async with bench_database() as url:
        pool = await open_pool(url, max_size=4)
        try:
            service = MemoryService(pool, embedder)
            async with pool.connection() as conn:
                await conn.execute("INSERT INTO users (id, username) VALUES (1, 'u1')")
            for start in range(0, len(texts), 64):
                await service.save_many(1, texts[start : start + 64], source="import")
            return await latency(service, pool, [q.text for q in conv.questions][:questions])
        finally:
            await pool.close()


def _fill_queries(records: list[dict]) -> None:
    """Question texts for a --legs file written before they were kept (the data sets'
    conversations and questions come in the same order every time)."""
    if all("query" in q for rec in records for q in rec["questions"]):
        return
    by_name = {}
    for data, count in (("chitchat", 6), ("generated", 6)):
        for user, (d, conv) in enumerate(conversations(data, count), start=1):
            by_name[_name(d, user, conv)] = conv
    for rec in records:
        conv = by_name[rec["name"]]
        for q, source in zip(rec["questions"], conv.questions, strict=True):
            q.setdefault("query", source.text)


def _write(path: Path, value: dict) -> None:
    path.write_bytes(pickle.dumps(value))


def print_header(result: dict, seconds: float) -> None:
    """Machine, data and the latency lines."""
    load = ", ".join(f"{x:.1f}" for x in os.getloadavg())
    records = result["records"]
    turns = sum(r["turns"] for r in records)
    print(f"### Memory recall benchmark\n\n{machine_line()}, {os.cpu_count()} cores, load average {load}")
    sets = sorted({r["data"] for r in records})
    print(f"data: {' + '.join(sets)}, {len(records)} conversations, {turns} turns, "
          f"{sum(len(r['questions']) for r in records)} questions; embedder {result['embedder']}; "
          f"{result['embedded']} texts embedded in {result['embed_seconds']:.0f} s (the rest cached); "
          f"{seconds:.0f} s in all\n")
    merged, lost = sum(r["merged"] for r in records), sum(r["lost"] for r in records)
    print(f"Saving {turns} turns one by one: {merged} merged into an earlier identical memory "
          f"(exact repeats), **{lost} distinct turns merged away**.\n")
    t = result["timing"]
    print(f"Latency at {LATENCY_SIZE:,} memories of one user ({len(t['embed'])} questions, top 10, "
          "vectors embedded beforehand): " + "; ".join(
              f"{m} p50 {percentile(t[m], 50):.2f} ms, p95 {percentile(t[m], 95):.2f} ms"
              for m in (*MODES, "hybrid + rerank") if m in t))
    print(f"Query embedding: p50 {percentile(t['embed'], 50):.1f} ms, "
          f"p95 {percentile(t['embed'], 95):.1f} ms\n")


FULL = {"embedder": "local", "data": "both", "conversations": 6,
        "from_legs": None}  # what bench/results/memory_recall.json's rows describe


def parse_args() -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--embedder", default="local", help="a PANAGER_EMBEDDING_MODEL value")
    parser.add_argument("--data", choices=("both", "chitchat", "generated"), default="both")
    parser.add_argument("--conversations", type=int, default=6, help="per data set")
    parser.add_argument("--questions", type=int, default=200, help="questions timed for latency")
    parser.add_argument("--legs", type=Path, help="write what was searched (pickle) for --from-legs")
    parser.add_argument("--from-legs", type=Path, help="analyse a --legs file; no database")
    parser.add_argument("--latency-only", action="store_true", help="only time memory_search")
    add_record_option(parser, "memory_recall")
    return parser.parse_args()


async def main() -> None:
    args = parse_args()
    started = time.perf_counter()
    if args.latency_only:
        t = await latency_only(args.embedder, args.questions)
        print(f"{machine_line()}, load average {os.getloadavg()[0]:.1f}: " + "; ".join(
            f"{m} p50 {percentile(t[m], 50):.2f} ms, p95 {percentile(t[m], 95):.2f} ms"
            for m in (*MODES, "hybrid + rerank")))
        return
    if args.from_legs:
        result = pickle.loads(args.from_legs.read_bytes())
    else:
        result = await run(args.embedder, conversations(args.data, args.conversations),
                           args.questions, args.legs)
        if args.legs:
            args.legs.write_bytes(pickle.dumps(result))
    print_header(result, time.perf_counter() - started)
    _fill_queries(result["records"])
    chosen: list = []
    values = report(result["records"], chosen)
    stages = await stage_tables(result["records"], chosen)
    injection_neighbours(result["records"], chosen)
    gated = gate_table(result["records"], result.get("embedder", ""))  # what ships for e5
    values["inject_recall"], values["inject_precision"] = gated["gate_recall"], gated["gate_precision"]
    values["folds_below"] = len(stages["below"])
    timing = result.get("timing") or {}
    if "hybrid + rerank" in timing:  # not kept by --legs files written before the timing
        values["search_p95_ms"] = percentile(timing["hybrid"], 95)
        values["rerank_search_p95_ms"] = percentile(timing["hybrid + rerank"], 95)
    values["rerank_p95_ms"] = stages["rerank_p95"]
    record_if_asked(args, "memory_recall", values, full=FULL)


if __name__ == "__main__":
    asyncio.run(main())
