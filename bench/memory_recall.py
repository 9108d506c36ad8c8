"""Memory recall on long multi-session conversations: what search finds, what saving keeps.

    .venv/bin/python bench/memory_recall.py                 # people's chats, the default embedder
    .venv/bin/python bench/memory_recall.py --data generated  # the generated dialogues
    .venv/bin/python bench/memory_recall.py --embedders local,local:all-minilm-l6-v2-int8
    .venv/bin/python bench/memory_recall.py --embedders local:multilingual-e5-small-q4#older
        # e5 as stored before query/passage roles (every text a query), for comparison

Data (--data): "chitchat" (the default), six long multi-session conversations
typed by people (the Chit-Chat Challenge data set from PyPI's `chitchat-dataset`,
MIT) with questions written for this repository (bench/chitchat.py says how); or
"generated", bench/memory_dialogues.py (6 generated conversations of ~270 turns,
with questions; see its docstring for what it is and is not). Every turn is stored through
`MemoryService.save` (the `memory_save` path) as "Speaker: text", with the clock
at its session's date, one user per conversation, on a real PostgreSQL +
pgvector (a throwaway database). Then, per embedder:

1. Saving: how many turns were merged into an earlier memory (exact repeats such
   as "Thanks!") and how many *distinct* turns are missing from the store
   afterwards (must be 0).
2. Retrieval: recall@5/10/20 (share of a question's answering turns in the top k)
   and hit@k (at least one of them) per question type, for the product's search
   (hybrid), its dense leg alone, its lexical (BM25 in PostgreSQL) leg alone, and
   a plain BM25 baseline (`rank_bm25.BM25Okapi` over lower-cased word tokens,
   bench-only dependency). The fusion weights (services/memory/fusion.py) were
   chosen on the first three generated conversations, before the chitchat data
   existed: on "generated" the "held-out" row scores only the other three; on
   "chitchat" every question is held out.
   Recency: the product's top 50 re-ranked with a bonus for newer memories
   (RECENCY_WEIGHTS × the spread of the fused scores × the memory's place
   between the conversation's first and last date), to see whether the
   memory's date helps temporal questions ("when did…", "most recently…").
3. Injection: for the top 5 of each question, and for 30 messages unrelated to
   any memory, precision and recall of injecting the hits whose similarity
   reaches a bar, per bar, and for the rule `MemoryService.recall` ships (a bar and a
   margin over the median similarity of the search's candidates); this is how
   RECALL_THRESHOLDS and RECALL_MARGINS were chosen (--dump-injection writes what
   other rules need).
4. Latency: `memory_search` for a user with 1,000 memories (200 questions, vectors
   embedded beforehand: the database + fusion part), and the query embedding.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import re
import statistics
import sys
import time
from datetime import timedelta
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from bench.common import bench_database, machine_line, percentile
from bench.memory_dialogues import Conversation, dataset
from panager.clock import FakeClock
from panager.config import Settings
from panager.db.pool import open_pool
from panager.embeddings import legacy_embedder
from panager.services.memory.binding import build_embedder
from panager.services.memory.service import MemoryService
from panager.services.memory.text import normalise

KS = (5, 10, 20)
MODES = ("hybrid", "vector", "text")
LABELS = {"hybrid": "product (hybrid)", "vector": "dense only", "text": "lexical only (BM25 in SQL)",
          "bm25": "plain BM25 (rank_bm25)"}
LATENCY_USER, LATENCY_SIZE = 100, 1_000
TUNING = {"generated": 3, "chitchat": 0}  # conversations the fusion weights were chosen on
RECENCY_WEIGHTS = (0.0, 0.1, 0.25, 0.5, 1.0)
RECENCY_POOL = 30  # = the service's candidates per leg, so the top 20 is the product's
HELD_OUT = "all, held-out conversations"
BARS = [round(0.20 + 0.01 * i, 2) for i in range(76)]
SHOWN_BARS = 0.06  # bars printed: the shipped one ± this
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


def log(message: str) -> None:
    """Progress on stderr (the tables go to stdout)."""
    print(message, file=sys.stderr, flush=True)


async def store(service: MemoryService, clock: FakeClock, user: int, conv: Conversation) -> dict:
    """Save every turn through MemoryService.save; returns turn id → memory id and counts."""
    ids: dict[str, str] = {}
    merged = 0
    when = conv.dates[0]
    for turn in conv.turns:  # one second apart within a session, never going back
        when = max(conv.dates[turn.session], when + timedelta(seconds=1))
        clock.set(when)
        result = await service.save(user, turn.stored, "conversation")
        ids[turn.id] = result.memory.id
        merged += result.merged
    stored = {normalise(h.content) for h in await service.list(user, 100_000)}
    distinct = {normalise(t.stored) for t in conv.turns}
    return {"ids": ids, "merged": merged, "lost": len(distinct - stored), "turns": len(conv.turns)}


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


def recency(hits: list, weight: float, conv: Conversation) -> list[str]:
    """The hits re-ranked with a bonus growing linearly from the conversation's first date
    (0) to its last (weight × the spread of the fused scores)."""
    if not hits:
        return []
    first, span = conv.dates[0], (conv.dates[-1] - conv.dates[0]).total_seconds() or 1.0
    spread = statistics.pstdev(h.score for h in hits) or 1.0
    scored = [(h.score + weight * spread * (h.created_at - first).total_seconds() / span, -i, h.id)
              for i, h in enumerate(hits)]
    return [key for *_, key in sorted(scored, reverse=True)[: max(KS)]]


def kind_of(question) -> str:
    """The question's kind; temporal ones split into "when did…" and "the latest on…"."""
    if question.kind != "temporal":
        return question.kind
    return "temporal: latest" if LATEST.search(question.text) else "temporal: when"


