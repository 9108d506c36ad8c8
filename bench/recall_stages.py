"""The stages after fusion, measured on what bench/memory_recall.py searched: a rerank
endpoint over the fused candidates and the neighbours of a hit; and every method per data
set, fold and question kind.

- **hybrid + rerank (fake endpoint)**: each held-out question's fused candidates (the top
  RERANK_DEPTH under its fold's fusion) go through the product's `EndpointReranker` to
  tests/fakes/rerank_server.py, which scores by a known rule (the query's words a memory
  holds). It tests the plumbing end to end over HTTP and times the round trip; its recall
  is that rule's, not a cross-encoder's. No offline cross-encoder ships its weights in a
  package (docs/memory.md), so there is no offline row.
- **hybrid + neighbours**: the same ranking with each hit followed by the memories saved
  right before and after it in the same session (services/memory/neighbours.py), counted
  within k, as `MemoryService.search(..., neighbours=True)` returns them.
"""

from __future__ import annotations

import statistics
import time
from collections import defaultdict
from dataclasses import replace

from bench.common import percentile
from bench.recall_cv import (
    BARS,
    KS,
    LIMITS,
    MARGINS,
    MIN_PRECISION,
    MIN_QUIET,
    PLAIN_RRF,
    _fmt,
    _mean,
    _recalls,
)
from panager.services.memory.fusion import Fusion, fuse, ranking
from panager.services.memory.rerank import RERANK_DEPTH, EndpointReranker, rerank_order
from panager.services.memory.service import MARGIN_MIN_CANDIDATES as MARGIN_MIN

METHODS = ("hybrid", "unwoven", "vector", "text", "rrf", "rerank", "neighbours")
LABELS = {"hybrid": "hybrid", "unwoven": "score fusion alone (not woven)",
          "vector": "dense leg", "text": "lexical leg", "rrf": "plain RRF",
          "rerank": "hybrid + rerank (fake)", "neighbours": "hybrid + neighbours"}


def neighbour_map(record: dict) -> dict[str, tuple[str | None, str | None]]:
    """{memory id: (the memory saved right before it, right after it)} in the same session."""
    seq = record.get("sequence") or []
    out: dict[str, tuple[str | None, str | None]] = {}
    for i, (key, session) in enumerate(seq):
        before = seq[i - 1][0] if i > 0 and seq[i - 1][1] == session else None
        after = seq[i + 1][0] if i + 1 < len(seq) and seq[i + 1][1] == session else None
        out[key] = (before, after)
    return out


def with_neighbours(ranked: list[str], near: dict, limit: int) -> list[str]:
    """neighbours.with_neighbours on ids: each hit, then its neighbours, listed once."""
    out: list[str] = []
    seen: set[str] = set()
    for key in ranked:
        for item in (key, *near.get(key, (None, None))):
            if len(out) >= limit:
                return out
            if item is not None and item not in seen:
                seen.add(item)
                out.append(item)
    return out


async def _reranked(reranker: EndpointReranker, text: str, vec: list, lex: list,
                    fusion: Fusion, times: list[float]) -> list[str]:
    hits = fuse(vec, lex, RERANK_DEPTH, fusion)
    started = time.perf_counter()
    scores = await reranker.scores(text, [h.content for h in hits])
    times.append((time.perf_counter() - started) * 1000)
    if scores is None:
        raise RuntimeError("the fake rerank endpoint failed")
    return [hits[i].id for i in rerank_order(scores)]


async def rankings(records: list[dict], chosen: list[Fusion], questions: str = "questions"
                   ) -> tuple[list[list[dict]], list[float]]:
    """Per conversation, per question: {method: ranked ids}; and the rerank round trips (ms)."""
    from tests.fakes.rerank_server import FakeRerank

    times: list[float] = []
    async with FakeRerank() as fake:
        reranker = EndpointReranker(fake.base + "/v1", "fake-rule")
        try:
            out = await _all(reranker, records, chosen, questions, times)
        finally:
            await reranker.aclose()
    return out, times


