"""Cross-validated choices for the memory search, from what bench/memory_recall.py searched.

Leave one conversation out: for each conversation (a fold), the fusion and the
injection gate are chosen on the other conversations by the rules below, and
scored on the one left out; "pooled" adds up the held-out folds. What ships is
the same rule applied to all conversations.

- Fusion (services/memory/fusion.py): every `Fusion` of GRID; chosen by
  this rule: the highest mean of recall@5, @10 and @20 over the training
  conversations, each conversation weighing the same (so the data set with
  more questions per conversation does not decide alone).
- Injection gate: a hit of the top 5 is injected when its similarity reaches
  `bar` and stands `margin` above the median similarity of the search's
  candidates (service.recall). Chosen by RULE: the highest recall of
  answering turns with precision ≥ MIN_PRECISION, among gates leaving at least
  MIN_QUIET of the unrelated messages injecting nothing.
- Related bar (memory_save's result): the highest bar at which at least
  MIN_LISTED of the generated dialogues' restated corrections (the fact's
  sentence with one value changed, the shape of "…March 3" / "…March 13") still
  list the memory they correct; reworded corrections are reported beside them.
"""

from __future__ import annotations

import statistics
from collections.abc import Iterable
from dataclasses import replace

from panager.services.memory.fusion import (
    DEFAULT_FUSION,
    PLAIN_RRF,
    WEAVE,
    Fusion,
    fuse,
    ranking,
)
from panager.services.memory.service import (
    MARGIN_MIN_CANDIDATES,
    MAX_RELATED,
    RECALL_LIMIT,
    RECALL_MARGINS,
    RECALL_THRESHOLDS,
    RELATED_THRESHOLDS,
)

KS = (5, 10, 20)
SCORE_GRID = [
    *(Fusion("score", crowd_weight=c, lexical_weight=w, coverage=cov)
      for c in (0.0, 0.1, 0.25, 0.5) for w in (0.25, 0.5, 1.0, 1.5, 2.0, 3.0, 4.0)
      for cov in (True, False)),
    *(Fusion("rrf", crowd_weight=c, lexical_weight=w, rrf_k=k, depth=d)
      for c in (0.0, 0.25, 0.5) for w in (0.5, 0.75, 1.0, 1.5, 2.0) for k in (10.0, 30.0, 60.0)
      for d in (20, 30)),
]
# Each with every WEAVE-th place given to the lexical leg, as the product does (fusion.weave)
GRID = [replace(f, lexical_every=WEAVE) for f in SCORE_GRID]
EARLIER = Fusion("score", crowd_weight=0.25, lexical_weight=1.5, coverage=True)  # before
BASELINES = {"vector": "dense leg", "text": "lexical leg", "rrf": "plain RRF", "bm25": "plain BM25"}
BARS = [round(0.76 + 0.005 * i, 3) for i in range(29)]  # 0.76 … 0.90
MARGINS = (0.0, 0.01, 0.02, 0.03, 0.04, 0.05, 0.06)
LIMITS = (1, 2, 3, 5)  # memories injected at most (memory_inject_limit)
MIN_PRECISION, MIN_QUIET = 0.35, 0.75
RULE = (f"the highest recall of answering turns at precision ≥ {MIN_PRECISION} with at least "
        f"{MIN_QUIET:.0%} of unrelated messages injecting nothing")
SHIPPED_GATE = (0.82, 0.03, 5)  # service.RECALL_THRESHOLDS / RECALL_MARGINS before this choice
INJECT = 5
E5 = "local:multilingual-e5-small-q4/passage"  # the embedder these constants are for
RELATED_BARS = [round(0.80 + 0.005 * i, 3) for i in range(40)]
MIN_LISTED = 0.95
CHOSEN_ON = ("restated",)  # corrections of the shape the tests' five pairs have
RELATED_BEFORE = 0.92
NOTE_TOKENS = 30  # the "note" memory_save adds when it lists related memories


# --------------------------------------------------------------------------- fusion


def _recalls(ranked: list[str], want: Iterable[str]) -> tuple[float, ...]:
    want = set(want)
    return tuple(len(want & set(ranked[:k])) / len(want) for k in KS)


