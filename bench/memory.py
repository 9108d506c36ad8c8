"""Memory benchmark: search latency (HNSW vs exact), ANN recall, retrieval quality.

    .venv/bin/python bench/memory.py              # 1k, 10k and 100k memories (minutes)
    .venv/bin/python bench/memory.py --quick      # 1k and 10k only
    .venv/bin/python bench/memory.py --record     # and append the figures to memory.json

Everything runs through `MemoryService.search` on a real PostgreSQL + pgvector
(the embedded server, or DATABASE_URL's) in a throwaway database.

1. Latency: one user with N memories plus 10 other users with --others rows each.
   Each query is a real question embedded beforehand, so the numbers are the
   database part of `memory_search` (hybrid = vector + full text + fusion);
   the query embedding is timed separately. Plans, in the same run: "exact"
   scans the user's rows, "hnsw" uses the index (at each ef_search), "auto" is
   what the service does (exact up to EXACT_MAX memories, else HNSW).
2. ANN recall@5: the service's HNSW vector leg vs the exact nearest five, per
   `hnsw.ef_search`, on real embeddings of generated personal memories
   (bench/memory_corpus.py). Beyond --real distinct embedded sentences, rows
   are derived vectors (0.8·a + 0.2·b of two real vectors plus small noise,
   renormalised); the table says how many rows are real. The index is built
   as the product builds it (m, ef_construction of services/memory/binding.py;
   `--m`, `--ef-construction` to try others), and 50 single-row inserts into
   the full table show what its build options cost each save.
3. Quality: tests/data/memory_pairs.jsonl (English and Korean memories with
   paraphrased questions, plus each memory's rarest word as a keyword query),
   recall@1/@5 of vector-only, full-text-only and hybrid search for each
   available embedder.

Embeddings of the generated corpus are cached under ~/.cache/panager-bench in
chunks of 5,000. The first run embeds 100,000 sentences with the offline model
(about an hour on two busy cores; `--real 10000` for a quick first look);
later runs take a few minutes.
"""

from __future__ import annotations

import argparse
import asyncio
import hashlib
import itertools
import json
import os
import sys
import time
from datetime import UTC, datetime
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from bench.common import bench_database, machine_line, percentile
from bench.memory_corpus import memories, questions
from bench.results import add_record_option, record_if_asked
from panager.config import Settings
from panager.db.pool import open_pool
from panager.services.memory.binding import HNSW_EF_CONSTRUCTION, HNSW_M, build_embedder
from panager.services.memory.queries import SEARCH_ANN, SET_EF_SEARCH
from panager.services.memory.service import MemoryService
from panager.services.memory.text import HANGUL, STOPWORDS, TOKEN

PAIRS = Path(__file__).resolve().parent.parent / "tests" / "data" / "memory_pairs.jsonl"
CACHE = Path(os.environ.get("XDG_CACHE_HOME", Path.home() / ".cache")) / "panager-bench"
TARGET_USER, OTHER_USERS = 1, range(2, 12)
CHUNK = 5_000
TIE_EPSILON = 1e-3  # ann-benchmarks' default for its distance-based recall
COPY = (
    "COPY memories (user_id, content, category, source, embedding, created_at, updated_at) "
    "FROM STDIN (FORMAT BINARY)"
)
CREATE_INDEX = (
    "CREATE INDEX memories_embedding_hnsw ON memories "
    "USING hnsw (embedding vector_cosine_ops) WITH (m = {m}, ef_construction = {ef_construction})"
)


def log(message: str) -> None:
    """Progress on stderr (the tables go to stdout)."""
    print(message, file=sys.stderr, flush=True)