async def _all(reranker: EndpointReranker, records: list[dict], chosen: list[Fusion],
               questions: str, times: list[float]) -> list[list[dict]]:
    out: list[list[dict]] = []
    for i, rec in enumerate(records):
        near = neighbour_map(rec)
        rows = []
        for q in rec[questions]:
            vec, lex = q["vector"], q["text"]
            hybrid = [k for k, _ in ranking(vec, lex, chosen[i])]
            rows.append({
                "hybrid": hybrid, "vector": [r["id"] for r in vec],
                "unwoven": [k for k, _ in ranking(vec, lex, replace(chosen[i], lexical_every=0))],
                "text": [r["id"] for r in lex],
                "rrf": [k for k, _ in ranking(vec, lex, PLAIN_RRF)],
                "rerank": await _reranked(reranker, q["query"], vec, lex, chosen[i], times),
                "neighbours": with_neighbours(hybrid, near, max(KS)),
            })
        out.append(rows)
    return out


async def stage_tables(records: list[dict], chosen: list[Fusion]) -> dict:
    """Print recall@5/10/20 of every method per data set and held-out fold, and per question
    kind; returns pooled recalls and the rerank latency."""
    ranked, times = await rankings(records, chosen)
    print("#### Every method per held-out fold (hybrid: the fold's fusion)\n")
    print("Recall@5 / @10 / @20. `≥` marks a fold where hybrid is at least every leg and plain "
          "RRF at every k (within 0.005).\n")
    print("| data | held-out conversation | n | " + " | ".join(LABELS[m] for m in METHODS)
          + " | hybrid ≥ legs, RRF |")
    print("|---|---|---|" + "---|" * (len(METHODS) + 1))
    per: dict = {m: defaultdict(list) for m in METHODS}
    kinds: dict = {m: defaultdict(list) for m in METHODS}
    below = []
    for rec, rows in zip(records, ranked, strict=True):
        cells = {m: [_recalls(r[m], q["want"]) for r, q in zip(rows, rec["questions"], strict=True)]
                 for m in METHODS}
        for m in METHODS:
            per[m][rec["data"]] += cells[m]
            per[m]["all"] += cells[m]
            for value, q in zip(cells[m], rec["questions"], strict=True):
                kinds[m][(rec["data"], q["kind"])].append(value)
        ok = _holds(cells)
        if not ok:
            below.append(rec["name"])
        print(f"| {rec['data']} | {rec['name']} | {len(rows)} | "
              + " | ".join(_fmt(_mean(cells[m])) for m in METHODS) + f" | {'≥' if ok else '**no**'} |")
    for data in sorted(per["hybrid"]):
        print(f"| **{data}** | pooled | {len(per['hybrid'][data])} | "
              + " | ".join(f"**{_fmt(_mean(per[m][data]))}**" for m in METHODS) + " | |")
    print(f"\nFolds where hybrid falls below a leg or plain RRF at some k: {len(below)} of "
          f"{len(records)}" + (f" ({', '.join(below)})" if below else "") + ".\n")
    print("By question kind (pooled held-out folds), recall@10:\n")
    print("| data | kind | n | " + " | ".join(LABELS[m] for m in METHODS) + " |")
    print("|---|---|---|" + "---|" * len(METHODS))
    for key in sorted(kinds["hybrid"]):
        print(f"| {key[0]} | {key[1]} | {len(kinds['hybrid'][key])} | "
              + " | ".join(f"{_mean(kinds[m][key])[1]:.3f}" for m in METHODS) + " |")
    print(f"\nRerank endpoint round trip (fake on this machine, {RERANK_DEPTH} candidates, "
          f"{len(times)} questions): p50 {percentile(times, 50):.1f} ms, "
          f"p95 {percentile(times, 95):.1f} ms.\n")
    pooled = {m: _mean(per[m]["all"]) for m in METHODS}
    return {"pooled": pooled, "below": below, "rerank_p95": percentile(times, 95),
            "rerank_p50": statistics.median(times)}


def _holds(cells: dict) -> bool:
    hybrid = _mean(cells["hybrid"])
    return all(hybrid[i] >= _mean(cells[m])[i] - 0.005
               for m in ("vector", "text", "rrf") for i in range(len(KS)))


# ------------------------------------------------------------------ injection, neighbours

TARGET_PRECISION, TARGET_RECALL = 0.45, 0.35
SIDES = (0, 1)  # neighbours injected per hit: none, or both sides (before and after)


def _inject_items(rec: dict, fusion: Fusion, near: dict, key: str) -> list[dict]:
    """Per message: the top 5's (similarity, [ids injected with it]), the median similarity
    of the candidates, the answering ids."""
    out = []
    for q in rec[key]:
        hits = fuse(q["vector"], q["text"], 30, fusion)
        sims = [h.similarity or 0.0 for h in hits]
        median = statistics.median(sims) if len(sims) >= MARGIN_MIN else None
        top = [(h.similarity or 0.0, h.id, [n for n in near.get(h.id, (None, None)) if n])
               for h in hits[:5]]
        out.append({"top": top, "median": median, "want": set(q.get("want", ()))})
    return out