def score(rankings: dict, conv: Conversation, ids: dict[str, str], totals: dict,
          held_out: bool = False) -> None:
    """Add each question's recall@k / hit@k per method to `totals[(method, kind)]`."""
    for method, ranked in rankings.items():
        for q, got in zip(conv.questions, ranked, strict=True):
            want = {ids[t] for t in q.evidence}
            for kind in (kind_of(q), "all", *([HELD_OUT] if held_out else [])):
                row = totals.setdefault((method, kind), {"n": 0, **{f"r{k}": 0.0 for k in KS},
                                                         **{f"h{k}": 0 for k in KS}})
                row["n"] += 1
                for k in KS:
                    found = len(want & set(got[:k]))
                    row[f"r{k}"] += found / len(want)
                    row[f"h{k}"] += found > 0


async def injection(service, user, conv, ids, vectors, unrelated_vecs, rows: dict,
                    dump: list | None = None) -> None:
    """Per bar: injected relevant/total for the questions, unrelated messages left empty.
    `dump` collects each search's top 30 (similarity, answering?) for other rules."""
    for q, vec in zip(conv.questions, vectors, strict=True):
        want = {ids[t] for t in q.evidence}
        if dump is not None:
            pool = await service.search(user, q.text, RECENCY_POOL, vector=vec)
            dump.append({"user": user, "kind": kind_of(q), "want": len(want),
                         "hits": [[h.similarity, h.id in want] for h in pool]})
        hits = await service.search(user, q.text, 5, vector=vec)
        shipped = await service.recall(user, q.text, 5)  # the rule injection uses
        for bar in [*BARS, "shipped"]:
            kept = shipped if bar == "shipped" else [h for h in hits if (h.similarity or 0) >= bar]
            row = rows.setdefault(bar, {"inj": 0, "good": 0, "want": 0, "found": 0, "qs": 0,
                                        "q_any": 0, "quiet": 0, "unrel": 0})
            row["inj"] += len(kept)
            row["good"] += sum(h.id in want for h in kept)
            row["want"] += len(want)
            row["found"] += len(want & {h.id for h in kept})
            row["qs"] += 1
            row["q_any"] += bool(kept)
    for text, vec in zip(UNRELATED, unrelated_vecs, strict=True):
        if dump is not None:
            pool = await service.search(user, text, RECENCY_POOL, vector=vec)
            dump.append({"user": user, "kind": "unrelated", "want": 0,
                         "hits": [[h.similarity, False] for h in pool]})
        hits = await service.search(user, text, 5, vector=vec)
        for bar in BARS:
            rows[bar]["unrel"] += 1
            rows[bar]["quiet"] += not any((h.similarity or 0) >= bar for h in hits)
        rows["shipped"]["unrel"] += 1
        rows["shipped"]["quiet"] += not await service.recall(user, text, 5)