def per_question(records: list[dict]) -> dict:
    """{method: [[(r5, r10, r20) per question] per conversation]} for baselines and GRID."""
    out: dict = {m: [] for m in (*BASELINES, *GRID, EARLIER)}
    for rec in records:
        rows: dict = {m: [] for m in out}
        for q in rec["questions"]:
            vec, lex, want = q["vector"], q["text"], q["want"]
            rows["vector"].append(_recalls([r["id"] for r in vec], want))
            rows["text"].append(_recalls([r["id"] for r in lex], want))
            rows["bm25"].append(_recalls(q["bm25"], want))
            rows["rrf"].append(_recalls([k for k, _ in ranking(vec, lex, PLAIN_RRF)], want))
            for f in (*GRID, EARLIER):
                rows[f].append(_recalls([k for k, _ in ranking(vec, lex, f)], want))
        for m in out:
            out[m].append(rows[m])
    return out


def _mean(rows: list[tuple[float, ...]]) -> tuple[float, ...]:
    return tuple(sum(r[i] for r in rows) / len(rows) for i in range(len(KS)))


def choose_fusion(scores: dict, train: list[int]) -> Fusion:
    """The fusion rule on the conversations `train` (ties: the earlier of GRID)."""
    def objective(f: Fusion) -> float:
        return statistics.mean(statistics.mean(_mean(scores[f][i])) for i in train)
    return max(GRID, key=objective)


def fusion_table(
    records: list[dict], scores: dict
) -> tuple[list[Fusion], Fusion, tuple[float, ...]]:
    """Print the per-fold and pooled table; returns each fold's fusion, the shipped one and the
    pooled held-out recall at KS."""
    folds = range(len(records))
    chosen = [choose_fusion(scores, [j for j in folds if j != i]) for i in folds]
    shipped = choose_fusion(scores, list(folds))
    print("#### Fusion, leave one conversation out\n")
    print("Recall@5 / @10 / @20 of each held-out conversation with the fusion chosen on the "
          f"other {len(records) - 1} (rule: best mean of R@5, R@10, R@20, conversations weighing "
          "the same).\n")
    methods = ["held-out", *BASELINES]
    print("| held-out conversation | n | fusion chosen on the others | "
          + " | ".join(f"{BASELINES.get(m, 'hybrid (held-out)')} R@5/10/20" for m in methods) + " |")
    print("|---|---|---|" + "---|" * len(methods))
    pooled: dict = {m: [] for m in methods}
    for i, rec in enumerate(records):
        cells = {"held-out": scores[chosen[i]][i], **{m: scores[m][i] for m in BASELINES}}
        for m in methods:
            pooled[m] += cells[m]
        print(f"| {rec['name']} | {len(cells['vector'])} | {chosen[i].label()} | "
              + " | ".join(_fmt(_mean(cells[m])) for m in methods) + " |")
    print(f"| **pooled** | {len(pooled['vector'])} | | "
          + " | ".join(f"**{_fmt(_mean(pooled[m]))}**" for m in methods) + " |")
    _verdict(pooled)
    _by_set(records, scores, shipped)
    return chosen, shipped, _mean(pooled["held-out"])


def _verdict(pooled: dict) -> None:
    held = _mean(pooled["held-out"])
    checks = [(f"≥ {BASELINES[m]} − 0.005 at {k}", held[i] - _mean(pooled[m])[i] >= -0.005)
              for m in ("vector", "text") for i, k in enumerate(KS)]
    checks.append(("≥ plain RRF − 0.005 at 10", held[1] - _mean(pooled["rrf"])[1] >= -0.005))
    print("\nPooled held-out checks: " + "; ".join(
        f"{name}: {'met' if ok else '**not met**'}" for name, ok in checks) + "\n")