async def cached_embeddings(embedder, texts: list[str], kind: str) -> np.ndarray:
    """Embeddings of `texts`, cached on disk in chunks of CHUNK texts (a longer corpus reuses
    the chunks of a shorter one: the generator is deterministic)."""
    CACHE.mkdir(parents=True, exist_ok=True)
    out, started, fresh = [], time.perf_counter(), 0
    for start in range(0, len(texts), CHUNK):
        chunk = texts[start : start + CHUNK]
        digest = hashlib.sha256("\n".join(chunk).encode()).hexdigest()[:16]
        path = CACHE / f"{embedder.name.replace(':', '_').replace('/', '_')}-{len(chunk)}-{digest}.npy"
        if not path.exists():
            vectors = []
            for i in range(0, len(chunk), 256):
                embed = embedder.embed_queries if kind == "questions" else embedder.embed
                vectors.extend(await embed(chunk[i : i + 256]))
                fresh += min(256, len(chunk) - i)
                rate = fresh / (time.perf_counter() - started)
                log(f"  embedding {kind}: {start + i + min(256, len(chunk) - i):,}/{len(texts):,} ({rate:.0f}/s)")
            np.save(path, np.asarray(vectors, dtype=np.float32))
        out.append(np.load(path))
    return np.concatenate(out)


def derived(real: np.ndarray, count: int, rng: np.random.Generator) -> tuple[np.ndarray, np.ndarray]:
    """(source index, vector) of `count` vectors near the real ones (see module docstring)."""
    a = rng.integers(0, len(real), count)
    b = rng.integers(0, len(real), count)
    vectors = 0.8 * real[a] + 0.2 * real[b] + rng.normal(0, 0.005, (count, real.shape[1]))
    vectors /= np.linalg.norm(vectors, axis=1, keepdims=True)
    return a, vectors.astype(np.float32)


async def load_rows(pool, rows: list[tuple[int, str, np.ndarray]]) -> None:
    """Bulk-load (user, content, vector) rows with binary COPY."""
    now = datetime.now(UTC)
    async with pool.connection() as conn, conn.cursor().copy(COPY) as copy:
        copy.set_types(["int8", "text", "text", "text", "vector", "timestamptz", "timestamptz"])
        for user, content, vector in rows:
            await copy.write_row((user, content, "general", "import", vector, now, now))


async def reset(pool, size: int, others: int, texts, real, rng) -> int:
    """Fill the table for one size; returns how many of the target user's rows are real."""
    async with pool.connection() as conn:
        await conn.execute("TRUNCATE memories, memory_terms, memory_stats")
        await conn.execute("DROP INDEX IF EXISTS memories_embedding_hnsw")
    n_real = min(size, len(real))
    rows = [(TARGET_USER, texts[i], real[i]) for i in range(n_real)]
    if size > n_real:
        src, vectors = derived(real, size - n_real, rng)
        rows += [(TARGET_USER, f"{texts[i]} (#{k})", v) for k, (i, v) in enumerate(zip(src, vectors, strict=True))]
    for user in OTHER_USERS:
        picks = rng.integers(0, len(real), others)
        rows += [(user, texts[i], real[i]) for i in picks]
    await load_rows(pool, rows)
    async with pool.connection() as conn:
        await conn.execute("VACUUM ANALYZE memories")
    return n_real


async def timed_searches(service, user, queries, vectors, mode) -> tuple[list[float], list[list]]:
    """Per-query latency (ms) and results (id, similarity) of `service.search` with
    precomputed vectors."""
    for text, vector in list(zip(queries, vectors, strict=True))[:10]:  # warm-up
        await service.search(user, text, 5, mode=mode, vector=vector)
    service.retrieval.exact_fallbacks = 0
    times, ids = [], []
    for text, vector in zip(queries, vectors, strict=True):
        started = time.perf_counter()
        hits = await service.search(user, text, 5, mode=mode, vector=vector)
        times.append((time.perf_counter() - started) * 1000)
        ids.append([(h.id, h.similarity) for h in hits])
    return times, ids


def recall_at_5(found: list[list], truth: list[list]) -> float:
    """Mean share of the exact top five (ids) that the approximate top five contains."""
    return float(np.mean([len({i for i, _ in f} & {i for i, _ in t}) / len(t)
                          for f, t in zip(found, truth, strict=True) if t]))