def _inject_counts(items: list[dict], quiet: list[dict], gate: tuple) -> dict:
    bar, margin, limit, sides = gate
    c = {"inj": 0, "good": 0, "want": 0, "quiet": 0, "unrel": len(quiet)}
    for it in items:
        floor = bar if it["median"] is None else max(bar, it["median"] + margin)
        kept = [(key, near) for sim, key, near in it["top"][:limit] if sim >= floor]
        ids: list[str] = []
        for key, near in kept:
            ids += [k for k in (key, *(near if sides else ())) if k not in ids]
        c["inj"] += len(ids)
        c["good"] += len(it["want"] & set(ids))
        c["want"] += len(it["want"])
    for it in quiet:
        floor = bar if it["median"] is None else max(bar, it["median"] + margin)
        c["quiet"] += not any(sim >= floor for sim, _, _ in it["top"][:limit])
    return c


def _inject_ratios(c: dict) -> dict:
    return {"precision": c["good"] / c["inj"] if c["inj"] else 0.0,
            "recall": c["good"] / c["want"] if c["want"] else 0.0,
            "quiet": c["quiet"] / c["unrel"] if c["unrel"] else 1.0}


GATES = [(b, m, n, s) for b in BARS for m in MARGINS for n in LIMITS for s in SIDES]


def _choose(items: list[dict], quiet: list[dict], min_precision: float, gates: list) -> tuple:
    curve = {g: _inject_ratios(_inject_counts(items, quiet, g)) for g in gates}
    ok = [g for g, r in curve.items() if r["precision"] >= min_precision and r["quiet"] >= MIN_QUIET]
    if ok:
        return max(ok, key=lambda g: (curve[g]["recall"], curve[g]["precision"], -g[2], -g[3]))
    return max(curve, key=lambda g: (curve[g]["quiet"] >= MIN_QUIET, curve[g]["precision"]))


def injection_neighbours(records: list[dict], chosen: list[Fusion]) -> dict:
    """Held-out injection with and without the injected hits' neighbours: for each fold the
    gate (bar, margin, at most, neighbours) is chosen on the other folds by the rule at the
    target precision; pooled over the held-out folds."""
    items, quiet = [], []
    for i, rec in enumerate(records):
        near = neighbour_map(rec)
        items.append(_inject_items(rec, chosen[i], near, "questions"))
        quiet.append(_inject_items(rec, chosen[i], near, "unrelated"))
    print("#### Injection with neighbours, held out\n")
    print(f"Gates: bar × margin × at most × neighbours (none / both sides of each injected hit); "
          f"per fold the rule on the other folds at precision ≥ P: the highest recall with "
          f"≥ {MIN_QUIET:.0%} of unrelated messages quiet. Pooled held-out folds:\n")
    print("| rule precision P | neighbours allowed | precision | recall | unrelated quiet | "
          "gates chosen (bar, margin, at most, neighbours) |")
    print("|---|---|---|---|---|---|")
    out = {}
    for p in (MIN_PRECISION, TARGET_PRECISION):
        for allow in (False, True):
            total: dict = {}
            picks = []
            for i in range(len(records)):
                train = [j for j in range(len(records)) if j != i]
                tr_items = [x for j in train for x in items[j]]
                tr_quiet = [x for j in train for x in quiet[j]]
                gate = _choose_allowed(tr_items, tr_quiet, p, allow)
                picks.append(gate)
                c = _inject_counts(items[i], quiet[i], gate)
                total = {k: total.get(k, 0) + v for k, v in c.items()}
            r = _inject_ratios(total)
            out[(p, allow)] = r
            names = sorted({f"{g[0]:.3f}, {g[1]:.2f}, {g[2]}, {'yes' if g[3] else 'no'}"
                            for g in picks})
            print(f"| {p:.2f} | {'yes' if allow else 'no'} | {r['precision']:.3f} | "
                  f"{r['recall']:.3f} | {r['quiet']:.3f} | {'; '.join(names)} |")
    print()
    return out


def _choose_allowed(items: list[dict], quiet: list[dict], p: float, allow: bool) -> tuple:
    return _choose(items, quiet, p, [g for g in GATES if allow or not g[3]])