def _by_set(records: list[dict], scores: dict, shipped: Fusion) -> None:
    """The shipped fusion (chosen on all conversations) and the earlier one, per data set."""
    same = "the same as" if shipped == DEFAULT_FUSION else "**not** the same as"
    print(f"Shipped (chosen on all conversations): **{shipped.label()}**, {same} "
          "DEFAULT_FUSION in fusion.py. Per data set "
          f"(in-sample for the shipped fusion; the earlier default was tuned on generated "
          f"conversations 1–3):\n")
    print("| data | n | method | R@5 | R@10 | R@20 |")
    print("|---|---|---|---|---|---|")
    names = {shipped: f"shipped: {shipped.label()}", EARLIER: f"before: {EARLIER.label()}",
             **BASELINES}
    for data in sorted({r["data"] for r in records}):
        idx = [i for i, r in enumerate(records) if r["data"] == data]
        for m, label in names.items():
            rows = [x for i in idx for x in scores[m][i]]
            print(f"| {data} | {len(rows)} | {label} | " + " | ".join(f"{v:.3f}" for v in _mean(rows)) + " |")
    print()


def _fmt(values: tuple[float, ...]) -> str:
    return " / ".join(f"{v:.3f}" for v in values)


# ------------------------------------------------------------------------ injection


def _top(q: dict, fusion: Fusion) -> dict:
    """What the recall rule looks at: the top 5's (similarity, answering?) and the median
    similarity of the candidates (None under MARGIN_MIN_CANDIDATES)."""
    hits = fuse(q["vector"], q["text"], 30, fusion)
    want = set(q.get("want", ()))
    sims = [h.similarity or 0.0 for h in hits]
    median = statistics.median(sims) if len(sims) >= MARGIN_MIN_CANDIDATES else None
    return {"top": [(h.similarity or 0.0, h.id in want) for h in hits[:INJECT]],
            "want": len(want), "median": median}


def _counts(items: list[dict], quiet_items: list[dict], bar: float, margin: float,
            limit: int = INJECT) -> dict:
    """Injected, injected answering turns, answering turns, questions injecting any,
    questions; unrelated messages injecting nothing, unrelated messages."""
    c = {"inj": 0, "good": 0, "want": 0, "any": 0, "n": len(items), "quiet": 0,
         "unrel": len(quiet_items)}
    for it in items:
        floor = bar if it["median"] is None else max(bar, it["median"] + margin)
        kept = [rel for sim, rel in it["top"][:limit] if sim >= floor]
        c["inj"] += len(kept)
        c["good"] += sum(kept)
        c["want"] += it["want"]
        c["any"] += bool(kept)
    for it in quiet_items:
        floor = bar if it["median"] is None else max(bar, it["median"] + margin)
        c["quiet"] += not any(sim >= floor for sim, _ in it["top"][:limit])
    return c


def _ratios(c: dict) -> dict:
    return {"precision": c["good"] / c["inj"] if c["inj"] else 0.0,
            "recall": c["good"] / c["want"] if c["want"] else 0.0,
            "any": c["any"] / c["n"] if c["n"] else 0.0,
            "quiet": c["quiet"] / c["unrel"] if c["unrel"] else 1.0}


def _gate(items: list[dict], quiet_items: list[dict], bar: float, margin: float,
          limit: int = INJECT) -> dict:
    return _ratios(_counts(items, quiet_items, bar, margin, limit))


def _curve(items: list[dict], quiet_items: list[dict]) -> dict:
    return {(b, m, n): _gate(items, quiet_items, b, m, n)
            for b in BARS for m in MARGINS for n in LIMITS}


def choose_gate(curve: dict) -> tuple[float, float, int]:
    """RULE; when no gate reaches the precision, the most precise one that keeps quiet."""
    ok = [g for g, r in curve.items() if r["precision"] >= MIN_PRECISION and r["quiet"] >= MIN_QUIET]
    if ok:
        return max(ok, key=lambda g: (curve[g]["recall"], curve[g]["precision"], -g[2]))
    return max(curve, key=lambda g: (curve[g]["quiet"] >= MIN_QUIET, curve[g]["precision"]))