def distance_recall_at_5(found: list[list], truth: list[list], epsilon: float = TIE_EPSILON) -> float:
    """ann-benchmarks' recall: a hit counts when it is no farther than the exact 5th nearest
    plus epsilon, so swapping memories at (nearly) the same distance is not a miss."""
    return float(np.mean([min(len(t), sum(s >= t[-1][1] - epsilon for _, s in f)) / len(t)
                          for f, t in zip(found, truth, strict=True) if t]))


def corpus(args) -> tuple[list[str], list[str]]:
    """(memories, questions): generated personal memories and questions about them, or
    --corpus chitchat: distinct messages people typed (bench/chitchat.py's data set, in
    conversation order) and the recall benchmark's questions."""
    if args.corpus == "generated":
        return memories(args.real), questions(args.queries)
    from bench.chitchat import QUESTIONS, _raw

    seen: dict[str, None] = {}
    for convo in sorted(_raw().values(), key=lambda c: c["start"]):
        for turn in convo["messages"]:
            for message in turn:
                text = message["text"].strip()
                if len(text) >= 3:
                    seen.setdefault(text, None)
    texts = list(seen)[: args.real]
    asked = [json.loads(line)["question"] for line in QUESTIONS.read_text().splitlines() if line.strip()]
    return texts, asked[: args.queries]


async def latency_section(args, embedder) -> list[dict]:
    """Measure every size; returns one dict per table row."""
    texts, qtexts = corpus(args)
    real = await cached_embeddings(embedder, texts, "memories")
    qvecs = await cached_embeddings(embedder, qtexts, "questions")
    rng = np.random.default_rng(1)
    results: list[dict] = []
    async with bench_database() as url:
        pool = await open_pool(url, max_size=4)
        try:
            async with pool.connection() as conn:
                await conn.execute("INSERT INTO users (id, username) SELECT g, 'u' || g FROM generate_series(1, 11) g")
                await conn.execute("INSERT INTO memory_meta (embedder, dim) VALUES (%s, %s)", (embedder.name, real.shape[1]))
                await conn.execute("SET maintenance_work_mem = '1GB'")
            service = MemoryService(pool, embedder)
            await service.check_bound()
            for size in args.sizes:
                results += await measure_size(args, pool, service, size, texts, real, qtexts, qvecs, rng)
        finally:
            await pool.close()
    return results


async def measure_size(args, pool, service, size, texts, real, qtexts, qvecs, rng) -> list[dict]:
    """Exact scan vs HNSW at each ef_search, on one table size, in the same run."""
    log(f"size {size:,}: loading")
    n_real = await reset(pool, size, args.others, texts, real, rng)
    service.retrieval._sizes.clear()  # the plan cache still holds the previous size's counts
    log(f"size {size:,}: building the HNSW index")
    started = time.perf_counter()
    async with pool.connection() as conn:
        await conn.execute("SET maintenance_work_mem = '1GB'")
        await conn.execute(CREATE_INDEX.format(m=args.m, ef_construction=args.ef_construction))
    base = {"size": size, "real": n_real, "build_s": time.perf_counter() - started,
            "plan": await ann_plan(pool, qvecs[0])}
    arms = [("exact", "-")] + [("hnsw", ef) for ef in args.ef] + [("auto", args.default_ef)]
    rows, truth = [], None
    for strategy, ef in arms:
        service.retrieval.strategy, service.retrieval.ef_search = strategy, (ef if ef != "-" else args.default_ef)
        for mode in ("vector", "hybrid"):
            times, found = await timed_searches(service, TARGET_USER, qtexts, qvecs, mode)
            if strategy == "exact" and mode == "vector":
                truth = found
            vector = mode == "vector"
            rows.append({**base, "index": strategy, "mode": mode, "ef": ef, "times": times,
                         "recall": recall_at_5(found, truth) if vector else None,
                         "tie_recall": distance_recall_at_5(found, truth) if vector else None,
                         "fallback": service.retrieval.exact_fallbacks / len(times)})
    service.retrieval.strategy, service.retrieval.ef_search = "auto", args.default_ef
    times, _ = await timed_searches(service, TARGET_USER, qtexts, qvecs, "text")
    rows.append({**base, "index": "gin", "mode": "text", "ef": "-", "times": times, "recall": None})
    times, _ = await timed_searches(service, OTHER_USERS[0], qtexts, qvecs, "hybrid")
    rows.append({**base, "index": "auto", "mode": f"hybrid, a user with {args.others:,}",
                 "ef": args.default_ef, "times": times, "recall": None})
    rows[0]["inserts"] = await timed_inserts(pool, real, rng)
    return rows