async def latency(service: MemoryService, pool, questions: list[str]) -> dict:
    """p50/p95 of search at LATENCY_SIZE memories (vectors embedded beforehand) and of the
    query embedding."""
    async with pool.connection() as conn:
        await conn.execute("INSERT INTO users (id, username) VALUES (%s, 'latency')", (LATENCY_USER,))
        await conn.execute(
            "INSERT INTO memories (user_id, content, category, source, embedding, created_at, updated_at) "
            "SELECT %s, content, category, source, embedding, created_at, updated_at FROM memories "
            "WHERE user_id <> %s ORDER BY created_at, id LIMIT %s",
            (LATENCY_USER, LATENCY_USER, LATENCY_SIZE),
        )
        await conn.execute("VACUUM ANALYZE memories")
    embed_times, vectors = [], []
    for text in questions:
        started = time.perf_counter()
        vectors.append(await service.embed_query(text + " "))  # a fresh text: not cached
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
    return out


async def run_embedder(model: str, convs: list[Conversation], questions: int, data: str,
                       dump: list | None = None) -> dict:
    """Everything for one embedder on a fresh database."""
    if model.endswith("#older"):  # the space before query/passage roles, for comparison
        embedder = legacy_embedder(model.removesuffix("#older"))
    else:
        embedder = build_embedder(model, Settings(_env_file=None))
    clock = FakeClock()
    totals: dict = {}
    saving = {"merged": 0, "lost": 0, "turns": 0}
    inject: dict = {}
    async with bench_database() as url:
        pool = await open_pool(url, max_size=4)
        try:
            service = MemoryService(pool, embedder, clock=clock)
            unrelated = [await service.embed_query(t) for t in UNRELATED]
            for user, conv in enumerate(convs, start=1):
                async with pool.connection() as conn:
                    await conn.execute("INSERT INTO users (id, username) VALUES (%s, %s)", (user, f"u{user}"))
                log(f"  {embedder.name}: storing conversation {user} ({len(conv.turns)} turns)")
                saved = await store(service, clock, user, conv)
                for key in saving:
                    saving[key] += saved[key]
                ids = saved["ids"]
                vectors = [await service.embed_query(q.text) for q in conv.questions]
                rankings = {"bm25": bm25_rankings(conv, ids, max(KS))}
                pooled = [await service.search(user, q.text, RECENCY_POOL, vector=v)
                          for q, v in zip(conv.questions, vectors, strict=True)]
                for w in RECENCY_WEIGHTS:
                    rankings[f"recency {w}"] = [recency(hits, w, conv) for hits in pooled]
                for mode in MODES:
                    rankings[mode] = [
                        [h.id for h in await service.search(user, q.text, max(KS), mode=mode, vector=v)]
                        for q, v in zip(conv.questions, vectors, strict=True)
                    ]
                score(rankings, conv, ids, totals, held_out=0 < TUNING[data] < user)
                await injection(service, user, conv, ids, vectors, unrelated, inject, dump)
            all_questions = [q.text for c in convs for q in c.questions][:questions]
            timing = await latency(service, pool, all_questions)
        finally:
            await pool.close()
    return {"name": embedder.name, "totals": totals, "saving": saving, "inject": inject,
            "timing": timing, "related": service.dedupe_threshold, "bar": service.recall_threshold,
            "margin": service.recall_margin}