def injection_table(records: list[dict], chosen: list[Fusion], shipped: Fusion) -> tuple:
    """Print the held-out curve and the chosen gates; returns the shipped gate and the pooled
    held-out precision and recall of the per-fold gates."""
    items = [[_top(q, chosen[i]) for q in rec["questions"]] for i, rec in enumerate(records)]
    quiet = [[_top(u, chosen[i]) for u in rec["unrelated"]] for i, rec in enumerate(records)]
    folds = range(len(records))
    cv_rows, total = [], {}
    for i in folds:
        train = [j for j in folds if j != i]
        gate = choose_gate(_curve([x for j in train for x in items[j]], [x for j in train for x in quiet[j]]))
        counts = _counts(items[i], quiet[i], *gate)
        total = {k: total.get(k, 0) + v for k, v in counts.items()}
        cv_rows.append((records[i]["name"], gate, _ratios(counts), len(items[i])))
    every, every_quiet = [x for j in folds for x in items[j]], [x for j in folds for x in quiet[j]]
    held = _curve(every, every_quiet)
    all_items = [_top(q, shipped) for rec in records for q in rec["questions"]]
    all_quiet = [_top(u, shipped) for rec in records for u in rec["unrelated"]]
    gate = choose_gate(_curve(all_items, all_quiet))
    _print_curve(held, gate)
    print(f"\nRule: {RULE}. Per held-out conversation, the gate chosen on the others:\n")
    print("| held-out conversation | n | bar, margin, at most | precision | recall | questions injecting ≥1 | unrelated quiet |")
    print("|---|---|---|---|---|---|---|")
    for name, (b, m, most), r, n in cv_rows:
        print(f"| {name} | {n} | {b:.3f}, {m:.2f}, {most} | {r['precision']:.3f} | {r['recall']:.3f} | "
              f"{r['any']:.3f} | {r['quiet']:.3f} |")
    r = _ratios(total)
    print(f"| **pooled** | {total['n']} | | {r['precision']:.3f} | {r['recall']:.3f} | "
          f"{r['any']:.3f} | {r['quiet']:.3f} |")
    ungated = _gate(every, [], -1.0, -1.0)
    print(f"\nShipped gate (the rule on all conversations, shipped fusion): **bar {gate[0]:.3f}, "
          f"margin {gate[1]:.2f}, at most {gate[2]}**; on the held-out folds the ungated top {INJECT} holds recall "
          f"{ungated['recall']:.3f} at precision {ungated['precision']:.3f}. "
          f"The service ships bar {RECALL_THRESHOLDS[E5]}, margin {RECALL_MARGINS[E5]}, "
          f"at most {RECALL_LIMIT} (memory_inject_limit).\n")
    return gate, r


def _print_curve(curve: dict, chosen: tuple) -> None:
    print("#### Injection: recall vs precision on the held-out folds\n")
    print(f"Each held-out conversation's top {INJECT} under its fold's fusion; a point per gate "
          "(bar, margin over the candidates' median similarity, at most n injected); the points no other gate "
          "beats on both precision and recall (the curve), plus the gate shipped before:\n")
    frontier = [g for g, r in curve.items() if not any(
        (o["precision"] >= r["precision"] and o["recall"] > r["recall"])
        or (o["precision"] > r["precision"] and o["recall"] >= r["recall"]) for o in curve.values())]
    seen: dict = {}
    for g in sorted(frontier, key=lambda g: (g[1], -g[2], g[0])):  # one gate per point
        seen.setdefault((curve[g]["precision"], curve[g]["recall"]), g)
    frontier = list(seen.values())
    shown = sorted(set(frontier) | {chosen, SHIPPED_GATE} & set(curve), key=lambda g: -curve[g]["recall"])
    print("| bar | margin | at most | precision | recall of answering turns | questions injecting ≥1 | unrelated quiet | |")
    print("|---|---|---|---|---|---|---|---|")
    for g in shown:
        r = curve[g]
        mark = "**chosen**" if g == chosen else "before" if g == SHIPPED_GATE else ""
        print(f"| {g[0]:.3f} | {g[1]:.2f} | {g[2]} | {r['precision']:.3f} | {r['recall']:.3f} | "
              f"{r['any']:.3f} | {r['quiet']:.3f} | {mark} |")
    print("\n```text\n" + ascii_plot(curve, frontier, chosen) + "\n```")