async def timed_inserts(pool, real: np.ndarray, rng: np.random.Generator, count: int = 50) -> list[float]:
    """Milliseconds per single-row INSERT into the indexed table (what a save adds to the index;
    the embedding and the save path's checks are not included); the rows are removed again."""
    _, vectors = derived(real, count, rng)
    times = []
    async with pool.connection() as conn:
        for vector in vectors:
            started = time.perf_counter()
            await conn.execute(
                "INSERT INTO memories (user_id, content, embedding) VALUES (%s, 'insert probe', %s)",
                (TARGET_USER, vector),
            )
            times.append((time.perf_counter() - started) * 1000)
        await conn.execute("DELETE FROM memories WHERE content = 'insert probe'")
    return times


async def ann_plan(pool, vector) -> str:
    """The index PostgreSQL picks for the service's HNSW query (to show it is really used)."""
    params = {"user": TARGET_USER, "v": vector, "k": 20}
    async with pool.connection() as conn, conn.transaction():
        await conn.execute(SET_EF_SEARCH, ("100",))
        plan = await (await conn.execute("EXPLAIN " + SEARCH_ANN, params)).fetchall()
    text = " ".join(next(iter(row.values())) for row in plan)
    return "memories_embedding_hnsw" if "memories_embedding_hnsw" in text else "no HNSW (" + text[:60] + ")"


def print_latency(rows: list[dict], args) -> None:
    print(f"\n### Search latency and ANN recall ({args.queries} queries, top 5, "
          f"+{len(OTHER_USERS)} other users × {args.others:,} rows)\n")
    print(f"| memories (real) | plan | search | ef_search | p50 ms | p95 ms | recall@5 vs exact "
          f"(same ids) | recall@5 (ties within {TIE_EPSILON:g}) | starved → exact |")
    print("|---|---|---|---|---|---|---|---|---|")
    for r in rows:
        recall = "" if r["recall"] is None else f"{r['recall']:.3f}"
        tie = "" if r.get("tie_recall") is None else f"{r['tie_recall']:.3f}"
        starved = f"{r['fallback']:.0%}" if r.get("fallback") else ""
        print(f"| {r['size']:,} ({r['real']:,}) | {r['index']} | {r['mode']} | {r['ef']} | "
              f"{percentile(r['times'], 50):.2f} | {percentile(r['times'], 95):.2f} | {recall} | "
              f"{tie} | {starved} |")
    builds = {r["size"]: (r["build_s"], r["plan"], r["inserts"]) for r in rows if "inserts" in r}
    print(f"\nHNSW build (m={args.m}, ef_construction={args.ef_construction}), one more row inserted "
          "(p50 / p95 of 50) and the index the hnsw plan uses: "
          + "; ".join(f"{s:,} + {len(OTHER_USERS) * args.others:,} rows: {t:.1f} s, insert "
                      f"{percentile(ins, 50):.2f} / {percentile(ins, 95):.2f} ms, {plan}"
                      for s, (t, plan, ins) in builds.items()))