def print_report(results: list[dict], convs: list[Conversation], seconds: float, data: str) -> None:
    """The markdown tables."""
    load = ", ".join(f"{x:.1f}" for x in os.getloadavg())
    turns = sum(len(c.turns) for c in convs)
    print(f"### Memory recall benchmark\n\n{machine_line()}, {os.cpu_count()} cores, load average {load}")
    source = {"chitchat": "bench/chitchat.py (people's chats)", "generated": "bench/memory_dialogues.py"}[data]
    print(f"data: {source}, {len(convs)} conversations, {turns} turns, "
          f"{sum(len(c.questions) for c in convs)} questions; {seconds:.0f} s\n")
    for res in results:
        s = res["saving"]
        print(f"#### {res['name']}\n")
        print(f"Saving {s['turns']} turns one by one: {s['merged']} merged into an earlier identical "
              f"memory (exact repeats), **{s['lost']} distinct turns merged away**.\n")
        kinds = [*sorted({kind for _, kind in res["totals"]} - {"all", HELD_OUT}), "all"]
        kinds += [HELD_OUT] if any(kind == HELD_OUT for _, kind in res["totals"]) else []
        print("| search | questions | n | R@5 | R@10 | R@20 | hit@5 | hit@10 | hit@20 |")
        print("|---|---|---|---|---|---|---|---|---|")
        for method in ("hybrid", "vector", "text", "bm25"):
            for kind in kinds:
                row = res["totals"][(method, kind)]
                n = row["n"]
                cells = [f"{row[f'r{k}'] / n:.3f}" for k in KS] + [f"{row[f'h{k}'] / n:.3f}" for k in KS]
                label = f"**{kind}**" if kind == "all" else kind
                print(f"| {LABELS[method]} | {label} | {n} | " + " | ".join(cells) + " |")
        print_recency(res, kinds)
        print_injection(res)
        t = res["timing"]
        print(f"\nLatency at {LATENCY_SIZE:,} memories of one user ({len(t['embed'])} questions, top 10, "
              "vectors embedded beforehand): " + "; ".join(
                  f"{m} p50 {percentile(t[m], 50):.2f} ms, p95 {percentile(t[m], 95):.2f} ms" for m in MODES))
        print(f"Query embedding: p50 {percentile(t['embed'], 50):.1f} ms, p95 {percentile(t['embed'], 95):.1f} ms\n")


def print_recency(res: dict, kinds: list[str]) -> None:
    """Recall@10 of the product's ranking with a recency bonus, per question kind."""
    print("\nRecency bonus on the product's top 30 (recall@10; weight 0 = the product):\n")
    print("| weight | " + " | ".join(kinds) + " |")
    print("|---|" + "---|" * len(kinds))
    for w in RECENCY_WEIGHTS:
        cells = [res["totals"][(f"recency {w}", kind)] for kind in kinds]
        print(f"| {w} | " + " | ".join(f"{c['r10'] / c['n']:.3f}" for c in cells) + " |")


def print_injection(res: dict) -> None:
    """Injection precision/recall per similarity bar (the top 5 of each question)."""
    print(f"\nInjection (top 5, kept when similarity ≥ bar; shipped: bar {res['bar']:.2f} and "
          f"a margin of {res['margin']:.2f} over the candidates' median similarity; "
          f"related-memory threshold {res['related']:.2f}):\n")
    print("| bar | precision | recall of answering turns | questions injecting ≥1 | unrelated messages injecting none |")
    print("|---|---|---|---|---|")
    bars = [b for b in res["inject"] if b != "shipped" and abs(b - res["bar"]) <= SHOWN_BARS + 1e-9]
    for bar in [*sorted(bars), "shipped"]:
        row = res["inject"][bar]
        precision = row["good"] / row["inj"] if row["inj"] else float("nan")
        label = "**shipped rule (`recall`)**" if bar == "shipped" else f"{bar:.2f}"
        print(f"| {label} | {precision:.3f} | {row['found'] / row['want']:.3f} | "
              f"{row['q_any'] / row['qs']:.3f} | {row['quiet'] / row['unrel']:.3f} |")


def parse_args() -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--embedders", default="local", help="comma-separated PANAGER_EMBEDDING_MODEL values")
    parser.add_argument("--data", choices=("chitchat", "generated"), default="chitchat")
    parser.add_argument("--conversations", type=int, default=6)
    parser.add_argument("--questions", type=int, default=200, help="questions timed for latency")
    parser.add_argument("--dump-injection", type=Path, help="write each search's top 30 "
                        "(similarity, answering?) as JSON, to study injection rules")
    return parser.parse_args()


async def main() -> None:
    args = parse_args()
    started = time.perf_counter()
    if args.data == "chitchat":
        from bench.chitchat import conversations

        convs = conversations()[: args.conversations]
    else:
        convs = dataset(args.conversations)
    dump: list | None = [] if args.dump_injection else None
    results = [await run_embedder(m.strip(), convs, args.questions, args.data, dump)
               for m in args.embedders.split(",")]
    if args.dump_injection:
        args.dump_injection.write_text(json.dumps(dump))
    print_report(results, convs, time.perf_counter() - started, args.data)


if __name__ == "__main__":
    asyncio.run(main())