def ascii_plot(curve: dict, frontier: list, chosen: tuple, width: int = 50, height: int = 14) -> str:
    """Recall (x) against precision (y) of every gate: '.' a gate, 'o' on the curve, '*' chosen."""
    xs = [r["recall"] for r in curve.values()]
    ys = [r["precision"] for r in curve.values()]
    x0, x1, y0, y1 = min(xs), max(xs) or 1, min(ys), max(ys) or 1
    grid = [[" "] * (width + 1) for _ in range(height + 1)]
    for g, r in curve.items():
        x = round((r["recall"] - x0) / ((x1 - x0) or 1) * width)
        y = height - round((r["precision"] - y0) / ((y1 - y0) or 1) * height)
        mark = "*" if g == chosen else "o" if g in frontier else "."
        if grid[y][x] not in "*o" or mark == "*":
            grid[y][x] = mark
    rows = [f"{y1 - (y1 - y0) * i / height:5.2f} |" + "".join(line) for i, line in enumerate(grid)]
    return "\n".join(["precision", *rows, "      +" + "-" * (width + 1),
                      f"       recall {x0:.2f} … {x1:.2f}"])


# -------------------------------------------------------------------------- saving


def related_table(records: list[dict]) -> float | None:
    """Print how many corrections stay listed and how often saves list anything, per bar;
    returns the chosen bar."""
    fixes = [c for rec in records for c in rec["corrections"]]
    saves = [s for rec in records for s in rec["saves"]]
    if not fixes:
        print("(no generated dialogues: the related bar is not chosen)\n")
        return None

    def listed(bar: float, kinds: tuple = ("restated", "reworded")) -> float:
        sel = [c for c in fixes if c["kind"] in kinds]
        return sum(any(orig for _, orig in [n for n in c["nearest"] if n[0] >= bar][:MAX_RELATED])
                   for c in sel) / len(sel)

    ok = [b for b in RELATED_BARS if listed(b, CHOSEN_ON) >= MIN_LISTED]
    bar = max(ok) if ok else min(RELATED_BARS)
    print("#### Related memories in memory_save's result\n")
    print(f"{len(fixes)} corrections of the generated dialogues' facts (one value changed; "
          f"half restated, half reworded), saved against the conversation's memories; "
          f"{len(saves)} saves of the conversations' turns (both data sets where run). "
          f"Bar chosen: the highest with ≥ {MIN_LISTED:.0%} of the restated corrections still "
          f"listed (a reworded correction is listed at 0.80 only "
          f"{listed(min(RELATED_BARS), ('reworded',)):.0%} of the time: other turns of the "
          "same event come nearer).\n")
    print("| bar | corrections listed (all / restated / reworded) | saves listing any: chats | generated | "
          "tokens per save result | |")
    print("|---|---|---|---|---|---|")
    for b in sorted({*[x for x in RELATED_BARS if x >= 0.88], RELATED_BEFORE, bar}):
        mark = "**chosen**" if b == bar else "before" if b == RELATED_BEFORE else ""
        lists = [_lists(records, data, b) for data in ("chitchat", "generated")]
        print(f"| {b:.3f} | {listed(b):.3f} / {listed(b, ('restated',)):.3f} / "
              f"{listed(b, ('reworded',)):.3f} | {lists[0]} | {lists[1]} | {_tokens(saves, b):.1f} | {mark} |")
    print(f"The service ships {RELATED_THRESHOLDS[E5]} for e5 (RELATED_THRESHOLDS).\n")
    return bar


def _lists(records: list[dict], data: str, bar: float) -> str:
    saves = [s for rec in records if rec["data"] == data for s in rec["saves"]]
    if not saves:
        return "–"
    return f"{sum(any(sim >= bar for sim, _ in s['related']) for s in saves) / len(saves):.3f}"


def _tokens(saves: list[dict], bar: float) -> float:
    total = 0
    for s in saves:
        kept = [tok for sim, tok in s["related"] if sim >= bar][:MAX_RELATED]
        total += s["memory"] + sum(kept) + (NOTE_TOKENS if kept else 0)
    return total / len(saves)


def report(records: list[dict], chosen_out: list | None = None) -> dict[str, float]:
    """All three choices, printed as markdown; returns the pooled held-out hybrid recall@5 and
    @10 (the dashboard's figures). `chosen_out` receives each fold's fusion."""
    scores = per_question(records)
    chosen, shipped, held = fusion_table(records, scores)
    if chosen_out is not None:
        chosen_out.extend(chosen)
    _, injected = injection_table(records, chosen, shipped)
    related_table(records)
    return {**{f"hybrid_r{k}": held[i] for i, k in enumerate(KS)},
            "inject_recall": injected["recall"], "inject_precision": injected["precision"]}