async def query_embedding_latency(embedder, count: int = 30) -> list[float]:
    """Milliseconds per single-question embed call (after a warm-up)."""
    texts = questions(count, seed=99)
    await embedder.embed_queries(texts[:1])
    times = []
    for text in texts:
        started = time.perf_counter()
        await embedder.embed_queries([text])
        times.append((time.perf_counter() - started) * 1000)
    return times


def keyword_queries(pairs: list[dict]) -> list[str]:
    """For each memory, its rarest word across the set (a name, a code, a place)."""
    docs = [set(TOKEN.findall(p["memory"].casefold())) for p in pairs]
    freq: dict[str, int] = {}
    for words in docs:
        for word in words:
            freq[word] = freq.get(word, 0) + 1

    def usable(word: str) -> bool:
        return word not in STOPWORDS and len(word) >= (2 if HANGUL.search(word) else 4)

    return [min(filter(usable, words), key=lambda w: (freq[w], -len(w), w)) for words in docs]


async def quality_for(embedder, pairs: list[dict]) -> dict:
    """recall@1/@5 per (query set, mode, language) through the service on a fresh database."""
    keywords = keyword_queries(pairs)
    async with bench_database() as url:
        pool = await open_pool(url, max_size=2)
        try:
            async with pool.connection() as conn:
                await conn.execute("INSERT INTO users (id, username) VALUES (1, 'bench')")
            service = MemoryService(pool, embedder)
            saved = await service.save_many(1, [p["memory"] for p in pairs], source="import")
            ids = [r.memory.id for r in saved]
            scores: dict[tuple, list[bool]] = {}
            for pair, keyword, target in zip(pairs, keywords, ids, strict=True):
                for kind, query in (("paraphrase", pair["query"]), ("keyword", keyword)):
                    for mode in ("vector", "text", "hybrid"):
                        got = [h.id for h in await service.search(1, query, 5, mode=mode)]
                        for k, lang in itertools.product((1, 5), (pair["lang"], "all")):
                            scores.setdefault((kind, mode, lang, k), []).append(target in got[:k])
        finally:
            await pool.close()
    return {"merged": len(ids) - len(set(ids)), **{k: float(np.mean(v)) for k, v in scores.items()}}


def available_embedders(settings: Settings) -> list:
    """Both offline models when installed, and the endpoint named by PANAGER_BENCH_OPENAI_MODEL."""
    out = []
    for name in ("local:multilingual-e5-small-q4", "local:all-minilm-l6-v2-int8"):
        try:
            out.append(build_embedder(name, settings))
        except Exception as exc:
            log(f"skipping {name}: {exc}")
    if os.environ.get("PANAGER_BENCH_OPENAI_MODEL"):
        out.append(build_embedder(os.environ["PANAGER_BENCH_OPENAI_MODEL"], settings))
    return out


async def quality_section(settings: Settings) -> None:
    pairs = [json.loads(line) for line in PAIRS.read_text().splitlines() if line.strip()]
    langs = {lang: sum(p["lang"] == lang for p in pairs) for lang in ("en", "ko")}
    print(f"\n### Retrieval quality ({len(pairs)} memories of one user: {langs['en']} en, "
          f"{langs['ko']} ko)\n")
    print("Paraphrase: the pair's question. Keyword: the memory's rarest word (e.g. a name or "
          "a code), as a user searching for it would type it.\n")
    print("| embedder | queries | search | en R@1 | en R@5 | ko R@1 | ko R@5 | all R@1 | all R@5 |")
    print("|---|---|---|---|---|---|---|---|---|")
    embed_ms = {}
    for embedder in available_embedders(settings):
        log(f"quality: {embedder.name}")
        q = await quality_for(embedder, pairs)
        embed_ms[embedder.name] = percentile(await query_embedding_latency(embedder), 50)
        for kind, mode in itertools.product(("paraphrase", "keyword"), ("vector", "text", "hybrid")):
            cells = " | ".join(f"{q[(kind, mode, lang, k)]:.2f}"
                               for lang in ("en", "ko", "all") for k in (1, 5))
            print(f"| {embedder.name} | {kind} | {mode} | {cells} |")
        if q["merged"]:
            print(f"\n({embedder.name}: {q['merged']} memories merged as near-duplicates on save)")
    print("\nQuery embedding p50 (one question per call): "
          + ", ".join(f"{name} {ms:.1f} ms" for name, ms in embed_ms.items()))


FULL = {"quick": False, "sizes": [1_000, 10_000, 100_000], "real": 100_000, "others": 1_000,
        "queries": 200, "m": HNSW_M, "ef_construction": HNSW_EF_CONSTRUCTION,
        "corpus": "generated"}  # what the dashboard's rows (bench/results/memory.json) describe


def figures(rows: list[dict]) -> dict[str, float]:
    """The dashboard's figures: the service's own plan ("auto") at 1k and 100k memories."""
    auto = {(r["size"], r["mode"]): r for r in rows if r["index"] == "auto"}
    values = {}
    if (100_000, "hybrid") in auto:
        values["hybrid_p50_100k"] = percentile(auto[(100_000, "hybrid")]["times"], 50)
        values["recall5_100k"] = auto[(100_000, "vector")]["recall"]
    if (1_000, "hybrid") in auto:
        values["hybrid_p95_1k"] = percentile(auto[(1_000, "hybrid")]["times"], 95)
    return values


def parse_args() -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--quick", action="store_true", help="1k and 10k only")
    parser.add_argument("--sizes", type=lambda s: [int(x) for x in s.split(",")])
    parser.add_argument("--real", type=int, default=100_000, help="distinct embedded memories")
    parser.add_argument("--others", type=int, default=1_000, help="rows of each other user")
    parser.add_argument("--queries", type=int, default=200)
    parser.add_argument("--ef", type=lambda s: [int(x) for x in s.split(",")], default=[40, 100, 200, 300, 400])
    parser.add_argument("--m", type=int, default=HNSW_M, help="HNSW m of the index built here")
    parser.add_argument("--ef-construction", type=int, default=HNSW_EF_CONSTRUCTION,
                        help="HNSW ef_construction (default: the product's)")
    parser.add_argument("--skip-quality", action="store_true")
    parser.add_argument("--corpus", choices=("generated", "chitchat"), default="generated",
                        help="memories for latency/ANN: generated ones, or messages people typed")
    parser.add_argument("--embed-only", action="store_true", help="fill the embedding cache, then stop")
    add_record_option(parser, "memory")
    args = parser.parse_args()
    args.sizes = args.sizes or ([1_000, 10_000] if args.quick else [1_000, 10_000, 100_000])
    from panager.services.memory.retrieval import EF_SEARCH, EXACT_MAX

    args.default_ef, args.exact_max = EF_SEARCH, EXACT_MAX
    return args


async def main() -> None:
    args = parse_args()
    settings = Settings(_env_file=None)
    embedder = build_embedder("local", settings)
    load = ", ".join(f"{x:.1f}" for x in os.getloadavg())
    if args.embed_only:
        texts, qtexts = corpus(args)
        await cached_embeddings(embedder, texts, "memories")
        await cached_embeddings(embedder, qtexts, "questions")
        return
    print(f"## Memory benchmark\n\n{machine_line()}, {os.cpu_count()} cores, load average {load}")
    print(f"embedder for latency/ANN: {embedder.name}; service defaults: ef_search = "
          f"{args.default_ef}, exact scan up to {args.exact_max:,} memories of a user")
    rows = await latency_section(args, embedder)
    print_latency(rows, args)
    embed = await query_embedding_latency(embedder)
    print(f"\nQuery embedding ({embedder.name}, one question per call): "
          f"p50 {percentile(embed, 50):.1f} ms, p95 {percentile(embed, 95):.1f} ms")
    if not args.skip_quality:
        await quality_section(settings)
    record_if_asked(args, "memory", figures(rows), full=FULL)


if __name__ == "__main__":
    asyncio.run(main())
